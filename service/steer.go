package service

// Steering: a message sent with the busy policy STEER while a Steerable agent runs joins
// the branch at once and waits, in the run's memory, until the agent takes it at its
// next step (Output.Steers). The reply so far is then complete, and the agent's text
// after it starts a new assistant message, so the history shows where the steer entered
// the reply. A steer its agent never took starts the next run when the run completes or
// fails (never lost); a run stopped or interrupted leaves it in the history, where the
// next run reads it. After a crash the run is started again on a history that holds it.

// Steerable is implemented by agents that take the user's messages while they work:
// they call Output.Steers at each step (a model agent: before each call of its model,
// after any tool results) and add what it returns to their conversation as user
// messages. Messages sent with STEER to an agent that is not Steerable (or answers
// false) wait their turn as with ENQUEUE.
type Steerable interface {
	TakesSteers() bool
}

// steerableLocked reports whether ar's agent takes steers now: it runs (not waiting for a
// slot, an answer or a decision) and is Steerable.
func (ar *activeRun) steerableLocked() bool {
	if ar == nil || ar.sealed || ar.parked || ar.run.Status != RunRunning || len(ar.inputs) > 0 {
		return false
	}
	runner, ok := ar.st.c.agents.Get(ar.run.Agent)
	if !ok {
		return false
	}
	st, ok := runner.(Steerable)
	return ok && st.TakesSteers()
}

// planSteerLocked builds the write of a steer to the session's active run: the text its agent
// wrote so far, then the user's message, which joins the branch after it. Once durable,
// the message waits for the agent (activeRun.steers).
func (st *sessionState) planSteerLocked(sess *TalkSession, u string, a addition) (*txn, *Message, *Run) {
	ar := st.active
	t := st.beginLocked()
	ar.writeTextLocked(t)
	msg := t.newUserMessage(u, a.content, ar.run.ID)
	t.addUserMessage(sess, msg, a.key)
	steer := *msg
	t.onCommit(func() { ar.steers = append(ar.steers, &steer) })
	m, r := *msg, *ar.run
	return t, &m, &r
}

// Steers implements Output.
func (o *output) Steers() ([]Message, error) {
	ar := o.ar
	st := ar.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if ar.sealed || ar.writeErr != nil {
		return nil, o.ended()
	}
	if len(ar.steers) == 0 {
		return nil, nil
	}
	if ar.msg != nil {
		// The reply so far is complete: what the agent writes after the steer is a new
		// message, after it on the branch.
		t := st.beginLocked()
		ar.completeMessageLocked(t, MessageComplete, "")
		if err := t.commitLocked(ar.ctx); err != nil {
			return nil, err
		}
	}
	out := make([]Message, len(ar.steers))
	for i, m := range ar.steers {
		out[i] = *m
	}
	ar.steers = nil
	return out, nil
}

// steersLeftLocked adds to t, which ends ar with status, the next run for the steers its
// agent never took, when the run ended by itself (completed or failed): the steers are
// on the branch, and the new run reads them. Once t is durable the run is first in the
// session's queue.
func (ar *activeRun) steersLeftLocked(t *txn, status RunStatus) {
	s := ar.st.c
	if len(ar.steers) == 0 || (status != RunCompleted && status != RunFailed) {
		return
	}
	now := s.now()
	run := &Run{ID: newID(), SessionID: ar.run.SessionID, UserID: ar.run.UserID, Status: RunQueued,
		Agent: ar.settings.Agent, Owner: s.peers.id(), CreatedAt: now}
	if run.Agent == "" {
		run.Agent = ar.run.Agent
	}
	t.add(runEvent(run))
	st := ar.st
	t.onCommit(func() { st.queueFirstLocked(run) })
}
