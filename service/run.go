package service

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// activeRun is the in-memory side of a run that owns its session: queued for a slot,
// running, or waiting for an answer. Its fields are guarded by the session's lock.
type activeRun struct {
	st     *sessionState
	run    *Run
	ctx    context.Context
	cancel context.CancelFunc
	// sealed is set once the run's end is recorded (or it is left for a restart): nothing
	// the agent does afterwards is written.
	sealed bool
	// parked is set for a run found waiting for an answer at start-up: it has no goroutine
	// and holds a reference to the session state until it is answered or ended.
	parked bool
	// holdsSlot is set while the run's goroutine holds a scheduler slot.
	holdsSlot atomic.Bool

	msg   *Message   // the assistant message being written, if any
	text  textStream // its text
	timer *time.Timer

	question *Question
	answer   chan string // buffered(1): the answer to question

	tools map[string]*toolState
}

type toolState struct {
	call    *ToolCall
	out     textStream // its output
	fromSeq int64      // where its output chunks may start in the log
}

// textStream is text an agent streams: what was written to the log, and what waits for
// the next flush.
type textStream struct {
	written strings.Builder // the row's text shares its bytes
	pending strings.Builder
	length  int // code points, written or not
	bytes   int
}

func (t *textStream) add(delta string) {
	t.pending.WriteString(delta)
	t.length += runeLen(delta)
	t.bytes += len(delta)
}

// flush moves the pending text to the written text and returns it with its offset in code
// points; ok is false when nothing was pending.
func (t *textStream) flush() (delta string, offset int, ok bool) {
	if t.pending.Len() == 0 {
		return "", 0, false
	}
	delta = t.pending.String()
	t.pending.Reset()
	t.written.WriteString(delta)
	return delta, t.length - runeLen(delta), true
}

func (ar *activeRun) stopTimer() {
	if ar.timer != nil {
		ar.timer.Stop()
		ar.timer = nil
	}
}

