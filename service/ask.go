package service

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// This file is a run's questions as its agent sees them: posing one (Output.Pose, Ask) and
// waiting for its answer (Pending.Wait), the run's worker slot given back meanwhile.

// maxChoices bounds the choices of a question, and maxChoice each one.
const (
	maxChoices = 100
	maxChoice  = 500
)

// pose checks and records a question of ar's agent; the question waits once durable.
func (o *output) pose(spec QuestionSpec) (*waiting, error) {
	s, ar := o.s, o.ar
	if blank(spec.Prompt) {
		return nil, Errorf(EINVALID, "the agent asked an empty question")
	}
	if len(spec.Choices) > maxChoices {
		return nil, Errorf(EINVALID, "a question offers at most %d choices", maxChoices)
	}
	if spec.Multiple && len(spec.Choices) == 0 {
		return nil, Errorf(EINVALID, "a question with several answers needs choices")
	}
	if spec.AnswerSchema != "" {
		if len(spec.AnswerSchema) > s.cfg.MaxMessageBytes {
			return nil, Errorf(EINVALID, "the answer schema is longer than %d bytes", s.cfg.MaxMessageBytes)
		}
		if _, err := CompileSchema(spec.AnswerSchema); err != nil {
			return nil, Errorf(EINVALID, "%v", err)
		}
	}
	prompt := truncateBytes(strings.ToValidUTF8(spec.Prompt, "\uFFFD"), s.cfg.MaxMessageBytes)
	var choices []string
	if spec.Choices != nil {
		choices = make([]string, len(spec.Choices))
		for i, c := range spec.Choices {
			choices[i] = truncateBytes(strings.ToValidUTF8(c, "\uFFFD"), maxChoice)
		}
	}
	st := ar.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if ar.sealed || ar.writeErr != nil {
		return nil, o.ended()
	}
	t := st.beginLocked()
	ar.writeTextLocked(t)
	if ar.msg != nil {
		ar.completeMessageLocked(t, MessageComplete, "")
	}
	now := s.now()
	expires := s.expiryFor(now, spec.ExpiresIn)
	q := &Question{ID: newID(), RunID: ar.run.ID, SessionID: st.id, Prompt: prompt, Choices: choices, Multiple: spec.Multiple,
		AnswerSchema: spec.AnswerSchema, AskedAt: now, ExpiresAt: &expires, ToolCallID: spec.ToolCallID}
	qm := &Message{ID: newID(), SessionID: st.id, Role: RoleAssistant, Kind: KindQuestion, Content: prompt, Status: MessageComplete, RunID: ar.run.ID, QuestionID: q.ID, CreatedAt: now}
	asked, withMsg := *q, *q
	t.add(&Event{Type: EventMessageAdded, Message: qm, Question: &withMsg}, &Event{Type: EventQuestionAsked, Question: &asked})
	w := newWaiting(q.ID, &askedQuestion{q}, expires)
	ar.openLocked(t, w)
	t.onCommit(func() { ar.replied = true })
	if err := t.commitLocked(ar.ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// wait waits until w ends, giving the run's worker slot back meanwhile (a run that waits
// for a person takes no slot). When ctx ends first, w is withdrawn (reason: the agent
// stopped waiting), unless it ended meanwhile; ctx's error is returned then.
func (o *output) wait(ctx context.Context, w *waiting) (inputEnd, error) {
	s, ar := o.s, o.ar
	if ar.holdsSlot.Swap(false) {
		s.sched.release(ar.run.UserID)
	}
	reacquire := func() error {
		if ar.holdsSlot.Load() {
			return nil
		}
		if err := s.sched.acquire(ar.ctx, ar.run.UserID, true); err != nil {
			return err
		}
		if !ar.holdsSlot.CompareAndSwap(false, true) {
			s.sched.release(ar.run.UserID) // another waiter of the run took one meanwhile
		}
		return nil
	}
	select {
	case end := <-w.done:
		return end, reacquire()
	case <-ar.ctx.Done():
		return inputEnd{}, o.ended()
	case <-ctx.Done():
		end, ended, err := o.stopWaiting(w)
		if err != nil {
			return inputEnd{}, err
		}
		if err := reacquire(); err != nil {
			return inputEnd{}, err
		}
		if ended {
			return end, nil
		}
		return inputEnd{}, ctx.Err()
	}
}

// stopWaiting withdraws w, which the agent no longer waits for; ended reports that w had
// ended first, with end.
func (o *output) stopWaiting(w *waiting) (end inputEnd, ended bool, err error) {
	ar := o.ar
	st := ar.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if ar.inputs[w.id] != w || ar.sealed {
		select {
		case end := <-w.done:
			return end, true, nil
		default:
			return inputEnd{}, false, o.ended()
		}
	}
	t := st.beginLocked()
	withdrawn := w.in.withdraw(t, ReasonAgentDone)
	ar.closeLocked(t, map[string]inputEnd{w.id: withdrawn}, trace.SpanContext{})
	if err := t.commitLocked(ar.ctx); err != nil {
		return inputEnd{}, false, err
	}
	<-w.done // the withdrawal, handed over by closeLocked
	return inputEnd{}, false, nil
}

// pending is a question an agent posed (Pending).
type pending struct {
	o *output
	w *waiting
}

func (p *pending) ID() string { return p.w.id }

func (p *pending) Wait(ctx context.Context) (string, error) {
	end, err := p.o.wait(ctx, p.w)
	switch {
	case err != nil:
		return "", err
	case end.withdrawn != "":
		return "", &Withdrawn{Reason: end.withdrawn}
	}
	return end.answer, nil
}
