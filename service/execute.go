package service

import (
	"cmp"
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"time"
)

// This file is a run's agent at work: a worker slot, the move to RUNNING, the request the
// agent gets (its history, settings and tools' policies), the call, a panic caught.

// execute runs the agent of ar: it waits for a slot, marks the run RUNNING, calls the
// runner on the stored history, and records how it ended.
func (ar *activeRun) execute(resumed bool) {
	s := ar.st.c
	st := ar.st
	defer s.runs.Done()
	defer s.releaseState(st)
	defer func() {
		ar.waitPrevious()
		close(ar.done)
	}()
	defer func() {
		if ar.holdsSlot.Swap(false) {
			s.sched.release(ar.run.UserID)
		}
	}()
	var req RunRequest
	var err error // what the agent returned
	if ar.span != nil {
		defer func() { ar.endSpan(err) }()
	}
	started := time.Now()
start:
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		if !ar.holdsSlot.Load() {
			if err := s.sched.acquire(ar.ctx, ar.run.UserID, resumed); err != nil {
				return // stopped while queued, or the server is shutting down: it stays as stored
			}
			ar.holdsSlot.Store(true)
		}
		st.mu.Lock()
		req, err = ar.prepareLocked()
		sealed := ar.sealed
		st.mu.Unlock()
		if sealed {
			return
		}
		switch {
		case ErrorCode(err) == ERATELIMIT:
			// The user's other runs hold every slot RunsPerUser gives them, on other
			// replicas: give this replica's slot back and try again once one may be free.
			if ar.holdsSlot.Swap(false) {
				s.sched.release(ar.run.UserID)
			}
		case ErrorCode(err) == EUNAVAILABLE && time.Since(started) < s.cfg.WriteRetry:
			// The storage failed for a moment (a restart, a broken connection): the run
			// starts once it takes writes again, as streamed text is written again.
		default:
			break start
		}
		if pauseOrStop(ar.ctx, s.closing, pause) != nil {
			return // stopped while queued, or the server is shutting down: it stays as stored
		}
	}
	runner, ok := s.agents.Get(ar.run.Agent)
	model := modelOf(runner, req.Settings)
	if ar.span != nil && model != "" {
		ar.span.SetAttributes(AttrModel.String(model))
	}
	if err == nil {
		ar.waitPrevious()
		switch {
		case !ok:
			err = Errorf(EINVALID, "the agent %q is not available on this server", ar.run.Agent)
		case ar.ctx.Err() != nil: // stopped while the previous agent returned
			err = ar.ctx.Err()
		default:
			err = ar.safeRun(runner, req)
		}
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	status, msg := RunCompleted, ""
	switch {
	case ar.sealed:
		return
	case ar.writeErr != nil:
		err = ar.writeErr
		status, msg = RunFailed, ErrorMessage(err)
	case err == nil:
	case isCtxErr(err) && ar.ctx.Err() != nil:
		status = RunCancelled
	default:
		status, msg = RunFailed, ErrorMessage(err)
	}
	if status == RunFailed {
		// The one line an operator gets for a failed run: what the user was told is in
		// the run's error; err says why (agents keep secrets out of it).
		s.log.Error("run failed", "session", st.id, "run", ar.run.ID, "agent", ar.run.Agent,
			"model", model, "code", ErrorCode(err), "err", err)
	}
	ar.finishLockedRetrying(status, msg)
}

// waitPrevious waits until the session's previous agent has returned, for at most
// StopTimeout: an agent that ignores its cancellation longer than that is logged and no
// longer waited for.
func (ar *activeRun) waitPrevious() {
	s := ar.st.c
	if ar.prev == nil {
		return
	}
	t := time.NewTimer(s.cfg.StopTimeout)
	defer t.Stop()
	select {
	case <-ar.prev:
	case <-t.C:
		s.log.Warn("a stopped agent did not return in time; the session's next run starts beside it",
			"session", ar.st.id, "run", ar.run.ID, "agent", ar.run.Agent, "waited", s.cfg.StopTimeout)
	}
	ar.prev = nil
}

// modelOf names the model a run of runner with set uses: the agent's word when it is a
// ModelNamer, else the session's model setting ("" when neither says).
func modelOf(runner Runner, set Settings) string {
	if n, ok := runner.(ModelNamer); ok {
		return n.ModelFor(set)
	}
	if set.Model != nil {
		return *set.Model
	}
	return ""
}

