package service

import (
	"context"
)

// SessionView is a session as one read saw it: its state and the position of its log at
// that moment. Messages read with AsOf set to the view show the history as of the same
// moment, so that subscribing after StreamCursor continues it with no gap and no duplicate.
type SessionView struct {
	*TalkSession
	Status          SessionStatus
	ActiveRun       *Run
	PendingQuestion *Question
	// StreamCursor is the encoded position of the last event at the time of the read.
	StreamCursor string

	asOf snapshot
}

type snapshot struct {
	seq          int64
	streamingID  string // the message being written, if any
	streamedText string // what of it was written
}

// View returns the caller's session with its status, active run, pending question and
// stream cursor, read together. ENOTFOUND when missing or another user's.
func (s *Service) View(ctx context.Context, id string) (*SessionView, error) {
	sess, err := s.session(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.viewOf(ctx, sess), nil
}

func (s *Service) viewOf(ctx context.Context, sess *TalkSession) *SessionView {
	st := s.acquireState(ctx, sess)
	defer s.releaseState(st)
	st.mu.Lock()
	defer st.mu.Unlock()
	v := &SessionView{TalkSession: sess, Status: SessionIdle}
	// The session row may predate events appended since; the state is current.
	if st.lastSeq > sess.LastSeq {
		cp := *sess
		cp.LastSeq = st.lastSeq
		v.TalkSession = &cp
	}
	c := Cursor{Seq: v.LastSeq, Off: st.lastOff}
	if st.lastSeq < v.LastSeq { // the state was created from an older row
		c.Off = 0
	}
	v.StreamCursor = EncodeCursor(sess.ID, c)
	v.asOf.seq = c.Seq
	if ar := st.active; ar != nil {
		r := *ar.run
		v.ActiveRun = &r
		v.Status = SessionRunning
		if ar.run.Status == RunWaitingForInput {
			v.Status = SessionWaitingForInput
			if ar.question != nil {
				q := *ar.question
				v.PendingQuestion = &q
			}
		}
		if ar.msg != nil {
			v.asOf.streamingID = ar.msg.ID
			v.asOf.streamedText = ar.msg.Content
		}
	} else if len(st.queue) > 0 {
		v.Status = SessionRunning
		r := *st.queue[0]
		v.ActiveRun = &r
	}
	return v
}

// Messages returns a page of the caller's session history, oldest first, as of the view
// when asOf is not nil. Cursors are history cursors (EncodeMessageCursor). EINVALID for a
// bad cursor or a negative count; ENOTFOUND for a session that is missing or not the
// caller's.
func (s *Service) Messages(ctx context.Context, sessionID string, asOf *SessionView, first *int, after string, last *int, before string) (msgs []*Message, hasPrev, hasNext bool, err error) {
	sess, err := s.session(ctx, sessionID)
	if err != nil {
		return nil, false, false, err
	}
	if asOf == nil {
		// The store holds a streaming message's text only in its chunk events: take the
		// text from memory, as of now.
		asOf = s.viewOf(ctx, sess)
	}
	var page MessagePage
	if after != "" {
		if page.After, err = DecodeMessageCursor(after); err != nil {
			return nil, false, false, err
		}
	}
	if before != "" {
		if page.Before, err = DecodeMessageCursor(before); err != nil {
			return nil, false, false, err
		}
	}
	if page.Before == 0 || page.Before > asOf.asOf.seq+1 {
		page.Before = asOf.asOf.seq + 1
	}
	fromEnd := last != nil && first == nil
	n, err := s.pageSize(first)
	if fromEnd {
		n, err = s.pageSize(last)
	}
	if err != nil {
		return nil, false, false, err
	}
	if fromEnd {
		page.Last = n + 1
	} else {
		page.First = n + 1
	}
	list, err := s.store.Messages(ctx, sessionID, page)
	if err != nil {
		return nil, false, false, err
	}
	if !fromEnd && page.Before > 0 {
		kept := list[:0]
		for _, m := range list {
			if m.Seq < page.Before {
				kept = append(kept, m)
			}
		}
		list = kept
	}
	if len(list) > n {
		if fromEnd {
			list, hasPrev = list[len(list)-n:], true
		} else {
			list, hasNext = list[:n], true
		}
	}
	if fromEnd {
		hasNext = before != ""
	} else {
		hasPrev = after != ""
	}
	if asOf.asOf.streamingID != "" {
		for i, m := range list {
			if m.ID == asOf.asOf.streamingID {
				cp := *m
				cp.Content = asOf.asOf.streamedText
				cp.Status = MessageStreaming
				list[i] = &cp
			}
		}
	}
	return list, hasPrev, hasNext, nil
}

// ToolCalls returns the tool calls of the given messages of one of the caller's sessions.
func (s *Service) ToolCalls(ctx context.Context, sessionID string, messageIDs []string) ([]*ToolCall, error) {
	if _, err := s.session(ctx, sessionID); err != nil {
		return nil, err
	}
	return s.store.ToolCalls(ctx, messageIDs)
}

// Question returns a question of the caller's; ENOTFOUND when missing or another user's.
func (s *Service) Question(ctx context.Context, id string) (*Question, error) {
	if !validID(id) {
		return nil, Errorf(ENOTFOUND, "question not found")
	}
	q, err := s.store.Question(ctx, id)
	if ErrorCode(err) == ENOTFOUND {
		return nil, Errorf(ENOTFOUND, "question not found")
	} else if err != nil {
		return nil, err
	}
	if _, err := s.session(ctx, q.SessionID); err != nil {
		return nil, Errorf(ENOTFOUND, "question not found")
	}
	return q, nil
}

// recover brings back, at start-up, what a previous process left active (see New).
func (s *Service) recover(ctx context.Context) error {
	runs, err := s.store.RunsByStatus(ctx, RunRunning, RunQueued, RunWaitingForInput)
	if err != nil {
		return err
	}
	for _, run := range runs {
		sess, err := s.store.Session(ctx, run.SessionID)
		if ErrorCode(err) == ENOTFOUND {
			continue
		} else if err != nil {
			return err
		}
		st := s.acquireState(ctx, sess)
		st.mu.Lock()
		err = s.recoverRunLocked(ctx, st, run)
		st.mu.Unlock()
		s.releaseState(st)
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) recoverRunLocked(ctx context.Context, st *sessionState, run *Run) error {
	switch run.Status {
	case RunQueued:
		if st.active == nil {
			s.startLocked(st, run, false)
		} else {
			st.queue = append(st.queue, run)
		}
		return nil
	case RunWaitingForInput:
		cctx, cancel := context.WithCancel(context.Background())
		ar := &activeRun{st: st, run: run, ctx: cctx, cancel: cancel, parked: true, answer: make(chan string, 1), tools: map[string]*toolState{}}
		msgs, calls, err := s.runWork(ctx, st.id, run.ID)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Kind == KindQuestion {
				if q, err := s.store.Question(ctx, m.QuestionID); err == nil && q.Answer == nil && !q.Withdrawn {
					ar.question = q
				}
			}
		}
		// Tool calls left running (the asking one) end with the run if it is stopped.
		for _, c := range calls {
			if c.Status == ToolRunning {
				ar.tools[c.ID] = &toolState{call: c}
			}
		}
		st.active = ar
		s.statesMu.Lock()
		st.refs++
		s.statesMu.Unlock()
		return nil
	}
	// RUNNING: the process died while the agent worked. What was written stays, marked
	// INTERRUPTED.
	ar := &activeRun{st: st, run: run, ctx: context.Background(), cancel: func() {}, tools: map[string]*toolState{}}
	msgs, calls, err := s.runWork(ctx, st.id, run.ID)
	if err != nil {
		return err
	}
	for _, c := range calls {
		if c.Status == ToolRunning {
			ar.tools[c.ID] = &toolState{call: c}
		}
	}
	b := &Batch{}
	for _, m := range msgs {
		if m.Status == MessageStreaming {
			// Its text is in its chunk events: every flushed chunk, nothing more.
			text, err := s.streamedText(ctx, st.id, m)
			if err != nil {
				return err
			}
			m.Content = text
			m.Status = MessageInterrupted
			cp := *m
			b.Messages = append(b.Messages, m)
			b.Events = append(b.Events, &Event{Type: EventMessageCompleted, Message: &cp})
			defer s.compactLocked(ctx, st, m.ID, m.Seq+1)
			for _, ts := range ar.tools {
				if ts.call.MessageID == m.ID {
					ts.fromSeq = m.Seq + 1
				}
			}
		}
	}
	if err := s.commitLocked(ctx, st, b); err != nil {
		return err
	}
	st.active = ar
	return s.finishLocked(ctx, st, ar, RunInterrupted, "")
}

// streamedText rebuilds the text of a message from its chunk events, placing each delta at
// its offset.
func (s *Service) streamedText(ctx context.Context, sessionID string, m *Message) (string, error) {
	var text []rune
	after := m.Seq
	for {
		evs, err := s.store.Events(ctx, sessionID, after, 1000)
		if err != nil {
			return "", err
		}
		for _, ev := range evs {
			if ev.Type == EventMessageChunk && ev.Key == m.ID && ev.Offset <= len(text) {
				text = append(text[:ev.Offset], []rune(ev.Delta)...)
			}
		}
		if len(evs) < 1000 {
			return string(text), nil
		}
		after = evs[len(evs)-1].Seq
	}
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

// Run returns a run of the caller's; ENOTFOUND when missing or another user's.
func (s *Service) Run(ctx context.Context, id string) (*Run, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	notFound := Errorf(ENOTFOUND, "run not found")
	if !validID(id) {
		return nil, notFound
	}
	r, err := s.store.Run(ctx, id)
	if ErrorCode(err) == ENOTFOUND || (err == nil && r.UserID != u) {
		return nil, notFound
	}
	return r, err
}
