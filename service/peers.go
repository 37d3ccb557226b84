package service

import (
	"cmp"
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// peers is everything that differs between a process that has its store to itself and
// replicas that share one: where a command is done, who hears of new events, how runs
// left by a process that is gone come back, and whether a run is still this process's.
// The service asks it and never which kind it has: solo (below) for a store without a
// Coordinator, replicas (replicas.go) for one with.
//
// Whether the service may trust what it holds in memory of a session is a separate
// question, which the store answers (SoleWriter): a shared store that coordinates nothing
// still gets no shortcut.
type peers interface {
	// id is this process's name as runs' Owner: "" alone.
	id() string
	// start brings back, once at start-up, what earlier processes left active: runs that
	// were RUNNING end INTERRUPTED with their partial replies kept, QUEUED runs start
	// again, and WAITING_FOR_INPUT runs wait for their answer (see recoverRun).
	start(ctx context.Context) error
	// route does cmd where the session's agent runs: local here, or on the process that
	// runs it. A local write refused because the log moved on (ErrNotNext) is done again
	// on the log read anew.
	route(ctx context.Context, cmd *Command, local func(context.Context) (*Reply, error)) (*Reply, error)
	// published is told of events of st made durable here (nil: the session was deleted).
	// It must not block.
	published(st *sessionState, evs []*Event)
	// follow makes st receive the events other processes write to its session, while it
	// has subscribers here; unfollow ends that. st.mu must be held.
	follow(st *sessionState)
	unfollow(st *sessionState)
	// toldViewer is told that a write made here told userID something (see told): the
	// other processes' viewer subscriptions of the user are woken. It must not block.
	toldViewer(userID string)
	// followViewer calls wake whenever another process tells userID something, until the
	// returned func is called.
	followViewer(userID string, wake func()) (unfollow func())
	// lostTrack is told that a write of st found the log moved on without this process
	// (ErrNotNext). st.mu must be held.
	lostTrack(st *sessionState)
	// reconcileLocked reads st's log again and drops the runs of st that are no longer
	// this process's; an error when the store could not be read (nothing changed then).
	// st.mu must be held.
	reconcileLocked(ctx context.Context, st *sessionState) error
	// elsewhere completes v, a view of a session with no run here, with the active run
	// and pending question another process has for it, if any.
	elsewhere(ctx context.Context, v *SessionView)
	// admission is the Batch.Admit of a write that makes run RUNNING: nil where this
	// process's scheduler alone bounds a user's runs.
	admission(run *Run, limit int) *Admission
	// ready returns nil while this process can reach the others.
	ready() error
	// leave ends this process's part, at Close once its runs are left as stored.
	leave()
	// stats adds the peers' counters.
	stats(st *Stats)
}

// solo is the peers of a process alone with its store. Its route still does a command
// again on ErrNotNext, which only a store that another process writes can answer (see
// SoleWriter): such a process then reads the log anew and stays correct.
type solo struct{ s *core }

var _ peers = solo{}

func (solo) id() string { return "" }

func (p solo) start(ctx context.Context) error {
	runs, err := p.s.store.RunsByStatus(ctx, RunRunning, RunQueued, RunWaitingForInput)
	if err != nil {
		return err
	}
	for _, run := range runs {
		if err := p.s.recoverRun(ctx, run); err != nil {
			return err
		}
	}
	return nil
}

func (solo) route(ctx context.Context, _ *Command, local func(context.Context) (*Reply, error)) (*Reply, error) {
	for attempt := 1; ; attempt++ {
		r, err := local(ctx)
		if !isNotNext(err) || attempt == routeAttempts {
			return r, err
		}
	}
}

// routeAttempts is how many times a command is tried before its error is answered.
const routeAttempts = 4

func (solo) published(*sessionState, []*Event)  {}
func (solo) toldViewer(string)                  {}
func (solo) followViewer(string, func()) func() { return func() {} }
func (solo) follow(*sessionState)               {}
func (solo) unfollow(*sessionState)             {}
func (solo) lostTrack(*sessionState)            {}

func (p solo) reconcileLocked(ctx context.Context, st *sessionState) error {
	st.log.lostSync()
	return st.readyLocked(ctx)
}

func (solo) elsewhere(context.Context, *SessionView) {}
func (solo) admission(*Run, int) *Admission          { return nil }
func (solo) ready() error                            { return nil }
func (solo) leave()                                  {}
func (solo) stats(*Stats)                            {}

// recoverRun brings back one active run left by another process: this server's earlier
// life, or a replica that is gone. Both start-up (peers.start) and a take-over come here.
//
// The log is read again from the store first, even when this process follows the session
// and holds it as synced: the process that ran the run may have written events it never
// published (its last write was stored, and it died, or lost the broker, before telling
// anyone). A recovery that fails leaves nothing behind in memory; a take-over tries it
// again at the next claim (replicas.unrecovered).
func (s *core) recoverRun(ctx context.Context, run *Run) error {
	sess, err := s.store.Session(ctx, run.SessionID)
	if ErrorCode(err) == ENOTFOUND {
		return nil
	} else if err != nil {
		return err
	}
	st := s.acquireState(sess)
	defer s.releaseState(st)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.log.lostSync()
	if err := st.readyLocked(ctx); err != nil {
		return err
	}
	if ar := st.active; ar != nil && ar.run.ID == run.ID {
		return nil // already here
	}
	return st.recoverRunLocked(ctx, run)
}

// recoverRunLocked is recoverRun with st.mu held: a QUEUED run starts (or queues), a
// WAITING_FOR_INPUT one is parked until it is answered, and a RUNNING one ends
// INTERRUPTED with the text it had written (its agent is not run again behind the user's
// back).
func (st *sessionState) recoverRunLocked(ctx context.Context, run *Run) error {
	s := st.c
	if run.Status == RunQueued {
		st.queueLocked(run, false, trace.SpanContext{})
		return nil
	}
	msgs, calls, err := s.runWork(ctx, st.id, run.ID)
	if err != nil {
		return err
	}
	streaming := []*Message{}
	for _, m := range msgs {
		if m.Status == MessageStreaming {
			streaming = append(streaming, m)
		}
	}
	var running []*ToolCall
	for _, c := range calls {
		if c.Status == ToolRunning {
			running = append(running, c)
		}
	}
	// The text of a streaming message and the output of a running tool live in the log
	// until they end: every durable chunk, nothing more.
	var from int64
	if len(msgs) > 0 {
		from = msgs[0].Seq
	}
	texts, err := s.streamedTexts(ctx, st.id, from, 0)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(context.Background())
	ar := newActiveRun(st, run, cctx, cancel)
	for _, c := range calls {
		ts := &toolState{call: c, fromSeq: from + 1}
		ts.out.restore(texts[c.ID])
		ar.tools[c.ID] = ts
	}

	if run.Status == RunWaitingForInput {
		// No agent waits in this process: the run is parked until nothing is left to wait
		// on (it then starts again on the history) or it ends. What waits is armed to
		// expire; a call that was running (approved, or running beside what waits) may
		// have run, and ends FAILED: it is never run again behind the user's back.
		qs, err := s.runQuestions(ctx, msgs)
		if err != nil {
			return err
		}
		st.adoptLocked(ar, true)
		ar.replied = true // it asked
		t := st.beginLocked()
		t.onAbort(func() { st.dropActiveLocked() })
		// The agent that resumes writes a reply of its own: the messages it was writing
		// end here with their durable text, COMPLETE (they hold what it wrote before it
		// waited, and the calls it waits on), rather than stay STREAMING for ever.
		for _, m := range streaming {
			done := *m
			done.Content, done.Status = texts[m.ID], MessageComplete
			t.add(&Event{Type: EventMessageCompleted, Message: &done})
			t.onCommit(func() { st.compactSoonLocked(m.ID, m.Seq+1) })
		}
		for _, c := range running {
			if asksFor(qs, c) {
				continue // an ask_user call: the answer will be its result
			}
			why := "the server stopped while this call ran; it was not run again"
			t.finishTool(ar.tools[c.ID], ToolFailed, nil, &why)
		}
		var ws []*waiting
		for _, q := range pendingOf(qs) {
			expires := s.expiryFor(q.AskedAt, 0)
			if q.ExpiresAt != nil {
				expires = *q.ExpiresAt
			}
			ws = append(ws, newWaiting(q.ID, &askedQuestion{q}, expires))
		}
		for _, c := range awaitingOf(calls) {
			ws = append(ws, newWaiting(c.ID, &pendingApproval{ar.tools[c.ID]}, c.Approval.ExpiresAt))
		}
		if run.Budget != "" { // a budget, whose period may have turned meanwhile
			b := &budgetWait{scope: run.Budget, since: s.now()}
			_, b.resets = s.cfg.budgetPeriod(b.since)
			ws = append(ws, newWaiting(budgetKey, b, time.Time{}))
		}
		ar.openLocked(t, ws...)
		if err := t.commitLocked(ctx); err != nil {
			return err
		}
		if len(ws) == 0 { // everything was answered before the process died: go on
			ar.resumeLocked(trace.SpanContext{})
		}
		if run.Budget != "" {
			return st.budgetLiftedLocked(ctx)
		}
		return nil
	}

	// RUNNING: the process died while the agent worked. What was written stays, marked
	// INTERRUPTED; the agent is not run again behind the user's back.
	t := st.beginLocked()
	for i, m := range streaming {
		if i == len(streaming)-1 {
			ar.msg, ar.announced = m, true
			ar.text.restore(texts[m.ID])
			break
		}
		done := *m
		done.Content, done.Status = texts[m.ID], MessageInterrupted
		t.add(&Event{Type: EventMessageCompleted, Message: &done})
		t.onCommit(func() { st.compactSoonLocked(m.ID, m.Seq+1) })
	}
	st.adoptLocked(ar, false)
	ar.crashed = true
	ar.finishLocked(t, RunInterrupted, "")
	t.onAbort(func() { st.dropActiveLocked() })
	return t.commitLocked(ctx)
}

// streamedTexts rebuilds, from the chunk events after Seq from (up to Seq upTo, when > 0),
// the text of every stream (by key: a message's ID or a tool call's), placing each delta at
// its offset.
func (s *core) streamedTexts(ctx context.Context, sessionID string, from, upTo int64) (map[string]string, error) {
	texts := map[string][]rune{}
	after := from
	for done := false; !done; {
		evs, err := s.store.Events(ctx, sessionID, after, 1000)
		if err != nil {
			return nil, err
		}
		done = len(evs) < 1000
		for _, ev := range evs {
			if upTo > 0 && ev.Seq > upTo {
				done = true
				break
			}
			if !ev.Type.Chunky() {
				continue
			}
			text := texts[ev.Key]
			if ev.Offset <= len(text) {
				texts[ev.Key] = append(text[:ev.Offset], []rune(ev.Delta)...)
			}
		}
		if len(evs) > 0 {
			after = evs[len(evs)-1].Seq
		}
	}
	out := make(map[string]string, len(texts))
	for k, v := range texts {
		out[k] = string(v)
	}
	return out, nil
}

// runWork returns the messages a run wrote (among the session's latest) and their tool
// calls.
func (s *core) runWork(ctx context.Context, sessionID, runID string) ([]*Message, []*ToolCall, error) {
	latest, err := s.store.Messages(ctx, sessionID, MessagePage{Last: 100})
	if err != nil {
		return nil, nil, err
	}
	var msgs []*Message
	var ids []string
	for _, m := range latest {
		if m.RunID == runID && m.Role == RoleAssistant {
			msgs = append(msgs, m)
			ids = append(ids, m.ID)
		}
	}
	calls, err := s.store.ToolCalls(ctx, ids)
	return msgs, calls, err
}

// runQuestions returns the questions of a run's messages (see runWork).
func (s *core) runQuestions(ctx context.Context, msgs []*Message) ([]*Question, error) {
	var qids []string
	for _, m := range msgs {
		if m.Kind == KindQuestion {
			qids = append(qids, m.QuestionID)
		}
	}
	return s.store.Questions(ctx, qids)
}

// pendingOf returns the questions of qs still waiting for an answer, oldest first.
func pendingOf(qs []*Question) []*Question {
	var out []*Question
	for _, q := range qs {
		if q.Answer == nil && !q.Withdrawn {
			out = append(out, q)
		}
	}
	slices.SortFunc(out, func(a, b *Question) int { return cmp.Or(a.AskedAt.Compare(b.AskedAt), cmp.Compare(a.ID, b.ID)) })
	return out
}

// asksFor reports whether a question of qs is asked by the tool call c (an ask_user
// call): one names it, or, for questions of an older release that name none, was asked
// while c ran.
func asksFor(qs []*Question, c *ToolCall) bool {
	for _, q := range qs {
		if q.ToolCallID == c.ID || (q.ToolCallID == "" && !c.StartedAt.After(q.AskedAt)) {
			return true
		}
	}
	return false
}

// awaitingOf returns the calls of calls awaiting approval, oldest first.
func awaitingOf(calls []*ToolCall) []*ToolCall {
	var out []*ToolCall
	for _, c := range calls {
		if c.Status == ToolAwaitingApproval && c.Approval != nil {
			out = append(out, c)
		}
	}
	return out // ToolCalls come by StartedAt
}
