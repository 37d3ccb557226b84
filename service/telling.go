package service

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// This file is what a write tells its session's user, away from the session itself: the
// events of their viewer log (one stream for all their sessions) and those their webhooks
// are sent. Both are derived from the write's own events, once, when its changes are
// (Batch.Derive), and the store writes them in the same transaction: never after, never
// from a second path. What each kind of session event tells is one row of tellers, and
// each webhook event type one row of hookTypes; a new kind is a new row, not a new case.

// ViewerEventType names a kind of viewer event.
type ViewerEventType string

const (
	// ViewerSessionChanged: a session was created, renamed or changed its settings, status,
	// activity or unread flag; Session and Status are as it is then.
	ViewerSessionChanged ViewerEventType = "SessionChanged"
	// ViewerSessionRemoved: a session was deleted.
	ViewerSessionRemoved ViewerEventType = "SessionRemoved"
	// ViewerRunEnded: a run reached a final status (Run).
	ViewerRunEnded ViewerEventType = "RunEnded"
	// ViewerInputRequested: a run waits on a question (Question) or an approval (ToolCall).
	ViewerInputRequested ViewerEventType = "InputRequested"
)

// ViewerEvent is one entry of a user's viewer log: what one of their sessions did. Its
// payloads are snapshots taken when it was written.
type ViewerEvent struct {
	// UserID is the user whose log it is in; Seq numbers the user's events, 1, 2, 3, …
	// with no gap and in the order their writes committed. The store numbers them.
	UserID string `json:"-"`
	Seq    int64  `json:"-"`

	Type      ViewerEventType `json:"type"`
	At        time.Time       `json:"at"`
	SessionID string          `json:"sessionId"`
	// SessionSeq is the position in the session's log after the session event this one
	// tells of (for SessionChanged: after the write), 0 for none.
	SessionSeq int64         `json:"sessionSeq,omitempty"`
	Session    *TalkSession  `json:"session,omitempty"`
	Status     SessionStatus `json:"status,omitempty"`
	Run        *Run          `json:"run,omitempty"`
	Question   *Question     `json:"question,omitempty"`
	ToolCall   *ToolCall     `json:"toolCall,omitempty"`
}

// Payload returns the event as stores keep it (JSON, without UserID and Seq).
func (e *ViewerEvent) Payload() ([]byte, error) { return json.Marshal(e) }

// DecodeViewerEvent reads an event a store kept with Payload.
func DecodeViewerEvent(userID string, seq int64, payload []byte) (*ViewerEvent, error) {
	e := &ViewerEvent{}
	if err := json.Unmarshal(payload, e); err != nil {
		return nil, err
	}
	e.UserID, e.Seq = userID, seq
	if e.Session != nil {
		e.Session.LastSeq = e.SessionSeq
	}
	return e, nil
}

// HookEvent is one event a user's webhooks are sent: a delivery (an outbox row) is made
// of it for each enabled webhook of the user that takes its Type.
type HookEvent struct {
	// ID is the event's id, the webhook-id of every attempt of every delivery of it: the
	// same whenever the same write is derived again.
	ID     string
	UserID string
	Type   string
	At     time.Time
	// Body is what each delivery posts (see HookBody).
	Body string
}

// HookData is the data of a webhook event: ids and states, never a user's text. Each type
// sets what its row of hookTypes says.
type HookData struct {
	SessionID  string    `json:"sessionId,omitempty"`
	RunID      string    `json:"runId,omitempty"`
	Status     RunStatus `json:"status,omitempty"`
	QuestionID string    `json:"questionId,omitempty"`
	ToolCallID string    `json:"toolCallId,omitempty"`
	// Cursor is the cursor of the session event the webhook tells of:
	// messageStream(after: cursor) reads what came after it.
	Cursor string `json:"cursor,omitempty"`
	// Scope is the cap a budget.reached tells of: "session" or "user".
	Scope string `json:"scope,omitempty"`
	// A schedule.fired tells of one fire of a schedule: which, the instant it was for
	// (RFC 3339) and how it ended (STARTED, SKIPPED or FAILED).
	ScheduleID  string `json:"scheduleId,omitempty"`
	FireID      string `json:"fireId,omitempty"`
	ScheduledAt string `json:"scheduledAt,omitempty"`
	Outcome     string `json:"outcome,omitempty"`
}

// HookBody is the JSON a webhook delivery posts.
type HookBody struct {
	Type      string   `json:"type"`
	Timestamp string   `json:"timestamp"`
	Data      HookData `json:"data"`
}

// hookType is one webhook event type: its name and what it tells.
type hookType struct{ name, doc string }

