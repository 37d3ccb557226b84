package service

import (
	"slices"
	"strings"
	"time"
)

// Changes are the row changes a batch's events imply, as every Store applies them in the
// transaction that appends the events. Each row is a whole snapshot: upsert it by ID with
// all its fields.
type Changes struct {
	// Session is the last SessionUpdated snapshot, and Activity the time of the latest
	// user message (zero for none): see SessionRow for what they make of the session's
	// row.
	Session  *TalkSession
	Activity time.Time
	// Messages, Runs, Questions and ToolCalls hold the last snapshot of each row the events
	// carry, in the order the rows first appear.
	Messages  []*Message
	Runs      []*Run
	Questions []*Question
	ToolCalls []*ToolCall
	// Switches are what the BranchSelected events do to which messages are on the
	// current branch, net: each message they name once, in On when the last switch that
	// names it puts it on the branch and in Off otherwise (within one event, Off before
	// On), each list in the order the messages are first named. A store applies them
	// after upserting Messages (the upserts never change whether a stored message is on
	// the branch), to the messages of the batch's session only; as no message is in both
	// lists, in any order or all at once (see BranchSwitch.Each).
	Switches BranchSwitch
	// EndedRuns are runs that reached a final status: their questions that were never
	// answered are withdrawn (see Withdraws).
	EndedRuns []string
	// Bytes is what the events add to the session's size as its user's quota counts it:
	// what the user wrote (messages, answers) and set (a title, settings).
	Bytes int64
	// Unread is what the events leave of the session's unread flag: set by an assistant
	// message that completed (or failed) and by an input requested, cleared by a
	// SessionRead; nil when they do not touch it. Stores keep it in the session's row.
	Unread *bool

	// Viewer and Hooks are what the batch tells its session's user: the events of their
	// viewer log (numbered by the store, per user, in commit order) and those their
	// webhooks are sent (an outbox row per enabled webhook that takes the type), both
	// written in the transaction that writes the batch. Only a batch that carries a Mark
	// tells anything (see Tell); chunks never do.
	Viewer []*ViewerEvent
	Hooks  []*HookEvent
}

// flag returns a pointer to a new bool b.
func flag(b bool) *bool { return &b }

// Derive returns the row changes of events, appended in this order. It is a pure function
// of the events; chunk events change no row (a streaming message's text and a running tool's
// output live in the log until MessageCompleted or ToolCallFinished carries them whole).
func Derive(events []*Event) Changes {
	var c Changes
	msgs, runs, qs, calls := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	// The last switch of each message, and the messages in the order first named.
	var switched map[string]bool
	var order []string
	for _, ev := range events {
		switch ev.Type {
		case EventMessageAdded, EventMessageCompleted:
			if m := ev.Message; m != nil {
				c.Messages = upsertRow(c.Messages, msgs, m.ID, m)
				if ev.Type == EventMessageAdded && m.Role == RoleUser {
					c.Activity = ev.At
					c.Bytes += int64(len(m.Content))
				}
				if ev.Type == EventMessageCompleted && m.Role == RoleAssistant && (m.Status == MessageComplete || m.Status == MessageFailed) {
					c.Unread = flag(true)
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
		case EventQuestionAsked, EventQuestionAnswered, EventQuestionWithdrawn:
			if q := ev.Question; q != nil {
				c.Questions = upsertRow(c.Questions, qs, q.ID, q)
			}
			if ev.Type == EventQuestionAsked && ev.Question != nil {
				c.Unread = flag(true)
			}
		case EventToolCallStarted, EventToolCallFinished, EventToolApprovalRequested, EventToolApprovalDecided:
			if tc := ev.ToolCall; tc != nil {
				c.ToolCalls = upsertRow(c.ToolCalls, calls, tc.ID, tc)
			}
			if ev.Type == EventToolApprovalRequested && ev.ToolCall != nil {
				c.Unread = flag(true)
			}
		case EventSessionRead:
			c.Unread = flag(false)
		case EventBranchSelected:
			if b := ev.Branch; b != nil {
				if switched == nil {
					switched = map[string]bool{}
				}
				b.Each(func(id string, on bool) {
					if _, ok := switched[id]; !ok {
						order = append(order, id)
					}
					switched[id] = on
				})
			}
		case EventSessionUpdated:
			if ev.Session != nil {
				c.Session = ev.Session
				c.Bytes += ev.Session.Size()
			}
		}
	}
	for _, id := range order {
		if switched[id] {
			c.Switches.On = append(c.Switches.On, id)
		} else {
			c.Switches.Off = append(c.Switches.Off, id)
		}
	}
	return c
}

// Each calls f for each message b names, with on true where it joins the current branch
// and false where it leaves it: those of Off, then those of On. Applied in this order, the
// calls are b's effect, for an event's switch and for the net one of Changes.Switches
// alike; the SQL stores write the latter as statements instead, since its lists are
// disjoint.
func (b *BranchSwitch) Each(f func(id string, on bool)) {
	for _, id := range b.Off {
		f(id, false)
	}
	for _, id := range b.On {
		f(id, true)
	}
}

// OnBranch returns the messages of c.Messages that are on the current branch once the
// events are applied, in the order of c.Messages, as a store keeps them: each as its
// snapshot says (Message.OffBranch), then as c.Switches move it. It is for the events of
// a whole log, whose messages are all in c.Messages. It filters c.Messages in place: c's
// Messages are not to be read afterwards.
func (c *Changes) OnBranch() []*Message {
	if len(c.Switches.Off) == 0 && len(c.Switches.On) == 0 {
		return slices.DeleteFunc(c.Messages, func(m *Message) bool { return m.OffBranch })
	}
	on := make(map[string]bool, len(c.Messages))
	for _, m := range c.Messages {
		on[m.ID] = !m.OffBranch
	}
	c.Switches.Each(func(id string, joins bool) { on[id] = joins })
	return slices.DeleteFunc(c.Messages, func(m *Message) bool { return !on[m.ID] })
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

// SessionRow says how the events change their session's row, as every store and the
// service's copy of the row apply it: the snapshot of the last SessionUpdated (its title,
// settings and UpdatedAt) when there is one; otherwise, when touch is not zero, only
// UpdatedAt moves to touch, the time of the latest user message. Both nil and zero: the
// row does not change.
func (c *Changes) SessionRow() (snapshot *TalkSession, touch time.Time) {
	if c.Session != nil {
		return c.Session, time.Time{}
	}
	return nil, c.Activity
}

// ApplySession changes sess as SessionRow says, keeping its ID, owner, creation time and
// LastSeq, and its unread flag as Unread says; it reports whether anything changed.
func (c *Changes) ApplySession(sess *TalkSession) bool {
	changed := false
	if c.Unread != nil && sess.Unread != *c.Unread {
		sess.Unread, changed = *c.Unread, true
	}
	snap, touch := c.SessionRow()
	switch {
	case snap != nil:
		sess.Title, sess.Settings, sess.UpdatedAt = snap.Title, snap.Settings, snap.UpdatedAt
		return true
	case !touch.IsZero():
		sess.UpdatedAt = touch
		return true
	}
	return changed
}

// Withdraws reports whether the events withdraw q, a question of their session as it
// stands before them or among them: one never answered whose run reached a final status.
// Stores that keep questions in SQL withdraw them with one statement per ended run
// (EndedRuns) that says the same.
func (c *Changes) Withdraws(q *Question) bool {
	if q.Answer != nil || q.Withdrawn {
		return false
	}
	for _, id := range c.EndedRuns {
		if q.RunID == id {
			return true
		}
	}
	return false
}
