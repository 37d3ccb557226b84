// Package storetest checks that a service.Store keeps the contract written on the
// interface. Every Store implementation runs it from its own tests:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) service.Store { return inmem.New() })
//	}
//
// Each subtest is named after the sentence of the contract it checks. Besides the sentences
// of service.Store, the suite pins down the points the contract leaves open, so that every
// Store answers the same (see the subtests under "Resolved"):
//
//   - Times come back in UTC, to the nanosecond, without a monotonic clock reading.
//   - An event's Seq may be left 0 (the Store assigns it and writes it back into the
//     caller's Event) or set by the caller, in which case it must be the session's next
//     one or Apply returns ECONFLICT.
//   - The Store owns a session's LastSeq: the LastSeq of a Session in a batch is ignored.
//   - A Message with Seq 0 takes the Seq of its MessageAdded event in the same batch, or
//     keeps the one stored.
//   - A batch with Delete must write nothing else; a Rewrite of a Seq beyond LastSeq is
//     an error (and writes nothing).
//   - MessagePage's After and Before both bound the page whenever set; Last wins over
//     First. A limit of 0 or less means no limit.
//   - Rows with equal times are ordered by ID (RunsByStatus, ToolCalls).
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
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
		{"Session/ENOTFOUND when missing", testSessionNotFound},
		{"Session/round-trips every field", testSessionRoundTrip},
		{"Apply/ENOTFOUND for writes to a missing session", testApplyMissingSession},
		{"Apply/assigns consecutive Seq per session", testApplySeq},
		{"Apply/sets the session's LastSeq to the last one", testApplyLastSeq},
		{"Apply/all or nothing", testApplyAllOrNothing},
		{"Apply/upserts rows by ID with all their fields", testApplyUpsert},
		{"Apply/an empty batch writes nothing", testApplyEmpty},
		{"Apply/safe for concurrent use across sessions", testApplyConcurrent},
		{"Idempotency/ECONFLICT when (UserID, Key) already exists", testIdempotency},
		{"Idempotency/ENOTFOUND when none", testIdempotencyNotFound},
		{"Sessions/most recent activity first with keyset pagination", testSessions},
		{"Messages/empty for a session with no messages", testMessagesEmpty},
		{"Messages/first after, last before", testMessagesPage},
		{"Message/ENOTFOUND when missing", testMessageNotFound},
		{"Run/ENOTFOUND when missing", testRunNotFound},
		{"RunsByStatus", testRunsByStatus},
		{"Question/ENOTFOUND when missing", testQuestionNotFound},
		{"Question/round-trips choices and answer", testQuestionRoundTrip},
		{"ToolCalls by message", testToolCalls},
		{"Events/after seq with limit", testEvents},
		{"Events/payloads round-trip", testEventPayloads},
		{"Rewrite and DropEvents", testRewrite},
		{"Delete removes everything", testDelete},
		{"returned rows are copies", testCopies},
		{"Ping/nil while the store can be written", testPing},
		{"Resolved/caller-set Seq must be the next one", testCallerSeq},
		{"Resolved/the Store owns LastSeq", testOwnsLastSeq},
		{"Resolved/message Seq from its MessageAdded event", testMessageSeq},
		{"Resolved/Delete writes nothing else", testDeleteAlone},
		{"Resolved/limit 0 means no limit", testNoLimit},
		{"Resolved/times in UTC to the nanosecond", testTimes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

// t0 has nanoseconds, to check they survive.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

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

func newMessage(id, sessionID string, seq int64) *service.Message {
	return &service.Message{
		ID:        id,
		SessionID: sessionID,
		Seq:       seq,
		Role:      service.RoleAssistant,
		Kind:      service.KindText,
		Content:   "content of " + id + " ✓",
		Status:    service.MessageStreaming,
		RunID:     "run-" + id,
		CreatedAt: at(time.Duration(seq) * time.Second),
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

func newQuestion(id, sessionID string) *service.Question {
	return &service.Question{
		ID:        id,
		RunID:     "r1",
		SessionID: sessionID,
		Prompt:    "Which one?",
		Choices:   []string{"this", "that"},
		AskedAt:   at(time.Minute),
	}
}

func newToolCall(id, sessionID, messageID string, startedAt time.Time) *service.ToolCall {
	return &service.ToolCall{
		ID:        id,
		RunID:     "r1",
		SessionID: sessionID,
		MessageID: messageID,
		Name:      "search",
		Arguments: `{"q":"go"}`,
		Output:    "searching…",
		Status:    service.ToolRunning,
		StartedAt: startedAt,
	}
}

func chunk(messageID, delta string, offset int) *service.Event {
	return &service.Event{Type: service.EventMessageChunk, At: t0, Key: messageID, Delta: delta, Offset: offset}
}

func mustApply(t *testing.T, s service.Store, b *service.Batch) {
	t.Helper()
	if err := s.Apply(t.Context(), b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// create stores new sessions with no other rows.
func create(t *testing.T, s service.Store, sessions ...*service.TalkSession) {
	t.Helper()
	for _, ss := range sessions {
		mustApply(t, s, &service.Batch{SessionID: ss.ID, Session: ss})
	}
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

func testSessionNotFound(t *testing.T, s service.Store) {
	_, err := s.Session(t.Context(), "missing")
	wantCode(t, "Session(missing)", err, service.ENOTFOUND)
}

func testSessionRoundTrip(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", at(time.Hour)))
	got, err := s.Session(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "Session", got, newSession("s1", "u1", at(time.Hour)))

	// Nil settings stay nil.
	bare := &service.TalkSession{ID: "s2", UserID: "u1", CreatedAt: t0, UpdatedAt: t0}
	create(t, s, bare)
	got, err = s.Session(t.Context(), "s2")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "Session with default settings", got,
		&service.TalkSession{ID: "s2", UserID: "u1", CreatedAt: t0, UpdatedAt: t0})
}

func testApplyMissingSession(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	mustApply(t, s, &service.Batch{SessionID: "s1", Events: []*service.Event{chunk("m", "a", 0)}})
	tests := []struct {
		name string
		b    *service.Batch
	}{
		{"message", &service.Batch{SessionID: "x", Messages: []*service.Message{newMessage("m1", "x", 1)}}},
		{"run", &service.Batch{SessionID: "x", Runs: []*service.Run{newRun("r1", "x", service.RunQueued, t0)}}},
		{"question", &service.Batch{SessionID: "x", Questions: []*service.Question{newQuestion("q1", "x")}}},
		{"tool call", &service.Batch{SessionID: "x", ToolCalls: []*service.ToolCall{newToolCall("t1", "x", "m1", t0)}}},
		{"event", &service.Batch{SessionID: "x", Events: []*service.Event{chunk("m1", "a", 0)}}},
		{"idempotency", &service.Batch{SessionID: "x", Idempotency: &service.IdempotencyRecord{
			UserID: "u1", Key: "k", SessionID: "x", MessageID: "m1", RunID: "r1", CreatedAt: t0}}},
		{"rewrite", &service.Batch{SessionID: "x", Rewrite: []*service.Event{{Seq: 1, Type: service.EventMessageChunk}}}},
		{"drop events", &service.Batch{SessionID: "x", DropEvents: []int64{1}}},
		{"delete", &service.Batch{SessionID: "x", Delete: true}},
	}
	for _, tt := range tests {
		err := s.Apply(t.Context(), tt.b)
		wantCode(t, tt.name, err, service.ENOTFOUND)
	}
	for _, id := range []string{"m1"} {
		_, err := s.Message(t.Context(), id)
		wantCode(t, "Message after refused writes", err, service.ENOTFOUND)
	}
	_, err := s.Idempotency(t.Context(), "u1", "k")
	wantCode(t, "Idempotency after refused writes", err, service.ENOTFOUND)
	_, err = s.Session(t.Context(), "x")
	wantCode(t, "Session after refused writes", err, service.ENOTFOUND)
}

func testApplySeq(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0), newSession("s2", "u1", t0))
	var all1, all2 []*service.Event
	for i := range 3 {
		e1 := []*service.Event{chunk("a", "x", 2*i), chunk("a", "y", 2*i+1)}
		e2 := []*service.Event{chunk("b", "z", i)}
		mustApply(t, s, &service.Batch{SessionID: "s1", Events: e1})
		mustApply(t, s, &service.Batch{SessionID: "s2", Events: e2})
		all1 = append(all1, e1...)
		all2 = append(all2, e2...)
	}
	// Apply writes the Seq it assigned into the caller's events.
	if got, want := seqsOf(all1), []int64{1, 2, 3, 4, 5, 6}; !reflect.DeepEqual(got, want) {
		t.Errorf("assigned Seq in s1 = %v, want %v", got, want)
	}
	if got, want := seqsOf(all2), []int64{1, 2, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("assigned Seq in s2 = %v, want %v", got, want)
	}
	got, err := s.Events(t.Context(), "s1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqsOf(got), []int64{1, 2, 3, 4, 5, 6}; !reflect.DeepEqual(got, want) {
		t.Errorf("stored Seq in s1 = %v, want %v", got, want)
	}
	for i, e := range got {
		if e.SessionID != "s1" {
			t.Errorf("event %d: SessionID = %q, want s1", i, e.SessionID)
		}
	}
	wantEqual(t, "stored events of s1", got, all1)
}

func testApplyLastSeq(t *testing.T, s service.Store) {
	ss := newSession("s1", "u1", t0)
	mustApply(t, s, &service.Batch{SessionID: "s1", Session: ss,
		Events: []*service.Event{{Type: service.EventSessionUpdated, At: t0, Session: newSession("s1", "u1", t0)}}})
	if got, want := ss.LastSeq, int64(1); got != want {
		t.Errorf("LastSeq written back into the batch's session = %d, want %d", got, want)
	}
	got, err := s.Session(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := got.LastSeq, int64(1); got != want {
		t.Errorf("LastSeq after creation with one event = %d, want %d", got, want)
	}
	mustApply(t, s, &service.Batch{SessionID: "s1", Events: []*service.Event{chunk("m", "a", 0), chunk("m", "b", 1)}})
	got, err = s.Session(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := got.LastSeq, int64(3); got != want {
		t.Errorf("LastSeq after two more events = %d, want %d", got, want)
	}
	create(t, s, newSession("s2", "u1", t0))
	got, err = s.Session(t.Context(), "s2")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := got.LastSeq, int64(0); got != want {
		t.Errorf("LastSeq of a session without events = %d, want %d", got, want)
	}
}

func testApplyAllOrNothing(t *testing.T, s service.Store) {
	rec := &service.IdempotencyRecord{UserID: "u1", Key: "k1", SessionID: "s1", MessageID: "m1", RunID: "r1", CreatedAt: t0}
	mustApply(t, s, &service.Batch{
		SessionID: "s1",
		Session:   newSession("s1", "u1", t0),
		Messages:  []*service.Message{newMessage("m1", "s1", 1)},
		Runs:      []*service.Run{newRun("r1", "s1", service.RunQueued, t0)},
		Events: []*service.Event{
			{Type: service.EventMessageAdded, At: t0, Message: newMessage("m1", "s1", 1)},
			chunk("m1", "a", 0),
		},
		Idempotency: rec,
	})
	rewrite := chunk("m1", "rewritten", 0)
	rewrite.Seq = 2

	// A retry carrying the same key writes nothing at all.
	changed := newSession("s1", "u1", at(time.Hour))
	changed.Title = "changed"
	m1 := newMessage("m1", "s1", 1)
	m1.Content = "changed"
	err := s.Apply(t.Context(), &service.Batch{
		SessionID:  "s1",
		Session:    changed,
		Messages:   []*service.Message{m1, newMessage("m2", "s1", 2)},
		Runs:       []*service.Run{newRun("r2", "s1", service.RunQueued, t0)},
		Questions:  []*service.Question{newQuestion("q1", "s1")},
		ToolCalls:  []*service.ToolCall{newToolCall("t1", "s1", "m2", t0)},
		Events:     []*service.Event{{Type: service.EventMessageAdded, At: t0, Message: newMessage("m2", "s1", 2)}},
		Rewrite:    []*service.Event{rewrite},
		DropEvents: []int64{1},
		Idempotency: &service.IdempotencyRecord{UserID: "u1", Key: "k1", SessionID: "s1",
			MessageID: "m2", RunID: "r2", CreatedAt: at(time.Hour)},
	})
	wantCode(t, "Apply with a used idempotency key", err, service.ECONFLICT)

	ss, err := s.Session(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := newSession("s1", "u1", t0)
	want.LastSeq = 2
	wantEqual(t, "session after the refused batch", ss, want)
	m, err := s.Message(t.Context(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "message after the refused batch", m, newMessage("m1", "s1", 1))
	for name, get := range map[string]func() error{
		"Message(m2)":  func() error { _, err := s.Message(t.Context(), "m2"); return err },
		"Run(r2)":      func() error { _, err := s.Run(t.Context(), "r2"); return err },
		"Question(q1)": func() error { _, err := s.Question(t.Context(), "q1"); return err },
	} {
		wantCode(t, name+" after the refused batch", get(), service.ENOTFOUND)
	}
	tcs, err := s.ToolCalls(t.Context(), []string{"m2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(tcs); got != 0 {
		t.Errorf("%d tool calls after the refused batch, want 0", got)
	}
	events, err := s.Events(t.Context(), "s1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	wantChunk := chunk("m1", "a", 0)
	wantChunk.SessionID, wantChunk.Seq = "s1", 2
	wantEqual(t, "events after the refused batch", events, []*service.Event{
		{SessionID: "s1", Seq: 1, Type: service.EventMessageAdded, At: t0, Message: newMessage("m1", "s1", 1)},
		wantChunk,
	})
	r, err := s.Idempotency(t.Context(), "u1", "k1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "idempotency record after the refused batch", r,
		&service.IdempotencyRecord{UserID: "u1", Key: "k1", SessionID: "s1", MessageID: "m1", RunID: "r1", CreatedAt: t0})
}

func testApplyUpsert(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	mustApply(t, s, &service.Batch{
		SessionID: "s1",
		Messages:  []*service.Message{newMessage("m1", "s1", 1)},
		Runs:      []*service.Run{newRun("r1", "s1", service.RunRunning, t0)},
		Questions: []*service.Question{newQuestion("q1", "s1")},
		ToolCalls: []*service.ToolCall{newToolCall("t1", "s1", "m1", t0)},
	})

	ss := newSession("s1", "u1", at(time.Hour))
	ss.Title = "renamed"
	ss.Settings = service.Settings{Agent: "openai", BusyPolicy: service.BusyReject}
	m := newMessage("m1", "s1", 1)
	m.Content, m.Status = "done", service.MessageComplete
	r := newRun("r1", "s1", service.RunFailed, t0)
	r.Error, r.StartedAt, r.FinishedAt = "it broke", nil, ptr(at(time.Minute))
	q := newQuestion("q1", "s1")
	q.Answer, q.AnsweredAt, q.Choices, q.Withdrawn = ptr("that"), ptr(at(2*time.Minute)), nil, true
	tc := newToolCall("t1", "s1", "m1", t0)
	tc.Status, tc.Result, tc.Error, tc.FinishedAt = service.ToolFailed, ptr("{}"), ptr("timeout"), ptr(at(time.Second))
	mustApply(t, s, &service.Batch{SessionID: "s1", Session: ss,
		Messages: []*service.Message{m}, Runs: []*service.Run{r},
		Questions: []*service.Question{q}, ToolCalls: []*service.ToolCall{tc}})

	gotS, err := s.Session(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "session", gotS, ss)
	gotM, err := s.Message(t.Context(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "message", gotM, m)
	gotR, err := s.Run(t.Context(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "run", gotR, r)
	gotQ, err := s.Question(t.Context(), "q1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "question", gotQ, q)
	gotT, err := s.ToolCalls(t.Context(), []string{"m1"})
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "tool calls", gotT, []*service.ToolCall{tc})

	// A row upserted again with zero values keeps none of the old ones (but its Seq).
	bare := &service.Message{ID: "m1", SessionID: "s1", Seq: 1}
	mustApply(t, s, &service.Batch{SessionID: "s1", Messages: []*service.Message{bare}})
	gotM, err = s.Message(t.Context(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "message replaced by a bare one", gotM, &service.Message{ID: "m1", SessionID: "s1", Seq: 1})
}

func testApplyEmpty(t *testing.T, s service.Store) {
	if err := s.Apply(t.Context(), &service.Batch{SessionID: "missing"}); err != nil {
		t.Errorf("Apply(empty batch) = %v, want nil", err)
	}
	_, err := s.Session(t.Context(), "missing")
	wantCode(t, "Session after an empty batch", err, service.ENOTFOUND)
}

func testApplyConcurrent(t *testing.T, s service.Store) {
	const sessions, batches = 6, 20
	for i := range sessions {
		create(t, s, newSession(fmt.Sprintf("s%d", i), "u1", t0))
	}
	errs := make(chan error, sessions*2)
	var wg sync.WaitGroup
	for i := range sessions {
		id := fmt.Sprintf("s%d", i)
		wg.Go(func() {
			m := newMessage("m-"+id, id, 1)
			for j := range batches {
				m.Content += "x"
				ss := newSession(id, "u1", at(time.Duration(j)*time.Second))
				b := &service.Batch{SessionID: id, Session: ss, Messages: []*service.Message{m},
					Events: []*service.Event{chunk(m.ID, "x", j)}}
				if err := s.Apply(context.Background(), b); err != nil {
					errs <- fmt.Errorf("apply to %s: %w", id, err)
					return
				}
			}
		})
		wg.Go(func() {
			for range batches {
				if _, err := s.Events(context.Background(), id, 0, 0); err != nil {
					errs <- fmt.Errorf("events of %s: %w", id, err)
					return
				}
				if _, err := s.Sessions(context.Background(), "u1", nil, 3); err != nil {
					errs <- fmt.Errorf("sessions: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range sessions {
		id := fmt.Sprintf("s%d", i)
		ss, err := s.Session(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ss.LastSeq, int64(batches); got != want {
			t.Errorf("%s: LastSeq = %d, want %d", id, got, want)
		}
		events, err := s.Events(t.Context(), id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for j, e := range events {
			if got, want := e.Seq, int64(j+1); got != want {
				t.Errorf("%s: event %d has Seq %d, want %d", id, j, got, want)
			}
		}
	}
}

func testIdempotency(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0), newSession("s2", "u2", t0))
	rec := &service.IdempotencyRecord{UserID: "u1", Key: "k", SessionID: "s1", MessageID: "m1", RunID: "r1", CreatedAt: t0}
	mustApply(t, s, &service.Batch{SessionID: "s1", Idempotency: rec})
	got, err := s.Idempotency(t.Context(), "u1", "k")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "Idempotency(u1, k)", got,
		&service.IdempotencyRecord{UserID: "u1", Key: "k", SessionID: "s1", MessageID: "m1", RunID: "r1", CreatedAt: t0})

	again := &service.IdempotencyRecord{UserID: "u1", Key: "k", SessionID: "s1", MessageID: "m2", RunID: "r2", CreatedAt: t0}
	err = s.Apply(t.Context(), &service.Batch{SessionID: "s1", Idempotency: again})
	wantCode(t, "Apply with the same (UserID, Key)", err, service.ECONFLICT)

	// The same key of another user is another record.
	other := &service.IdempotencyRecord{UserID: "u2", Key: "k", SessionID: "s2", MessageID: "m3", RunID: "r3", CreatedAt: t0}
	mustApply(t, s, &service.Batch{SessionID: "s2", Idempotency: other})
	got, err = s.Idempotency(t.Context(), "u2", "k")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := got.MessageID, "m3"; got != want {
		t.Errorf("Idempotency(u2, k).MessageID = %q, want %q", got, want)
	}
}

func testIdempotencyNotFound(t *testing.T, s service.Store) {
	_, err := s.Idempotency(t.Context(), "u1", "nope")
	wantCode(t, "Idempotency(u1, nope)", err, service.ENOTFOUND)
}

func testSessions(t *testing.T, s service.Store) {
	create(t, s,
		newSession("a", "u1", at(1*time.Second)),
		newSession("b", "u1", at(3*time.Second)),
		newSession("c", "u1", at(3*time.Second)),
		newSession("d", "u1", at(2*time.Second+time.Nanosecond)),
		newSession("e", "u1", at(2*time.Second)),
		newSession("x", "u2", at(5*time.Second)),
	)
	var pages [][]string
	var after *service.SessionPosition
	for range 10 {
		page, err := s.Sessions(t.Context(), "u1", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		pages = append(pages, sessionIDs(page))
		last := page[len(page)-1]
		after = &service.SessionPosition{UpdatedAt: last.UpdatedAt, ID: last.ID}
	}
	wantEqual(t, "pages of 2", pages, [][]string{{"c", "b"}, {"d", "e"}, {"a"}})

	// A position need not be a stored session.
	page, err := s.Sessions(t.Context(), "u1", &service.SessionPosition{UpdatedAt: at(3 * time.Second), ID: "bb"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "after (3s, bb)", sessionIDs(page), []string{"b", "d", "e", "a"})

	// New activity moves a session to the front.
	mustApply(t, s, &service.Batch{SessionID: "a", Session: newSession("a", "u1", at(time.Minute))})
	page, err = s.Sessions(t.Context(), "u1", nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "first 3 after activity on a", sessionIDs(page), []string{"a", "c", "b"})

	page, err = s.Sessions(t.Context(), "nobody", nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(page); got != 0 {
		t.Errorf("Sessions of a user without sessions: %d, want 0", got)
	}
}

func testMessagesEmpty(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	for _, id := range []string{"s1", "missing"} {
		got, err := s.Messages(t.Context(), id, service.MessagePage{First: 10})
		if err != nil {
			t.Errorf("Messages(%s) = %v, want no error", id, err)
		}
		if len(got) != 0 {
			t.Errorf("Messages(%s) = %d messages, want 0", id, len(got))
		}
	}
}

func testMessagesPage(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0), newSession("s2", "u1", t0))
	var ms []*service.Message
	for _, seq := range []int64{10, 2, 8, 4, 6} { // stored out of order
		ms = append(ms, newMessage(fmt.Sprintf("m%02d", seq), "s1", seq))
	}
	mustApply(t, s, &service.Batch{SessionID: "s1", Messages: ms})
	mustApply(t, s, &service.Batch{SessionID: "s2", Messages: []*service.Message{newMessage("other", "s2", 5)}})

	tests := []struct {
		page service.MessagePage
		want []string
	}{
		{service.MessagePage{First: 2}, []string{"m02", "m04"}},
		{service.MessagePage{First: 2, After: 4}, []string{"m06", "m08"}},
		{service.MessagePage{First: 2, After: 5}, []string{"m06", "m08"}},
		{service.MessagePage{First: 10, After: 8}, []string{"m10"}},
		{service.MessagePage{First: 10, After: 10}, []string{}},
		{service.MessagePage{Last: 2}, []string{"m08", "m10"}},
		{service.MessagePage{Last: 2, Before: 8}, []string{"m04", "m06"}},
		{service.MessagePage{Last: 5, Before: 3}, []string{"m02"}},
		{service.MessagePage{Last: 5, Before: 2}, []string{}},
		{service.MessagePage{Last: 1, First: 2}, []string{"m10"}},
		{service.MessagePage{First: 10, After: 2, Before: 8}, []string{"m04", "m06"}},
		{service.MessagePage{Last: 10, After: 2, Before: 8}, []string{"m04", "m06"}},
	}
	for _, tt := range tests {
		got, err := s.Messages(t.Context(), "s1", tt.page)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := messageIDs(got), tt.want; !reflect.DeepEqual(got, want) {
			t.Errorf("Messages(%+v) = %v, want %v", tt.page, got, want)
		}
	}
	got, err := s.Messages(t.Context(), "s1", service.MessagePage{First: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "first message", got, []*service.Message{newMessage("m02", "s1", 2)})
}

func testMessageNotFound(t *testing.T, s service.Store) {
	_, err := s.Message(t.Context(), "missing")
	wantCode(t, "Message(missing)", err, service.ENOTFOUND)
}

func testRunNotFound(t *testing.T, s service.Store) {
	_, err := s.Run(t.Context(), "missing")
	wantCode(t, "Run(missing)", err, service.ENOTFOUND)
}

func testRunsByStatus(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0), newSession("s2", "u1", t0))
	mustApply(t, s, &service.Batch{SessionID: "s1", Runs: []*service.Run{
		newRun("r1", "s1", service.RunCompleted, at(1*time.Second)),
		newRun("r2", "s1", service.RunWaitingForInput, at(4*time.Second)),
		newRun("r3", "s1", service.RunQueued, at(5*time.Second)),
	}})
	mustApply(t, s, &service.Batch{SessionID: "s2", Runs: []*service.Run{
		newRun("r4", "s2", service.RunRunning, at(2*time.Second)),
		newRun("r5", "s2", service.RunQueued, at(4*time.Second)),
		newRun("r6", "s2", service.RunFailed, at(3*time.Second)),
	}})
	got, err := s.RunsByStatus(t.Context(), service.RunQueued, service.RunRunning, service.RunWaitingForInput)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := idsOf(got, func(r *service.Run) string { return r.ID }), []string{"r4", "r2", "r5", "r3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("active runs = %v, want %v", got, want)
	}
	if len(got) > 0 {
		wantEqual(t, "first active run", got[0], newRun("r4", "s2", service.RunRunning, at(2*time.Second)))
	}
	got, err = s.RunsByStatus(t.Context(), service.RunCancelled)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("RunsByStatus(CANCELLED) = %d runs, want 0", len(got))
	}
	got, err = s.RunsByStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("RunsByStatus() = %d runs, want 0", len(got))
	}
}

func testQuestionNotFound(t *testing.T, s service.Store) {
	_, err := s.Question(t.Context(), "missing")
	wantCode(t, "Question(missing)", err, service.ENOTFOUND)
}

func testQuestionRoundTrip(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	free := newQuestion("q2", "s1")
	free.Choices = nil
	answered := newQuestion("q3", "s1")
	answered.Answer, answered.AnsweredAt = ptr(""), ptr(at(time.Hour))
	mustApply(t, s, &service.Batch{SessionID: "s1", Questions: []*service.Question{newQuestion("q1", "s1"), free, answered}})
	for _, want := range []*service.Question{newQuestion("q1", "s1"), free, answered} {
		got, err := s.Question(t.Context(), want.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, "Question("+want.ID+")", got, want)
	}
}

func testToolCalls(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0), newSession("s2", "u1", t0))
	mustApply(t, s, &service.Batch{SessionID: "s1", ToolCalls: []*service.ToolCall{
		newToolCall("t1", "s1", "m1", at(3*time.Second)),
		newToolCall("t2", "s1", "m2", at(1*time.Second)),
		newToolCall("t3", "s1", "m3", at(2*time.Second)),
		newToolCall("t4", "s1", "m1", at(2*time.Second)),
	}})
	mustApply(t, s, &service.Batch{SessionID: "s2", ToolCalls: []*service.ToolCall{
		newToolCall("t5", "s2", "m5", at(0)),
	}})
	got, err := s.ToolCalls(t.Context(), []string{"m1", "m2", "m5", "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := idsOf(got, func(tc *service.ToolCall) string { return tc.ID }), []string{"t5", "t2", "t4", "t1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ToolCalls(m1, m2, m5) = %v, want %v", got, want)
	}
	if len(got) > 0 {
		wantEqual(t, "first tool call", got[0], newToolCall("t5", "s2", "m5", at(0)))
	}
	got, err = s.ToolCalls(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("ToolCalls(nil) = %d, want 0", len(got))
	}
}

func testEvents(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0), newSession("s2", "u1", t0))
	for i := range 5 {
		mustApply(t, s, &service.Batch{SessionID: "s1", Events: []*service.Event{chunk("m", "x", i)}})
	}
	mustApply(t, s, &service.Batch{SessionID: "s2", Events: []*service.Event{chunk("m", "y", 0)}})
	tests := []struct {
		after int64
		limit int
		want  []int64
	}{
		{0, 2, []int64{1, 2}},
		{2, 2, []int64{3, 4}},
		{2, 10, []int64{3, 4, 5}},
		{4, 1, []int64{5}},
		{5, 10, []int64{}},
		{9, 10, []int64{}},
	}
	for _, tt := range tests {
		got, err := s.Events(t.Context(), "s1", tt.after, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := seqsOf(got); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Events(s1, %d, %d) = %v, want %v", tt.after, tt.limit, got, tt.want)
		}
	}
	got, err := s.Events(t.Context(), "missing", 0, 10)
	if err != nil {
		t.Errorf("Events(missing) = %v, want no error", err)
	}
	if len(got) != 0 {
		t.Errorf("Events(missing) = %d events, want 0", len(got))
	}
}

func testEventPayloads(t *testing.T, s service.Store) {
	ss := newSession("s1", "u1", t0)
	create(t, s, ss)
	q := newQuestion("q1", "s1")
	q.Answer = ptr("this")
	tc := newToolCall("t1", "s1", "m1", t0)
	tc.Result = ptr("ok")
	events := []*service.Event{
		{Type: service.EventMessageAdded, At: at(1), Message: newMessage("m1", "s1", 1)},
		{Type: service.EventMessageChunk, At: at(2), Key: "m1", Delta: "héllo 🌍", Offset: 7},
		{Type: service.EventToolCallOutput, At: at(3), Key: "t1", MessageID: "m1", Delta: "out", Offset: 2, CoalescedFrom: 1},
		{Type: service.EventRunStatusChanged, At: at(4), Run: newRun("r1", "s1", service.RunRunning, t0)},
		{Type: service.EventQuestionAnswered, At: at(5), Question: q},
		{Type: service.EventToolCallFinished, At: at(6), ToolCall: tc},
		{Type: service.EventSessionUpdated, At: at(7), Session: newSession("s1", "u1", at(7))},
	}
	mustApply(t, s, &service.Batch{SessionID: "s1", Events: events})
	got, err := s.Events(t.Context(), "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []*service.Event{
		{SessionID: "s1", Seq: 1, Type: service.EventMessageAdded, At: at(1), Message: newMessage("m1", "s1", 1)},
		{SessionID: "s1", Seq: 2, Type: service.EventMessageChunk, At: at(2), Key: "m1", Delta: "héllo 🌍", Offset: 7},
		{SessionID: "s1", Seq: 3, Type: service.EventToolCallOutput, At: at(3), Key: "t1", MessageID: "m1", Delta: "out", Offset: 2, CoalescedFrom: 1},
		{SessionID: "s1", Seq: 4, Type: service.EventRunStatusChanged, At: at(4), Run: newRun("r1", "s1", service.RunRunning, t0)},
		{SessionID: "s1", Seq: 5, Type: service.EventQuestionAnswered, At: at(5), Question: q},
		{SessionID: "s1", Seq: 6, Type: service.EventToolCallFinished, At: at(6), ToolCall: tc},
		{SessionID: "s1", Seq: 7, Type: service.EventSessionUpdated, At: at(7), Session: newSession("s1", "u1", at(7))},
	}
	wantEqual(t, "events", got, want)
}

func testRewrite(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	m := newMessage("m1", "s1", 1)
	mustApply(t, s, &service.Batch{SessionID: "s1", Messages: []*service.Message{m}, Events: []*service.Event{
		{Type: service.EventMessageAdded, At: t0, Message: newMessage("m1", "s1", 1)},
		chunk("m1", "Hel", 0),
		chunk("m1", "lo", 3),
		chunk("m1", "!", 5),
		{Type: service.EventMessageCompleted, At: t0, Message: newMessage("m1", "s1", 1)},
	}})

	// Compaction: the last chunk becomes all of them, the others go.
	coalesced := chunk("m1", "Hello!", 0)
	coalesced.Seq, coalesced.CoalescedFrom = 4, 2
	mustApply(t, s, &service.Batch{SessionID: "s1", Rewrite: []*service.Event{coalesced}, DropEvents: []int64{2, 3}})
	got, err := s.Events(t.Context(), "s1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqsOf(got), []int64{1, 4, 5}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Seq after compaction = %v, want %v", got, want)
	}
	want := chunk("m1", "Hello!", 0)
	want.SessionID, want.Seq, want.CoalescedFrom = "s1", 4, 2
	wantEqual(t, "rewritten event", got[1], want)
	got, err = s.Events(t.Context(), "s1", 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqsOf(got), []int64{4, 5}; !reflect.DeepEqual(got, want) {
		t.Errorf("Events after a dropped Seq = %v, want %v", got, want)
	}

	// The log goes on after its last Seq; dropped numbers are not reused.
	next := chunk("m2", "x", 0)
	mustApply(t, s, &service.Batch{SessionID: "s1", Events: []*service.Event{next}, DropEvents: []int64{99}})
	if got, want := next.Seq, int64(6); got != want {
		t.Errorf("Seq after compaction = %d, want %d", got, want)
	}
	ss, err := s.Session(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ss.LastSeq, int64(6); got != want {
		t.Errorf("LastSeq = %d, want %d", got, want)
	}

	// Rewriting an event that was never appended is a bug, and writes nothing.
	bad := chunk("m1", "?", 0)
	bad.Seq = 7
	if err := s.Apply(t.Context(), &service.Batch{SessionID: "s1", Rewrite: []*service.Event{bad}, DropEvents: []int64{1}}); err == nil {
		t.Errorf("Apply(rewrite of Seq 7 with LastSeq 6) = nil, want an error")
	}
	got, err = s.Events(t.Context(), "s1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqsOf(got), []int64{1, 4, 5, 6}; !reflect.DeepEqual(got, want) {
		t.Errorf("Seq after a refused rewrite = %v, want %v", got, want)
	}
}

func testDelete(t *testing.T, s service.Store) {
	fill := func(id string) {
		mustApply(t, s, &service.Batch{
			SessionID: id,
			Session:   newSession(id, "u1", t0),
			Messages:  []*service.Message{newMessage("m-"+id, id, 1)},
			Runs:      []*service.Run{newRun("r-"+id, id, service.RunWaitingForInput, t0)},
			Questions: []*service.Question{newQuestion("q-"+id, id)},
			ToolCalls: []*service.ToolCall{newToolCall("t-"+id, id, "m-"+id, t0)},
			Events:    []*service.Event{{Type: service.EventMessageAdded, At: t0, Message: newMessage("m-"+id, id, 1)}},
			Idempotency: &service.IdempotencyRecord{UserID: "u1", Key: "k-" + id, SessionID: id,
				MessageID: "m-" + id, RunID: "r-" + id, CreatedAt: t0},
		})
	}
	fill("s1")
	fill("s2")
	mustApply(t, s, &service.Batch{SessionID: "s1", Delete: true})

	ctx := t.Context()
	gone := map[string]error{}
	_, gone["Session"] = s.Session(ctx, "s1")
	_, gone["Message"] = s.Message(ctx, "m-s1")
	_, gone["Run"] = s.Run(ctx, "r-s1")
	_, gone["Question"] = s.Question(ctx, "q-s1")
	_, gone["Idempotency"] = s.Idempotency(ctx, "u1", "k-s1")
	for name, err := range gone {
		wantCode(t, name+" of a deleted session", err, service.ENOTFOUND)
	}
	if ms, err := s.Messages(ctx, "s1", service.MessagePage{}); err != nil || len(ms) != 0 {
		t.Errorf("Messages of a deleted session = %d, %v; want none", len(ms), err)
	}
	if es, err := s.Events(ctx, "s1", 0, 0); err != nil || len(es) != 0 {
		t.Errorf("Events of a deleted session = %d, %v; want none", len(es), err)
	}
	if tcs, err := s.ToolCalls(ctx, []string{"m-s1"}); err != nil || len(tcs) != 0 {
		t.Errorf("ToolCalls of a deleted session = %d, %v; want none", len(tcs), err)
	}
	runs, err := s.RunsByStatus(ctx, service.RunWaitingForInput)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := idsOf(runs, func(r *service.Run) string { return r.ID }), []string{"r-s2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("waiting runs after delete = %v, want %v", got, want)
	}
	list, err := s.Sessions(ctx, "u1", nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sessionIDs(list), []string{"s2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Sessions after delete = %v, want %v", got, want)
	}

	// The other session is untouched.
	if _, err := s.Message(ctx, "m-s2"); err != nil {
		t.Errorf("Message of the other session: %v", err)
	}
	if _, err := s.Idempotency(ctx, "u1", "k-s2"); err != nil {
		t.Errorf("Idempotency of the other session: %v", err)
	}
	if es, err := s.Events(ctx, "s2", 0, 0); err != nil || len(es) != 1 {
		t.Errorf("Events of the other session = %d, %v; want 1", len(es), err)
	}

	err = s.Apply(ctx, &service.Batch{SessionID: "s1", Delete: true})
	wantCode(t, "deleting it again", err, service.ENOTFOUND)

	// The session's ID and key can be used afresh, and its log starts over.
	fill("s1")
	ss, err := s.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ss.LastSeq, int64(1); got != want {
		t.Errorf("LastSeq of a re-created session = %d, want %d", got, want)
	}
}

func testCopies(t *testing.T, s service.Store) {
	ctx := t.Context()
	ss := newSession("s1", "u1", t0)
	q := newQuestion("q1", "s1")
	q.Answer, q.AnsweredAt = ptr("this"), ptr(at(time.Hour))
	r := newRun("r1", "s1", service.RunRunning, t0)
	tc := newToolCall("t1", "s1", "m1", t0)
	tc.Result = ptr("ok")
	ev := &service.Event{Type: service.EventQuestionAsked, At: t0, Question: q, Session: ss}
	mustApply(t, s, &service.Batch{SessionID: "s1", Session: ss, Runs: []*service.Run{r},
		Questions: []*service.Question{q}, ToolCalls: []*service.ToolCall{tc}, Events: []*service.Event{ev}})

	wantQ := newQuestion("q1", "s1")
	wantQ.Answer, wantQ.AnsweredAt = ptr("this"), ptr(at(time.Hour))
	wantS := newSession("s1", "u1", t0)
	wantS.LastSeq = 1
	wantR := newRun("r1", "s1", service.RunRunning, t0)
	wantT := newToolCall("t1", "s1", "m1", t0)
	wantT.Result = ptr("ok")

	scribble := func(ss *service.TalkSession, q *service.Question, r *service.Run, tc *service.ToolCall) {
		*ss.Settings.Model = "scribbled"
		*ss.Settings.Temperature = 9
		q.Choices[0] = "scribbled"
		*q.Answer = "scribbled"
		*q.AnsweredAt = time.Time{}
		*r.StartedAt = time.Time{}
		*tc.Result = "scribbled"
	}
	check := func(when string) {
		t.Helper()
		gotS, err := s.Session(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, "session "+when, gotS, wantS)
		gotQ, err := s.Question(ctx, "q1")
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, "question "+when, gotQ, wantQ)
		gotR, err := s.Run(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, "run "+when, gotR, wantR)
		gotT, err := s.ToolCalls(ctx, []string{"m1"})
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, "tool calls "+when, gotT, []*service.ToolCall{wantT})
		gotE, err := s.Events(ctx, "s1", 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(gotE) != 1 {
			t.Fatalf("%d events %s, want 1", len(gotE), when)
		}
		wantEqual(t, "event's question "+when, gotE[0].Question, wantQ)
		wantEqual(t, "event's session "+when, gotE[0].Session, newSession("s1", "u1", t0))
	}

	// Changing what was passed to Apply changes nothing stored.
	scribble(ss, q, r, tc)
	check("after changing the rows passed to Apply")

	// Changing what a read returned changes nothing stored.
	gotS, err := s.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	gotQ, err := s.Question(ctx, "q1")
	if err != nil {
		t.Fatal(err)
	}
	gotR, err := s.Run(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	gotT, err := s.ToolCalls(ctx, []string{"m1"})
	if err != nil {
		t.Fatal(err)
	}
	scribble(gotS, gotQ, gotR, gotT[0])
	gotE, err := s.Events(ctx, "s1", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	scribble(gotE[0].Session, gotE[0].Question, newRun("x", "s1", service.RunRunning, t0), &service.ToolCall{Result: ptr("")})
	list, err := s.Sessions(ctx, "u1", nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	*list[0].Settings.SystemPrompt = "scribbled"
	check("after changing rows a read returned")
}

func testPing(t *testing.T, s service.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping = %v, want nil", err)
	}
}

func testCallerSeq(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	ok := []*service.Event{chunk("m", "a", 0), chunk("m", "b", 1)}
	ok[0].Seq, ok[1].Seq = 1, 2
	mustApply(t, s, &service.Batch{SessionID: "s1", Events: ok})

	for _, seqs := range [][]int64{{2}, {4}, {3, 5}, {0, 3}} {
		var events []*service.Event
		for _, seq := range seqs {
			e := chunk("m", "c", 2)
			e.Seq = seq
			events = append(events, e)
		}
		err := s.Apply(t.Context(), &service.Batch{SessionID: "s1", Events: events,
			Messages: []*service.Message{newMessage("m", "s1", 1)}})
		wantCode(t, fmt.Sprintf("Apply(events %v after LastSeq 2)", seqs), err, service.ECONFLICT)
	}
	if _, err := s.Message(t.Context(), "m"); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("Message after refused batches: %v, want ENOTFOUND", err)
	}
	mixed := []*service.Event{chunk("m", "c", 2), chunk("m", "d", 3)}
	mixed[1].Seq = 4
	mustApply(t, s, &service.Batch{SessionID: "s1", Events: mixed})
	if got, want := mixed[0].Seq, int64(3); got != want {
		t.Errorf("Seq assigned before a caller-set one = %d, want %d", got, want)
	}
	got, err := s.Events(t.Context(), "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqsOf(got), []int64{1, 2, 3, 4}; !reflect.DeepEqual(got, want) {
		t.Errorf("Seq = %v, want %v", got, want)
	}
}

func testOwnsLastSeq(t *testing.T, s service.Store) {
	ss := newSession("s1", "u1", t0)
	ss.LastSeq = 41
	create(t, s, ss)
	mustApply(t, s, &service.Batch{SessionID: "s1", Events: []*service.Event{chunk("m", "a", 0)}})
	stale := newSession("s1", "u1", at(time.Second))
	mustApply(t, s, &service.Batch{SessionID: "s1", Session: stale})
	if got, want := stale.LastSeq, int64(1); got != want {
		t.Errorf("LastSeq written back = %d, want %d", got, want)
	}
	got, err := s.Session(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := got.LastSeq, int64(1); got != want {
		t.Errorf("LastSeq = %d, want %d", got, want)
	}
}

func testMessageSeq(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	mustApply(t, s, &service.Batch{SessionID: "s1", Events: []*service.Event{chunk("x", "a", 0)}})
	m := newMessage("m1", "s1", 0)
	snap := newMessage("m1", "s1", 0)
	added := &service.Event{Type: service.EventMessageAdded, At: t0, Message: snap}
	mustApply(t, s, &service.Batch{SessionID: "s1", Messages: []*service.Message{m},
		Events: []*service.Event{chunk("x", "b", 1), added}})
	if got, want := m.Seq, int64(3); got != want {
		t.Errorf("message Seq written back = %d, want %d", got, want)
	}
	if got, want := snap.Seq, int64(3); got != want {
		t.Errorf("snapshot Seq written back = %d, want %d", got, want)
	}
	got, err := s.Message(t.Context(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := got.Seq, int64(3); got != want {
		t.Errorf("stored message Seq = %d, want %d", got, want)
	}
	events, err := s.Events(t.Context(), "s1", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Message == nil {
		t.Fatalf("Events(after 2) = %s, want the MessageAdded", dump(events))
	}
	if got, want := events[0].Message.Seq, int64(3); got != want {
		t.Errorf("stored snapshot Seq = %d, want %d", got, want)
	}

	// Later upserts with Seq 0 keep it.
	later := newMessage("m1", "s1", 0)
	later.Content = "more"
	mustApply(t, s, &service.Batch{SessionID: "s1", Messages: []*service.Message{later},
		Events: []*service.Event{chunk("m1", "more", 0)}})
	got, err = s.Message(t.Context(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := got.Seq, int64(3); got != want {
		t.Errorf("message Seq after an upsert with Seq 0 = %d, want %d", got, want)
	}
	if got, want := later.Seq, int64(3); got != want {
		t.Errorf("message Seq written back after an upsert with Seq 0 = %d, want %d", got, want)
	}
}

func testDeleteAlone(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	err := s.Apply(t.Context(), &service.Batch{SessionID: "s1", Delete: true,
		Messages: []*service.Message{newMessage("m1", "s1", 1)}})
	if err == nil {
		t.Errorf("Apply(Delete with a message) = nil, want an error")
	}
	if _, err := s.Session(t.Context(), "s1"); err != nil {
		t.Errorf("Session after a refused delete: %v", err)
	}
}

func testNoLimit(t *testing.T, s service.Store) {
	const n = 5
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		create(t, s, newSession(id, "u1", at(time.Duration(i))))
		mustApply(t, s, &service.Batch{SessionID: "s0", Events: []*service.Event{chunk("m", "x", i)},
			Messages: []*service.Message{newMessage(fmt.Sprintf("m%d", i), "s0", int64(i+1))}})
	}
	for _, limit := range []int{0, -1} {
		ss, err := s.Sessions(t.Context(), "u1", nil, limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(ss); got != n {
			t.Errorf("Sessions(limit %d) = %d sessions, want %d", limit, got, n)
		}
		es, err := s.Events(t.Context(), "s0", 0, limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(es); got != n {
			t.Errorf("Events(limit %d) = %d events, want %d", limit, got, n)
		}
	}
	ms, err := s.Messages(t.Context(), "s0", service.MessagePage{})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(ms); got != n {
		t.Errorf("Messages(no First or Last) = %d messages, want %d", got, n)
	}
}

func testTimes(t *testing.T, s service.Store) {
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	local := time.Date(2030, 12, 31, 23, 59, 59, 999999999, zone)
	now := time.Now() // has a monotonic reading
	ss := &service.TalkSession{ID: "s1", UserID: "u1", CreatedAt: local, UpdatedAt: now}
	r := &service.Run{ID: "r1", SessionID: "s1", Status: service.RunQueued, CreatedAt: time.Time{}, StartedAt: &local}
	mustApply(t, s, &service.Batch{SessionID: "s1", Session: ss, Runs: []*service.Run{r},
		Events: []*service.Event{{Type: service.EventRunStatusChanged, At: local, Run: r}}})
	gotS, err := s.Session(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gotS.CreatedAt, local.UTC(); got != want {
		t.Errorf("CreatedAt = %v, want %v", got, want)
	}
	if got, want := gotS.UpdatedAt, now.UTC().Round(0); got != want {
		t.Errorf("UpdatedAt = %v, want %v", got, want)
	}
	gotR, err := s.Run(t.Context(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if !gotR.CreatedAt.IsZero() {
		t.Errorf("zero CreatedAt came back as %v", gotR.CreatedAt)
	}
	if got, want := *gotR.StartedAt, local.UTC(); got != want {
		t.Errorf("StartedAt = %v, want %v", got, want)
	}
	events, err := s.Events(t.Context(), "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := events[0].At, local.UTC(); got != want {
		t.Errorf("event At = %v, want %v", got, want)
	}
	if got, want := *events[0].Run.StartedAt, local.UTC(); got != want {
		t.Errorf("event's run StartedAt = %v, want %v", got, want)
	}
}