// hookTypes are the webhook event types a webhook may take.
var hookTypes = []hookType{
	{"session.created", "a session was created (data: sessionId)"},
	{"session.deleted", "a session was deleted (data: sessionId)"},
	{"run.completed", "a run ended COMPLETED (data: sessionId, runId, status, cursor)"},
	{"run.failed", "a run ended FAILED (data: sessionId, runId, status, cursor)"},
	{"run.cancelled", "a run ended CANCELLED (data: sessionId, runId, status, cursor)"},
	{"run.interrupted", "a run ended INTERRUPTED (data: sessionId, runId, status, cursor)"},
	{"input.requested", "a run waits on a question or an approval (data: sessionId, runId, questionId or toolCallId, cursor)"},
	{"input.expired", "a question or an approval expired unanswered (data: sessionId, runId, questionId or toolCallId, cursor)"},
	{"budget.reached", "a run waits because a token budget is reached (data: sessionId, runId, scope, cursor)"},
	{"schedule.fired", "a schedule fired (data: scheduleId, fireId, scheduledAt, outcome; sessionId and runId when it started one)"},
}

// HookTypes returns the names of the webhook event types.
func HookTypes() []string {
	names := make([]string, len(hookTypes))
	for i, t := range hookTypes {
		names[i] = t.name
	}
	return names
}

// knownHookType reports whether name is a webhook event type.
func knownHookType(name string) bool {
	for _, t := range hookTypes {
		if t.name == name {
			return true
		}
	}
	return false
}

// runEndHooks is the webhook event type of each final run status.
var runEndHooks = map[RunStatus]string{
	RunCompleted:   "run.completed",
	RunFailed:      "run.failed",
	RunCancelled:   "run.cancelled",
	RunInterrupted: "run.interrupted",
}

// Mark is what the service knew of a session just before a batch: enough for Derive to
// tell the session's user what the batch changes (Changes.Viewer, Changes.Hooks). The
// service marks every batch it writes but those of chunks alone, which tell nothing.
type Mark struct {
	UserID string
	// Row is the session's row before the batch: the session created, for a creation.
	Row *TalkSession
	// Before and After are the session's status before the batch and once it is written,
	// as the service reckons it from the runs it holds (see statusOf).
	Before, After SessionStatus
	// At is when the batch was made: the time of what has no event of its own (a
	// deletion).
	At time.Time
}

// telling is the derivation of what one batch tells (see tell).
type telling struct {
	b  *Batch
	m  *Mark
	ch *Changes
}

// tellers says what each kind of session event tells its user; kinds it does not list
// tell nothing of their own (a SessionChanged may still follow, see tell).
var tellers = map[EventType]func(t *telling, ev *Event){
	EventRunStatusChanged: func(t *telling, ev *Event) {
		r := ev.Run
		if r != nil && r.Status == RunWaitingForInput && r.Budget != "" {
			t.hook("budget.reached", ev.At, ev.Seq, HookData{RunID: r.ID, Scope: strings.ToLower(string(r.Budget)), Cursor: t.cursor(ev)})
		}
		if r == nil || !r.Status.Final() {
			return
		}
		t.view(&ViewerEvent{Type: ViewerRunEnded, At: ev.At, SessionSeq: ev.Seq, Run: r})
		if typ := runEndHooks[r.Status]; typ != "" {
			t.hook(typ, ev.At, ev.Seq, HookData{RunID: r.ID, Status: r.Status, Cursor: t.cursor(ev)})
		}
	},
	EventQuestionAsked: func(t *telling, ev *Event) {
		if q := ev.Question; q != nil {
			t.view(&ViewerEvent{Type: ViewerInputRequested, At: ev.At, SessionSeq: ev.Seq, Question: q})
			t.hook("input.requested", ev.At, ev.Seq, HookData{RunID: q.RunID, QuestionID: q.ID, Cursor: t.cursor(ev)})
		}
	},
	EventToolApprovalRequested: func(t *telling, ev *Event) {
		if tc := ev.ToolCall; tc != nil {
			t.view(&ViewerEvent{Type: ViewerInputRequested, At: ev.At, SessionSeq: ev.Seq, ToolCall: tc})
			t.hook("input.requested", ev.At, ev.Seq, HookData{RunID: tc.RunID, ToolCallID: tc.ID, Cursor: t.cursor(ev)})
		}
	},
	EventQuestionWithdrawn: func(t *telling, ev *Event) {
		if q := ev.Question; q != nil && q.WithdrawnReason == ReasonExpired {
			t.hook("input.expired", ev.At, ev.Seq, HookData{RunID: q.RunID, QuestionID: q.ID, Cursor: t.cursor(ev)})
		}
	},
	EventToolCallFinished: func(t *telling, ev *Event) {
		tc := ev.ToolCall
		if tc != nil && tc.Status == ToolCancelled && tc.Approval != nil && tc.Approval.Decision == nil && tc.Approval.Reason == ReasonExpired {
			t.hook("input.expired", ev.At, ev.Seq, HookData{RunID: tc.RunID, ToolCallID: tc.ID, Cursor: t.cursor(ev)})
		}
	},
}