// AddMessage stores a user message in the caller's session and starts a run for it, or
// queues one, by the session's busy policy: INTERRUPT stops the active run (kept
// INTERRUPTED with its partial reply), ENQUEUE queues the new run, REJECT refuses with
// ECONFLICT and stores nothing. With an idempotency key, a retry answers the message and
// run the first call created. ENOTFOUND when the session is missing or not the caller's;
// EINVALID for empty or oversized content or key; ERATELIMIT when too many runs wait.
func (s *Service) AddMessage(ctx context.Context, sessionID, content, key string) (*Message, *Run, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkText("message", content); err != nil {
		return nil, nil, err
	}
	if len(key) > 200 {
		return nil, nil, Errorf(EINVALID, "idempotency key is too long: at most 200 bytes")
	}
	if err := s.checkOpen(); err != nil {
		return nil, nil, err
	}
	sess, st, unlock, err := s.lockSession(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()

	if key != "" {
		rec, err := s.store.Idempotency(ctx, u, key)
		switch {
		case err == nil:
			return s.replay(ctx, rec, sessionID, content)
		case ErrorCode(err) != ENOTFOUND:
			return nil, nil, err
		}
	}

	busy := st.active != nil || len(st.queue) > 0
	b := &Batch{}
	if busy {
		switch sess.Settings.BusyPolicy {
		case BusyReject:
			return nil, nil, Errorf(ECONFLICT, "the agent is still working on this session")
		case BusyEnqueue:
			if len(st.queue) >= s.cfg.MaxQueuedRuns {
				return nil, nil, Errorf(ERATELIMIT, "too many messages are waiting in this session")
			}
		default:
			// Queued runs are covered by the new run, which reads the whole history. They
			// leave the queue first, so that stopping the active run starts none of them.
			for _, q := range st.queue {
				s.endRun(q, RunInterrupted, "")
				b.Runs = append(b.Runs, q)
				b.Events = append(b.Events, runEvent(q))
			}
			st.queue = nil
			if ar := st.active; ar != nil {
				if err := s.finishLocked(ctx, st, ar, RunInterrupted, ""); err != nil {
					return nil, nil, err
				}
			}
		}
	}

	now := s.now()
	run := &Run{ID: newID(), SessionID: sess.ID, UserID: u, Status: RunQueued, Agent: sess.Settings.Agent, CreatedAt: now}
	msg := &Message{ID: newID(), SessionID: sess.ID, Role: RoleUser, Kind: KindText, Content: content,
		Status: MessageComplete, RunID: run.ID, CreatedAt: now}
	sess.UpdatedAt = now
	b.Session = sess
	b.Messages = append(b.Messages, msg)
	b.Runs = append(b.Runs, run)
	b.Events = append(b.Events, &Event{Type: EventMessageAdded, Message: msg}, runEvent(run))
	if sess.Title == "" {
		// An untitled session is named after its first message.
		sess.Title = truncate(strings.Join(strings.Fields(content), " "), 60)
		snap := *sess
		b.Events = append(b.Events, &Event{Type: EventSessionUpdated, Session: &snap})
	}
	if key != "" {
		b.Idempotency = &IdempotencyRecord{UserID: u, Key: key, SessionID: sess.ID, MessageID: msg.ID, RunID: run.ID, CreatedAt: now}
	}
	if err := s.commitLocked(ctx, st, b); err != nil {
		return nil, nil, err
	}
	if st.active == nil {
		s.startLocked(st, run, false)
	} else {
		st.queue = append(st.queue, run)
	}
	m, r := *msg, *run
	return &m, &r, nil
}

// replay answers a retried addMessage with what the first call created.
func (s *Service) replay(ctx context.Context, rec *IdempotencyRecord, sessionID, content string) (*Message, *Run, error) {
	if rec.SessionID != sessionID {
		return nil, nil, Errorf(ECONFLICT, "this idempotency key was used for another session")
	}
	msg, err := s.store.Message(ctx, rec.MessageID)
	if err != nil {
		return nil, nil, err
	}
	if msg.Content != content {
		return nil, nil, Errorf(ECONFLICT, "this idempotency key was used for another message")
	}
	run, err := s.store.Run(ctx, rec.RunID)
	if err != nil {
		return nil, nil, err
	}
	return msg, run, nil
}

func (s *Service) checkText(what, content string) error {
	if strings.TrimSpace(content) == "" {
		return Errorf(EINVALID, "%s is empty", what)
	}
	if len(content) > s.cfg.MaxMessageBytes {
		return Errorf(EINVALID, "%s is too long: %d bytes, at most %d", what, len(content), s.cfg.MaxMessageBytes)
	}
	if !utf8.ValidString(content) {
		return Errorf(EINVALID, "%s is not valid UTF-8", what)
	}
	return nil
}

func runEvent(r *Run) *Event {
	cp := *r
	return &Event{Type: EventRunStatusChanged, Run: &cp}
}

func (s *Service) endRun(r *Run, status RunStatus, msg string) {
	now := s.now()
	r.Status = status
	r.Error = msg
	r.FinishedAt = &now
	s.countRun(status)
}

// startLocked makes run the session's active run and starts a goroutine that waits for a
// slot and executes it. resumed runs (after an answer) go first in their user's line.
func (s *Service) startLocked(st *sessionState, run *Run, resumed bool) *activeRun {
	ctx, cancel := context.WithCancel(context.Background())
	ar := &activeRun{st: st, run: run, ctx: ctx, cancel: cancel, answer: make(chan string, 1), tools: map[string]*toolState{}}
	st.active = ar
	s.statesMu.Lock()
	st.refs++ // the run holds the state until it returns
	s.statesMu.Unlock()
	s.runs.Add(1)
	go s.execute(ar, resumed)
	return ar
}

// execute runs the agent of ar: it waits for a slot, marks the run RUNNING, calls the
// runner on the stored history, and records how it ended.
func (s *Service) execute(ar *activeRun, resumed bool) {
	st := ar.st
	defer s.runs.Done()
	defer s.releaseState(st)
	if err := s.sched.acquire(ar.ctx, ar.run.UserID, resumed); err != nil {
		st.mu.Lock()
		if !isCtxErr(err) { // the scheduler is closed
			s.finishLocked(context.Background(), st, ar, RunFailed, ErrorMessage(err))
		}
		st.mu.Unlock()
		return
	}
	ar.holdsSlot.Store(true)
	defer func() {
		if ar.holdsSlot.Swap(false) {
			s.sched.release(ar.run.UserID)
		}
	}()

	st.mu.Lock()
	if ar.sealed {
		st.mu.Unlock()
		return
	}
	sess, err := s.store.Session(ar.ctx, st.id)
	if err == nil && ar.run.Status != RunRunning {
		now := s.now()
		ar.run.Status = RunRunning
		ar.run.StartedAt = &now
		err = s.commitLocked(ar.ctx, st, &Batch{Runs: []*Run{ar.run}, Events: []*Event{runEvent(ar.run)}})
	}
	var req RunRequest
	if err == nil {
		req, err = s.request(ar.ctx, sess, ar.run)
	}
	st.mu.Unlock()
	runner, ok := s.agents.Get(ar.run.Agent)
	if err == nil && !ok {
		err = Errorf(EINVALID, "the agent %q is not available on this server", ar.run.Agent)
	}
	if err == nil {
		err = s.safeRun(runner, ar, req)
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case ar.sealed:
	case err == nil:
		s.finishLocked(context.Background(), st, ar, RunCompleted, "")
	case isCtxErr(err) && ar.ctx.Err() != nil:
		s.finishLocked(context.Background(), st, ar, RunCancelled, "")
	default:
		if ErrorCode(err) == EINTERNAL {
			s.log.Error("agent failed", "session", st.id, "run", ar.run.ID, "agent", ar.run.Agent, "err", err)
		}
		s.finishLocked(context.Background(), st, ar, RunFailed, ErrorMessage(err))
	}
}

// safeRun calls the runner, turning a panic into an error.
func (s *Service) safeRun(r Runner, ar *activeRun, req RunRequest) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("agent panicked", "session", ar.st.id, "run", ar.run.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = Errorf(EINTERNAL, "the agent crashed")
		}
	}()
	return r.Run(ar.ctx, req, &output{s: s, ar: ar})
}

