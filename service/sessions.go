package service

import (
	"context"
	"reflect"
	"strings"
	"unicode/utf8"
)

// SessionView is a session as one read saw it: its state and the position of its log at
// that moment. History read with the view (History with asOf) shows the messages as of the
// same moment, so that subscribing after StreamCursor continues it with no gap and no
// duplicate.
type SessionView struct {
	*TalkSession
	Status    SessionStatus
	ActiveRun *Run
	// PendingQuestions and PendingApprovals are what the session's run waits on, oldest
	// first; PendingQuestion is the oldest question.
	PendingQuestion  *Question
	PendingQuestions []*Question
	PendingApprovals []*ToolCall
	// StreamCursor is the encoded position of the last event at the time of the read.
	StreamCursor string

	pos  Cursor // StreamCursor's position
	asOf snapshot
}

// snapshot is what the in-memory state held at the time of a view: the durable text of
// the message being written and of running tools, which the stored rows get only when
// they end.
type snapshot struct {
	seq         int64
	streamingID string            // the message being written, if announced
	streamed    string            // its durable text
	toolOutput  map[string]string // running tool calls' durable output, by ID
}

// View returns the caller's session with its status, active run, pending question and
// stream cursor, read together. ENOTFOUND when missing or another user's.
func (s *Service) View(ctx context.Context, id string) (*SessionView, error) { return s.view(ctx, id) }

// view is View.
func (s *core) view(ctx context.Context, id string) (*SessionView, error) {
	sess, err := s.session(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.viewOf(ctx, sess), nil
}

func (s *core) viewOf(ctx context.Context, sess *TalkSession) *SessionView {
	st := s.acquireState(sess)
	defer s.releaseState(st)
	st.mu.Lock()
	v := st.viewLocked(sess)
	st.mu.Unlock()
	if v.ActiveRun == nil {
		s.peers.elsewhere(ctx, v)
	}
	return v
}

// viewLocked builds the view of sess from its state; st.mu must be held.
func (st *sessionState) viewLocked(sess *TalkSession) *SessionView {
	v := &SessionView{TalkSession: sess, Status: SessionIdle}
	c := Cursor{Seq: sess.LastSeq}
	switch end := st.log.end; {
	case end.Seq > sess.LastSeq: // the row was read before events appended since
		cp := *sess
		cp.LastSeq = end.Seq
		v.TalkSession = &cp
		c = end
	case end.Seq == sess.LastSeq:
		c.Off = end.Off
	}
	v.StreamCursor = EncodeCursor(sess.ID, c)
	v.pos, v.asOf.seq = c, c.Seq
	if ar := st.active; ar != nil {
		r := *ar.run
		v.ActiveRun = &r
		v.Status = SessionRunning
		if ar.run.Status == RunWaitingForInput {
			v.Status = SessionWaitingForInput
			v.PendingQuestions, v.PendingApprovals = ar.pendingLocked()
			if len(v.PendingQuestions) > 0 {
				v.PendingQuestion = v.PendingQuestions[0]
			}
		}
		if ar.msg != nil && ar.announced {
			v.asOf.streamingID = ar.msg.ID
			v.asOf.streamed = ar.text.written.String()
		}
		for id, tool := range ar.tools {
			if tool.call.Status == ToolRunning {
				if v.asOf.toolOutput == nil {
					v.asOf.toolOutput = map[string]string{}
				}
				v.asOf.toolOutput[id] = tool.out.written.String()
			}
		}
	} else if len(st.queue) > 0 {
		v.Status = SessionRunning
		r := *st.queue[0]
		v.ActiveRun = &r
	}
	return v
}

// CreateTalkSession creates a session for the caller. EINVALID for a title that is too
// long, an unknown agent or an invalid setting.
func (s *Service) CreateTalkSession(ctx context.Context, title string, settings SettingsInput) (*SessionView, error) {
	r, err := s.exec(ctx, &Command{Op: "createTalkSession", Args: &CreateSessionArgs{Title: title, Settings: settings}})
	if err != nil {
		return nil, err
	}
	return r.view, nil
}

// CreateSessionArgs are createTalkSession's arguments.
type CreateSessionArgs struct {
	Title    string        `json:"title,omitempty"`
	Settings SettingsInput `json:"settings"`
	// ID, when set, is the new session's: a schedule's fire names the session it creates
	// (see sendFire), so that a fire sent again finds it (ECONFLICT). No API sets it.
	ID string `json:"id,omitempty"`
}

// SessionArgs are the arguments of a change of a session's row: its title
// (renameTalkSession) or its settings (updateTalkSessionSettings).
type SessionArgs struct {
	Title    string        `json:"title,omitempty"`
	Settings SettingsInput `json:"settings"`
}

func init() {
	addOperation("createTalkSession", &operation{
		args:  func() any { return new(CreateSessionArgs) },
		local: true,
		check: func(c *core, args any) error {
			a := args.(*CreateSessionArgs)
			a.Title = trimTitle(a.Title)
			return c.checkTitle(a.Title)
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			a := cmd.Args.(*CreateSessionArgs)
			return viewReply(s.createSession(ctx, cmd.UserID, cmd.Guest, a.ID, a.Title, a.Settings))
		},
	})
	addOperation("renameTalkSession", &operation{
		args: func() any { return new(SessionArgs) },
		check: func(c *core, args any) error {
			a := args.(*SessionArgs)
			a.Title = trimTitle(a.Title)
			return c.checkTitle(a.Title)
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			title := cmd.Args.(*SessionArgs).Title
			return viewReply(s.changeSession(ctx, cmd.SessionID, func(sess *TalkSession) error { sess.Title = title; return nil }))
		},
	})
	addOperation("updateTalkSessionSettings", &operation{
		args: func() any { return new(SessionArgs) },
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			in := cmd.Args.(*SessionArgs).Settings
			return viewReply(s.changeSession(ctx, cmd.SessionID, func(sess *TalkSession) error { return s.applySettings(&sess.Settings, in) }))
		},
	})
	addOperation("markSessionRead", &operation{
		args: func() any { return new(struct{}) },
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			return viewReply(s.markRead(ctx, cmd.SessionID))
		},
	})
	addOperation("deleteTalkSession", &operation{
		args: func() any { return new(struct{}) },
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			return nil, s.deleteSession(ctx, cmd.SessionID)
		},
	})
}

