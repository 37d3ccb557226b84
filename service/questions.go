package service

import (
	"context"
)

// Respond answers a question of the caller's: the answer is stored, shown in the history,
// and the waiting run goes on once nothing else waits (started again on the history when
// the server restarted meanwhile). It is RespondToInputs with one answer. ENOTFOUND when
// the question is missing or not the caller's; ECONFLICT when it was already answered or
// is no longer waited for; EINVALID for a malformed ID or an empty, oversized or (see
// RespondToInputs) unfit answer; EUNAVAILABLE when it cannot be written, and then the
// question stays waiting.
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
	q, err := s.Question(ctx, questionID)
	if err != nil {
		return nil, nil, err
	}
	res, err := s.RespondToInputs(ctx, q.SessionID, []Answer{{QuestionID: questionID, Answer: answer}}, nil)
	if err != nil {
		return nil, nil, unwrapInputErr(err)
	}
	return res.Questions[0], res.Run, nil
}

// DecideToolCall approves or rejects a call of the caller's awaiting approval: it is
// RespondToInputs with one decision, and answers the call as decided and its run.
// ENOTFOUND when the call is missing or not the caller's; the rest as RespondToInputs.
func (s *Service) DecideToolCall(ctx context.Context, d Decision) (*ToolCall, *Run, error) {
	if _, err := user(ctx); err != nil {
		return nil, nil, err
	}
	if err := checkID("tool call ID", d.ToolCallID); err != nil {
		return nil, nil, err
	}
	tc, err := s.ToolCall(ctx, d.ToolCallID)
	if err != nil {
		return nil, nil, err
	}
	res, err := s.RespondToInputs(ctx, tc.SessionID, nil, []Decision{d})
	if err != nil {
		return nil, nil, unwrapInputErr(err)
	}
	return res.ToolCalls[0], res.Run, nil
}

// unwrapInputErr drops the "answers[0]: " RespondToInputs puts before the error of a
// request of one input, which names no list.
func unwrapInputErr(err error) error {
	msg := ErrorMessage(err)
	for _, prefix := range []string{"answers[0]: ", "decisions[0]: "} {
		if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
			return Errorf(ErrorCode(err), "%s", msg[len(prefix):])
		}
	}
	return err
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

// ToolCall returns a tool call of the caller's; ENOTFOUND when missing or another user's,
// at the same cost.
func (s *Service) ToolCall(ctx context.Context, id string) (*ToolCall, error) {
	if err := checkID("tool call ID", id); err != nil {
		return nil, err
	}
	notFound := Errorf(ENOTFOUND, "tool call not found")
	tc, err := s.store.ToolCall(ctx, id)
	sessionID := id
	if err == nil {
		sessionID = tc.SessionID
	} else if ErrorCode(err) != ENOTFOUND {
		return nil, err
	}
	if _, serr := s.session(ctx, sessionID); serr != nil || err != nil {
		if serr != nil && ErrorCode(serr) != ENOTFOUND {
			return nil, serr
		}
		return nil, notFound
	}
	return tc, nil
}