// request builds what the agent gets: the settings and the whole history.
func (s *Service) request(ctx context.Context, sess *TalkSession, run *Run) (RunRequest, error) {
	req := RunRequest{SessionID: sess.ID, RunID: run.ID, UserID: sess.UserID, Settings: sess.Settings}
	var after int64
	for {
		page, err := s.store.Messages(ctx, sess.ID, MessagePage{After: after, First: 500})
		if err != nil {
			return req, err
		}
		for _, m := range page {
			req.History = append(req.History, HistoryMessage{Message: *m})
		}
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].Seq
	}
	ids := make([]string, 0, len(req.History))
	byID := make(map[string]*HistoryMessage, len(req.History))
	for i := range req.History {
		h := &req.History[i]
		ids = append(ids, h.ID)
		byID[h.ID] = h
		if h.QuestionID != "" {
			q, err := s.store.Question(ctx, h.QuestionID)
			if err != nil {
				return req, err
			}
			h.Question = q
		}
	}
	calls, err := s.store.ToolCalls(ctx, ids)
	if err != nil {
		return req, err
	}
	for _, c := range calls {
		if h := byID[c.MessageID]; h != nil {
			h.ToolCalls = append(h.ToolCalls, c)
		}
	}
	return req, nil
}

// finishLocked records the end of ar with status: the text streamed so far is written and
// its message completed (INTERRUPTED for a stopped run, FAILED for a failed one), running
// tool calls end, a pending question is withdrawn, the run gets its final status, and the
// session's next queued run starts. The agent's context is cancelled.
func (s *Service) finishLocked(ctx context.Context, st *sessionState, ar *activeRun, status RunStatus, errMsg string) error {
	if ar.sealed {
		return nil
	}
	ar.sealed = true
	ar.cancel()
	b := &Batch{}
	type job struct {
		key  string
		from int64
	}
	var compact []job
	msgStatus := MessageComplete
	switch status {
	case RunFailed:
		msgStatus = MessageFailed
	case RunCancelled, RunInterrupted:
		msgStatus = MessageInterrupted
	}
	for _, ts := range ar.tools {
		if ts.call.Status == ToolRunning {
			s.toolChunkInto(b, ar, ts, true)
			now := s.now()
			ts.call.Status = ToolCancelled
			if status == RunFailed {
				ts.call.Status = ToolFailed
			}
			ts.call.FinishedAt = &now
			b.ToolCalls = append(b.ToolCalls, ts.call)
			cp := *ts.call
			b.Events = append(b.Events, &Event{Type: EventToolCallFinished, ToolCall: &cp})
			compact = append(compact, job{ts.call.ID, ts.fromSeq})
		}
	}
	if ar.msg != nil {
		compact = append(compact, job{ar.msg.ID, ar.msg.Seq + 1})
		if status == RunFailed {
			ar.msg.Error = errMsg
		}
		s.completeMessageInto(b, ar, msgStatus)
	} else if status == RunFailed {
		// A failed run shows in the history even when it wrote nothing.
		now := s.now()
		m := &Message{ID: newID(), SessionID: st.id, Role: RoleAssistant, Kind: KindText, Status: MessageFailed, Error: errMsg, RunID: ar.run.ID, CreatedAt: now}
		added, done := *m, *m
		b.Messages = append(b.Messages, m)
		b.Events = append(b.Events, &Event{Type: EventMessageAdded, Message: &added}, &Event{Type: EventMessageCompleted, Message: &done})
	}
	if q := ar.question; q != nil && q.Answer == nil {
		q.Withdrawn = true
		b.Questions = append(b.Questions, q)
		ar.question = nil
	}
	s.endRun(ar.run, status, errMsg)
	b.Runs = append(b.Runs, ar.run)
	b.Events = append(b.Events, runEvent(ar.run))
	err := s.commitLocked(ctx, st, b)
	if err != nil {
		s.log.Error("recording the end of a run", "session", st.id, "run", ar.run.ID, "err", err)
	}
	for _, j := range compact {
		s.compactLocked(ctx, st, j.key, j.from)
	}
	if st.active == ar {
		st.active = nil
		s.startNextLocked(st)
	}
	if ar.parked {
		ar.parked = false
		s.releaseState(st)
	}
	return err
}

