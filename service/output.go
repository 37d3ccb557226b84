package service

import (
	"context"
	"strings"
	"unicode/utf8"
)

// output is the Output of one run.
type output struct {
	s  *core
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
func (ar *activeRun) newMessageLocked() {
	s := ar.st.c
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
		ar.newMessageLocked()
	}
	if ar.text.bytes+len(delta) > s.cfg.MaxReplyBytes {
		return Errorf(EINVALID, "the reply is longer than this server allows (%d bytes)", s.cfg.MaxReplyBytes)
	}
	ar.text.add(delta)
	ar.st.flushSoonLocked()
	return nil
}

func (o *output) Ask(ctx context.Context, prompt string, choices []string) (string, error) {
	p, err := o.Pose(QuestionSpec{Prompt: prompt, Choices: choices})
	if err != nil {
		return "", err
	}
	return p.Wait(ctx)
}

func (o *output) Pose(spec QuestionSpec) (Pending, error) {
	w, err := o.pose(spec)
	if err != nil {
		return nil, err
	}
	return &pending{o: o, w: w}, nil
}

func (o *output) StartTool(id, name, arguments string, opts ...ToolOption) (ToolHandle, error) {
	var opt toolOptions
	for _, f := range opts {
		f(&opt)
	}
	s, ar := o.s, o.ar
	st := ar.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if ar.sealed || ar.writeErr != nil {
		return nil, o.ended()
	}
	if id != "" {
		for _, tool := range ar.tools { // a call of this run, started before it resumed
			if tool.call.CallID == id && tool.call.Name == name {
				return &toolHandle{o: o, tool: tool}, nil
			}
		}
	}
	policy, level := PolicyAllow, levelTool
	info, ok := ar.toolInfoLocked(name)
	if !ok {
		info = ToolInfo{Name: name} // not listed: the operator's patterns still apply
	}
	if !info.NoPolicy {
		policy, level = s.policyOf(info, ar.settings)
		if opt.alwaysAsk && policy == PolicyAllow {
			policy = PolicyAsk
		}
	}
	if ar.msg == nil {
		ar.newMessageLocked()
	}
	t := st.beginLocked()
	ar.announceLocked(t) // the call belongs to the message
	ar.writeTextLocked(t)
	now := s.now()
	call := &ToolCall{ID: newID(), CallID: truncate(id, 200), RunID: ar.run.ID, SessionID: st.id, MessageID: ar.msg.ID,
		Name: truncate(name, 100), Arguments: arguments, Status: ToolRunning, StartedAt: now}
	var w *waiting
	switch policy {
	case PolicyDeny:
		reason := deniedBy(level)
		call.Status, call.Error, call.FinishedAt = ToolRejected, &reason, &now
	case PolicyAsk:
		expires := s.expiryFor(now, opt.expiresIn)
		call.Status = ToolAwaitingApproval
		call.Approval = &ToolApproval{RequestedArguments: arguments, ExpiresAt: expires}
	}
	cp := *call
	t.add(&Event{Type: EventToolCallStarted, ToolCall: &cp})
	tool := &toolState{call: call, fromSeq: t.next}
	if policy == PolicyAsk {
		requested := *call
		t.add(&Event{Type: EventToolApprovalRequested, ToolCall: &requested})
		w = newWaiting(call.ID, &pendingApproval{tool}, call.Approval.ExpiresAt)
		ar.openLocked(t, w)
	}
	t.onCommit(func() { ar.tools[call.ID] = tool })
	if err := t.commitLocked(ar.ctx); err != nil {
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
	// The run's usage is written with its next status change; what it counts against the
	// budgets with the session's next write, which settles the call's reservation.
	ar.run.Usage = addUsage(ar.run.Usage, u)
	ar.largestCall = max(ar.largestCall, u.Tokens())
	period, _ := s.cfg.budgetPeriod(s.now())
	if r := ar.hold; r != nil {
		period = r.Period
	}
	ar.spend = addSpend(ar.spend, ar.run.UserID, period, u)
	ar.releaseHoldLocked()
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

func (h *toolHandle) AwaitsApproval() bool {
	h.o.ar.st.mu.Lock()
	defer h.o.ar.st.mu.Unlock()
	return h.tool.call.Status == ToolAwaitingApproval
}

func (h *toolHandle) Approval(ctx context.Context) (string, error) {
	o, ar, tool := h.o, h.o.ar, h.tool
	ar.st.mu.Lock()
	call := *tool.call
	w := ar.inputs[call.ID]
	ar.st.mu.Unlock()
	if w == nil {
		return approvalOf(&call)
	}
	end, err := o.wait(ctx, w)
	switch {
	case err != nil:
		return "", err
	case end.rejected != nil:
		return "", end.rejected
	}
	return end.arguments, nil
}

// approvalOf is Approval's answer for a call that waits no more.
func approvalOf(call *ToolCall) (string, error) {
	switch call.Status {
	case ToolAwaitingApproval:
		return "", Errorf(ECONFLICT, "the call is not waiting here") // its run ended
	case ToolRejected:
		if a := call.Approval; a != nil && a.Decision != nil {
			return "", &Rejected{Reason: a.Reason, ByUser: true}
		}
		if call.Error != nil {
			return "", &Rejected{Reason: *call.Error} // who denied it
		}
		return "", &Rejected{Reason: deniedBy(levelSession)}
	case ToolCancelled:
		if a := call.Approval; a != nil && a.Reason != "" {
			return "", &Rejected{Reason: a.Reason}
		}
		return "", &Rejected{Reason: "it was cancelled"}
	}
	return call.Arguments, nil
}

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
	if err := h.tool.runningErr(); err != nil {
		return err
	}
	if h.tool.out.bytes+len(delta) > s.cfg.MaxReplyBytes {
		return Errorf(EINVALID, "the tool's output is longer than this server allows")
	}
	h.tool.out.add(delta)
	ar.st.flushSoonLocked()
	return nil
}

func (h *toolHandle) Finish(result string, err error) error {
	s, ar, tool := h.o.s, h.o.ar, h.tool
	ar.st.mu.Lock()
	defer ar.st.mu.Unlock()
	if ar.sealed || ar.writeErr != nil {
		return h.o.ended()
	}
	if err := tool.runningErr(); err != nil {
		return err
	}
	t := ar.st.beginLocked()
	if err != nil {
		msg := ErrorMessage(err)
		if ErrorCode(err) == EINTERNAL {
			msg = err.Error()
		}
		t.finishTool(tool, ToolFailed, nil, &msg)
	} else {
		r := truncateBytes(result, s.cfg.MaxReplyBytes)
		t.finishTool(tool, ToolCompleted, &r, nil)
	}
	return t.commitLocked(ar.ctx)
}

// runningErr is ECONFLICT when the call is not running: it waits for approval, or it is
// over (finished, rejected, cancelled).
func (tool *toolState) runningErr() error {
	switch tool.call.Status {
	case ToolRunning:
		return nil
	case ToolAwaitingApproval:
		return Errorf(ECONFLICT, "the tool call waits for the user's approval")
	}
	return Errorf(ECONFLICT, "the tool call has finished")
}
