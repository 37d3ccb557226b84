package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
)

// This file is how the user answers what a run waits on: RespondToInputs (and
// respondToQuestion and decideToolCall, its one-input forms), checked on its face, then
// against each input, and written all or none.

// Answer is an answer to one question, in RespondToInputs.
type Answer struct {
	QuestionID string
	Answer     string
}

// Decision is a decision on one tool call awaiting approval, in RespondToInputs:
// Arguments (APPROVE only, "" for the requested ones) are the arguments as the user edited
// them; Reason (REJECT only) is told to the agent.
type Decision struct {
	ToolCallID string
	Decision   ToolDecision
	Arguments  string
	Reason     string
}

// Responded is what RespondToInputs did: the questions answered and the calls decided, as
// they now are, and their run.
type Responded struct {
	Questions []*Question
	ToolCalls []*ToolCall
	Run       *Run
}

// maxInputsAtOnce bounds what one request may answer and decide.
const maxInputsAtOnce = 100

// RespondToInputs answers questions and decides tool calls of one of the caller's
// sessions, all in one write, or none of them: the error (an *InputError) names the first
// that failed. Each goes to the run waiting on it, which goes on once nothing is left to
// wait on (started again on its history when the server restarted meanwhile). ENOTFOUND
// when the session, a question or a call is missing or not the caller's; ECONFLICT for
// one already answered or decided, withdrawn or expired; EINVALID for a malformed
// request, an answer that is empty, too long, not one of the choices of a
// multiple-choice question or does not satisfy the question's answerSchema, and
// arguments that are not JSON or do not satisfy the tool's input schema; EUNAVAILABLE
// when it cannot be written, and then everything stays waiting.
func (s *Service) RespondToInputs(ctx context.Context, sessionID string, answers []Answer, decisions []Decision) (*Responded, error) {
	return s.Resume(ctx, sessionID, RespondArgs{Answers: answers, Decisions: decisions})
}

// Resume is RespondToInputs with questions the user declines to answer besides
// (in.Cancelled, question IDs): each is withdrawn with the reason "cancelled", in the same
// write, and the agent goes on without its answer (as when a question expires).
func (s *Service) Resume(ctx context.Context, sessionID string, in RespondArgs) (*Responded, error) {
	r, err := s.exec(ctx, &Command{Op: "respondToInputs", SessionID: sessionID, Args: &in})
	if err != nil {
		return nil, err
	}
	return &Responded{Questions: r.Questions, ToolCalls: r.ToolCalls, Run: r.Run}, nil
}

// RespondArgs are respondToInputs's arguments.
type RespondArgs struct {
	Answers   []Answer   `json:"answers,omitempty"`
	Decisions []Decision `json:"decisions,omitempty"`
	// Cancelled are questions withdrawn unanswered (see Resume).
	Cancelled []string `json:"cancelled,omitempty"`
}

// InputError is the error of one answer or decision of a request to RespondToInputs:
// List is "answers" or "decisions", Index its place there, Err what is wrong with it.
// It is an *Error too (errors.As), with Err's code and a message that names the input.
type InputError struct {
	List  string
	Index int
	Err   error
}

func (e *InputError) Error() string {
	return fmt.Sprintf("%s[%d]: %s", e.List, e.Index, ErrorMessage(e.Err))
}

// Unwrap is Err's code with a message that names the input.
func (e *InputError) Unwrap() error { return Errorf(ErrorCode(e.Err), "%s", e.Error()) }

// inputErr is err, of the input at index i of list, as an *InputError (nil for nil).
func inputErr(list string, i int, err error) error {
	if err == nil {
		return nil
	}
	return &InputError{List: list, Index: i, Err: err}
}

// oneInput returns the error of a request of one input, which names no list: the
// input's own.
func oneInput(err error) error {
	var ie *InputError
	if errors.As(err, &ie) {
		return ie.Err
	}
	return err
}

func init() {
	addOperation("respondToInputs", &operation{
		args: func() any { return new(RespondArgs) },
		check: func(c *core, args any) error {
			a := args.(*RespondArgs)
			return c.checkInputs(a.Answers, a.Decisions, a.Cancelled)
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			a := cmd.Args.(*RespondArgs)
			res, err := s.respondToInputs(ctx, cmd.UserID, cmd.SessionID, a)
			if err != nil {
				return nil, err
			}
			return &Reply{Questions: res.Questions, ToolCalls: res.ToolCalls, Run: res.Run}, nil
		},
	})
}

