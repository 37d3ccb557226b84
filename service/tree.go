package service

import (
	"context"
	"slices"
)

// The conversation as a tree.
//
// Every message has a parent (Message.ParentID): the message before it on its branch.
// A session has one current branch, the path from a first message to its last message
// (the leaf); it is what the history pages through and all an agent ever reads. A
// message joins the current branch at its end when it is added (Service.add gives it the
// leaf as its parent); only an edit that waits for the agent is added beside it
// (Message.OffBranch) and joins it when its run starts (Run.ReplyTo). Every other change
// of branch is a BranchSelected event, which names the new leaf and the messages that
// leave and join the branch: the log stays append-only, so every cursor stays valid, and
// a follower rebuilds the branch from MessageAdded's parents and BranchSelected's leaf.

// EditMessage adds a new user message beside the caller's message messageID (same
// parent), makes its branch current and starts a run for it, by the session's busy
// policy as AddMessage does (STEER acting as ENQUEUE). Under ENQUEUE, while the agent
// works, the new message waits beside the branch, and its branch becomes current when
// its run starts. ENOTFOUND for a message that is missing or not the caller's; EINVALID
// for an assistant message or bad content; ERATELIMIT when MaxBranches versions of the
// message exist; ECONFLICT under REJECT while the agent works.
func (s *Service) EditMessage(ctx context.Context, messageID, content string) (*Message, *Run, error) {
	r, err := s.exec(ctx, &Command{Op: "editMessage", Args: &EditMessageArgs{MessageID: messageID, Content: content}})
	if err != nil {
		return nil, nil, err
	}
	return r.Message, r.Run, nil
}

// EditMessageArgs are editMessage's arguments.
type EditMessageArgs struct {
	MessageID string `json:"messageId"`
	Content   string `json:"content"`
}

// Regenerate starts a run of the caller's session whose reply is a new assistant message
// beside the reply messageID, on the history up to its parent, by the session's busy
// policy as EditMessage does. ENOTFOUND for a message that is missing or not the
// caller's; EINVALID for a user message.
func (s *Service) Regenerate(ctx context.Context, messageID string) (*Run, error) {
	r, err := s.exec(ctx, &Command{Op: "regenerate", Args: &MessageArgs{MessageID: messageID}})
	if err != nil {
		return nil, err
	}
	return r.Run, nil
}

// MessageArgs are the arguments of an operation on one message (regenerate,
// selectBranch).
type MessageArgs struct {
	MessageID string `json:"messageId"`
}

