package service

import (
	"fmt"
	"strings"
	"time"
)

// Changes are the row changes a batch's events imply, as every Store applies them in the
// transaction that appends the events. Each row is a whole snapshot: upsert it by ID with
// all its fields.
type Changes struct {
	// Session is the last SessionUpdated snapshot: the session's title, settings and
	// UpdatedAt take its values.
	Session *TalkSession
	// Activity, when not zero, is the time of the latest user message or answer: the
	// session's UpdatedAt moves to it (unless Session sets it).
	Activity time.Time
	// Messages, Runs, Questions and ToolCalls hold the last snapshot of each row the events
	// carry, in the order the rows first appear.
	Messages  []*Message
	Runs      []*Run
	Questions []*Question
	ToolCalls []*ToolCall
	// EndedRuns are runs that reached a final status: their questions that were never
	// answered are withdrawn.
	EndedRuns []string
	// Bytes is what the events add to the session's size as its user's quota counts it:
	// what the user wrote (messages, answers) and set (a title, settings).
	Bytes int64
}

// Derive returns the row changes of events, appended in this order. It is a pure function
// of the events; chunk events change no row (a streaming message's text and a running tool's
// output live in the log until MessageCompleted or ToolCallFinished carries them whole).
func Derive(events []*Event) Changes {
	var c Changes
	msgs, runs, qs, calls := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, ev := range events {
		switch ev.Type {
		case EventMessageAdded, EventMessageCompleted:
			if m := ev.Message; m != nil {
				c.Messages = upsertRow(c.Messages, msgs, m.ID, m)
				if ev.Type == EventMessageAdded && m.Role == RoleUser {
					c.Activity = ev.At
					c.Bytes += int64(len(m.Content))
				}
			}
		case EventRunStatusChanged:
			if r := ev.Run; r != nil {
				c.Runs = upsertRow(c.Runs, runs, r.ID, r)
				if r.Status.Final() {
					c.EndedRuns = append(c.EndedRuns, r.ID)
				}
			}
			// A run that stops waiting without an answer carries the question it withdraws.
			if q := ev.Question; q != nil {
				c.Questions = upsertRow(c.Questions, qs, q.ID, q)
			}
		case EventQuestionAsked, EventQuestionAnswered:
			if q := ev.Question; q != nil {
				c.Questions = upsertRow(c.Questions, qs, q.ID, q)
			}
		case EventToolCallStarted, EventToolCallFinished:
			if tc := ev.ToolCall; tc != nil {
				c.ToolCalls = upsertRow(c.ToolCalls, calls, tc.ID, tc)
			}
		case EventSessionUpdated:
			if ev.Session != nil {
				c.Session = ev.Session
				c.Bytes += ev.Session.Size()
			}
		}
	}
	return c
}

// upsertRow puts row at the place of the row with the same id, or at the end.
func upsertRow[T any](rows []*T, index map[string]int, id string, row *T) []*T {
	if i, ok := index[id]; ok {
		rows[i] = row
		return rows
	}
	index[id] = len(rows)
	return append(rows, row)
}

// Coalesce folds the chunk events of one stream (Key == key) among events, which are a
// slice of one session's log in Seq order: each unbroken run of two or more of them (no
// other event between) becomes one event at the Seq of its last, carrying all their text
// from the Offset of its first, with CoalescedFrom the Seq of its first (or the first's own
// CoalescedFrom when it was folded before). It returns the folded events and the Seqs of
// the events they replace, which are to be dropped. A reader whose cursor falls inside a
// folded run is given just the text after it (see the service's log).
func Coalesce(events []*Event, key string) (folded []*Event, drop []int64) {
	var group []*Event
	flush := func() {
		if len(group) > 1 {
			first, last := group[0], group[len(group)-1]
			merged := *last
			merged.Offset = first.Offset
			var text strings.Builder
			for _, g := range group {
				text.WriteString(g.Delta)
			}
			merged.Delta = text.String()
			merged.CoalescedFrom = first.Seq
			if first.CoalescedFrom > 0 {
				merged.CoalescedFrom = first.CoalescedFrom
			}
			folded = append(folded, &merged)
			for _, g := range group[:len(group)-1] {
				drop = append(drop, g.Seq)
			}
		}
		group = group[:0]
	}
	for _, ev := range events {
		if ev.Type.Chunky() && ev.Key == key {
			group = append(group, ev)
			continue
		}
		flush()
	}
	flush()
	return folded, drop
}