// checkInputs checks what a request to RespondToInputs says on its face.
func (s *core) checkInputs(answers []Answer, decisions []Decision, cancelled []string) error {
	if len(answers)+len(decisions)+len(cancelled) == 0 {
		return Errorf(EINVALID, "give at least one answer or decision")
	}
	if len(answers)+len(decisions)+len(cancelled) > maxInputsAtOnce {
		return Errorf(EINVALID, "at most %d answers and decisions at once", maxInputsAtOnce)
	}
	seen := map[string]bool{}
	for i, a := range answers {
		if err := checkID("question ID", a.QuestionID); err != nil {
			return inputErr("answers", i, err)
		}
		if err := s.checkText("answer", a.Answer); err != nil {
			return inputErr("answers", i, err)
		}
		if seen[a.QuestionID] {
			return inputErr("answers", i, Errorf(EINVALID, "the question is answered twice"))
		}
		seen[a.QuestionID] = true
	}
	for i, d := range decisions {
		if err := checkID("tool call ID", d.ToolCallID); err != nil {
			return inputErr("decisions", i, err)
		}
		if err := s.checkDecision(d); err != nil {
			return inputErr("decisions", i, err)
		}
		if seen[d.ToolCallID] {
			return inputErr("decisions", i, Errorf(EINVALID, "the call is decided twice"))
		}
		seen[d.ToolCallID] = true
	}
	for i, id := range cancelled {
		if err := checkID("question ID", id); err != nil {
			return inputErr("cancelled", i, err)
		}
		if seen[id] {
			return inputErr("cancelled", i, Errorf(EINVALID, "the question is answered twice"))
		}
		seen[id] = true
	}
	return nil
}

// checkDecision checks a decision on its face.
func (s *core) checkDecision(d Decision) error {
	switch d.Decision {
	case DecisionApprove:
		if d.Reason != "" {
			return Errorf(EINVALID, "a reason goes with REJECT only")
		}
		if len(d.Arguments) > s.cfg.MaxReplyBytes || !utf8.ValidString(d.Arguments) {
			return Errorf(EINVALID, "the arguments are longer than %d bytes or not valid UTF-8", s.cfg.MaxReplyBytes)
		}
	case DecisionReject:
		if d.Arguments != "" {
			return Errorf(EINVALID, "arguments go with APPROVE only")
		}
		if len(d.Reason) > s.cfg.MaxMessageBytes || !utf8.ValidString(d.Reason) {
			return Errorf(EINVALID, "the reason is longer than %d bytes or not valid UTF-8", s.cfg.MaxMessageBytes)
		}
	default:
		return Errorf(EINVALID, "the decision is not APPROVE or REJECT")
	}
	return nil
}

// respondToInputs is RespondToInputs where the session's agent runs.
func (s *core) respondToInputs(ctx context.Context, u, sessionID string, in *RespondArgs) (*Responded, error) {
	answers, decisions := in.Answers, in.Decisions
	sess, st, unlock, err := s.lockSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ar := st.active
	// Every input is checked before anything is written: all of them, or none.
	qs := make([]*askedQuestion, len(answers))
	for i, a := range answers {
		_, q, ok := waitingOn[*askedQuestion](ar, a.QuestionID)
		if !ok {
			return nil, inputErr("answers", i, s.notWaiting(ctx, sessionID, a.QuestionID, true))
		}
		if err := checkAnswer(q.q, a.Answer); err != nil {
			return nil, inputErr("answers", i, err)
		}
		qs[i] = q
	}
	ps := make([]*pendingApproval, len(decisions))
	for i, d := range decisions {
		_, p, ok := waitingOn[*pendingApproval](ar, d.ToolCallID)
		if !ok {
			return nil, inputErr("decisions", i, s.notWaiting(ctx, sessionID, d.ToolCallID, false))
		}
		if d.Decision == DecisionApprove && d.Arguments != "" {
			if err := ar.checkArgumentsLocked(sess, p.tool.call.Name, d.Arguments); err != nil {
				return nil, inputErr("decisions", i, err)
			}
		}
		ps[i] = p
	}
	cs := make([]*askedQuestion, len(in.Cancelled))
	for i, id := range in.Cancelled {
		_, q, ok := waitingOn[*askedQuestion](ar, id)
		if !ok {
			return nil, inputErr("cancelled", i, s.notWaiting(ctx, sessionID, id, true))
		}
		cs[i] = q
	}

	t := st.beginLocked()
	ends := map[string]inputEnd{}
	res := &Responded{}
	for i, q := range qs {
		answer := answers[i].Answer
		ends[q.q.ID] = q.answer(t, answer)
		if ar.parked {
			// No agent waits in this process: the asking tool's call (ask_user) has the
			// answer as its result, which the agent finds in the history when it starts
			// again.
			if tool := ar.askingCallLocked(q.q); tool != nil {
				t.finishTool(tool, ToolCompleted, &answer, nil)
			}
		}
	}
	for i, p := range ps {
		end, call := p.decide(t, decisions[i], u)
		ends[call.ID] = end
		res.ToolCalls = append(res.ToolCalls, call)
	}
	for _, q := range cs {
		ends[q.q.ID] = q.withdraw(t, ReasonCancelled)
	}
	ar.closeLocked(t, ends, trace.SpanContextFromContext(ctx))
	if err := t.commitLocked(ctx); err != nil {
		return nil, err
	}
	for _, q := range append(qs, cs...) {
		cp := *q.q // answered now
		res.Questions = append(res.Questions, &cp)
	}
	r := *ar.run
	res.Run = &r
	return res, nil
}