// startNextLocked starts the session's oldest queued run, if any.
func (s *Service) startNextLocked(st *sessionState) {
	if st.active != nil || len(st.queue) == 0 || s.closed.Load() {
		return
	}
	next := st.queue[0]
	st.queue = st.queue[1:]
	s.startLocked(st, next, false)
}

// chunkInto moves the run's unwritten text into b as a MessageChunk. The message row is
// not rewritten: until the message completes, its chunk events are the durable record of
// its text (recovery rebuilds the content from them, views overlay what is in memory), so
// streaming writes only what is new.
func (s *Service) chunkInto(b *Batch, ar *activeRun) {
	if ar.msg == nil {
		return
	}
	if delta, off, ok := ar.text.flush(); ok {
		ar.msg.Content = ar.text.written.String()
		b.Events = append(b.Events, &Event{Type: EventMessageChunk, Key: ar.msg.ID, MessageID: ar.msg.ID, Delta: delta, Offset: off})
	}
}

// toolChunkInto does for a tool's output what chunkInto does for a message's text.
func (s *Service) toolChunkInto(b *Batch, ar *activeRun, ts *toolState, final bool) {
	delta, off, ok := ts.out.flush()
	if !ok {
		return
	}
	ts.call.Output = ts.out.written.String()
	b.Events = append(b.Events, &Event{Type: EventToolCallOutput, Key: ts.call.ID, MessageID: ts.call.MessageID, Delta: delta, Offset: off})
	if !final {
		b.OutputAppends = append(b.OutputAppends, TextAppend{ID: ts.call.ID, Text: delta})
	}
}

// completeMessageInto writes the rest of the current message and completes it.
func (s *Service) completeMessageInto(b *Batch, ar *activeRun, status MessageStatus) {
	s.chunkInto(b, ar)
	ar.msg.Status = status
	cp := *ar.msg
	b.Messages = append(b.Messages, &cp)
	done := cp
	b.Events = append(b.Events, &Event{Type: EventMessageCompleted, Message: &done})
	ar.msg = nil
}

// flushLocked writes the run's pending text and tool output.
func (s *Service) flushLocked(ar *activeRun) error {
	ar.stopTimer()
	b := &Batch{}
	s.chunkInto(b, ar)
	for _, ts := range ar.tools {
		s.toolChunkInto(b, ar, ts, false)
	}
	return s.commitLocked(ar.ctx, ar.st, b)
}