// Check reports what is wrong with b on its face, without the stored state: a missing
// session ID, a creation of another session, a deletion that writes anything else, events
// of another session or with Seqs that are not consecutive, an idempotency record of
// another session or without a user or key. Such mistakes are the caller's bugs; every
// Store checks them before it writes anything.
func (b *Batch) Check() error {
	if b == nil {
		return fmt.Errorf("batch: nil batch")
	}
	if b.SessionID == "" {
		return fmt.Errorf("batch: batch without a session ID")
	}
	if b.Delete {
		if b.Create != nil || len(b.Events) > 0 || b.Idempotency != nil || b.Admit != nil {
			return fmt.Errorf("batch: a batch that deletes session %s must write nothing else", b.SessionID)
		}
		return nil
	}
	if b.Create != nil && b.Create.ID != b.SessionID {
		return fmt.Errorf("batch: creation of session %q in a batch for session %s", b.Create.ID, b.SessionID)
	}
	for i, e := range b.Events {
		if e == nil {
			return fmt.Errorf("batch: nil event")
		}
		if e.SessionID != "" && e.SessionID != b.SessionID {
			return fmt.Errorf("batch: event of session %s in a batch for session %s", e.SessionID, b.SessionID)
		}
		if e.Seq < 1 || (i > 0 && e.Seq != b.Events[i-1].Seq+1) {
			return fmt.Errorf("batch: event sequence numbers must be consecutive and positive (event %d has %d)", i, e.Seq)
		}
	}
	if b.Create != nil && len(b.Events) > 0 && b.Events[0].Seq != 1 {
		return fmt.Errorf("batch: the log of a new session starts at 1, not %d", b.Events[0].Seq)
	}
	if r := b.Idempotency; r != nil {
		if r.UserID == "" || r.Key == "" {
			return fmt.Errorf("batch: idempotency record without a user or key")
		}
		if r.SessionID != b.SessionID {
			return fmt.Errorf("batch: idempotency record of session %s in a batch for session %s", r.SessionID, b.SessionID)
		}
	}
	if b.Create == nil && len(b.Events) == 0 && b.Idempotency != nil {
		return fmt.Errorf("batch: an idempotency record without events")
	}
	if a := b.Admit; a != nil && (a.UserID == "" || a.RunID == "" || a.Limit < 1) {
		return fmt.Errorf("batch: an admission needs a user, a run and a limit ≥ 1")
	}
	ch := Derive(b.Events)
	rows := make([][2]string, 0, len(ch.Messages)+len(ch.Runs)+len(ch.Questions)+len(ch.ToolCalls))
	for _, m := range ch.Messages {
		rows = append(rows, [2]string{m.ID, m.SessionID})
	}
	for _, r := range ch.Runs {
		rows = append(rows, [2]string{r.ID, r.SessionID})
	}
	for _, q := range ch.Questions {
		rows = append(rows, [2]string{q.ID, q.SessionID})
	}
	for _, tc := range ch.ToolCalls {
		rows = append(rows, [2]string{tc.ID, tc.SessionID})
	}
	for _, r := range rows {
		if r[0] == "" {
			return fmt.Errorf("batch: a row without an ID")
		}
		if r[1] != b.SessionID {
			return fmt.Errorf("batch: row %s of session %q in a batch for session %s", r[0], r[1], b.SessionID)
		}
	}
	return nil
}

// Empty reports whether the batch writes nothing.
func (b *Batch) Empty() bool {
	return b.Create == nil && !b.Delete && len(b.Events) == 0 && b.Idempotency == nil && b.Admit == nil
}

// PrevSeq is the Seq the batch's events follow (0 for a batch without events).
func (b *Batch) PrevSeq() int64 {
	if len(b.Events) == 0 {
		return 0
	}
	return b.Events[0].Seq - 1
}