// notWaiting says why the session's run does not wait on the question (question) or the
// tool call id: ENOTFOUND when it does not exist in the session (or is another user's:
// the session was checked), ECONFLICT when it is not waiting (answered, decided,
// withdrawn, expired, or its run is over).
func (s *core) notWaiting(ctx context.Context, sessionID, id string, question bool) error {
	if question {
		q, err := s.store.Question(ctx, id)
		switch {
		case ErrorCode(err) == ENOTFOUND || (err == nil && q.SessionID != sessionID):
			return Errorf(ENOTFOUND, "question not found")
		case err != nil:
			return err
		case q.Answer != nil:
			return Errorf(ECONFLICT, "this question was already answered")
		}
		return Errorf(ECONFLICT, "the agent is no longer waiting for this answer")
	}
	tc, err := s.store.ToolCall(ctx, id)
	switch {
	case ErrorCode(err) == ENOTFOUND || (err == nil && tc.SessionID != sessionID):
		return Errorf(ENOTFOUND, "tool call not found")
	case err != nil:
		return err
	case tc.Approval != nil && tc.Approval.Decision != nil:
		return Errorf(ECONFLICT, "this tool call was already decided")
	}
	return Errorf(ECONFLICT, "this tool call is not waiting for a decision")
}

// checkAnswer checks an answer against its question: for a multiple-choice question, a
// JSON array of some of its choices; for one with an answerSchema, JSON that satisfies it.
func checkAnswer(q *Question, answer string) error {
	if q.Multiple && len(q.Choices) > 0 {
		var picked []string
		if err := json.Unmarshal([]byte(answer), &picked); err != nil || len(picked) == 0 {
			return Errorf(EINVALID, "the answer must be a JSON array of one or more of the choices offered")
		}
		seen := map[string]bool{}
		for _, p := range picked {
			if !slices.Contains(q.Choices, p) {
				return Errorf(EINVALID, "%q is not one of the choices offered", truncate(p, 60))
			}
			if seen[p] {
				return Errorf(EINVALID, "%q is picked twice", truncate(p, 60))
			}
			seen[p] = true
		}
	}
	if q.AnswerSchema != "" {
		sch, err := CompileSchema(q.AnswerSchema)
		if err != nil {
			return Errorf(EINTERNAL, "the question's answer schema: %v", err) // checked when asked
		}
		if err := sch.Validate(answer); err != nil {
			return Errorf(EINVALID, "the answer does not fit the question's form: %s", err)
		}
	}
	return nil
}

// checkArgumentsLocked checks arguments a user edited for a call of the tool name: JSON that
// satisfies the tool's input schema, where the agent gives one.
func (ar *activeRun) checkArgumentsLocked(sess *TalkSession, name string, arguments string) error {
	s := ar.st.c
	if !json.Valid([]byte(arguments)) {
		return Errorf(EINVALID, "the arguments are not JSON")
	}
	info, ok := s.toolInfo(ar.run.Agent, name, sess.Settings)
	if !ok || info.InputSchema == "" {
		return nil
	}
	sch, err := CompileSchema(info.InputSchema)
	if err != nil {
		s.log.Warn("a tool's input schema does not compile; edited arguments are taken unchecked", "tool", name, "err", err)
		return nil
	}
	if err := sch.Validate(arguments); err != nil {
		return Errorf(EINVALID, "the arguments do not fit the tool's input schema: %s", err)
	}
	return nil
}

// askingCallLocked returns the tool call of ar that q answers (an ask_user call): the one q
// names, or, for a question of an older release that names none, the call that was running
// when it was asked.
func (ar *activeRun) askingCallLocked(q *Question) *toolState {
	if q.ToolCallID != "" {
		if tool := ar.tools[q.ToolCallID]; tool != nil && tool.call.Status == ToolRunning {
			return tool
		}
		return nil
	}
	for _, tool := range ar.tools {
		if tool.call.Status == ToolRunning && !tool.call.StartedAt.After(q.AskedAt) {
			return tool
		}
	}
	return nil
}
