package service

import (
	"cmp"
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// This file is what a run waits on: its inputs, the questions it asked and the tool calls
// awaiting the user's approval. Every input is events in the log like everything else
// (asked, answered or decided, withdrawn), so every store, replica and restart agrees on
// what waits; the answer or decision is durable before the agent sees it. A run is
// WAITING_FOR_INPUT while any input waits, and RUNNING again once none does. Nothing waits
// forever: every input has an expiry, and stop, an interrupting message and the run's end
// withdraw what waits.

// input is one kind of thing a run may wait on: a question its agent asked
// (askedQuestion), a call awaiting the user's approval (pendingApproval), a token budget
// (budgetWait, budgetwait.go). Each kind says
// when it began to wait, how it is withdrawn and how a view lists it; what answers it
// (an answer, a decision) is the kind's own.
type input interface {
	// asked is when it began to wait.
	asked() time.Time
	// withdraw adds to t its withdrawal for reason (it stops waiting unanswered), and
	// returns what the agent waiting on it is told.
	withdraw(t *txn, reason string) inputEnd
	// listIn adds a copy of it to what a view shows waiting.
	listIn(w *waitingLists)
}

// waitingLists is what a session's run waits on, as a view shows it, oldest first.
type waitingLists struct {
	questions []*Question
	approvals []*ToolCall
}

// waiting is one input a run waits on, with its expiry and the channel its agent waits
// on.
type waiting struct {
	id        string
	in        input
	expiresAt time.Time
	timer     *time.Timer
	done      chan inputEnd // buffered(1): how the input ended, for the agent waiting on it
}

// newWaiting makes the wait of input in, which expires at expiresAt.
func newWaiting(id string, in input, expiresAt time.Time) *waiting {
	return &waiting{id: id, in: in, expiresAt: expiresAt, done: make(chan inputEnd, 1)}
}

// waitingOn returns what ar (nil: none) waits on under id, when it is of kind K.
func waitingOn[K input](ar *activeRun, id string) (*waiting, K, bool) {
	var zero K
	if ar == nil {
		return nil, zero, false
	}
	w := ar.inputs[id]
	if w == nil {
		return nil, zero, false
	}
	k, ok := w.in.(K)
	return w, k, ok
}

// askedQuestion is a question the run's agent asked, waiting for the user's answer.
type askedQuestion struct{ q *Question }

func (a *askedQuestion) asked() time.Time { return a.q.AskedAt }

func (a *askedQuestion) listIn(w *waitingLists) {
	q := *a.q
	w.questions = append(w.questions, &q)
}

// withdraw withdraws the question: it is never answered.
func (a *askedQuestion) withdraw(t *txn, reason string) inputEnd {
	q := a.q
	cp := *q
	cp.Withdrawn, cp.WithdrawnReason = true, reason
	t.add(&Event{Type: EventQuestionWithdrawn, Question: &cp})
	t.onCommit(func() { *q = cp })
	return inputEnd{withdrawn: reason}
}

// answer adds to t the user's answer: a message of the history and the question's
// answered event.
func (a *askedQuestion) answer(t *txn, answer string) inputEnd {
	q := a.q
	now := t.st.c.now()
	done := *q
	done.Answer, done.AnsweredAt = &answer, &now
	am := &Message{ID: newID(), SessionID: q.SessionID, Role: RoleUser, Kind: KindAnswer, Content: answer,
		Status: MessageComplete, RunID: q.RunID, QuestionID: q.ID, CreatedAt: now}
	qa, qm := done, done
	t.add(&Event{Type: EventMessageAdded, Message: am, Question: &qm}, &Event{Type: EventQuestionAnswered, Question: &qa})
	t.onCommit(func() { *q = done })
	return inputEnd{answer: answer}
}

// pendingApproval is a tool call waiting for the user's decision.
type pendingApproval struct{ tool *toolState }

func (p *pendingApproval) asked() time.Time { return p.tool.call.StartedAt }

func (p *pendingApproval) listIn(w *waitingLists) {
	c := *p.tool.call
	w.approvals = append(w.approvals, &c)
}

// withdraw ends the call CANCELLED without running, its approval's reason the reason.
func (p *pendingApproval) withdraw(t *txn, reason string) inputEnd {
	tool := p.tool
	now := t.st.c.now()
	snap := *tool.call
	approval := *snap.Approval
	approval.Reason = reason
	snap.Approval, snap.Status, snap.FinishedAt = &approval, ToolCancelled, &now
	cp := snap
	t.add(&Event{Type: EventToolCallFinished, ToolCall: &cp})
	t.onCommit(func() { *tool.call = snap })
	return inputEnd{rejected: &Rejected{Reason: reason}}
}

// decide adds to t user u's decision d: approved, the call runs now (once), with the
// arguments as edited; rejected, it never runs.
func (p *pendingApproval) decide(t *txn, d Decision, u string) (inputEnd, *ToolCall) {
	tool := p.tool
	now := t.st.c.now()
	snap := *tool.call
	approval := *snap.Approval
	decision := d.Decision
	approval.Decision, approval.DecidedAt, approval.DecidedBy = &decision, &now, u
	var end inputEnd
	if decision == DecisionApprove {
		snap.Status = ToolRunning
		if d.Arguments != "" {
			snap.Arguments = d.Arguments
		}
		end.arguments = snap.Arguments
	} else {
		approval.Reason = d.Reason
		snap.Status, snap.FinishedAt = ToolRejected, &now
		end.rejected = &Rejected{Reason: d.Reason, ByUser: true}
	}
	snap.Approval = &approval
	cp := snap
	t.add(&Event{Type: EventToolApprovalDecided, ToolCall: &cp})
	t.onCommit(func() { *tool.call = snap })
	out := snap
	return end, &out
}

// inputEnd is how an input ended, for the agent waiting on it.
type inputEnd struct {
	answer    string    // a question's answer
	arguments string    // an approved call's arguments
	rejected  *Rejected // a call that must not run
	withdrawn string    // a question withdrawn unanswered: why
}

// expiryFor is when an input asked now with the agent's wish d (0: none) expires: at most
// Config.InputExpiry from now.
func (s *core) expiryFor(now time.Time, d time.Duration) time.Time {
	if d <= 0 || d > s.cfg.InputExpiry {
		d = s.cfg.InputExpiry
	}
	return now.Add(d)
}

// openLocked adds ws to what t makes ar wait on, once t is durable: t carries the run's
// move to WAITING_FOR_INPUT when it waited on nothing, and each input's expiry is armed.
func (ar *activeRun) openLocked(t *txn, ws ...*waiting) {
	var snap *Run
	r := *ar.run
	if len(ar.inputs) == 0 && ar.run.Status != RunWaitingForInput {
		r.Status = RunWaitingForInput
		snap = &r
	}
	for _, w := range ws {
		if b, ok := w.in.(*budgetWait); ok && r.Budget != b.scope {
			r.Budget = b.scope // the run's status says which cap it waits on
			snap = &r
		}
	}
	if snap != nil {
		t.add(runEvent(snap))
	}
	t.onCommit(func() {
		if snap != nil {
			ar.run.setState(snap)
		}
		for _, w := range ws {
			ar.inputs[w.id] = w
			ar.armLocked(w)
		}
	})
}

// closeLocked ends the inputs of ar that ends names, once t (which carries how each ended)
// is durable: each is taken off ar's waits and handed to the agent waiting on it. When
// nothing is left to wait on, t carries the run's move back to RUNNING, and a parked run
// starts again on its history (from is the context of the operation that answered).
func (ar *activeRun) closeLocked(t *txn, ends map[string]inputEnd, cause trace.SpanContext) {
	left := 0
	for id := range ar.inputs {
		if _, ok := ends[id]; !ok {
			left++
		}
	}
	var snap *Run
	r := *ar.run
	if _, ok := ends[budgetKey]; ok && r.Budget != "" {
		r.Budget = ""
		snap = &r
	}
	if left == 0 && ar.run.Status == RunWaitingForInput {
		r.Status = RunRunning
		snap = &r
	}
	if ar.sealed {
		snap = nil
	}
	if snap != nil {
		t.add(runEvent(snap))
	}
	t.onCommit(func() {
		for id, end := range ends {
			if w := ar.inputs[id]; w != nil {
				delete(ar.inputs, id)
				if w.timer != nil {
					w.timer.Stop()
				}
				w.done <- end
			}
		}
		if snap != nil {
			ar.run.setState(snap)
			if ar.parked {
				ar.resumeLocked(cause)
			}
		}
	})
}

// armLocked has w expire at its time: the replica that runs the run keeps the timer, and
// a restart or a take-over arms it again from the log.
func (ar *activeRun) armLocked(w *waiting) {
	if b, ok := w.in.(*budgetWait); ok {
		ar.armBudgetLocked(w, b)
		return
	}
	w.timer = time.AfterFunc(time.Until(w.expiresAt), func() { ar.expire(w.id) })
}

// expire withdraws an input whose time has come; the agent is told and goes on. When the
// storage cannot take it now, it is tried again in a moment.
func (ar *activeRun) expire(id string) {
	st := ar.st
	st.mu.Lock()
	defer st.mu.Unlock()
	w := ar.inputs[id]
	if w == nil || ar.sealed || st.active != ar {
		return
	}
	t := st.beginLocked()
	end := w.in.withdraw(t, ReasonExpired)
	ar.closeLocked(t, map[string]inputEnd{id: end}, trace.SpanContext{})
	if err := t.commitLocked(context.Background()); err != nil {
		w.timer = time.AfterFunc(time.Second, func() { ar.expire(id) })
	}
}

// withdrawAllLocked adds to t the withdrawal of everything ar waits on, for reason: its
// run ends. Once t is durable their timers stop; the agent waiting on them learns of the
// end from its context, not from them.
func (ar *activeRun) withdrawAllLocked(t *txn, reason string) {
	if len(ar.inputs) == 0 {
		return
	}
	ws := ar.inputsInOrder()
	for _, w := range ws {
		w.in.withdraw(t, reason)
	}
	t.onCommit(func() {
		for _, w := range ws {
			delete(ar.inputs, w.id)
			if w.timer != nil {
				w.timer.Stop()
			}
		}
	})
}

// stopTimersLocked stops the expiry timers of ar's inputs, which stay as they are stored
// (the server shuts down: the next start arms them again).
func (ar *activeRun) stopTimersLocked() {
	for _, w := range ar.inputs {
		if w.timer != nil {
			w.timer.Stop()
		}
	}
}

// inputsInOrder returns ar's inputs, oldest first.
func (ar *activeRun) inputsInOrder() []*waiting {
	ws := make([]*waiting, 0, len(ar.inputs))
	for _, w := range ar.inputs {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b *waiting) int {
		return cmp.Or(a.in.asked().Compare(b.in.asked()), cmp.Compare(a.id, b.id))
	})
	return ws
}

// pendingLocked returns copies of what ar waits on, oldest first.
func (ar *activeRun) pendingLocked() (qs []*Question, calls []*ToolCall) {
	var l waitingLists
	for _, w := range ar.inputsInOrder() {
		w.in.listIn(&l)
	}
	return l.questions, l.approvals
}