// scheduleFlushLocked arranges for pending text to be written within the flush window.
func (s *Service) scheduleFlushLocked(ar *activeRun) error {
	if s.cfg.FlushInterval == 0 {
		return s.flushLocked(ar)
	}
	if ar.timer == nil {
		ar.timer = time.AfterFunc(s.cfg.FlushInterval, func() {
			ar.st.mu.Lock()
			defer ar.st.mu.Unlock()
			ar.timer = nil
			if !ar.sealed {
				if err := s.flushLocked(ar); err != nil {
					s.log.Error("writing streamed text", "session", ar.st.id, "err", err)
				}
			}
		})
	}
	return nil
}

// output is the Output of one run.
type output struct {
	s  *Service
	ar *activeRun
}

func (o *output) ended() error {
	if err := o.ar.ctx.Err(); err != nil {
		return err
	}
	return Errorf(ECONFLICT, "the run has ended")
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
	if ar.sealed {
		return o.ended()
	}
	if ar.msg == nil {
		if err := s.beginMessageLocked(ar); err != nil {
			return err
		}
	}
	if ar.text.bytes+len(delta) > s.cfg.MaxReplyBytes {
		return Errorf(EINVALID, "the reply is longer than this server allows (%d bytes)", s.cfg.MaxReplyBytes)
	}
	ar.text.add(delta)
	return s.scheduleFlushLocked(ar)
}

// beginMessageLocked starts a new assistant message for ar.
func (s *Service) beginMessageLocked(ar *activeRun) error {
	now := s.now()
	m := &Message{ID: newID(), SessionID: ar.st.id, Role: RoleAssistant, Kind: KindText, Status: MessageStreaming, RunID: ar.run.ID, CreatedAt: now}
	cp := *m
	if err := s.commitLocked(ar.ctx, ar.st, &Batch{Messages: []*Message{m}, Events: []*Event{{Type: EventMessageAdded, Message: &cp}}}); err != nil {
		return err
	}
	ar.msg, ar.text = m, textStream{}
	return nil
}

func (o *output) Ask(ctx context.Context, prompt string, choices []string) (string, error) {
	s, ar := o.s, o.ar
	if strings.TrimSpace(prompt) == "" {
		return "", Errorf(EINVALID, "the agent asked an empty question")
	}
	prompt = truncate(prompt, s.cfg.MaxMessageBytes/4)
	st := ar.st
	st.mu.Lock()
	if ar.sealed {
		st.mu.Unlock()
		return "", o.ended()
	}
	ar.stopTimer()
	b := &Batch{}
	for _, ts := range ar.tools {
		s.toolChunkInto(b, ar, ts, false)
	}
	var done *Message
	if ar.msg != nil {
		done = ar.msg
		s.completeMessageInto(b, ar, MessageComplete)
	}
	now := s.now()
	q := &Question{ID: newID(), RunID: ar.run.ID, SessionID: st.id, Prompt: prompt, Choices: append([]string(nil), choices...), AskedAt: now}
	qm := &Message{ID: newID(), SessionID: st.id, Role: RoleAssistant, Kind: KindQuestion, Content: prompt, Status: MessageComplete, RunID: ar.run.ID, QuestionID: q.ID, CreatedAt: now}
	ar.run.Status = RunWaitingForInput
	qcp, mcp := *q, *qm
	b.Questions = append(b.Questions, q)
	b.Messages = append(b.Messages, qm)
	b.Events = append(b.Events, &Event{Type: EventMessageAdded, Message: &mcp}, &Event{Type: EventQuestionAsked, Question: &qcp})
	b.Runs = append(b.Runs, ar.run)
	b.Events = append(b.Events, runEvent(ar.run))
	if err := s.commitLocked(ar.ctx, st, b); err != nil {
		st.mu.Unlock()
		return "", err
	}
	if done != nil {
		s.compactLocked(ar.ctx, st, done.ID, done.Seq+1)
	}
	ar.question = q
	st.mu.Unlock()

	// Waiting for a person takes no slot.
	if ar.holdsSlot.Swap(false) {
		s.sched.release(ar.run.UserID)
	}
	var answer string
	var err error
	select {
	case answer = <-ar.answer:
	case <-ar.ctx.Done():
		err = ar.ctx.Err()
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return "", err
	}
	if err := s.sched.acquire(ar.ctx, ar.run.UserID, true); err != nil {
		return "", err
	}
	ar.holdsSlot.Store(true)
	return answer, nil
}

