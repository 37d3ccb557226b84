package service

import (
	"context"
)

// Respond answers a question of the caller's: the answer is stored, shown in the history,
// and the waiting run goes on (started again on the history when the server restarted
// meanwhile). ENOTFOUND when the question is missing or not the caller's; ECONFLICT when
// it was already answered or is no longer waited for; EINVALID for a malformed ID or an
// empty or oversized answer; EUNAVAILABLE when it cannot be written, and then the question
// stays waiting.
func (s *Service) Respond(ctx context.Context, questionID, answer string) (*Question, *Run, error) {
	if _, err := user(ctx); err != nil {
		return nil, nil, err
	}
	if err := checkID("question ID", questionID); err != nil {
		return nil, nil, err
	}
	if err := s.checkText("answer", answer); err != nil {
		return nil, nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, nil, err
	}
	q, err := s.Question(ctx, questionID)
	if err != nil {
		return nil, nil, err
	}
	u := UserFrom(ctx)
	r, err := s.peers.route(ctx, &Command{Op: opRespond, UserID: u, SessionID: q.SessionID, QuestionID: questionID, Answer: answer}, func(ctx context.Context) (*Reply, error) {
		q, run, err := s.respond(ctx, q, answer)
		return &Reply{Question: q, Run: run}, err
	})
	if err != nil {
		return nil, nil, err
	}
	s.annotate(ctx, q.SessionID, q.RunID)
	return r.Question, r.Run, nil
}

// respond is Respond where the session's agent runs.
func (s *Service) respond(ctx context.Context, q *Question, answer string) (*Question, *Run, error) {
	questionID := q.ID
	_, st, unlock, err := s.lockSession(ctx, q.SessionID)
	if ErrorCode(err) == ENOTFOUND {
		return nil, nil, Errorf(ENOTFOUND, "question not found")
	} else if err != nil {
		return nil, nil, err
	}
	defer unlock()
	q, err = s.store.Question(ctx, questionID)
	if err != nil {
		return nil, nil, err
	}
	if q.Answer != nil {
		return nil, nil, Errorf(ECONFLICT, "this question was already answered")
	}
	ar := st.active
	if q.Withdrawn || ar == nil || ar.run.ID != q.RunID || ar.run.Status != RunWaitingForInput {
		return nil, nil, Errorf(ECONFLICT, "the agent is no longer waiting for this answer")
	}

	t := s.begin(st)
	now := s.now()
	answered := *q
	answered.Answer, answered.AnsweredAt = &answer, &now
	am := &Message{ID: newID(), SessionID: st.id, Role: RoleUser, Kind: KindAnswer, Content: answer, Status: MessageComplete, RunID: q.RunID, QuestionID: q.ID, CreatedAt: now}
	snap := *ar.run
	snap.Status = RunRunning
	qa, qm := answered, answered
	s.add(t, &Event{Type: EventMessageAdded, Message: am, Question: &qm}, &Event{Type: EventQuestionAnswered, Question: &qa}, runEvent(&snap))
	if ar.parked {
		// No agent waits in this process (it was restarted): the run starts again on the
		// history, which now holds the question and its answer. A tool call that was
		// running when the question was asked (an agent's "ask the user" tool) is that
		// question's call: the answer is its result.
		for _, tool := range ar.tools {
			if tool.call.Status == ToolRunning && !tool.call.StartedAt.After(q.AskedAt) {
				s.finishTool(t, tool, ToolCompleted, &answer, nil)
			}
		}
	}
	t.onCommit(func() {
		ar.question = nil
		ar.run.setState(&snap)
		if !ar.parked {
			ar.answer <- answer // the agent's goroutine waits in Ask
			return
		}
		s.resumeLocked(ar, ctx)
	})
	if err := s.commitLocked(ctx, t); err != nil {
		return nil, nil, err
	}
	r := snap
	return &answered, &r, nil
}

// Question returns a question of the caller's; ENOTFOUND when missing or another user's.
// Both cases cost the same reads, so the answer's timing does not tell them apart.
func (s *Service) Question(ctx context.Context, id string) (*Question, error) {
	if err := checkID("question ID", id); err != nil {
		return nil, err
	}
	notFound := Errorf(ENOTFOUND, "question not found")
	q, err := s.store.Question(ctx, id)
	sessionID := id // a read of a session that does not exist, when the question does not
	if err == nil {
		sessionID = q.SessionID
	} else if ErrorCode(err) != ENOTFOUND {
		return nil, err
	}
	if _, serr := s.session(ctx, sessionID); serr != nil || err != nil {
		if serr != nil && ErrorCode(serr) != ENOTFOUND {
			return nil, serr
		}
		return nil, notFound
	}
	return q, nil
}
