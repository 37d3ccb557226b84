package service

import (
	"context"
	"unicode/utf8"
)

// recover brings back, at start-up, what a previous process left active (see New).
func (s *Service) recover(ctx context.Context) error {
	runs, err := s.store.RunsByStatus(ctx, RunRunning, RunQueued, RunWaitingForInput)
	if err != nil {
		return err
	}
	for _, run := range runs {
		if err := s.recoverRun(ctx, run); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) recoverRunLocked(ctx context.Context, st *sessionState, run *Run) error {
	if run.Status == RunQueued {
		if st.active == nil {
			s.startLocked(st, run, false, false, nil)
		} else {
			st.queue = append(st.queue, run)
		}
		return nil
	}
	msgs, calls, err := s.runWork(ctx, st.id, run.ID)
	if err != nil {
		return err
	}
	streaming := []*Message{}
	for _, m := range msgs {
		if m.Status == MessageStreaming {
			streaming = append(streaming, m)
		}
	}
	var running []*ToolCall
	for _, c := range calls {
		if c.Status == ToolRunning {
			running = append(running, c)
		}
	}
	// The text of a streaming message and the output of a running tool live in the log
	// until they end: every durable chunk, nothing more.
	var from int64
	if len(msgs) > 0 {
		from = msgs[0].Seq
	}
	texts, err := s.streamedTexts(ctx, st.id, from, 0)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(context.Background())
	ar := &activeRun{st: st, run: run, ctx: cctx, cancel: cancel, answer: make(chan string, 1), tools: map[string]*toolState{}}
	for _, c := range running {
		ar.tools[c.ID] = &toolState{call: c, out: restored(texts[c.ID]), fromSeq: from + 1}
	}

	if run.Status == RunWaitingForInput {
		// No agent waits in this process: the run is parked until its question is answered
		// (it then starts again on the history) or it ends.
		var qids []string
		for _, m := range msgs {
			if m.Kind == KindQuestion {
				qids = append(qids, m.QuestionID)
			}
		}
		qs, err := s.store.Questions(ctx, qids)
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.Answer == nil && !q.Withdrawn && (ar.question == nil || q.AskedAt.After(ar.question.AskedAt)) {
				ar.question = q
			}
		}
		ar.parked = true
		st.active = ar
		s.holdState(st)
		return nil
	}

	// RUNNING: the process died while the agent worked. What was written stays, marked
	// INTERRUPTED; the agent is not run again behind the user's back.
	t := s.begin(st)
	for i, m := range streaming {
		if i == len(streaming)-1 {
			ar.msg, ar.announced, ar.text = m, true, restored(texts[m.ID])
			break
		}
		done := *m
		done.Content, done.Status = texts[m.ID], MessageInterrupted
		s.add(t, &Event{Type: EventMessageCompleted, Message: &done})
		t.onCommit(func() { s.compactSoon(st, m.ID, m.Seq+1) })
	}
	st.active = ar
	s.planFinish(t, ar, RunInterrupted, "")
	t.onAbort(func() { st.active = nil })
	return s.commitLocked(ctx, t)
}

// restored is a text stream holding text that is already durable.
func restored(text string) textStream {
	var t textStream
	t.written.WriteString(text)
	t.wlen = utf8.RuneCountInString(text)
	t.length, t.bytes = t.wlen, len(text)
	return t
}

// streamedTexts rebuilds, from the chunk events after Seq from (up to Seq upTo, when > 0),
// the text of every stream (by key: a message's ID or a tool call's), placing each delta at
// its offset.
func (s *Service) streamedTexts(ctx context.Context, sessionID string, from, upTo int64) (map[string]string, error) {
	texts := map[string][]rune{}
	after := from
	for done := false; !done; {
		evs, err := s.store.Events(ctx, sessionID, after, 1000)
		if err != nil {
			return nil, err
		}
		done = len(evs) < 1000
		for _, ev := range evs {
			if upTo > 0 && ev.Seq > upTo {
				done = true
				break
			}
			if !ev.Type.Chunky() {
				continue
			}
			text := texts[ev.Key]
			if ev.Offset <= len(text) {
				texts[ev.Key] = append(text[:ev.Offset], []rune(ev.Delta)...)
			}
		}
		if len(evs) > 0 {
			after = evs[len(evs)-1].Seq
		}
	}
	out := make(map[string]string, len(texts))
	for k, v := range texts {
		out[k] = string(v)
	}
	return out, nil
}

// runWork returns the messages a run wrote (among the session's latest) and their tool
// calls.
func (s *Service) runWork(ctx context.Context, sessionID, runID string) ([]*Message, []*ToolCall, error) {
	latest, err := s.store.Messages(ctx, sessionID, MessagePage{Last: 100})
	if err != nil {
		return nil, nil, err
	}
	var msgs []*Message
	var ids []string
	for _, m := range latest {
		if m.RunID == runID && m.Role == RoleAssistant {
			msgs = append(msgs, m)
			ids = append(ids, m.ID)
		}
	}
	calls, err := s.store.ToolCalls(ctx, ids)
	return msgs, calls, err
}
