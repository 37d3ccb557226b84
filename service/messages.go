package service

import (
	"context"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
)

// AddMessage stores a user message in the caller's session and starts a run for it, or
// queues one, by the session's busy policy: INTERRUPT stops the active run (kept
// INTERRUPTED with its partial reply) and withdraws queued ones, ENQUEUE queues the new
// run, REJECT refuses with ECONFLICT and stores nothing, STEER hands the message to the
// running agent (see AddMessageWith). With an idempotency key, a retry answers the
// message and run the first call created. ENOTFOUND when the session is missing or not
// the caller's; EINVALID for empty or oversized content or key; ERATELIMIT when too many
// runs wait; EBUDGET while the caller's token budget for the period is spent;
// EUNAVAILABLE when it cannot be written. A message that is refused changes
// nothing: the running agent goes on as it was.
func (s *Service) AddMessage(ctx context.Context, sessionID, content, key string) (*Message, *Run, error) {
	return s.AddMessageWith(ctx, sessionID, content, key, "")
}

// AddMessageWith is AddMessage with the busy policy for this message alone (policy; ""
// for the session's). Under STEER, while the session's agent runs and can take it (a
// Steerable agent, its run RUNNING), the message joins the branch at once and is handed
// to the agent at its next step (Output.Steers); the run returned is that running run.
// Otherwise STEER is ENQUEUE. A steer the agent never took starts the next run once its
// run completes or fails.
func (s *Service) AddMessageWith(ctx context.Context, sessionID, content, key string, policy BusyPolicy) (*Message, *Run, error) {
	r, err := s.exec(ctx, &Command{Op: "addMessage", SessionID: sessionID, Args: &AddMessageArgs{Content: content, Key: key, Policy: policy}})
	if err != nil {
		return nil, nil, err
	}
	return r.Message, r.Run, nil
}

// AddMessageArgs are addMessage's arguments.
type AddMessageArgs struct {
	Content string     `json:"content"`
	Key     string     `json:"key,omitempty"`
	Policy  BusyPolicy `json:"policy,omitempty"`
}

func init() {
	addOperation("addMessage", &operation{
		args: func() any { return new(AddMessageArgs) },
		check: func(c *core, args any) error {
			a := args.(*AddMessageArgs)
			if err := c.checkText("message", a.Content); err != nil {
				return err
			}
			if err := checkKey(a.Key); err != nil {
				return err
			}
			if a.Policy != "" && !a.Policy.Valid() {
				return Errorf(EINVALID, "unknown busy policy %q", truncate(string(a.Policy), 20))
			}
			return nil
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			a := cmd.Args.(*AddMessageArgs)
			m, run, err := s.addMessage(ctx, cmd.UserID, cmd.SessionID, addition{content: a.Content, key: a.Key, policy: a.Policy})
			if err != nil {
				return nil, err
			}
			return &Reply{Message: m, Run: run}, nil
		},
	})
}

// addition is what a command adds to a session: a user message with its run (addMessage,
// editMessage), or a run alone (regenerate).
type addition struct {
	content, key string
	// policy is the busy policy asked for ("": the session's); addMessage makes it the
	// one that applies.
	policy BusyPolicy
	// edited is the message an edit replaces (the new one goes beside it); regenerated
	// the reply a regeneration replaces (the run replies to its parent).
	edited, regenerated *Message
	// switchNow is set for an edit or a regeneration that does not wait: its branch
	// becomes current in the write that adds it.
	switchNow bool
}

