package service

import (
	"cmp"
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// activeRun is the in-memory side of a run that owns its session: queued for a slot,
// running, or waiting for an answer. Its fields are guarded by the session's lock, and
// change only once what they describe is durable.
//
// A run is sealed once its end is written, or once it is left as it is stored (at
// shutdown, when its session is deleted, when another replica took it over): nothing its
// agent does afterwards is written, and every Output method answers that the run has
// ended. A run is parked when it waits for an answer with no agent behind it: found
// waiting at start-up or taken over from another replica. It has no goroutine, and holds
// a reference to its session's state until it is answered (it then starts again on the
// history, see respond) or ended.
type activeRun struct {
	st     *sessionState
	run    *Run
	ctx    context.Context
	cancel context.CancelFunc
	span   trace.Span // nil unless the service traces
	sealed bool       // see above
	parked bool       // see above
	// holdsSlot is set while the run's goroutine holds a scheduler slot.
	holdsSlot atomic.Bool
	// done is closed once the run's goroutine, and those of the session's runs before it,
	// have returned; prev is the done of the session's run before this one (nil once
	// waited for). A session's agents never run two at once: a run interrupted by a newer
	// message may take a moment to return, and the newer one waits for it.
	done, prev chan struct{}

	// msg is the assistant message being written, if any; announced is set once its
	// MessageAdded is durable (the first write that carries its text announces it).
	// replied is set once the run has written a message of its own (a reply, a question):
	// until then the session owes it one (see checkTreeLimits).
	msg       *Message
	announced bool
	replied   bool
	text      textStream

	// steers are the user's messages sent to the run with STEER that its agent has not
	// taken yet (see steer.go), oldest first.
	steers []*Message

	// inputs are what the run waits on (see inputs.go), by question or tool call ID.
	inputs map[string]*waiting
	// settings are the session's settings the run works with, and offered the tools its
	// agent offers with them (see ToolLister).
	settings Settings
	offered  []ToolInfo
	// crashed is set for a run found RUNNING at start-up: its process died while it ran,
	// so a call that was running may have run, and ends FAILED.
	crashed bool

	tools map[string]*toolState
	// writeErr is set when the run's streamed text could not be written for too long: the
	// agent is stopped and the run fails with it.
	writeErr error
}

type toolState struct {
	call    *ToolCall
	out     textStream // its output
	fromSeq int64      // where its output chunks may start in the log
}

// setState takes the parts of a run that change (its status, error, times and usage)
// from src; the rest, which the run's goroutine reads without the session's lock, stays.
func (r *Run) setState(src *Run) {
	r.Status, r.Error, r.StartedAt, r.FinishedAt, r.Usage = src.Status, src.Error, src.StartedAt, src.FinishedAt, src.Usage
}

func runEvent(r *Run) *Event {
	cp := *r
	return &Event{Type: EventRunStatusChanged, Run: &cp}
}

// newActiveRun makes the in-memory side of run, which stops when cancel is called.
func newActiveRun(st *sessionState, run *Run, ctx context.Context, cancel context.CancelFunc) *activeRun {
	ar := &activeRun{st: st, run: run, ctx: ctx, cancel: cancel, tools: map[string]*toolState{}, inputs: map[string]*waiting{}}
	if st.sess != nil {
		ar.settings = st.sess.Settings
	}
	return ar
}

// toolInfo returns the tool name as ar's agent offers it.
func (ar *activeRun) toolInfo(name string) (ToolInfo, bool) {
	for _, t := range ar.offered {
		if t.Name == name {
			return t, true
		}
	}
	return ToolInfo{}, false
}

// A session's runs change hands only in the functions from here to execute: st.active and
// st.queue are set by them alone, under st.mu, and once what they describe is durable.

// seal marks ar sealed (see activeRun) and stops its agent.
func (ar *activeRun) seal() {
	ar.sealed = true
	ar.cancel()
}

// startLocked makes run the session's active run and starts a goroutine that waits for a
// slot and executes it. resumed runs (after an answer) go first in their user's line; a run
// admitted already (holding) has its slot. from is the context of the operation that
// starts the run, if any (for its trace).
func (st *sessionState) startLocked(run *Run, resumed bool, holding bool, from context.Context) *activeRun {
	s := st.c
	ctx, cancel := context.WithCancel(context.Background())
	var span trace.Span
	if s.tracer != nil {
		var cause trace.SpanContext
		if from != nil {
			cause = trace.SpanContextFromContext(from)
		}
		ctx, span = s.startRunSpan(ctx, st, run, cause)
	}
	ar := newActiveRun(st, run, ctx, cancel)
	ar.span = span
	ar.holdsSlot.Store(holding)
	ar.done, ar.prev = make(chan struct{}), st.agentDone
	st.agentDone = ar.done
	st.active = ar
	// The run's first text goes out at once, whatever an earlier run's last flush left
	// waiting (that run's end wrote its text).
	st.log.flushNow()
	s.holdState(st) // the run holds the state until it returns
	s.runs.Add(1)
	go ar.execute(resumed)
	return ar
}

// queueLocked starts run when the session has no active run, and queues it behind the
// active one otherwise. holding and from are startLocked's.
func (st *sessionState) queueLocked(run *Run, holding bool, from context.Context) {
	if st.active == nil {
		st.startLocked(run, false, holding, from)
		return
	}
	st.queue = append(st.queue, run)
}

// queueFirstLocked puts run first in the session's queue: the next to start.
func (st *sessionState) queueFirstLocked(run *Run) {
	st.queue = append([]*Run{run}, st.queue...)
}

// startNextLocked starts the session's oldest queued run, if any.
func (st *sessionState) startNextLocked() {
	s := st.c
	if st.active != nil || len(st.queue) == 0 || s.closed.Load() {
		return
	}
	next := st.queue[0]
	st.queue = st.queue[1:]
	st.startLocked(next, false, false, nil)
}

// adoptLocked makes ar, a run brought back from the store (see recoverRunLocked), the
// session's active run; parked, it waits for an answer with no agent behind it, and holds
// the session's state until it is answered or ended.
func (st *sessionState) adoptLocked(ar *activeRun, parked bool) {
	s := st.c
	st.active = ar
	if parked {
		ar.parked = true
		s.holdState(st)
	}
}

// endedLocked seals ar, whose end is durable, and starts the session's next queued run.
func (ar *activeRun) endedLocked() {
	st := ar.st
	ar.seal()
	if st.active == ar {
		st.active = nil
		st.startNextLocked()
	}
	ar.unparkLocked()
}

// resumeLocked starts the agent of ar, a parked run with nothing left to wait on, on the
// history that now holds the answers and decisions: a new activeRun of the same run takes
// its place, with its tool calls (an approved call is run by the agent that resumes, see
// Output.StartTool). from is the context of the operation that answered.
func (ar *activeRun) resumeLocked(from context.Context) {
	st := ar.st
	ar.seal()
	st.active = nil
	next := st.startLocked(ar.run, true, false, from)
	next.tools, next.steers, next.replied = ar.tools, ar.steers, true // it asked
	ar.unparkLocked()
}

// unparkLocked lets go of the session's state that ar held while parked.
func (ar *activeRun) unparkLocked() {
	s := ar.st.c
	if ar.parked {
		ar.parked = false
		s.releaseState(ar.st)
	}
}

// dropActiveLocked stops the session's active run, if any, writing nothing: it is over
// elsewhere (the session was deleted, or another replica took the run over).
func (st *sessionState) dropActiveLocked() {
	ar := st.active
	if ar == nil {
		return
	}
	ar.seal()
	st.active = nil
	ar.unparkLocked()
}

// dropQueueLocked empties the session's queue and returns the runs it held.
func (st *sessionState) dropQueueLocked() []*Run {
	q := st.queue
	st.queue = nil
	return q
}

// keepQueuedLocked keeps in the session's queue only the runs keep says.
func (st *sessionState) keepQueuedLocked(keep func(*Run) bool) {
	queue := st.queue[:0]
	for _, run := range st.queue {
		if keep(run) {
			queue = append(queue, run)
		}
	}
	clear(st.queue[len(queue):])
	st.queue = queue
}

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

// startRunLocked marks ar RUNNING, unless it was admitted RUNNING when it was created, and
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

// historyFromTail returns the session's history as the store would, derived from the
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
			ar.seal()
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

// planFinish adds to t the end of ar with status: the text streamed so far is written and
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
	snap := *ar.run
	now := s.now()
	snap.Status, snap.Error, snap.FinishedAt = status, errMsg, &now
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
