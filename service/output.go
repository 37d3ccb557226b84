package service

import (
	"context"
	"strings"
	"unicode/utf8"
)

// output is the Output of one run.
type output struct {
	s  *Service
	ar *activeRun
}

// ended is what Output's methods return once the run is over.
func (o *output) ended() error {
	if o.ar.writeErr != nil {
		return o.ar.writeErr
	}
	if err := o.ar.ctx.Err(); err != nil {
		return err
	}
	return Errorf(ECONFLICT, "the run has ended")
}

// newMessageLocked starts ar's next assistant message in memory; it is announced with the
// first write that carries its text.
func (s *Service) newMessageLocked(ar *activeRun) {
	ar.msg = &Message{ID: newID(), SessionID: ar.st.id, Role: RoleAssistant, Kind: KindText, Status: MessageStreaming, RunID: ar.run.ID, CreatedAt: s.now()}
	ar.announced = false
	ar.text = textStream{}
}

func (o *output) Text(delta string) error {
	if delta == "" {
		return nil
	}
	if !utf8.ValidString(delta) {
		delta = strings.ToValidUTF8(delta, "\uFFFD")
	}
	s, ar := o.s, o.ar
	ar.st.mu.Lock()
	defer ar.st.mu.Unlock()
	if ar.sealed || ar.writeErr != nil {
		return o.ended()
	}
	if ar.msg == nil {
		s.newMessageLocked(ar)
	}
	if ar.text.bytes+len(delta) > s.cfg.MaxReplyBytes {
		return Errorf(EINVALID, "the reply is longer than this server allows (%d bytes)", s.cfg.MaxReplyBytes)
	}
	ar.text.add(delta)
	s.flushSoonLocked(ar.st)
	return nil
}

func (o *output) Ask(ctx context.Context, prompt string, choices []string) (string, error) {
	s, ar := o.s, o.ar
	if strings.TrimSpace(prompt) == "" {
		return "", Errorf(EINVALID, "the agent asked an empty question")
	}
	prompt = truncateBytes(strings.ToValidUTF8(prompt, "\uFFFD"), s.cfg.MaxMessageBytes)
	st := ar.st
	st.mu.Lock()
	if ar.sealed || ar.writeErr != nil {
		st.mu.Unlock()
		return "", o.ended()
	}
	t := s.begin(st)
	s.writeText(t, ar)
	if ar.msg != nil {
		s.completeMessage(t, ar, MessageComplete, "")
	}
	now := s.now()
	q := &Question{ID: newID(), RunID: ar.run.ID, SessionID: st.id, Prompt: prompt, Choices: append([]string(nil), choices...), AskedAt: now}
	qm := &Message{ID: newID(), SessionID: st.id, Role: RoleAssistant, Kind: KindQuestion, Content: prompt, Status: MessageComplete, RunID: ar.run.ID, QuestionID: q.ID, CreatedAt: now}
	snap := *ar.run
	snap.Status = RunWaitingForInput
	asked, withMsg := *q, *q
	s.add(t, &Event{Type: EventMessageAdded, Message: qm, Question: &withMsg}, &Event{Type: EventQuestionAsked, Question: &asked}, runEvent(&snap))
	t.onCommit(func() {
		ar.question = q
		ar.run.setState(&snap)
	})
	if err := s.commitLocked(ar.ctx, t); err != nil {
		st.mu.Unlock()
		return "", err
	}
	st.mu.Unlock()

	// Waiting for a person takes no slot.
	if ar.holdsSlot.Swap(false) {
		s.sched.release(ar.run.UserID)
	}
	var answer string
	select {
	case answer = <-ar.answer:
	case <-ar.ctx.Done():
		return "", o.ended()
	case <-ctx.Done():
		// The agent gave up waiting (its own deadline): the question is withdrawn and the
		// run works again, unless an answer came first.
		var err error
		if answer, err = o.stopWaiting(q); err != nil {
			return "", err
		}
		if answer == "" {
			if err := s.sched.acquire(ar.ctx, ar.run.UserID, true); err != nil {
				return "", err
			}
			ar.holdsSlot.Store(true)
			return "", ctx.Err()
		}
	}
	if err := s.sched.acquire(ar.ctx, ar.run.UserID, true); err != nil {
		return "", err
	}
	ar.holdsSlot.Store(true)
	return answer, nil
}