// Respond answers a question of the caller's: the answer is stored, shown in the history,
// and the waiting run goes on (started again on the history when the server restarted
// meanwhile). ENOTFOUND when the question is missing or not the caller's; ECONFLICT when
// it was already answered or is no longer waited for; EINVALID for an empty or oversized
// answer.
func (s *Service) Respond(ctx context.Context, questionID, answer string) (*Question, *Run, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkText("answer", answer); err != nil {
		return nil, nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, nil, err
	}
	notFound := Errorf(ENOTFOUND, "question not found")
	if !validID(questionID) {
		return nil, nil, notFound
	}
	q, err := s.store.Question(ctx, questionID)
	if ErrorCode(err) == ENOTFOUND {
		return nil, nil, notFound
	} else if err != nil {
		return nil, nil, err
	}
	sess, st, unlock, err := s.lockSession(ctx, q.SessionID)
	if ErrorCode(err) == ENOTFOUND || (err == nil && sess.UserID != u) {
		if err == nil {
			unlock()
		}
		return nil, nil, notFound
	} else if err != nil {
		return nil, nil, err
	}
	defer unlock()
	if q, err = s.store.Question(ctx, questionID); err != nil {
		return nil, nil, err
	}
	if q.Answer != nil {
		return nil, nil, Errorf(ECONFLICT, "this question was already answered")
	}
	ar := st.active
	if q.Withdrawn || ar == nil || ar.run.ID != q.RunID || ar.run.Status != RunWaitingForInput {
		return nil, nil, Errorf(ECONFLICT, "the agent is no longer waiting for this answer")
	}
	now := s.now()
	q.Answer, q.AnsweredAt = &answer, &now
	am := &Message{ID: newID(), SessionID: st.id, Role: RoleUser, Kind: KindAnswer, Content: answer, Status: MessageComplete, RunID: q.RunID, QuestionID: q.ID, CreatedAt: now}
	ar.run.Status = RunRunning
	sess.UpdatedAt = now
	qcp, mcp := *q, *am
	b := &Batch{Session: sess, Questions: []*Question{q}, Messages: []*Message{am}, Runs: []*Run{ar.run},
		Events: []*Event{{Type: EventMessageAdded, Message: &mcp}, {Type: EventQuestionAnswered, Question: &qcp}, runEvent(ar.run)}}
	if err := s.commitLocked(ctx, st, b); err != nil {
		ar.run.Status = RunWaitingForInput
		return nil, nil, err
	}
	ar.question = nil
	if !ar.parked {
		ar.answer <- answer // the agent's goroutine waits in Ask
	} else {
		// No agent is waiting in this process (it was restarted): run the agent again on
		// the history, which now holds the question and its answer. A tool call that was
		// running when the question was asked (an agent's "ask the user" tool) is that
		// question's call: the answer is its result.
		if err := s.finishAskingToolLocked(ctx, st, q, answer); err != nil {
			s.log.Warn("completing the asking tool call", "question", q.ID, "err", err)
		}
		ar.sealed = true
		ar.cancel()
		st.active = nil
		s.startLocked(st, ar.run, true)
		ar.parked = false
		s.releaseState(st)
	}
	rq, rr := *q, *ar.run
	return &rq, &rr, nil
}

// CancelRun stops the caller's active run in the session, keeping its partial reply; the
// run ends CANCELLED. It returns nil (and no error) when nothing was running. ENOTFOUND
// when the session is missing or not the caller's.
func (s *Service) CancelRun(ctx context.Context, sessionID string) (*Run, error) {
	_, st, unlock, err := s.lockSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ar := st.active
	if ar == nil {
		return nil, nil
	}
	if err := s.finishLocked(ctx, st, ar, RunCancelled, ""); err != nil {
		return nil, err
	}
	r := *ar.run
	return &r, nil
}

