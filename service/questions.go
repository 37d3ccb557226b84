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
	r, err := s.exec(ctx, &Command{Op: "respondToQuestion", Args: &Answer{QuestionID: questionID, Answer: answer}})
	if err != nil {
		return nil, nil, err
	}
	return r.Questions[0], r.Run, nil
}

// DecideToolCall approves or rejects a call of the caller's awaiting approval: it is
// RespondToInputs with one decision, and answers the call as decided and its run.
// ENOTFOUND when the call is missing or not the caller's; the rest as RespondToInputs.
func (s *Service) DecideToolCall(ctx context.Context, d Decision) (*ToolCall, *Run, error) {
	r, err := s.exec(ctx, &Command{Op: "decideToolCall", Args: &d})
	if err != nil {
		return nil, nil, err
	}
	return r.ToolCalls[0], r.Run, nil
}

func init() {
	addOperation("respondToQuestion", &operation{
		args: func() any { return new(Answer) },
		check: func(c *core, args any) error {
			a := args.(*Answer)
			if err := checkID("question ID", a.QuestionID); err != nil {
				return err
			}
			return c.checkText("answer", a.Answer)
		},
		locate: func(ctx context.Context, c *core, u string, args any) (string, error) {
			q, err := c.question(ctx, u, args.(*Answer).QuestionID)
			if err != nil {
				return "", err
			}
			return q.SessionID, nil
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			res, err := s.respondToInputs(ctx, cmd.UserID, cmd.SessionID, &RespondArgs{Answers: []Answer{*cmd.Args.(*Answer)}})
			if err != nil {
				return nil, oneInput(err)
			}
			return &Reply{Questions: res.Questions, Run: res.Run}, nil
		},
	})
	addOperation("decideToolCall", &operation{
		args: func() any { return new(Decision) },
		check: func(c *core, args any) error {
			d := args.(*Decision)
			if err := checkID("tool call ID", d.ToolCallID); err != nil {
				return err
			}
			return c.checkDecision(*d)
		},
		locate: func(ctx context.Context, c *core, u string, args any) (string, error) {
			tc, err := c.toolCall(ctx, u, args.(*Decision).ToolCallID)
			if err != nil {
				return "", err
			}
			return tc.SessionID, nil
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			res, err := s.respondToInputs(ctx, cmd.UserID, cmd.SessionID, &RespondArgs{Decisions: []Decision{*cmd.Args.(*Decision)}})
			if err != nil {
				return nil, oneInput(err)
			}
			return &Reply{ToolCalls: res.ToolCalls, Run: res.Run}, nil
		},
	})
}

// Question returns a question of the caller's; ENOTFOUND when missing or another user's.
// Both cases cost the same reads, so the answer's timing does not tell them apart.
func (s *Service) Question(ctx context.Context, id string) (*Question, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	return s.question(ctx, u, id)
}

// question is Question for user u.
func (s *core) question(ctx context.Context, u, id string) (*Question, error) {
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
	if _, serr := s.ownSession(ctx, u, sessionID); serr != nil || err != nil {
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
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	return s.toolCall(ctx, u, id)
}

// toolCall is ToolCall for user u.
func (s *core) toolCall(ctx context.Context, u, id string) (*ToolCall, error) {
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
	if _, serr := s.ownSession(ctx, u, sessionID); serr != nil || err != nil {
		if serr != nil && ErrorCode(serr) != ENOTFOUND {
			return nil, serr
		}
		return nil, notFound
	}
	return tc, nil
}
