package service

import (
	"context"
	"slices"
	"time"
)

// This file is how a run ends: by itself (finishLocked, once its agent returns), or
// stopped (cancelRun, the stop button), its text kept and what it waited on withdrawn.

// finishLockedRetrying records the end of ar, trying again while the storage fails, until
// it is written, another command ends the run, or the server shuts down (the run is then
// recovered at the next start).
func (ar *activeRun) finishLockedRetrying(status RunStatus, msg string) {
	s := ar.st.c
	pause := 50 * time.Millisecond
	for !ar.sealed {
		t := ar.st.beginLocked()
		ar.finishLocked(t, status, msg)
		err := t.commitLocked(context.Background())
		if err == nil || ar.sealed {
			return
		}
		if isNotNext(err) && !s.closed.Load() {
			// Another process wrote to the session: read the log again (and, with
			// replicas, learn whether the run is still this one's: if not, it ends here
			// unwritten).
			if s.peers.reconcileLocked(context.Background(), ar.st) == nil {
				continue
			}
		}
		if s.closed.Load() || ErrorCode(err) != EUNAVAILABLE && !isNotNext(err) {
			s.log.Error("recording the end of a run", "session", ar.st.id, "run", ar.run.ID, "err", err)
			ar.sealLocked()
			return
		}
		ar.st.mu.Unlock()
		select {
		case <-time.After(pause):
		case <-s.closing:
		}
		ar.st.mu.Lock()
		pause = min(2*pause, time.Second)
	}
}

// finishLocked adds to t the end of ar with status: the text streamed so far is written and
// its message completed (INTERRUPTED for a stopped run, FAILED for a failed one), running
// tool calls end, and the run gets its final status (its unanswered question is withdrawn
// with it). Once t is durable the agent is stopped and the session's next queued run
// starts.
func (ar *activeRun) finishLocked(t *txn, status RunStatus, errMsg string) {
	s := ar.st.c
	st := ar.st
	msgStatus := MessageComplete
	switch status {
	case RunFailed:
		msgStatus = MessageFailed
	case RunCancelled, RunInterrupted:
		msgStatus = MessageInterrupted
	}
	reason := ReasonStopped
	switch status {
	case RunInterrupted:
		reason = ReasonInterrupted
	case RunFailed:
		reason = ReasonFailed
	case RunCompleted:
		reason = ReasonAgentDone
	}
	ar.withdrawAllLocked(t, reason)
	for _, tool := range ar.tools {
		if tool.call.Status != ToolRunning {
			continue
		}
		switch {
		case ar.crashed:
			// Its process died while it ran: it may have run, and is never run again
			// behind the user's back.
			why := "the server stopped while this call ran; it was not run again"
			t.finishTool(tool, ToolFailed, nil, &why)
		case status == RunFailed:
			t.finishTool(tool, ToolFailed, nil, nil)
		default:
			t.finishTool(tool, ToolCancelled, nil, nil)
		}
	}
	if ar.msg != nil {
		ar.completeMessageLocked(t, msgStatus, errMsg)
	} else if status == RunFailed {
		// A failed run shows in the history even when it wrote nothing.
		now := s.now()
		m := &Message{ID: newID(), SessionID: st.id, Role: RoleAssistant, Kind: KindText, Status: MessageFailed, Error: errMsg, RunID: ar.run.ID, CreatedAt: now}
		t.add(&Event{Type: EventMessageAdded, Message: m})
		done := *m
		t.add(&Event{Type: EventMessageCompleted, Message: &done})
	}
	ar.releaseHoldLocked() // a call that reported nothing holds nothing more
	snap := *ar.run
	now := s.now()
	snap.Status, snap.Error, snap.FinishedAt, snap.Budget = status, errMsg, &now, ""
	t.add(runEvent(&snap))
	ar.steersLeftLocked(t, status)
	t.onCommit(func() {
		ar.run.setState(&snap)
		s.countRun(status)
		ar.endedLocked()
	})
}