// tell derives what b tells its session's user into ch, from b's Mark (nothing without
// one): a deletion tells SessionRemoved; each event what its row of tellers says; and a
// write that creates the session, renames it or changes its settings, its activity (a
// user's message), its status or its unread flag ends with one SessionChanged carrying
// the session as the write leaves it.
func (b *Batch) tell(ch *Changes) {
	m := b.Mark
	if m == nil || m.UserID == "" {
		return
	}
	t := &telling{b: b, m: m, ch: ch}
	if b.Delete {
		t.view(&ViewerEvent{Type: ViewerSessionRemoved, At: m.At})
		t.hook("session.deleted", m.At, 0, HookData{})
		return
	}
	if b.Create != nil {
		t.hook("session.created", b.Create.CreatedAt, 0, HookData{})
	}
	for _, ev := range b.Events {
		if f := tellers[ev.Type]; f != nil {
			f(t, ev)
		}
	}
	row := m.Row
	if row == nil {
		row = b.Create
	}
	if row == nil {
		return
	}
	unreadFlips := ch.Unread != nil && *ch.Unread != row.Unread
	if b.Create == nil && ch.Session == nil && ch.Activity.IsZero() && m.Before == m.After && !unreadFlips {
		return
	}
	after := *row
	ch.ApplySession(&after)
	at := m.At
	if n := len(b.Events); n > 0 {
		after.LastSeq = b.Events[n-1].Seq
		at = b.Events[n-1].At
	}
	t.view(&ViewerEvent{Type: ViewerSessionChanged, At: at, SessionSeq: after.LastSeq, Session: &after, Status: m.After})
}

// view adds a viewer event of the batch's session.
func (t *telling) view(e *ViewerEvent) {
	e.UserID, e.SessionID, e.At = t.m.UserID, t.b.SessionID, e.At.UTC()
	t.ch.Viewer = append(t.ch.Viewer, e)
}

// cursor is the session cursor of ev, as messageStream gives it.
func (t *telling) cursor(ev *Event) string { return EncodeCursor(t.b.SessionID, CursorOf(ev)) }

// hookSpace is the UUID namespace of webhook event IDs.
var hookSpace = uuid.MustParse("6d1f7f0e-5b7e-4f4c-9a55-2f1b1b4b8a10")

// hook adds a webhook event of type typ for the batch's session, told by the session event
// seq (0: the session's creation or deletion). Its ID is derived from what it tells, so
// that the same write always tells the same event.
func (t *telling) hook(typ string, at time.Time, seq int64, data HookData) {
	data.SessionID = t.b.SessionID
	key := t.b.SessionID + "/" + strconv.FormatInt(seq, 10) + "/" + typ + "/" + data.QuestionID + data.ToolCallID + data.RunID
	t.ch.Hooks = append(t.ch.Hooks, newHookEvent(t.m.UserID, typ, at, key, data))
}

// newHookEvent returns user's webhook event of type typ: its ID is derived from key,
// what makes it one event, so that telling it again tells the same event.
func newHookEvent(user, typ string, at time.Time, key string, data HookData) *HookEvent {
	body, _ := json.Marshal(HookBody{Type: typ, Timestamp: at.UTC().Format(time.RFC3339Nano), Data: data}) // strings always marshal
	id := uuid.NewSHA1(hookSpace, []byte(key))
	return &HookEvent{ID: "msg_" + hex.EncodeToString(id[:]), UserID: user, Type: typ, At: at, Body: string(body)}
}

// fireHook is the schedule.fired webhook event of f, a fire of sc whose outcome is known.
// A fire is told once, when its outcome is recorded (FinishFire, in the same write).
func fireHook(sc *Schedule, f *ScheduleFire) *HookEvent {
	at := f.ScheduledAt
	if f.FiredAt != nil {
		at = *f.FiredAt
	}
	data := HookData{SessionID: f.SessionID, RunID: f.RunID, ScheduleID: sc.ID, FireID: f.ID,
		ScheduledAt: f.ScheduledAt.UTC().Format(time.RFC3339Nano), Outcome: string(f.Outcome)}
	return newHookEvent(sc.UserID, "schedule.fired", at, "fire/"+f.ID, data)
}

// statusOf is a session's status with the given active runs (by ID, their status), as a
// view reckons it: waiting while any waits, running while any is queued or running, idle
// otherwise.
func statusOf(active map[string]RunStatus) SessionStatus {
	st := SessionIdle
	for _, s := range active {
		if s == RunWaitingForInput {
			return SessionWaitingForInput
		}
		st = SessionRunning
	}
	return st
}