// createSession makes a session of user u's (a guest's when guest), with the ID id ("":
// a new one).
func (s *core) createSession(ctx context.Context, u string, guest bool, id, title string, settings SettingsInput) (*SessionView, error) {
	set := Settings{Agent: "demo", BusyPolicy: BusyInterrupt, Guest: guest}
	if err := s.applySettings(&set, settings); err != nil {
		return nil, err
	}
	now := s.now()
	if id == "" {
		id = newID()
	} else if err := checkID("session ID", id); err != nil {
		return nil, err
	}
	sess := &TalkSession{ID: id, UserID: u, Title: title, Settings: set, CreatedAt: now, UpdatedAt: now}
	if err := s.checkQuota(ctx, u, 1, sess.Size()); err != nil {
		return nil, err
	}
	if err := s.writeCreation(ctx, &Batch{SessionID: sess.ID, Create: sess}); err != nil {
		return nil, err
	}
	s.counted(u, 1, sess.Size())
	return &SessionView{TalkSession: sess, Status: SessionIdle, StreamCursor: EncodeCursor(sess.ID, Cursor{})}, nil
}

// writeCreation writes b, which creates a session (with its first events, for a fork),
// telling its user.
func (s *core) writeCreation(ctx context.Context, b *Batch) error {
	cp := *b.Create
	b.Mark = &Mark{UserID: cp.UserID, Row: &cp, Before: SessionIdle, After: SessionIdle, At: cp.CreatedAt}
	b.derive()
	if err := s.writer.write(ctx, b); err != nil {
		return err
	}
	s.told(b)
	return nil
}

