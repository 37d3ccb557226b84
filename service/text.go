package service

import (
	"strings"
	"unicode/utf8"
)

// This file is the one place where what an agent streams becomes events of the log: a
// message's text (Output.Text) and a tool's output (ToolHandle.Output) wait in a
// textStream until a write takes them, as one chunk event each, and a stream's end
// (MessageCompleted, ToolCallFinished) carries its whole text.

// textStream is text an agent streams (a message's text or a tool's output): what is
// durable, what a write has taken and is writing, and what waits to be taken. The
// pending text is a byte slice used again after each take: a model's pieces arrive a few
// words at a time, many times between two writes, and a builder started anew each time
// grew by several allocations for every write.
type textStream struct {
	written  strings.Builder
	inflight string
	pending  []byte
	wlen     int // code points written
	length   int // code points in all
	bytes    int // bytes in all
}

func (t *textStream) add(delta string) {
	t.pending = append(t.pending, delta...)
	t.length += utf8.RuneCountInString(delta)
	t.bytes += len(delta)
}

// take moves the pending text in flight and returns it with its offset in code points; ok
// is false when nothing was pending. The caller then calls commit or abort.
func (t *textStream) take() (delta string, offset int, ok bool) {
	if len(t.pending) == 0 {
		return "", 0, false
	}
	t.inflight = string(t.pending)
	t.pending = t.pending[:0]
	return t.inflight, t.wlen, true
}

// commit makes the text in flight written.
func (t *textStream) commit() {
	t.written.WriteString(t.inflight)
	t.wlen += utf8.RuneCountInString(t.inflight)
	t.inflight = ""
}

// abort puts the text in flight back before the pending text.
func (t *textStream) abort() {
	if t.inflight == "" {
		return
	}
	t.pending = append([]byte(t.inflight), t.pending...)
	t.inflight = ""
}

// all returns every character streamed so far, written or not.
func (t *textStream) all() string {
	return t.written.String() + t.inflight + string(t.pending)
}

// restore makes t, empty, hold text that is already durable. (In place: a strings.Builder
// that holds text must not be copied.)
func (t *textStream) restore(text string) {
	t.written.WriteString(text)
	t.wlen = utf8.RuneCountInString(text)
	t.length, t.bytes = t.wlen, len(text)
}

// chunk adds to t a chunk event of type typ (MessageChunk or ToolCallOutput) with the
// stream's pending text, if any; the text is written with t, or put back when t fails.
// key and messageID are the event's: the message's ID twice, or the tool call's ID and
// its message's.
func (t *txn) chunk(text *textStream, typ EventType, key string, messageID string) {
	delta, off, ok := text.take()
	if !ok {
		return
	}
	t.add(&Event{Type: typ, Key: key, MessageID: messageID, Delta: delta, Offset: off})
	t.onCommit(text.commit)
	t.onAbort(text.abort)
}

// announceLocked adds the MessageAdded of ar's current message to t unless it is durable, and
// returns the message's Seq.
func (ar *activeRun) announceLocked(t *txn) int64 {
	if ar.msg == nil {
		return 0
	}
	if ar.announced {
		return ar.msg.Seq
	}
	m := *ar.msg
	t.add(&Event{Type: EventMessageAdded, Message: &m})
	msg := ar.msg
	t.onCommit(func() {
		msg.Seq, msg.ParentID = m.Seq, m.ParentID
		ar.announced, ar.replied = ar.msg == msg, true
	})
	return m.Seq
}

// writeTextLocked adds to t everything ar streamed that is not written yet: its current
// message's text, announcing the message first if need be, then the output of its
// running tools.
func (ar *activeRun) writeTextLocked(t *txn) {
	if ar.msg != nil && len(ar.text.pending) > 0 {
		ar.announceLocked(t)
		t.chunk(&ar.text, EventMessageChunk, ar.msg.ID, ar.msg.ID)
	}
	for _, tool := range ar.tools {
		if tool.call.Status == ToolRunning {
			t.chunk(&tool.out, EventToolCallOutput, tool.call.ID, tool.call.MessageID)
		}
	}
}

// takeTextLocked takes the streamed text of st's run that waits to be written into a
// write for the writer's round; nil when there is none. st.mu must be held.
func (st *sessionState) takeTextLocked() *txn {
	ar := st.active
	if ar == nil || ar.sealed || ar.parked {
		return nil
	}
	t := st.beginLocked()
	ar.writeTextLocked(t)
	if len(t.b.Events) == 0 {
		return nil
	}
	return t
}

// completeMessageLocked adds to t the rest of ar's current message and its completion.
func (ar *activeRun) completeMessageLocked(t *txn, status MessageStatus, errMsg string) {
	m := ar.msg
	seq := ar.announceLocked(t)
	t.chunk(&ar.text, EventMessageChunk, m.ID, m.ID)
	done := *m
	done.Seq, done.Content, done.Status = seq, ar.text.all(), status
	if ev, ok := t.added(m.ID); ok { // announced in this very write
		done.ParentID = ev.ParentID
	}
	if status == MessageFailed {
		done.Error = errMsg
	}
	t.add(&Event{Type: EventMessageCompleted, Message: &done})
	t.onCommit(func() {
		ar.st.compactSoonLocked(m.ID, seq+1)
		if ar.msg == m {
			ar.msg, ar.announced, ar.text = nil, false, textStream{}
		}
	})
}

// finishTool adds to t the rest of a tool call's output and its end.
func (t *txn) finishTool(tool *toolState, status ToolCallStatus, result *string, errMsg *string) {
	s := t.st.c
	t.chunk(&tool.out, EventToolCallOutput, tool.call.ID, tool.call.MessageID)
	snap := *tool.call
	now := s.now()
	snap.Status, snap.Result, snap.Error, snap.FinishedAt = status, result, errMsg, &now
	snap.Output = tool.out.all()
	cp := snap
	t.add(&Event{Type: EventToolCallFinished, ToolCall: &cp})
	st := t.st
	t.onCommit(func() {
		*tool.call = snap
		st.compactSoonLocked(snap.ID, tool.fromSeq)
	})
}