// SelectBranch makes the branch through the caller's message messageID current,
// continuing below it at each step to the child added last, and returns the session.
// ECONFLICT while the session's agent works or runs wait: their replies go to the end of
// the current branch. ENOTFOUND for a message that is missing or not the caller's.
func (s *Service) SelectBranch(ctx context.Context, messageID string) (*SessionView, error) {
	cmd := &Command{Op: "selectBranch", Args: &MessageArgs{MessageID: messageID}}
	r, err := s.exec(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return s.answeredView(ctx, r, cmd.SessionID)
}

// locateMessage is the locate of an operation on one of the caller's messages: the
// message's session.
func locateMessage(id func(args any) string) func(ctx context.Context, c *core, u string, args any) (string, error) {
	return func(ctx context.Context, c *core, u string, args any) (string, error) {
		m, err := c.ownMessage(ctx, u, id(args))
		if err != nil {
			return "", err
		}
		return m.SessionID, nil
	}
}

func init() {
	addOperation("editMessage", &operation{
		args: func() any { return new(EditMessageArgs) },
		check: func(c *core, args any) error {
			return c.checkText("message", args.(*EditMessageArgs).Content)
		},
		locate: locateMessage(func(args any) string { return args.(*EditMessageArgs).MessageID }),
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			a := cmd.Args.(*EditMessageArgs)
			m, err := s.ownMessage(ctx, cmd.UserID, a.MessageID)
			if err != nil {
				return nil, err
			}
			if m.Role != RoleUser || m.Kind != KindText {
				return nil, Errorf(EINVALID, "only a message you wrote can be edited; regenerate the agent's reply instead")
			}
			msg, run, err := s.addMessage(ctx, cmd.UserID, m.SessionID, addition{content: a.Content, edited: m})
			if err != nil {
				return nil, err
			}
			return &Reply{Message: msg, Run: run}, nil
		},
	})
	addOperation("regenerate", &operation{
		args:   func() any { return new(MessageArgs) },
		locate: locateMessage(func(args any) string { return args.(*MessageArgs).MessageID }),
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			m, err := s.ownMessage(ctx, cmd.UserID, cmd.Args.(*MessageArgs).MessageID)
			if err != nil {
				return nil, err
			}
			if m.Role != RoleAssistant {
				return nil, Errorf(EINVALID, "only the agent's reply can be regenerated; edit your message instead")
			}
			if m.ParentID == "" {
				return nil, Errorf(EINVALID, "this reply answers nothing to regenerate it from")
			}
			_, run, err := s.addMessage(ctx, cmd.UserID, m.SessionID, addition{regenerated: m})
			if err != nil {
				return nil, err
			}
			return &Reply{Run: run}, nil
		},
	})
	addOperation("selectBranch", &operation{
		args:   func() any { return new(MessageArgs) },
		locate: locateMessage(func(args any) string { return args.(*MessageArgs).MessageID }),
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			m, err := s.ownMessage(ctx, cmd.UserID, cmd.Args.(*MessageArgs).MessageID)
			if err != nil {
				return nil, err
			}
			return viewReply(s.selectBranch(ctx, m))
		},
	})
	addOperation("forkSession", &operation{
		args:  func() any { return new(ForkSessionArgs) },
		local: true,
		check: func(c *core, args any) error {
			a := args.(*ForkSessionArgs)
			a.Title = trimTitle(a.Title)
			if err := c.checkTitle(a.Title); err != nil {
				return err
			}
			return checkID("message ID", a.MessageID)
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			a := cmd.Args.(*ForkSessionArgs)
			return viewReply(s.forkSession(ctx, cmd.UserID, a.MessageID, a.Title))
		},
	})
}

// ForkSessionArgs are forkSession's arguments.
type ForkSessionArgs struct {
	MessageID string `json:"messageId"`
	Title     string `json:"title,omitempty"`
}