// trimTitle trims white space around a title; a title that shows nothing (see blank) is
// empty, and is filled in from the first message.
func trimTitle(title string) string {
	if title = strings.TrimSpace(title); blank(title) {
		return ""
	}
	return title
}

func (s *core) checkTitle(title string) error {
	if !utf8.ValidString(title) {
		return Errorf(EINVALID, "title is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(title); n > s.cfg.MaxTitleLength {
		return Errorf(EINVALID, "title is too long: %d characters, at most %d", n, s.cfg.MaxTitleLength)
	}
	return nil
}

// SettingsInput changes settings; nil fields stay as they are. An empty Model or
// SystemPrompt clears it.
type SettingsInput struct {
	Agent        *string
	Model        *string
	SystemPrompt *string
	Temperature  *float64
	BusyPolicy   *BusyPolicy
	// ToolPolicies change the policies of the tools they name; the others stay.
	ToolPolicies map[string]ToolPolicy
	// TokenBudget sets the session's cap in tokens; 0 removes it.
	TokenBudget *int
}

func (s *core) applySettings(set *Settings, in SettingsInput) error {
	if in.Agent != nil {
		if _, ok := s.agents.Get(*in.Agent); !ok {
			return Errorf(EINVALID, "unknown agent %q", truncate(*in.Agent, 40))
		}
		set.Agent = *in.Agent
	}
	if in.Model != nil {
		if len(*in.Model) > 200 || !utf8.ValidString(*in.Model) {
			return Errorf(EINVALID, "model name is too long or not valid UTF-8")
		}
		set.Model = emptyNil(*in.Model)
	}
	if in.SystemPrompt != nil {
		if len(*in.SystemPrompt) > s.cfg.MaxMessageBytes || !utf8.ValidString(*in.SystemPrompt) {
			return Errorf(EINVALID, "system prompt is too long (at most %d bytes) or not valid UTF-8", s.cfg.MaxMessageBytes)
		}
		set.SystemPrompt = emptyNil(*in.SystemPrompt)
	}
	if in.Temperature != nil {
		t := *in.Temperature
		if t < 0 || t > 2 || t != t {
			return Errorf(EINVALID, "temperature must be between 0 and 2")
		}
		set.Temperature = &t
	}
	if in.BusyPolicy != nil {
		if !in.BusyPolicy.Valid() {
			return Errorf(EINVALID, "unknown busy policy")
		}
		set.BusyPolicy = *in.BusyPolicy
	}
	if in.TokenBudget != nil {
		switch n := *in.TokenBudget; {
		case n < 0:
			return Errorf(EINVALID, "a token budget cannot be negative")
		case n == 0:
			set.TokenBudget = nil
		default:
			set.TokenBudget = &n
		}
	}
	return s.applyToolPolicies(set, in.ToolPolicies)
}

func emptyNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// truncateBytes cuts s to at most n bytes, "…" included, between two characters.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len("…"), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if n < len("…") {
		return s[:cut]
	}
	return s[:cut] + "…"
}

// Sessions returns a page of the caller's sessions, most recent activity first, after the
// session-list cursor after (when not empty). first is clamped to the page size limit.
// EINVALID for a bad cursor or a negative first.
func (s *Service) Sessions(ctx context.Context, first *int, after string) (page []*SessionView, hasNext bool, err error) {
	u, err := user(ctx)
	if err != nil {
		return nil, false, err
	}
	n, err := s.pageSize(first)
	if err != nil {
		return nil, false, err
	}
	var pos *SessionPosition
	if after != "" {
		if pos, err = DecodeSessionCursor(after); err != nil {
			return nil, false, err
		}
	}
	list, err := s.store.Sessions(ctx, u, pos, n+1)
	if err != nil {
		return nil, false, err
	}
	if len(list) > n {
		list, hasNext = list[:n], true
	}
	for _, sess := range list {
		page = append(page, s.viewOf(ctx, sess))
	}
	return page, hasNext, nil
}

