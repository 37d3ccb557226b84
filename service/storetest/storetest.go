// Package storetest checks that a service.Store keeps the contract written on the
// interface. Every Store implementation runs it from its own tests:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) service.Store { return inmem.New() })
//	}
//
// Each subtest is named after the sentence of the contract it checks.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// Run runs the conformance suite. open must return a new, empty Store for each subtest
// and arrange (with t.Cleanup) for it to be closed.
func Run(t *testing.T, open func(t *testing.T) service.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s service.Store)
	}{
		{"Append/writes each batch whole", testAppendWhole},
		{"Append/ENOTFOUND for a batch to a missing session", testAppendMissingSession},
		{"Append/ECONFLICT for events that do not follow the stored log", testAppendContinuity},
		{"Append/ECONFLICT for a used idempotency key, writing nothing", testAppendIdempotencyTaken},
		{"Append/ECONFLICT for creating a session that exists", testAppendCreateTwice},
		{"Append/EINVALID for a malformed batch", testAppendMalformed},
		{"Append/batches fail alone", testAppendFailAlone},
		{"Append/never changes the batches", testAppendLeavesBatches},
		{"Append/rows change as Derive says", testAppendDerives},
		{"Append/an ended run withdraws its unanswered questions", testAppendWithdraws},
		{"Append/user messages move the session's activity time", testAppendActivity},
		{"Append/deletes a session with everything in it", testAppendDelete},
		{"Append/ERATELIMIT for an admission beyond the user's running runs, writing nothing", testAppendAdmit},
		{"Append/safe for concurrent use across sessions", testAppendConcurrent},
		{"Compact/folds unbroken runs of one stream's chunks", testCompact},
		{"Compact/folds many sessions at once, skipping a missing one", testCompactMany},
		{"Compact/writes a prepared folding, or folds what it reads when a run is not whole", testCompactPrepared},
		{"Session/ENOTFOUND when missing", testSessionNotFound},
		{"Session/round-trips every field, LastSeq from the log", testSessionRoundTrip},
		{"Sessions/most recent activity first with keyset pagination", testSessions},
		{"Messages/empty for a session with no messages", testMessagesEmpty},
		{"Messages/After and Before bound, First and Last take from either end", testMessagesPage},
		{"Message/ENOTFOUND when missing", testMessageNotFound},
		{"Run/ENOTFOUND when missing", testRunNotFound},
		{"RunsByStatus/oldest first across sessions", testRunsByStatus},
		{"Question/ENOTFOUND when missing", testQuestionNotFound},
		{"Questions/those that exist", testQuestions},
		{"ToolCalls/by start time then ID", testToolCalls},
		{"ToolCall/one by ID; ENOTFOUND when missing", testToolCall},
		{"Inputs/a question's choices, form, expiry and withdrawal, and a call's approval, round-trip", testInputsRoundTrip},
		{"Events/after a Seq, by Seq, up to a limit", testEvents},
		{"Events/payloads round-trip", testEventPayloads},
		{"Idempotency/ENOTFOUND when none", testIdempotencyNotFound},
		{"Rows are copies the caller may change", testCopies},
		{"Times come back in UTC to the nanosecond", testTimes},
		{"Ping/nil while the store can be written", testPing},
		{"Footprint/a user's sessions and what they weigh", testFootprint},
	}
	tests = append(tests, treeTests...)
	tests = append(tests, shareTests...)
	tests = append(tests, threadTests...)
	tests = append(tests, budgetTests...)
	tests = append(tests, scheduleTests...)
	tests = append(tests, userTests...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

// t0 is a time with nanoseconds and a zone other than UTC, to see that Stores keep both
// the instant and the precision, and answer in UTC.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 891234567, time.FixedZone("X", 3600))

func at(d time.Duration) time.Time { return t0.Add(d) }

func ptr[T any](v T) *T { return &v }

func newSession(id, userID string, updatedAt time.Time) *service.TalkSession {
	return &service.TalkSession{
		ID:     id,
		UserID: userID,
		Title:  "talk " + id,
		Settings: service.Settings{
			Agent:        "demo",
			Model:        ptr("model-" + id),
			SystemPrompt: ptr("Be brief."),
			Temperature:  ptr(0.25),
			BusyPolicy:   service.BusyEnqueue,
		},
		CreatedAt: t0,
		UpdatedAt: updatedAt,
	}
}

func newMessage(id, sessionID string) *service.Message {
	return &service.Message{
		ID:        id,
		SessionID: sessionID,
		Role:      service.RoleAssistant,
		Kind:      service.KindText,
		Content:   "content of " + id + " ✓",
		Status:    service.MessageComplete,
		RunID:     "r1",
		CreatedAt: at(time.Second),
	}
}

func newRun(id, sessionID string, status service.RunStatus, createdAt time.Time) *service.Run {
	return &service.Run{
		ID:        id,
		SessionID: sessionID,
		UserID:    "u1",
		Status:    status,
		Agent:     "demo",
		CreatedAt: createdAt,
		StartedAt: ptr(createdAt.Add(time.Millisecond)),
	}
}

func newQuestion(id, sessionID, runID string) *service.Question {
	return &service.Question{
		ID:        id,
		RunID:     runID,
		SessionID: sessionID,
		Prompt:    "Which one?",
		Choices:   []string{"this", "that"},
		AskedAt:   at(time.Minute),
	}
}

func newToolCall(id, sessionID, messageID string, startedAt time.Time) *service.ToolCall {
	return &service.ToolCall{
		ID:        id,
		CallID:    "call_" + id,
		RunID:     "r1",
		SessionID: sessionID,
		MessageID: messageID,
		Name:      "search",
		Arguments: `{"q":"go"}`,
		Status:    service.ToolRunning,
		StartedAt: startedAt,
	}
}

// Event builders: the payload is a copy, as the service hands over snapshots.
func added(m *service.Message) *service.Event {
	c := *m
	return &service.Event{Type: service.EventMessageAdded, At: t0, Message: &c}
}

func completed(m *service.Message) *service.Event {
	c := *m
	return &service.Event{Type: service.EventMessageCompleted, At: t0, Message: &c}
}

func runChanged(r *service.Run) *service.Event {
	c := *r
	return &service.Event{Type: service.EventRunStatusChanged, At: t0, Run: &c}
}

func asked(q *service.Question) *service.Event {
	c := *q
	return &service.Event{Type: service.EventQuestionAsked, At: t0, Question: &c}
}

func answered(q *service.Question) *service.Event {
	c := *q
	return &service.Event{Type: service.EventQuestionAnswered, At: t0, Question: &c}
}

func toolStarted(tc *service.ToolCall) *service.Event {
	c := *tc
	return &service.Event{Type: service.EventToolCallStarted, At: t0, ToolCall: &c}
}

func toolFinished(tc *service.ToolCall) *service.Event {
	c := *tc
	return &service.Event{Type: service.EventToolCallFinished, At: t0, ToolCall: &c}
}

func chunk(key, delta string, offset int) *service.Event {
	return &service.Event{Type: service.EventMessageChunk, At: t0, Key: key, MessageID: key, Delta: delta, Offset: offset}
}

func toolOutput(tc *service.ToolCall, delta string, offset int) *service.Event {
	return &service.Event{Type: service.EventToolCallOutput, At: t0, Key: tc.ID, MessageID: tc.MessageID, Delta: delta, Offset: offset}
}

// log writes one session's log the way the service does: it numbers events after the
// last it wrote.
type log struct {
	t    testing.TB
	s    service.Store
	id   string
	last int64
}

// create creates a session and returns its log.
func create(t testing.TB, s service.Store, sess *service.TalkSession) *log {
	t.Helper()
	mustAppend(t, s, &service.Batch{SessionID: sess.ID, Create: sess})
	return &log{t: t, s: s, id: sess.ID}
}

// batch numbers evs after the log's end and returns them in a batch, without writing.
func (l *log) batch(evs ...*service.Event) *service.Batch {
	for i, e := range evs {
		e.Seq = l.last + 1 + int64(i)
		if e.Type == service.EventMessageAdded && e.Message != nil {
			e.Message.Seq = e.Seq
		}
	}
	return &service.Batch{SessionID: l.id, Events: evs}
}

// append writes evs and moves the log's end past them.
func (l *log) append(evs ...*service.Event) {
	l.t.Helper()
	mustAppend(l.t, l.s, l.batch(evs...))
	l.last += int64(len(evs))
}

func mustAppend(t testing.TB, s service.Store, bs ...*service.Batch) {
	t.Helper()
	for i, err := range s.Append(context.Background(), bs) {
		if err != nil {
			t.Fatalf("Append: batch %d (session %s): %v", i, bs[i].SessionID, err)
		}
	}
}

func appendOne(s service.Store, b *service.Batch) error {
	return s.Append(context.Background(), []*service.Batch{b})[0]
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := service.ErrorCode(err); got != code {
		t.Errorf("%s: error %v, code %q; want code %q", what, err, got, code)
	}
}

func dump(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

func wantEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\ngot  %s\nwant %s", what, dump(got), dump(want))
	}
}