// addMessage is AddMessage, editMessage and regenerate where the session's agent runs.
func (s *core) addMessage(ctx context.Context, u, sessionID string, a addition) (*Message, *Run, error) {
	// Where the store is across the network (not a SoleWriter), what the message is
	// checked against besides its session is read meanwhile, each read on its own
	// goroutine: every read is a round trip, and the message waits for the longest instead
	// of for their sum. The answers are taken in the order they were checked in, so that
	// the same error wins; on a store in this process each is read then.
	async := !s.sole
	var idem *later[*IdempotencyRecord]
	if a.key != "" {
		idem = readLater(async, func() (*IdempotencyRecord, error) { return s.store.Idempotency(ctx, u, a.key) })
	}
	var budget, quota *later[struct{}]
	if s.cfg.UserTokenBudget > 0 {
		budget = readLater(async, func() (struct{}, error) { return struct{}{}, s.checkUserBudget(ctx, u) })
	}
	if a.regenerated == nil {
		quota = readLater(async, func() (struct{}, error) { return struct{}{}, s.checkQuota(ctx, u, 0, int64(len(a.content))) })
	}
	sess, st, unlock, err := s.lockSession(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()

	if idem != nil {
		rec, err := idem.wait()
		switch {
		case err == nil:
			return s.replay(ctx, rec, sessionID, a.content)
		case ErrorCode(err) != ENOTFOUND:
			return nil, nil, err
		}
	}
	m, run, err := s.addLocked(ctx, sess, st, u, a, budget, quota)
	if err != nil && a.key != "" {
		// The key was read before the session was locked, and another request with it may
		// have been written since (or won the race to write it): what it created is the
		// answer, rather than a refusal the first request did not get.
		if rec, rerr := s.store.Idempotency(ctx, u, a.key); rerr == nil {
			return s.replay(ctx, rec, sessionID, a.content)
		}
	}
	return m, run, err
}

// addLocked is addMessage once the session is locked and the key is known new: the
// checks (budget and quota: the reads addMessage started, nil for none), the busy
// policy, and the write.
func (s *core) addLocked(ctx context.Context, sess *TalkSession, st *sessionState, u string, a addition, budget, quota *later[struct{}]) (*Message, *Run, error) {
	if budget != nil {
		if _, err := budget.wait(); err != nil {
			return nil, nil, err
		}
	}
	if quota != nil {
		if _, err := quota.wait(); err != nil {
			return nil, nil, err
		}
	}
	policy := a.policy
	if policy == "" {
		policy = sess.Settings.BusyPolicy
	}
	if policy == BusySteer && (a.edited != nil || a.regenerated != nil || !st.active.steerableLocked()) {
		policy = BusyEnqueue // an edit or a regeneration is not a steer; nor is a message no agent takes
	}
	if err := st.checkTreeLimitsLocked(ctx, a, policy == BusySteer); err != nil {
		return nil, nil, err
	}
	busy := st.active != nil || len(st.queue) > 0
	if busy {
		switch policy {
		case BusyReject:
			return nil, nil, Errorf(ECONFLICT, "the agent is still working on this session")
		case BusyEnqueue:
			if len(st.queue) >= s.cfg.MaxQueuedRuns {
				return nil, nil, Errorf(ERATELIMIT, "too many messages are waiting in this session")
			}
		}
	}
	if policy == BusySteer {
		t, msg, run := st.planSteerLocked(sess, u, a)
		if err := t.commitLocked(ctx); err != nil {
			return nil, nil, err
		}
		return msg, run, nil
	}
	// An edit or a regeneration that does not wait switches to its branch in the same
	// write; one that waits switches when its run starts (Run.ReplyTo).
	a.policy = policy
	a.switchNow = (a.edited != nil || a.regenerated != nil) && (!busy || policy == BusyInterrupt)

	// A run that can start at once starts in the same write: RUNNING follows QUEUED.
	// Where the store is shared, it admits the run only while the user has fewer than
	// RunsPerUser runs RUNNING across every process (see admit); refused, it is written
	// QUEUED and waits for a slot.
	tryAdmit := true
	for {
		p, err := st.planAddLocked(ctx, sess, u, a, tryAdmit)
		if err != nil {
			return nil, nil, err
		}
		err = p.t.commitLocked(ctx)
		switch {
		case err == nil:
			r := *p.run
			if p.msg == nil {
				return nil, &r, nil
			}
			m := *p.msg
			return &m, &r, nil
		case p.admitted && ErrorCode(err) == ERATELIMIT:
			tryAdmit = false
			continue
		}
		return nil, nil, err
	}
}

// planAddLocked builds addMessage's write: the message, its run (RUNNING at once when
// tryAdmit and a slot is free here: admitted), and what the busy policy (a.policy) does
// to the runs before it. With a.switchNow, an edit's or a regeneration's branch becomes
// current in it.
// An error means that nothing was planned (the switch could not be read); t is then
// discarded unwritten.
func (st *sessionState) planAddLocked(ctx context.Context, sess *TalkSession, u string, a addition, tryAdmit bool) (planned, error) {
	s := st.c
	policy, switchNow := a.policy, a.switchNow
	t := st.beginLocked()
	// willStart: the new run becomes the active one (nothing else runs, or INTERRUPT ends
	// what runs).
	willStart := st.active == nil || policy == BusyInterrupt
	if (st.active != nil || len(st.queue) > 0) && policy == BusyInterrupt {
		// Queued runs are covered by the new run, which reads the whole history. They
		// leave the queue first, so that stopping the active run starts none of them.
		now := s.now()
		for _, q := range st.queue {
			snap := *q
			snap.Status, snap.FinishedAt = RunInterrupted, &now
			t.add(runEvent(&snap))
		}
		t.onCommit(func() {
			for range st.dropQueueLocked() {
				s.countRun(RunInterrupted)
			}
		})
		if ar := st.active; ar != nil {
			ar.finishLocked(t, RunInterrupted, "")
		}
	} else if ar := st.active; ar != nil && !ar.sealed && !ar.parked {
		// What the running agent wrote so far comes before the new message on the branch.
		ar.writeTextLocked(t)
	}
	var sw *Event // the switch of an edit or a regeneration that does not wait
	if switchNow {
		to := ""
		switch {
		case a.edited != nil:
			to = a.edited.ParentID
		case a.regenerated != nil:
			to = a.regenerated.ParentID
		}
		var err error
		if sw, err = t.switchTo(ctx, to, false); err != nil {
			return planned{}, err
		}
	}

	var msg *Message
	run := &Run{ID: newID(), SessionID: sess.ID, UserID: u, Status: RunQueued, Agent: sess.Settings.Agent, Owner: s.peers.id(), CreatedAt: s.now()}
	if a.regenerated != nil {
		run.ReplyTo = a.regenerated.ParentID
		if sw != nil {
			t.add(sw)
		}
		t.add(runEvent(run))
	} else {
		msg = t.newUserMessage(u, a.content, run.ID)
		var then []*Event
		if e := a.edited; e != nil {
			// Beside the edited message; its branch becomes current now or when its run
			// starts.
			run.ReplyTo = msg.ID
			msg.ParentID, msg.OffBranch = e.ParentID, true
			if switchNow {
				if sw == nil {
					sw = &Event{Type: EventBranchSelected, Branch: &BranchSwitch{}}
				}
				sw.Key, sw.Branch.On = msg.ID, append(sw.Branch.On, msg.ID)
				then = append(then, sw)
			}
		}
		t.addUserMessage(sess, msg, a.key, append(then, runEvent(run))...)
		msg.OffBranch = !switchNow && a.edited != nil
	}
	admitted := tryAdmit && willStart && s.sched.tryAcquire(u)
	if admitted {
		run.setState(t.admit(run))
		t.onAbort(func() { s.sched.release(u) })
	}
	t.onCommit(func() { st.queueLocked(run, admitted, trace.SpanContextFromContext(ctx)) })
	return planned{t: t, msg: msg, run: run, admitted: admitted}, nil
}

// planned is an addition as planned: its write, its message (none for a regeneration),
// its run, and whether the run was admitted RUNNING in the write (holding a worker slot
// of this process).
type planned struct {
	t        *txn
	msg      *Message
	run      *Run
	admitted bool
}

// newUserMessage makes a message of user u with content, for run runID (the run it
// starts, or the run it steers), to add to t (addUserMessage).
func (t *txn) newUserMessage(u, content, runID string) *Message {
	return &Message{ID: newID(), SessionID: t.st.id, Role: RoleUser, Kind: KindText, Content: content,
		Status: MessageComplete, RunID: runID, CreatedAt: t.st.c.now()}
}

// addUserMessage adds to t msg, a message of user u (newUserMessage), then the events
// then: at the end of the branch unless it says otherwise (an edit that waits). It titles
// an untitled session after it, records the idempotency key (when there is one) with it,
// and counts it in the user's footprint once durable. msg gets its Seq and parent. Every
// message a user writes (addMessage, editMessage, a steer) is added here.
func (t *txn) addUserMessage(sess *TalkSession, msg *Message, key string, then ...*Event) {
	added := *msg
	t.add(append([]*Event{{Type: EventMessageAdded, Message: &added, At: msg.CreatedAt}}, then...)...)
	msg.Seq, msg.ParentID = added.Seq, added.ParentID
	t.titleFrom(sess, msg.Content, msg.CreatedAt)
	if key != "" {
		t.b.Idempotency = &IdempotencyRecord{UserID: sess.UserID, Key: key, SessionID: sess.ID, MessageID: msg.ID, RunID: msg.RunID, CreatedAt: msg.CreatedAt}
	}
	c, bytes := t.st.c, int64(len(msg.Content))
	t.onCommit(func() { c.counted(sess.UserID, 0, bytes) })
}

// titleFrom names an untitled session after its first message, in t.
func (t *txn) titleFrom(sess *TalkSession, content string, now time.Time) {
	if sess.Title != "" {
		return
	}
	named := *sess
	named.Title = truncate(strings.Join(strings.Fields(content), " "), 60)
	named.UpdatedAt = now
	t.add(&Event{Type: EventSessionUpdated, Session: &named})
}

// replay answers a retried addMessage with what the first call created.
func (s *core) replay(ctx context.Context, rec *IdempotencyRecord, sessionID, content string) (*Message, *Run, error) {
	if rec.SessionID != sessionID {
		return nil, nil, Errorf(ECONFLICT, "this idempotency key was used for another session")
	}
	msg, err := s.store.Message(ctx, rec.MessageID)
	if err != nil {
		return nil, nil, err
	}
	if msg.Content != content {
		return nil, nil, Errorf(ECONFLICT, "this idempotency key was used for another message")
	}
	run, err := s.store.Run(ctx, rec.RunID)
	if err != nil {
		return nil, nil, err
	}
	return msg, run, nil
}

// checkKey refuses an idempotency key that no store could keep as it is: too long, not
// valid UTF-8, or holding a control character (PostgreSQL's text cannot hold NUL).
func checkKey(key string) error {
	if len(key) > 200 {
		return Errorf(EINVALID, "idempotency key is too long: at most 200 bytes")
	}
	if !utf8.ValidString(key) {
		return Errorf(EINVALID, "idempotency key is not valid UTF-8")
	}
	if strings.IndexFunc(key, unicode.IsControl) >= 0 {
		return Errorf(EINVALID, "idempotency key must not hold control characters")
	}
	return nil
}

func (s *core) checkText(what, content string) error {
	if blank(content) {
		return Errorf(EINVALID, "%s is empty", what)
	}
	if len(content) > s.cfg.MaxMessageBytes {
		return Errorf(EINVALID, "%s is too long: %d bytes, at most %d", what, len(content), s.cfg.MaxMessageBytes)
	}
	if !utf8.ValidString(content) {
		return Errorf(EINVALID, "%s is not valid UTF-8", what)
	}
	return nil
}

// blank reports whether s shows nothing: every character in it is white space, a control
// character, or one that Unicode has displayed as nothing (format characters such as the
// zero-width space U+200B, joiners and the byte order mark; the other default-ignorable
// ones such as the Hangul fillers; variation selectors).
func blank(s string) bool {
	for _, r := range s {
		if !unicode.IsSpace(r) && !unicode.IsControl(r) && !unicode.In(r, unicode.Cf, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) {
			return false
		}
	}
	return true
}