func (s *core) pageSize(n *int) (int, error) {
	if n == nil {
		return s.cfg.DefaultPageSize, nil
	}
	if *n < 0 {
		return 0, Errorf(EINVALID, "page size must not be negative")
	}
	return min(*n, s.cfg.MaxPageSize), nil
}

// RenameTalkSession sets a session's title. ENOTFOUND, EINVALID as for create.
func (s *Service) RenameTalkSession(ctx context.Context, id, title string) (*SessionView, error) {
	return s.changeRow(ctx, &Command{Op: "renameTalkSession", SessionID: id, Args: &SessionArgs{Title: title}})
}

// UpdateSettings changes a session's settings; they apply to runs that start afterwards.
func (s *Service) UpdateSettings(ctx context.Context, id string, in SettingsInput) (*SessionView, error) {
	return s.changeRow(ctx, &Command{Op: "updateTalkSessionSettings", SessionID: id, Args: &SessionArgs{Settings: in}})
}

// changeRow does cmd, a change of a session's row, and answers the session as it left it.
func (s *Service) changeRow(ctx context.Context, cmd *Command) (*SessionView, error) {
	r, err := s.exec(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return s.answeredView(ctx, r, cmd.SessionID)
}

func (s *core) changeSession(ctx context.Context, id string, change func(*TalkSession) error) (*SessionView, error) {
	sess, st, unlock, err := s.lockSession(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	updated := *sess
	if err := change(&updated); err != nil {
		return nil, err
	}
	if updated.Title == sess.Title && reflect.DeepEqual(updated.Settings, sess.Settings) {
		return st.viewLocked(sess), nil // nothing changes: nothing is written, updatedAt stays
	}
	updated.UpdatedAt = s.now()
	if err := s.checkQuota(ctx, sess.UserID, 0, updated.Size()); err != nil {
		return nil, err
	}
	t := st.beginLocked()
	snap := updated
	t.add(&Event{Type: EventSessionUpdated, Session: &snap})
	if err := st.raisedLocked(ctx, t, updated.Settings); err != nil {
		return nil, err
	}
	t.onCommit(func() { s.counted(sess.UserID, 0, updated.Size()) })
	if err := t.commitLocked(ctx); err != nil {
		return nil, err
	}
	return st.viewLocked(&updated), nil
}

// MarkSessionRead clears a session's unread flag (see TalkSession.Unread); every tab of
// the user hears of it (a SessionChanged). ENOTFOUND when missing or another user's.
func (s *Service) MarkSessionRead(ctx context.Context, id string) (*SessionView, error) {
	return s.changeRow(ctx, &Command{Op: "markSessionRead", SessionID: id})
}

// markRead is MarkSessionRead where the session's agent runs: a SessionRead event when
// the session is unread, nothing otherwise.
func (s *core) markRead(ctx context.Context, id string) (*SessionView, error) {
	sess, st, unlock, err := s.lockSession(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !sess.Unread {
		return st.viewLocked(sess), nil
	}
	t := st.beginLocked()
	t.add(&Event{Type: EventSessionRead})
	if err := t.commitLocked(ctx); err != nil {
		return nil, err
	}
	read := *sess
	read.Unread = false
	read.LastSeq = st.log.end.Seq
	return st.viewLocked(&read), nil
}

// DeleteTalkSession deletes a session and its history, stopping its run; subscriptions to
// it end. ENOTFOUND when missing or another user's.
func (s *Service) DeleteTalkSession(ctx context.Context, id string) error {
	_, err := s.exec(ctx, &Command{Op: "deleteTalkSession", SessionID: id})
	return err
}

// deleteSession is DeleteTalkSession where the session's agent runs. Once the deletion
// is durable the log ends (its readers with it), and the session's run stops unwritten.
func (s *core) deleteSession(ctx context.Context, id string) error {
	_, st, unlock, err := s.lockSession(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	t := st.beginLocked()
	t.b.Delete = true
	t.onCommit(func() {
		st.dropActiveLocked()
		st.dropQueueLocked()
		s.forget(st.userID)
	})
	return t.commitLocked(ctx)
}
