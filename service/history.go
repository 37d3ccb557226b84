package service

import (
	"context"
	"slices"
)

// HistoryMessage is a message of a session's history with what belongs to it: the
// question it asks or answers, and the tool calls the agent made while writing it. Agents
// get the history as these (RunRequest.History), and the API shows them.
type HistoryMessage struct {
	Message
	// Question is the question of a QUESTION or ANSWER message.
	Question *Question
	// ToolCalls are the calls of an assistant message, by start time. Loaded is set when
	// the history was read with them (a message of an event carries none).
	ToolCalls []*ToolCall
	Loaded    bool
	// Shared is set on a message a share link's reader is given (see ShareMask).
	Shared *ShareMask
}

// History returns a page of the caller's session history, oldest first, as of the view
// when asOf is not nil. Cursors are history cursors (EncodeMessageCursor). EINVALID for a
// bad cursor or a negative count; ENOTFOUND for a session that is missing or not the
// caller's.
func (s *Service) History(ctx context.Context, sessionID string, asOf *SessionView, first *int, after string, last *int, before string) (msgs []*HistoryMessage, hasPrev, hasNext bool, err error) {
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
	msgs, err = s.complete(ctx, list, &asOf.asOf)
	return msgs, hasPrev, hasNext, err
}

// rebuild shows, as of the snapshot, messages still being written and tool calls still
// running whose text this replica does not hold (their run is on another replica): from
// their chunk events in the log.
func (s *core) rebuild(ctx context.Context, sessionID string, out []*HistoryMessage, snap *snapshot) error {
	var from int64
	for _, h := range out {
		if h.Status == MessageStreaming && h.ID != snap.streamingID && (from == 0 || h.Seq < from) {
			from = h.Seq
		}
		for _, c := range h.ToolCalls {
			if _, ok := snap.toolOutput[c.ID]; c.Status == ToolRunning && !ok && (from == 0 || h.Seq < from) {
				from = h.Seq
			}
		}
	}
	if from == 0 {
		return nil
	}
	texts, err := s.streamedTexts(ctx, sessionID, from, snap.seq)
	if err != nil {
		return err
	}
	for _, h := range out {
		if h.Status == MessageStreaming && h.ID != snap.streamingID {
			h.Content = texts[h.ID]
		}
		for _, c := range h.ToolCalls {
			if _, ok := snap.toolOutput[c.ID]; c.Status == ToolRunning && !ok {
				c.Output = texts[c.ID]
			}
		}
	}
	return nil
}

// complete adds to messages their questions and tool calls, read with one query each, and,
// with a snapshot, shows a message or tool call still being written as the snapshot saw it.
func (s *core) complete(ctx context.Context, msgs []*Message, snap *snapshot) ([]*HistoryMessage, error) {
	var qids, mids []string
	for _, m := range msgs {
		if m.QuestionID != "" {
			qids = append(qids, m.QuestionID)
		}
		if m.Role == RoleAssistant {
			mids = append(mids, m.ID)
		}
	}
	var qs []*Question
	if len(qids) > 0 {
		var err error
		if qs, err = s.store.Questions(ctx, qids); err != nil {
			return nil, err
		}
	}
	var calls []*ToolCall
	if len(mids) > 0 {
		var err error
		if calls, err = s.store.ToolCalls(ctx, mids); err != nil {
			return nil, err
		}
		if snap != nil && len(calls) > 0 {
			if calls, err = s.rollBack(ctx, msgs[0].SessionID, calls, snap.seq); err != nil {
				return nil, err
			}
		}
		for _, c := range calls {
			if snap != nil && c.Status == ToolRunning {
				if text, ok := snap.toolOutput[c.ID]; ok {
					c.Output = text
				}
			}
		}
	}
	out := join(msgs, qs, calls)
	if snap != nil {
		for _, h := range out {
			if h.ID == snap.streamingID {
				h.Content, h.Status = snap.streamed, MessageStreaming
			}
		}
		if len(out) > 0 {
			if err := s.rebuild(ctx, out[0].SessionID, out, snap); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// join makes history messages of msgs with their questions and, for the assistant's, their
// tool calls (given in start order).
func join(msgs []*Message, qs []*Question, calls []*ToolCall) []*HistoryMessage {
	out := make([]*HistoryMessage, len(msgs))
	byID := make(map[string]*HistoryMessage, len(msgs))
	var byQ map[string]*Question
	if len(qs) > 0 {
		byQ = make(map[string]*Question, len(qs))
		for _, q := range qs {
			byQ[q.ID] = q
		}
	}
	for i, m := range msgs {
		h := &HistoryMessage{Message: *m, Loaded: true, ToolCalls: []*ToolCall{}}
		out[i] = h
		if m.QuestionID != "" {
			h.Question = byQ[m.QuestionID]
		}
		if m.Role == RoleAssistant {
			byID[m.ID] = h
		}
	}
	for _, c := range calls {
		if h := byID[c.MessageID]; h != nil {
			h.ToolCalls = append(h.ToolCalls, c)
		}
	}
	return out
}

// rollBack shows tool calls as they were at seq: the rows hold them as they are now, and
// a call may have started or finished since (the view and the read of the rows are not
// one moment). A call started later is left out; one finished later is shown running,
// its output then coming from the snapshot or the log (see rebuild). The events after seq
// are those appended while this request ran: usually none.
func (s *core) rollBack(ctx context.Context, sessionID string, calls []*ToolCall, seq int64) ([]*ToolCall, error) {
	const page = 1000
	started, finished := map[string]bool{}, map[string]bool{}
	for after := seq; ; {
		evs, err := s.store.Events(ctx, sessionID, after, page)
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			switch ev.Type {
			case EventToolCallStarted:
				started[ev.ToolCall.ID] = true
			case EventToolCallFinished:
				finished[ev.ToolCall.ID] = true
			}
		}
		if len(evs) < page {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	if len(started) == 0 && len(finished) == 0 {
		return calls, nil
	}
	out := calls[:0]
	for _, c := range calls {
		switch {
		case started[c.ID]:
			continue
		case finished[c.ID]:
			was := *c
			was.Status, was.Result, was.Error, was.FinishedAt = ToolRunning, nil, nil, nil
			c = &was
		}
		out = append(out, c)
	}
	return out, nil
}

// ToolCalls returns the tool calls of one message of one of the caller's sessions, by
// start time.
func (s *Service) ToolCalls(ctx context.Context, sessionID, messageID string) ([]*ToolCall, error) {
	if _, err := s.session(ctx, sessionID); err != nil {
		return nil, err
	}
	calls, err := s.store.ToolCalls(ctx, []string{messageID})
	if err != nil {
		return nil, err
	}
	// The message is named by its ID alone: only the named session's calls are the
	// caller's to see.
	return slices.DeleteFunc(calls, func(c *ToolCall) bool { return c.SessionID != sessionID }), nil
}