func (s *core) selectBranch(ctx context.Context, m *Message) (*SessionView, error) {
	sess, st, unlock, err := s.lockSession(ctx, m.SessionID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if st.active != nil || len(st.queue) > 0 {
		return nil, Errorf(ECONFLICT, "the agent is working on this session: stop it, or wait, before switching branches")
	}
	t := st.beginLocked()
	sw, err := t.switchTo(ctx, m.ID, true)
	if err != nil {
		return nil, err
	}
	if sw != nil {
		t.add(sw)
		if err := t.commitLocked(ctx); err != nil {
			return nil, err
		}
	}
	v := st.viewLocked(sess)
	return v, nil
}

// ForkSession makes a new session of the caller's holding the current branch of
// messageID's session up to messageID, with the source's settings and title (or title,
// when not empty), and its own history from then on. The copies are new messages with
// their text and status (a question or an answer becomes plain text; tool calls are not
// copied). ENOTFOUND for a message (or session) that is missing or not the caller's;
// EINVALID for a message off the current branch, a bad title, or more than
// MaxForkMessages messages; ECONFLICT for a message still being written.
func (s *Service) ForkSession(ctx context.Context, messageID, title string) (*SessionView, error) {
	r, err := s.exec(ctx, &Command{Op: "forkSession", Args: &ForkSessionArgs{MessageID: messageID, Title: title}})
	if err != nil {
		return nil, err
	}
	return r.view, nil
}

// forkSession is ForkSession, for user u.
func (s *core) forkSession(ctx context.Context, u, messageID, title string) (*SessionView, error) {
	m, err := s.ownMessage(ctx, u, messageID)
	if err != nil {
		return nil, err
	}
	src, err := s.session(ctx, m.SessionID)
	if err != nil {
		return nil, err
	}
	if m.OffBranch {
		return nil, Errorf(EINVALID, "fork from a message of the current branch: select its branch first")
	}
	if m.Status == MessageStreaming {
		return nil, Errorf(ECONFLICT, "the message is still being written")
	}
	msgs, err := s.store.Messages(ctx, m.SessionID, MessagePage{Before: m.Seq + 1, First: s.cfg.MaxForkMessages + 1})
	if err != nil {
		return nil, err
	}
	if len(msgs) > s.cfg.MaxForkMessages {
		return nil, Errorf(EINVALID, "a fork copies at most %d messages", s.cfg.MaxForkMessages)
	}
	if len(msgs) == 0 || msgs[len(msgs)-1].ID != m.ID {
		return nil, Errorf(EINVALID, "fork from a message of the current branch: select its branch first")
	}
	if title == "" {
		title = src.Title
	}
	return s.copySession(ctx, u, title, src.Settings, msgs)
}

// copySession makes a new session of user u's with title and settings, holding copies
// of msgs, a branch: new messages with their text and status (a question or an answer
// becomes plain text, one being written is INTERRUPTED; tool calls are not copied).
func (s *core) copySession(ctx context.Context, u, title string, settings Settings, msgs []*Message) (*SessionView, error) {
	now := s.now()
	sess := &TalkSession{ID: newID(), UserID: u, Title: title, Settings: settings, CreatedAt: now, UpdatedAt: now}
	b := &Batch{SessionID: sess.ID, Create: sess}
	parent := ""
	var bytes int64
	for i, old := range msgs {
		cp := &Message{ID: newID(), SessionID: sess.ID, Seq: int64(i + 1), Role: old.Role, Kind: KindText,
			Content: old.Content, Status: old.Status, Error: old.Error, ParentID: parent, CreatedAt: old.CreatedAt}
		if cp.Status == MessageStreaming {
			cp.Status = MessageInterrupted
		}
		if cp.Role == RoleUser {
			bytes += int64(len(cp.Content))
		}
		parent = cp.ID
		b.Events = append(b.Events, &Event{SessionID: sess.ID, Seq: cp.Seq, Type: EventMessageAdded, At: now, Message: cp})
	}
	if err := s.checkQuota(ctx, u, 1, sess.Size()+bytes); err != nil {
		return nil, err
	}
	if err := s.writeCreation(ctx, b); err != nil {
		return nil, err
	}
	s.counted(u, 1, sess.Size()+bytes)
	return s.view(ctx, sess.ID) // with its history as of now, and the cursor after it
}

// Siblings returns the IDs of m's siblings, m included, oldest first: the messages of its
// session with its parent. m is a message the caller was given.
func (s *Service) Siblings(ctx context.Context, m *Message) ([]string, error) {
	kids, err := s.store.Children(ctx, m.SessionID, m.ParentID, s.cfg.MaxBranches+1)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(kids))
	for _, k := range kids {
		ids = append(ids, k.ID)
	}
	if !slices.Contains(ids, m.ID) { // its session deleted meanwhile, or past the limit: m is listed all the same
		ids = append(ids, m.ID)
	}
	return ids, nil
}

// QueuedRuns returns the runs of v's session that wait their turn behind its active
// run, oldest first.
func (s *Service) QueuedRuns(ctx context.Context, v *SessionView) ([]*Run, error) {
	runs, err := s.store.SessionRuns(ctx, v.ID, RunQueued)
	if err != nil {
		return nil, err
	}
	if v.ActiveRun != nil {
		runs = slices.DeleteFunc(runs, func(r *Run) bool { return r.ID == v.ActiveRun.ID })
	}
	return runs, nil
}

// ownMessage returns message id when it is the caller's (u's); ENOTFOUND otherwise.
func (s *core) ownMessage(ctx context.Context, u, id string) (*Message, error) {
	if err := checkID("message ID", id); err != nil {
		return nil, err
	}
	m, err := s.store.Message(ctx, id)
	if ErrorCode(err) == ENOTFOUND {
		return nil, Errorf(ENOTFOUND, "message not found")
	} else if err != nil {
		return nil, err
	}
	sess, err := s.store.Session(ctx, m.SessionID)
	if ErrorCode(err) == ENOTFOUND || (err == nil && sess.UserID != u) {
		return nil, Errorf(ENOTFOUND, "message not found")
	} else if err != nil {
		return nil, err
	}
	return m, nil
}