// stopWaiting withdraws q, which the run no longer waits for, and puts the run back to
// work; it returns the answer instead when one was written first.
func (o *output) stopWaiting(q *Question) (string, error) {
	s, ar := o.s, o.ar
	st := ar.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if ar.question != q || ar.run.Status != RunWaitingForInput || ar.sealed {
		select {
		case answer := <-ar.answer: // answered meanwhile
			return answer, nil
		default:
			return "", o.ended()
		}
	}
	t := s.begin(st)
	withdrawn := *q
	withdrawn.Withdrawn = true
	snap := *ar.run
	snap.Status = RunRunning
	ev := runEvent(&snap)
	ev.Question = &withdrawn // Derive: the question's row says it is withdrawn
	s.add(t, ev)
	t.onCommit(func() {
		ar.question = nil
		ar.run.setState(&snap)
	})
	if err := s.commitLocked(ar.ctx, t); err != nil {
		return "", err
	}
	return "", nil
}

func (o *output) StartTool(id, name, arguments string) (ToolHandle, error) {
	s, ar := o.s, o.ar
	st := ar.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if ar.sealed || ar.writeErr != nil {
		return nil, o.ended()
	}
	if ar.msg == nil {
		s.newMessageLocked(ar)
	}
	t := s.begin(st)
	s.announce(t, ar) // the call belongs to the message
	s.writeText(t, ar)
	call := &ToolCall{ID: newID(), CallID: truncate(id, 200), RunID: ar.run.ID, SessionID: st.id, MessageID: ar.msg.ID,
		Name: truncate(name, 100), Arguments: arguments, Status: ToolRunning, StartedAt: s.now()}
	cp := *call
	s.add(t, &Event{Type: EventToolCallStarted, ToolCall: &cp})
	tool := &toolState{call: call, fromSeq: t.next}
	t.onCommit(func() { ar.tools[call.ID] = tool })
	if err := s.commitLocked(ar.ctx, t); err != nil {
		return nil, err
	}
	return &toolHandle{o: o, tool: tool}, nil
}

func (o *output) ReportUsage(model string, u Usage) error {
	if u.InputTokens < 0 || u.OutputTokens < 0 || (u.CachedInputTokens != nil && *u.CachedInputTokens < 0) {
		return Errorf(EINVALID, "token counts cannot be negative")
	}
	s, ar := o.s, o.ar
	ar.st.mu.Lock()
	if ar.sealed {
		ar.st.mu.Unlock()
		return o.ended()
	}
	// The run's usage is written with its next status change.
	ar.run.Usage = addUsage(ar.run.Usage, u)
	ar.st.mu.Unlock()
	if !s.models[model] {
		model = OtherModel
	}
	s.stats.mu.Lock()
	total := s.stats.usage[model]
	s.stats.usage[model] = *addUsage(&total, u)
	s.stats.mu.Unlock()
	return nil
}

// addUsage returns the sum of a (nil for none) and b.
func addUsage(a *Usage, b Usage) *Usage {
	sum := b
	if b.CachedInputTokens != nil {
		n := *b.CachedInputTokens
		sum.CachedInputTokens = &n
	}
	if a == nil {
		return &sum
	}
	sum.InputTokens += a.InputTokens
	sum.OutputTokens += a.OutputTokens
	if a.CachedInputTokens != nil {
		n := *a.CachedInputTokens
		if sum.CachedInputTokens != nil {
			n += *sum.CachedInputTokens
		}
		sum.CachedInputTokens = &n
	}
	return &sum
}

type toolHandle struct {
	o    *output
	tool *toolState
}

func (h *toolHandle) ID() string { return h.tool.call.ID }

func (h *toolHandle) Output(delta string) error {
	if delta == "" {
		return nil
	}
	delta = strings.ToValidUTF8(delta, "\uFFFD")
	s, ar := h.o.s, h.o.ar
	ar.st.mu.Lock()
	defer ar.st.mu.Unlock()
	if ar.sealed || ar.writeErr != nil {
		return h.o.ended()
	}
	if h.tool.call.Status != ToolRunning {
		return Errorf(ECONFLICT, "the tool call has finished")
	}
	if h.tool.out.bytes+len(delta) > s.cfg.MaxReplyBytes {
		return Errorf(EINVALID, "the tool's output is longer than this server allows")
	}
	h.tool.out.add(delta)
	s.flushSoonLocked(ar.st)
	return nil
}

func (h *toolHandle) Finish(result string, err error) error {
	s, ar, tool := h.o.s, h.o.ar, h.tool
	ar.st.mu.Lock()
	defer ar.st.mu.Unlock()
	if ar.sealed || ar.writeErr != nil {
		return h.o.ended()
	}
	if tool.call.Status != ToolRunning {
		return Errorf(ECONFLICT, "the tool call has finished")
	}
	t := s.begin(ar.st)
	if err != nil {
		msg := ErrorMessage(err)
		if ErrorCode(err) == EINTERNAL {
			msg = err.Error()
		}
		s.finishTool(t, tool, ToolFailed, nil, &msg)
	} else {
		r := truncateBytes(result, s.cfg.MaxReplyBytes)
		s.finishTool(t, tool, ToolCompleted, &r, nil)
	}
	return s.commitLocked(ar.ctx, t)
}