func (o *output) StartTool(_, name, arguments string) (ToolHandle, error) {
	s, ar := o.s, o.ar
	ar.st.mu.Lock()
	defer ar.st.mu.Unlock()
	if ar.sealed {
		return nil, o.ended()
	}
	// Models reuse their call IDs across turns ("call_0"); the stored ID must be unique.
	id := newID()
	if ar.msg == nil {
		if err := s.beginMessageLocked(ar); err != nil {
			return nil, err
		}
	}
	b := &Batch{}
	s.chunkInto(b, ar)
	now := s.now()
	fromSeq := ar.msg.Seq + 1
	call := &ToolCall{ID: id, RunID: ar.run.ID, SessionID: ar.st.id, MessageID: ar.msg.ID, Name: truncate(name, 100), Arguments: arguments, Status: ToolRunning, StartedAt: now}
	cp := *call
	b.ToolCalls = append(b.ToolCalls, call)
	b.Events = append(b.Events, &Event{Type: EventToolCallStarted, ToolCall: &cp})
	if err := s.commitLocked(ar.ctx, ar.st, b); err != nil {
		return nil, err
	}
	ts := &toolState{call: call, fromSeq: fromSeq}
	ar.tools[id] = ts
	return &toolHandle{o: o, ts: ts}, nil
}

type toolHandle struct {
	o  *output
	ts *toolState
}

func (h *toolHandle) ID() string { return h.ts.call.ID }

func (h *toolHandle) Output(delta string) error {
	if delta == "" {
		return nil
	}
	delta = strings.ToValidUTF8(delta, "\uFFFD")
	s, ar := h.o.s, h.o.ar
	ar.st.mu.Lock()
	defer ar.st.mu.Unlock()
	if ar.sealed {
		return h.o.ended()
	}
	if h.ts.call.Status != ToolRunning {
		return Errorf(ECONFLICT, "the tool call has finished")
	}
	if h.ts.out.bytes+len(delta) > s.cfg.MaxReplyBytes {
		return Errorf(EINVALID, "the tool's output is longer than this server allows")
	}
	h.ts.out.add(delta)
	return s.scheduleFlushLocked(ar)
}

func (h *toolHandle) Finish(result string, err error) error {
	s, ar, ts := h.o.s, h.o.ar, h.ts
	ar.st.mu.Lock()
	defer ar.st.mu.Unlock()
	if ar.sealed {
		return h.o.ended()
	}
	if ts.call.Status != ToolRunning {
		return Errorf(ECONFLICT, "the tool call has finished")
	}
	b := &Batch{}
	s.toolChunkInto(b, ar, ts, true)
	now := s.now()
	ts.call.FinishedAt = &now
	if err != nil {
		msg := ErrorMessage(err)
		if ErrorCode(err) == EINTERNAL {
			msg = err.Error()
		}
		ts.call.Status, ts.call.Error = ToolFailed, &msg
	} else {
		r := truncate(result, s.cfg.MaxReplyBytes)
		ts.call.Status, ts.call.Result = ToolCompleted, &r
	}
	cp := *ts.call
	b.ToolCalls = append(b.ToolCalls, ts.call)
	b.Events = append(b.Events, &Event{Type: EventToolCallFinished, ToolCall: &cp})
	if err := s.commitLocked(ar.ctx, ar.st, b); err != nil {
		return err
	}
	s.compactLocked(ar.ctx, ar.st, ts.call.ID, ts.fromSeq)
	return nil
}

// finishAskingToolLocked completes, with the answer as its result, the latest tool call of
// q's run that was still running when q was asked, if any.
func (s *Service) finishAskingToolLocked(ctx context.Context, st *sessionState, q *Question, answer string) error {
	_, calls, err := s.runWork(ctx, st.id, q.RunID)
	if err != nil {
		return err
	}
	var asking *ToolCall
	for _, c := range calls {
		if c.Status == ToolRunning && !c.StartedAt.After(q.AskedAt) {
			asking = c
		}
	}
	if asking == nil {
		return nil
	}
	now := s.now()
	asking.Status, asking.Result, asking.FinishedAt = ToolCompleted, &answer, &now
	cp := *asking
	return s.commitLocked(ctx, st, &Batch{ToolCalls: []*ToolCall{asking}, Events: []*Event{{Type: EventToolCallFinished, ToolCall: &cp}}})
}