// checkTreeLimitsLocked refuses an addition that would take the session past
// MaxSessionMessages messages, or a message past MaxBranches versions. The session's
// messages are counted with those promised: one reply for each run that has not written
// one yet (the queued runs, the active run until it replies), and what the addition adds
// (its message, and a reply unless it is a steer, which the running run answers).
func (st *sessionState) checkTreeLimitsLocked(ctx context.Context, a addition, steer bool) error {
	s := st.c
	adds := 2 // a message and its reply
	switch {
	case a.regenerated != nil:
		adds = 1 // a reply
	case steer:
		adds = 1 // a message
	}
	owed := int64(len(st.queue))
	if ar := st.active; ar != nil && !ar.replied {
		owed++
	}
	limit := int64(s.cfg.MaxSessionMessages)
	// Every message began with an event of the log: a log short enough holds few
	// enough messages, and the store need not count them.
	if st.log.end.Seq+owed+int64(adds) > limit {
		n, err := s.store.CountMessages(ctx, st.id)
		if err != nil {
			return err
		}
		if int64(n)+owed+int64(adds) > limit {
			if owed > 0 {
				return Errorf(ERATELIMIT, "this session holds %d messages and owes %d replies, and it can hold %d: fork it or start a new one", n, owed, limit)
			}
			return Errorf(ERATELIMIT, "this session holds %d messages, the most it can: fork it or start a new one", n)
		}
	}
	var beside *Message
	switch {
	case a.edited != nil:
		beside = a.edited
	case a.regenerated != nil:
		beside = a.regenerated
	default:
		return nil
	}
	kids, err := s.store.Children(ctx, st.id, beside.ParentID, s.cfg.MaxBranches)
	if err != nil {
		return err
	}
	if len(kids) >= s.cfg.MaxBranches {
		return Errorf(ERATELIMIT, "this message has %d versions, the most it can have", len(kids))
	}
	return nil
}

// switchTo returns the BranchSelected event that makes current, after t's events so
// far, the branch through target ("" for none: the empty branch), ending there, or, with
// descend, continuing below it at each step to the child added last; nil when that
// branch is current already. The session's lock is held.
func (t *txn) switchTo(ctx context.Context, target string, descend bool) (*Event, error) {
	s := t.st.c
	st := t.st
	leaf := t.leafOf()
	// Up from target to the first message on the current branch (the fork point).
	var up []*Message
	forkSeq := int64(0)
	for id := target; id != ""; {
		m, err := s.store.Message(ctx, id)
		if err != nil {
			return nil, err
		}
		if m.SessionID != st.id {
			return nil, Errorf(ENOTFOUND, "message not found")
		}
		if !m.OffBranch {
			forkSeq = m.Seq
			break
		}
		up = append(up, m)
		if len(up) > s.cfg.MaxSessionMessages {
			return nil, Errorf(EINTERNAL, "the message's branch does not end")
		}
		id = m.ParentID
	}
	slices.Reverse(up)
	var next []string // the new branch below the fork point
	for _, m := range up {
		next = append(next, m.ID)
	}
	to := target
	if descend && target != "" {
		for at := target; len(next) <= s.cfg.MaxSessionMessages; {
			kids, err := s.store.Children(ctx, st.id, at, 0)
			if err != nil {
				return nil, err
			}
			if len(kids) == 0 {
				break
			}
			at = kids[len(kids)-1].ID
			next, to = append(next, at), at
		}
	}
	// The current branch below the fork point.
	var old []string
	for after := forkSeq; ; {
		page, err := s.store.Messages(ctx, st.id, MessagePage{After: after, First: 500})
		if err != nil {
			return nil, err
		}
		for _, m := range page {
			old = append(old, m.ID)
		}
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].Seq
	}
	// and what t added to it so far.
	for _, ev := range t.b.Events {
		if ev.Type == EventMessageAdded && ev.Message != nil && !ev.Message.OffBranch {
			old = append(old, ev.Message.ID)
		}
	}
	// The two branches share no message below the fork point but those a descent meets
	// again on the current branch: each side's others leave or join it.
	inOld, inNext := make(map[string]bool, len(old)), make(map[string]bool, len(next))
	for _, id := range old {
		inOld[id] = true
	}
	for _, id := range next {
		inNext[id] = true
	}
	sw := &BranchSwitch{}
	for _, id := range old {
		if !inNext[id] {
			sw.Off = append(sw.Off, id)
		}
	}
	for _, id := range next {
		if !inOld[id] {
			sw.On = append(sw.On, id)
		}
	}
	if len(sw.Off) == 0 && len(sw.On) == 0 && to == leaf {
		return nil, nil
	}
	return &Event{Type: EventBranchSelected, Key: to, Branch: sw}, nil
}
