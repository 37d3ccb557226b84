package service

import (
	"context"
	"sync/atomic"

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
	// hold is the reservation of the model call under way (see BeforeModelCall), spend
	// what the run spent that its session's next write counts, largestCall the most one
	// call of the run cost, in tokens: what the next reserves at least.
	hold        *Reservation
	spend       *Spend
	largestCall int64
	// writeErr is set when the run's streamed text could not be written for too long: the
	// agent is stopped and the run fails with it.
	writeErr error
}

type toolState struct {
	call    *ToolCall
	out     textStream // its output
	fromSeq int64      // where its output chunks may start in the log
}

// setState takes the parts of a run that change (its status, error, times, usage and the
// budget it waits on) from src; the rest, which the run's goroutine reads without the
// session's lock, stays.
func (r *Run) setState(src *Run) {
	r.Status, r.Error, r.StartedAt, r.FinishedAt, r.Usage = src.Status, src.Error, src.StartedAt, src.FinishedAt, src.Usage
	r.Budget = src.Budget
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

// toolInfoLocked returns the tool name as ar's agent offers it.
func (ar *activeRun) toolInfoLocked(name string) (ToolInfo, bool) {
	for _, t := range ar.offered {
		if t.Name == name {
			return t, true
		}
	}
	return ToolInfo{}, false
}

// A session's runs change hands only in the functions from here to execute: st.active and
// st.queue are set by them alone, under st.mu, and once what they describe is durable.

// sealLocked marks ar sealed (see activeRun) and stops its agent.
func (ar *activeRun) sealLocked() {
	ar.sealed = true
	ar.cancel()
}

// startLocked makes run the session's active run and starts a goroutine that waits for a
// slot and executes it. resumed runs (after an answer) go first in their user's line; a run
// admitted already (holding) has its slot. cause is the span of the operation that starts
// the run, if any: the run's span links to it.
func (st *sessionState) startLocked(run *Run, resumed bool, holding bool, cause trace.SpanContext) *activeRun {
	s := st.c
	ctx, cancel := context.WithCancel(context.Background())
	var span trace.Span
	if s.tracer != nil {
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
func (st *sessionState) queueLocked(run *Run, holding bool, cause trace.SpanContext) {
	if st.active == nil {
		st.startLocked(run, false, holding, cause)
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
	st.startLocked(next, false, false, trace.SpanContext{})
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
	ar.sealLocked()
	if st.active == ar {
		st.active = nil
		st.startNextLocked()
	}
	ar.unparkLocked()
}

// resumeLocked starts the agent of ar, a parked run with nothing left to wait on, on the
// history that now holds the answers and decisions: a new activeRun of the same run takes
// its place, with its tool calls (an approved call is run by the agent that resumes, see
// Output.StartTool). cause is the span of the operation that answered.
func (ar *activeRun) resumeLocked(cause trace.SpanContext) {
	st := ar.st
	ar.sealLocked()
	st.active = nil
	next := st.startLocked(ar.run, true, false, cause)
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
	ar.sealLocked()
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