// prepareLocked marks ar RUNNING, unless it was admitted RUNNING when it was created, and
// reads what its agent works on.
func (ar *activeRun) prepareLocked() (RunRequest, error) {
	s := ar.st.c
	st := ar.st
	if ar.sealed {
		return RunRequest{}, nil
	}
	sess := st.sess
	if sess == nil {
		var err error
		if sess, err = s.store.Session(ar.ctx, st.id); err != nil {
			return RunRequest{}, err
		}
		st.setRowLocked(sess)
	}
	ar.settings = sess.Settings
	ar.offered = s.toolsOf(ar.run.Agent, sess.Settings)
	// Unless the store is a SoleWriter, another process may have written to the log; the
	// write below proves that none has.
	current := s.sole
	if ar.run.Status != RunRunning {
		t := st.beginLocked()
		if to := ar.run.ReplyTo; to != "" {
			// An edit or a regeneration that waited: its branch becomes current now.
			sw, err := t.switchTo(ar.ctx, to, false)
			if err != nil {
				return RunRequest{}, err
			}
			if sw != nil {
				t.add(sw)
			}
		}
		snap := t.admit(ar.run)
		t.onCommit(func() { ar.run.setState(snap) })
		if err := t.commitLocked(ar.ctx); err != nil {
			return RunRequest{}, err // ERATELIMIT: execute tries again
		}
		current = true
	}
	if current {
		if hist, ok := st.historyFromTailLocked(); ok {
			return s.requestOf(sess, ar.run, ar.offered, hist), nil
		}
	}
	return s.request(ar.ctx, sess, ar.run, ar.offered)
}

// admit adds to t the move of run to RUNNING, the one way a run starts (at once with its
// message, see planAdd, or once a slot frees, see startRunLocked), and returns the run as
// the write leaves it. Where the store is shared, the write carries the Admission that
// keeps a user within RunsPerUser across every process: the store refuses it with
// ERATELIMIT while the user's other runs hold every slot.
func (t *txn) admit(run *Run) *Run {
	s := t.st.c
	snap := *run
	now := s.now()
	snap.Status, snap.StartedAt = RunRunning, &now
	t.add(runEvent(&snap))
	t.b.Admit = s.peers.admission(&snap, s.cfg.RunsPerUser)
	return &snap
}

// safeRun calls the runner, turning a panic into an error.
func (ar *activeRun) safeRun(r Runner, req RunRequest) (err error) {
	s := ar.st.c
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("agent panicked", "session", ar.st.id, "run", ar.run.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = Errorf(EINTERNAL, "the agent crashed")
		}
	}()
	return r.Run(ar.ctx, req, &output{s: s, ar: ar})
}

// request builds what the agent gets: the settings, the policies of the tools it offered
// when the run began (offered) and the whole history.
func (s *core) request(ctx context.Context, sess *TalkSession, run *Run, offered []ToolInfo) (RunRequest, error) {
	var msgs []*Message
	var after int64
	for {
		page, err := s.store.Messages(ctx, sess.ID, MessagePage{After: after, First: 500})
		if err != nil {
			return RunRequest{}, err
		}
		msgs = append(msgs, page...)
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].Seq
	}
	hist, err := s.complete(ctx, msgs, nil)
	if err != nil {
		return RunRequest{}, err
	}
	return s.requestOf(sess, run, offered, hist), nil
}

// requestOf is what the agent of run gets, with the session's whole history. Its
// Policies are those of offered, the very list StartTool finds a call's tool in: an
// agent whose tools come and go (MCP servers) offers a model only tools whose policy
// the service knows.
func (s *core) requestOf(sess *TalkSession, run *Run, offered []ToolInfo, hist []*HistoryMessage) RunRequest {
	req := RunRequest{SessionID: sess.ID, RunID: run.ID, UserID: sess.UserID, Settings: sess.Settings,
		Policies: s.policies(offered, sess.Settings)}
	req.History = make([]HistoryMessage, len(hist))
	for i, h := range hist {
		req.History[i] = *h
	}
	return req
}

// historyFromTailLocked returns the session's history as the store would, derived from the
// events in memory, when they are the whole log (see sessionLog.whole): a run then starts
// without reading the store. The caller holds st.mu and knows that no other process wrote
// to the session since its own last write.
func (st *sessionState) historyFromTailLocked() ([]*HistoryMessage, bool) {
	evs, ok := st.log.whole()
	if !ok {
		return nil, false
	}
	c := Derive(evs)
	msgs := c.OnBranch() // c is this call's own
	slices.SortStableFunc(msgs, func(a, b *Message) int { return cmp.Compare(a.Seq, b.Seq) })
	qs := make([]*Question, len(c.Questions))
	for i, q := range c.Questions {
		cp := *q
		if c.Withdraws(&cp) {
			cp.Withdrawn = true // as every store does when the run ends
		}
		qs[i] = &cp
	}
	calls := make([]*ToolCall, len(c.ToolCalls))
	for i, tc := range c.ToolCalls {
		cp := *tc
		calls[i] = &cp
	}
	slices.SortStableFunc(calls, func(a, b *ToolCall) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.ID, b.ID))
	})
	return join(msgs, qs, calls), true
}

// pauseOrStop waits d, or until ctx ends or stop is closed (then it returns an error); a
// nil stop is never closed.
func pauseOrStop(ctx context.Context, stop <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return Errorf(EUNAVAILABLE, "the server is shutting down")
	}
}
