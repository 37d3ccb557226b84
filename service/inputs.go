package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// This file is what a run waits on: its inputs, the questions it asked and the tool calls
// awaiting the user's approval. Every input is events in the log like everything else
// (asked, answered or decided, withdrawn), so every store, replica and restart agrees on
// what waits; the answer or decision is durable before the agent sees it. A run is
// WAITING_FOR_INPUT while any input waits, and RUNNING again once none does. Nothing waits
// forever: every input has an expiry, and stop, an interrupting message and the run's end
// withdraw what waits.

// input is one kind of thing a run may wait on: a question its agent asked
// (askedQuestion), a call awaiting the user's approval (pendingApproval). Each kind says
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
	if len(ar.inputs) == 0 && ar.run.Status != RunWaitingForInput {
		r := *ar.run
		r.Status = RunWaitingForInput
		t.add(runEvent(&r))
		snap = &r
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
func (ar *activeRun) closeLocked(t *txn, ends map[string]inputEnd, from context.Context) {
	left := 0
	for id := range ar.inputs {
		if _, ok := ends[id]; !ok {
			left++
		}
	}
	var snap *Run
	if left == 0 && !ar.sealed && ar.run.Status == RunWaitingForInput {
		r := *ar.run
		r.Status = RunRunning
		t.add(runEvent(&r))
		snap = &r
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
				ar.resumeLocked(from)
			}
		}
	})
}

// armLocked has w expire at its time: the replica that runs the run keeps the timer, and
// a restart or a take-over arms it again from the log.
func (ar *activeRun) armLocked(w *waiting) {
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
	ar.closeLocked(t, map[string]inputEnd{id: end}, nil)
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
	r, err := s.exec(ctx, &Command{Op: "respondToInputs", SessionID: sessionID, Args: &RespondArgs{Answers: answers, Decisions: decisions}})
	if err != nil {
		return nil, err
	}
	return &Responded{Questions: r.Questions, ToolCalls: r.ToolCalls, Run: r.Run}, nil
}

// RespondArgs are respondToInputs's arguments.
type RespondArgs struct {
	Answers   []Answer   `json:"answers,omitempty"`
	Decisions []Decision `json:"decisions,omitempty"`
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
			return c.checkInputs(a.Answers, a.Decisions)
		},
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			a := cmd.Args.(*RespondArgs)
			res, err := s.respondToInputs(ctx, cmd.UserID, cmd.SessionID, a.Answers, a.Decisions)
			if err != nil {
				return nil, err
			}
			return &Reply{Questions: res.Questions, ToolCalls: res.ToolCalls, Run: res.Run}, nil
		},
	})
}

// checkInputs checks what a request to RespondToInputs says on its face.
func (s *core) checkInputs(answers []Answer, decisions []Decision) error {
	if len(answers)+len(decisions) == 0 {
		return Errorf(EINVALID, "give at least one answer or decision")
	}
	if len(answers)+len(decisions) > maxInputsAtOnce {
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
func (s *core) respondToInputs(ctx context.Context, u, sessionID string, answers []Answer, decisions []Decision) (*Responded, error) {
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
			if err := ar.checkArguments(sess, p.tool.call.Name, d.Arguments); err != nil {
				return nil, inputErr("decisions", i, err)
			}
		}
		ps[i] = p
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
			if tool := ar.askingCall(q.q); tool != nil {
				t.finishTool(tool, ToolCompleted, &answer, nil)
			}
		}
	}
	for i, p := range ps {
		end, call := p.decide(t, decisions[i], u)
		ends[call.ID] = end
		res.ToolCalls = append(res.ToolCalls, call)
	}
	ar.closeLocked(t, ends, ctx)
	if err := t.commitLocked(ctx); err != nil {
		return nil, err
	}
	for _, q := range qs {
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

// checkArguments checks arguments a user edited for a call of the tool name: JSON that
// satisfies the tool's input schema, where the agent gives one.
func (ar *activeRun) checkArguments(sess *TalkSession, name string, arguments string) error {
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

// askingCall returns the tool call of ar that q answers (an ask_user call): the one q
// names, or, for a question of an older release that names none, the call that was running
// when it was asked.
func (ar *activeRun) askingCall(q *Question) *toolState {
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
	ar.closeLocked(t, map[string]inputEnd{w.id: withdrawn}, nil)
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