// CancelRun stops the caller's active run in the session, keeping its partial reply; the
// run ends CANCELLED. It returns nil (and no error) when nothing was running. ENOTFOUND
// when the session is missing or not the caller's; EUNAVAILABLE when the end cannot be
// written, and then the run goes on as it was.
func (s *Service) CancelRun(ctx context.Context, sessionID string) (*Run, error) {
	return s.StopRun(ctx, sessionID, "")
}

// StopRun is CancelRun for the run runID of the session ("": its active run). A queued
// run is cancelled before it starts (its message stays on the branch); the active one
// stops as CancelRun says. It returns nil when the run has ended already. ENOTFOUND for a
// run that is missing, of another session or not the caller's.
func (s *Service) StopRun(ctx context.Context, sessionID, runID string) (*Run, error) {
	r, err := s.exec(ctx, &Command{Op: "cancelRun", SessionID: sessionID, Args: &CancelRunArgs{RunID: runID}})
	if err != nil {
		return nil, err
	}
	return r.Run, nil
}

// CancelRunArgs are cancelRun's arguments: the run to stop, "" for the active one.
type CancelRunArgs struct {
	RunID string `json:"runId,omitempty"`
}

func init() {
	addOperation("cancelRun", &operation{
		args: func() any { return new(CancelRunArgs) },
		check: func(_ *core, args any) error {
			if id := args.(*CancelRunArgs).RunID; id != "" {
				return checkID("run ID", id)
			}
			return nil
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			run, err := s.cancelRun(ctx, cmd.SessionID, cmd.Args.(*CancelRunArgs).RunID)
			if err != nil {
				return nil, err
			}
			return &Reply{Run: run}, nil
		},
	})
}

// cancelRun is CancelRun where the session's agent runs.
func (s *core) cancelRun(ctx context.Context, sessionID, runID string) (*Run, error) {
	if s.closed.Load() { // what this process held is stored as it was: not "nothing ran"
		return nil, Errorf(EUNAVAILABLE, "the server is shutting down")
	}
	_, st, unlock, err := s.lockSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ar := st.active
	if runID != "" && (ar == nil || ar.run.ID != runID) {
		return st.cancelQueuedLocked(ctx, runID)
	}
	if ar == nil {
		return nil, nil
	}
	t := st.beginLocked()
	ar.finishLocked(t, RunCancelled, "")
	if err := t.commitLocked(ctx); err != nil {
		return nil, err
	}
	r := *ar.run
	return &r, nil
}

// cancelQueuedLocked cancels the session's queued run runID before it starts; nil when
// the run has ended already, ENOTFOUND when the session has no such run.
func (st *sessionState) cancelQueuedLocked(ctx context.Context, runID string) (*Run, error) {
	s := st.c
	i := slices.IndexFunc(st.queue, func(r *Run) bool { return r.ID == runID })
	if i < 0 {
		r, err := s.store.Run(ctx, runID)
		if ErrorCode(err) == ENOTFOUND || (err == nil && r.SessionID != st.id) {
			return nil, Errorf(ENOTFOUND, "run not found")
		} else if err != nil {
			return nil, err
		}
		return nil, nil // it ended already
	}
	snap := *st.queue[i]
	now := s.now()
	snap.Status, snap.FinishedAt = RunCancelled, &now
	t := st.beginLocked()
	t.add(runEvent(&snap))
	t.onCommit(func() {
		st.keepQueuedLocked(func(r *Run) bool { return r.ID != runID })
		s.countRun(RunCancelled)
	})
	if err := t.commitLocked(ctx); err != nil {
		return nil, err
	}
	return &snap, nil
}

// Run returns a run of the caller's; ENOTFOUND when missing or another user's.
func (s *Service) Run(ctx context.Context, id string) (*Run, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID("run ID", id); err != nil {
		return nil, err
	}
	r, err := s.store.Run(ctx, id)
	if ErrorCode(err) == ENOTFOUND || (err == nil && r.UserID != u) {
		return nil, Errorf(ENOTFOUND, "run not found")
	}
	if err == nil {
		s.annotate(ctx, r.SessionID, r.ID)
	}
	return r, err
}
