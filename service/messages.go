package service

import (
	"context"
	"strings"
	"unicode"
	"unicode/utf8"
)

// AddMessage stores a user message in the caller's session and starts a run for it, or
// queues one, by the session's busy policy: INTERRUPT stops the active run (kept
// INTERRUPTED with its partial reply) and withdraws queued ones, ENQUEUE queues the new
// run, REJECT refuses with ECONFLICT and stores nothing. With an idempotency key, a retry
// answers the message and run the first call created. ENOTFOUND when the session is
// missing or not the caller's; EINVALID for empty or oversized content or key; ERATELIMIT
// when too many runs wait; EUNAVAILABLE when it cannot be written. A message that is
// refused changes nothing: the running agent goes on as it was.
func (s *Service) AddMessage(ctx context.Context, sessionID, content, key string) (*Message, *Run, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkText("message", content); err != nil {
		return nil, nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, nil, err
	}
	if err := checkID("session ID", sessionID); err != nil {
		return nil, nil, err
	}
	r, err := s.peers.route(ctx, &Command{Op: opAdd, UserID: u, SessionID: sessionID, Content: content, Key: key}, func(ctx context.Context) (*Reply, error) {
		m, run, err := s.addMessage(ctx, u, sessionID, content, key)
		return &Reply{Message: m, Run: run}, err
	})
	if err != nil {
		return nil, nil, err
	}
	if r.Run != nil {
		s.annotate(ctx, sessionID, r.Run.ID)
	}
	return r.Message, r.Run, nil
}

// addMessage is AddMessage where the session's agent runs.
func (s *Service) addMessage(ctx context.Context, u, sessionID, content, key string) (*Message, *Run, error) {
	sess, st, unlock, err := s.lockSession(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()

	if key != "" {
		rec, err := s.store.Idempotency(ctx, u, key)
		switch {
		case err == nil:
			return s.replay(ctx, rec, sessionID, content)
		case ErrorCode(err) != ENOTFOUND:
			return nil, nil, err
		}
	}
	if err := s.checkQuota(ctx, u, 0, int64(len(content))); err != nil {
		return nil, nil, err
	}
	if st.active != nil || len(st.queue) > 0 {
		switch sess.Settings.BusyPolicy {
		case BusyReject:
			return nil, nil, Errorf(ECONFLICT, "the agent is still working on this session")
		case BusyEnqueue:
			if len(st.queue) >= s.cfg.MaxQueuedRuns {
				return nil, nil, Errorf(ERATELIMIT, "too many messages are waiting in this session")
			}
		}
	}

	// A run that can start at once starts in the same write: RUNNING follows QUEUED.
	// Where the store is shared, it admits the run only while the user has fewer than
	// RunsPerUser runs RUNNING across every process (see admit); refused, it is written
	// QUEUED and waits for a slot.
	tryAdmit := true
	for {
		t, msg, run, admitted := s.planAdd(ctx, st, sess, u, content, key, tryAdmit)
		err := s.commitLocked(ctx, t)
		switch {
		case err == nil:
			m, r := *msg, *run
			return &m, &r, nil
		case admitted && ErrorCode(err) == ERATELIMIT:
			tryAdmit = false
			continue
		case ErrorCode(err) == ECONFLICT && key != "":
			// Another request with the key won the race: answer what it created.
			if rec, rerr := s.store.Idempotency(ctx, u, key); rerr == nil {
				return s.replay(ctx, rec, sessionID, content)
			}
		}
		return nil, nil, err
	}
}

// planAdd builds addMessage's write: the message, its run (RUNNING at once when
// tryAdmit and a slot is free here: admitted), and what the busy policy does to the runs
// before it.
func (s *Service) planAdd(ctx context.Context, st *sessionState, sess *TalkSession, u, content, key string, tryAdmit bool) (t *txn, msg *Message, run *Run, admitted bool) {
	t = s.begin(st)
	// willStart: the new run becomes the active one (nothing else runs, or INTERRUPT ends
	// what runs).
	willStart := st.active == nil || sess.Settings.BusyPolicy == BusyInterrupt
	if (st.active != nil || len(st.queue) > 0) && sess.Settings.BusyPolicy == BusyInterrupt {
		// Queued runs are covered by the new run, which reads the whole history. They
		// leave the queue first, so that stopping the active run starts none of them.
		now := s.now()
		for _, q := range st.queue {
			snap := *q
			snap.Status, snap.FinishedAt = RunInterrupted, &now
			s.add(t, runEvent(&snap))
		}
		t.onCommit(func() {
			for range s.dropQueueLocked(st) {
				s.countRun(RunInterrupted)
			}
		})
		if ar := st.active; ar != nil {
			s.planFinish(t, ar, RunInterrupted, "")
		}
	}

	now := s.now()
	run = &Run{ID: newID(), SessionID: sess.ID, UserID: u, Status: RunQueued, Agent: sess.Settings.Agent, Owner: s.peers.id(), CreatedAt: now}
	msg = &Message{ID: newID(), SessionID: sess.ID, Role: RoleUser, Kind: KindText, Content: content,
		Status: MessageComplete, RunID: run.ID, CreatedAt: now}
	added := *msg
	s.add(t, &Event{Type: EventMessageAdded, Message: &added, At: now}, runEvent(run))
	msg.Seq = added.Seq
	if sess.Title == "" {
		// An untitled session is named after its first message.
		named := *sess
		named.Title = truncate(strings.Join(strings.Fields(content), " "), 60)
		named.UpdatedAt = now
		s.add(t, &Event{Type: EventSessionUpdated, Session: &named})
	}
	if key != "" {
		t.b.Idempotency = &IdempotencyRecord{UserID: u, Key: key, SessionID: sess.ID, MessageID: msg.ID, RunID: run.ID, CreatedAt: now}
	}
	admitted = tryAdmit && willStart && s.sched.tryAcquire(u)
	if admitted {
		run.setState(s.admit(t, run))
		t.onAbort(func() { s.sched.release(u) })
	}
	t.onCommit(func() {
		s.counted(u, 0, int64(len(content)))
		s.queueLocked(st, run, admitted, ctx)
	})
	return t, msg, run, admitted
}

// replay answers a retried addMessage with what the first call created.
func (s *Service) replay(ctx context.Context, rec *IdempotencyRecord, sessionID, content string) (*Message, *Run, error) {
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

func (s *Service) checkText(what, content string) error {
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