func seqsOf(events []*service.Event) []int64 {
	out := []int64{}
	for _, e := range events {
		out = append(out, e.Seq)
	}
	return out
}

func idsOf[T any](rows []*T, id func(*T) string) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, id(r))
	}
	return out
}

func messageIDs(ms []*service.Message) []string {
	return idsOf(ms, func(m *service.Message) string { return m.ID })
}

func sessionIDs(ss []*service.TalkSession) []string {
	return idsOf(ss, func(s *service.TalkSession) string { return s.ID })
}

// utcSession returns the row as a Store gives it back: times in UTC, no monotonic reading.
func utcSession(s *service.TalkSession, lastSeq int64) *service.TalkSession {
	c := *s
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	c.LastSeq = lastSeq
	return &c
}

func utcMessage(m *service.Message) *service.Message {
	c := *m
	c.CreatedAt = c.CreatedAt.UTC()
	return &c
}

func utcRun(r *service.Run) *service.Run {
	c := *r
	c.CreatedAt = c.CreatedAt.UTC()
	if r.StartedAt != nil {
		c.StartedAt = ptr(r.StartedAt.UTC())
	}
	if r.FinishedAt != nil {
		c.FinishedAt = ptr(r.FinishedAt.UTC())
	}
	return &c
}

func utcQuestion(q *service.Question) *service.Question {
	c := *q
	c.AskedAt = c.AskedAt.UTC()
	if q.AnsweredAt != nil {
		c.AnsweredAt = ptr(q.AnsweredAt.UTC())
	}
	if q.ExpiresAt != nil {
		c.ExpiresAt = ptr(q.ExpiresAt.UTC())
	}
	return &c
}

func utcToolCall(tc *service.ToolCall) *service.ToolCall {
	c := *tc
	c.StartedAt = c.StartedAt.UTC()
	if tc.FinishedAt != nil {
		c.FinishedAt = ptr(tc.FinishedAt.UTC())
	}
	if a := tc.Approval; a != nil {
		ca := *a
		ca.ExpiresAt = a.ExpiresAt.UTC()
		if a.DecidedAt != nil {
			ca.DecidedAt = ptr(a.DecidedAt.UTC())
		}
		c.Approval = &ca
	}
	return &c
}

func testPing(t *testing.T, s service.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}
