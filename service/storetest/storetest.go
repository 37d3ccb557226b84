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
	"errors"
	"fmt"
	"reflect"
	"strings"
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

// utc returns the row as a Store gives it back: times in UTC, no monotonic reading.
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

func testAppendWhole(t *testing.T, s service.Store) {
	ctx := t.Context()
	sess := newSession("s1", "u1", at(time.Hour))
	m := newMessage("m1", "s1")
	r := newRun("r1", "s1", service.RunRunning, at(time.Second))
	l := &log{t: t, s: s, id: "s1"}
	b := l.batch(added(m), chunk("m1", "con", 0), runChanged(r))
	b.Create = sess
	b.Idempotency = &service.IdempotencyRecord{UserID: "u1", Key: "k1", SessionID: "s1", MessageID: "m1", RunID: "r1", CreatedAt: t0}
	mustAppend(t, s, b)

	got, err := s.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "session", got, utcSession(sess, 3))
	evs, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "event seqs", seqsOf(evs), []int64{1, 2, 3})
	m.Seq = 1
	gm, err := s.Message(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "message", gm, utcMessage(m))
	gr, err := s.Run(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "run", gr, utcRun(r))
	rec, err := s.Idempotency(ctx, "u1", "k1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "idempotency record", rec, &service.IdempotencyRecord{UserID: "u1", Key: "k1", SessionID: "s1", MessageID: "m1", RunID: "r1", CreatedAt: t0.UTC()})
}

func testAppendMissingSession(t *testing.T, s service.Store) {
	l := &log{t: t, s: s, id: "missing"}
	wantCode(t, "events to a missing session", appendOne(s, l.batch(chunk("m", "x", 0))), service.ENOTFOUND)
	wantCode(t, "deleting a missing session", appendOne(s, &service.Batch{SessionID: "missing", Delete: true}), service.ENOTFOUND)
	if _, err := s.Session(t.Context(), "missing"); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("the refused batch created the session: %v", err)
	}
}

func testAppendContinuity(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	l.append(chunk("m", "a", 0), chunk("m", "b", 1))
	for name, first := range map[string]int64{"a gap": 4, "a repeat": 2, "from the start": 1} {
		b := &service.Batch{SessionID: "s1", Events: []*service.Event{chunk("m", "x", 2), chunk("m", "y", 3)}}
		b.Events[0].Seq, b.Events[1].Seq = first, first+1
		err := appendOne(s, b)
		wantCode(t, name, err, service.ECONFLICT)
		if !errors.Is(err, service.ErrNotNext) {
			t.Errorf("%s: error %v is not ErrNotNext", name, err)
		}
	}
	evs, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "log after refused batches", seqsOf(evs), []int64{1, 2})
	l.append(chunk("m", "c", 2))
	if got, _ := s.Session(ctx, "s1"); got == nil || got.LastSeq != 3 {
		t.Errorf("LastSeq after a good batch = %+v, want 3", got)
	}
}

func testAppendIdempotencyTaken(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	rec := &service.IdempotencyRecord{UserID: "u1", Key: "k", SessionID: "s1", MessageID: "m1", RunID: "r1", CreatedAt: t0}
	b := l.batch(added(newMessage("m1", "s1")))
	b.Idempotency = rec
	mustAppend(t, s, b)
	l.last++
	again := l.batch(added(newMessage("m2", "s1")))
	again.Idempotency = &service.IdempotencyRecord{UserID: "u1", Key: "k", SessionID: "s1", MessageID: "m2", RunID: "r2", CreatedAt: t0}
	wantCode(t, "a used key", appendOne(s, again), service.ECONFLICT)
	if _, err := s.Message(ctx, "m2"); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("the refused batch wrote its message: %v", err)
	}
	if got, _ := s.Session(ctx, "s1"); got == nil || got.LastSeq != 1 {
		t.Errorf("the refused batch moved the log: %+v", got)
	}
	other := &log{t: t, s: s, id: "s1", last: 1}
	b2 := other.batch(added(newMessage("m3", "s1")))
	b2.Idempotency = &service.IdempotencyRecord{UserID: "u2", Key: "k", SessionID: "s1", MessageID: "m3", RunID: "r3", CreatedAt: t0}
	if err := appendOne(s, b2); err != nil {
		t.Errorf("the same key of another user: %v", err)
	}
}

func testAppendCreateTwice(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	changed := newSession("s1", "u2", t0)
	wantCode(t, "creating s1 again", appendOne(s, &service.Batch{SessionID: "s1", Create: changed}), service.ECONFLICT)
	if got, _ := s.Session(t.Context(), "s1"); got == nil || got.UserID != "u1" {
		t.Errorf("the refused creation changed the session: %+v", got)
	}
}

func testAppendMalformed(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	bad := map[string]*service.Batch{
		"no session ID":         {Events: []*service.Event{{Seq: 1, Type: service.EventMessageChunk}}},
		"delete and write":      {SessionID: "s1", Delete: true, Events: []*service.Event{{Seq: 1, Type: service.EventMessageChunk}}},
		"Seqs not consecutive":  {SessionID: "s1", Events: []*service.Event{{Seq: 1, Type: service.EventMessageChunk}, {Seq: 3, Type: service.EventMessageChunk}}},
		"event of another":      {SessionID: "s1", Events: []*service.Event{{SessionID: "s2", Seq: 1, Type: service.EventMessageChunk}}},
		"row of another":        {SessionID: "s1", Events: []*service.Event{added(newMessage("m1", "s2"))}},
		"creating another":      {SessionID: "s1", Create: newSession("s2", "u1", t0)},
		"idempotency elsewhere": {SessionID: "s1", Events: []*service.Event{{Seq: 1, Type: service.EventMessageChunk}}, Idempotency: &service.IdempotencyRecord{UserID: "u", Key: "k", SessionID: "s2"}},
	}
	bad["row of another"].Events[0].Seq = 1
	for name, b := range bad {
		wantCode(t, name, appendOne(s, b), service.EINVALID)
	}
	if got, _ := s.Session(t.Context(), "s1"); got == nil || got.LastSeq != 0 {
		t.Errorf("a malformed batch wrote: %+v", got)
	}
}

func testAppendFailAlone(t *testing.T, s service.Store) {
	ctx := t.Context()
	l1 := create(t, s, newSession("s1", "u1", t0))
	l2 := create(t, s, newSession("s2", "u1", t0))
	good1 := l1.batch(added(newMessage("m1", "s1")))
	gap := &service.Batch{SessionID: "s2", Events: []*service.Event{chunk("x", "x", 0)}}
	gap.Events[0].Seq = 7
	good2 := l2.batch(added(newMessage("m2", "s2")))
	missing := (&log{id: "s3"}).batch(chunk("y", "y", 0))
	errs := s.Append(ctx, []*service.Batch{good1, gap, good2, missing})
	if len(errs) != 4 {
		t.Fatalf("Append returned %d errors for 4 batches", len(errs))
	}
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("good batches failed: %v, %v", errs[0], errs[2])
	}
	wantCode(t, "the batch with a gap", errs[1], service.ECONFLICT)
	wantCode(t, "the batch to a missing session", errs[3], service.ENOTFOUND)
	for _, id := range []string{"m1", "m2"} {
		if _, err := s.Message(ctx, id); err != nil {
			t.Errorf("message %s of a good batch: %v", id, err)
		}
	}
}

func testAppendLeavesBatches(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", t0))
	m := newMessage("m1", "s1")
	tc := newToolCall("t1", "s1", "m1", t0)
	b := l.batch(added(m), toolStarted(tc), chunk("m1", "hi", 0), runChanged(newRun("r1", "s1", service.RunCompleted, t0)))
	b.Idempotency = &service.IdempotencyRecord{UserID: "u1", Key: "k", SessionID: "s1", MessageID: "m1", RunID: "r1", CreatedAt: t0}
	before := dump(b)
	mustAppend(t, s, b)
	if after := dump(b); after != before {
		t.Errorf("Append changed its batch:\nbefore %s\nafter  %s", before, after)
	}
}

func testAppendDerives(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	m := newMessage("m1", "s1")
	m.Status, m.Content = service.MessageStreaming, ""
	r := newRun("r1", "s1", service.RunRunning, t0)
	tc := newToolCall("t1", "s1", "m1", at(time.Second))
	q := newQuestion("q1", "s1", "r1")
	l.append(added(m), runChanged(r), toolStarted(tc), chunk("m1", "par", 0), toolOutput(tc, "out", 0), asked(q))
	// Chunks change no row: the streaming message and the running tool keep their start.
	m.Seq = 1
	if got, _ := s.Message(ctx, "m1"); got == nil || got.Content != "" || got.Status != service.MessageStreaming {
		t.Errorf("message while streaming = %+v, want empty STREAMING", got)
	}
	calls, _ := s.ToolCalls(ctx, []string{"m1"})
	wantEqual(t, "tool call while running", calls, []*service.ToolCall{utcToolCall(tc)})

	done := *m
	done.Content, done.Status, done.Error = "partial", service.MessageFailed, "it broke"
	tcDone := *tc
	tcDone.Status, tcDone.Output, tcDone.Result, tcDone.FinishedAt = service.ToolCompleted, "out", ptr("found"), ptr(at(2*time.Second))
	qDone := *q
	qDone.Answer, qDone.AnsweredAt = ptr("this"), ptr(at(3*time.Second))
	rDone := *r
	rDone.Status, rDone.Error, rDone.FinishedAt = service.RunFailed, "it broke", ptr(at(4*time.Second))
	rDone.Usage = &service.Usage{InputTokens: 10, OutputTokens: 5, CachedInputTokens: ptr(3)}
	renamed := newSession("s1", "u1", at(time.Hour))
	renamed.Title, renamed.Settings.BusyPolicy = "renamed", service.BusyReject
	l.append(toolFinished(&tcDone), completed(&done), answered(&qDone), runChanged(&rDone),
		&service.Event{Type: service.EventSessionUpdated, At: t0, Session: renamed})

	gm, err := s.Message(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "completed message", gm, utcMessage(&done))
	calls, _ = s.ToolCalls(ctx, []string{"m1"})
	wantEqual(t, "finished tool call", calls, []*service.ToolCall{utcToolCall(&tcDone)})
	gq, err := s.Question(ctx, "q1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "answered question", gq, utcQuestion(&qDone))
	gr, err := s.Run(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "ended run", gr, utcRun(&rDone))
	gs, err := s.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "updated session", gs, utcSession(renamed, 11))
}

func testAppendWithdraws(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	r := newRun("r1", "s1", service.RunWaitingForInput, t0)
	q1, q2 := newQuestion("q1", "s1", "r1"), newQuestion("q2", "s1", "r1")
	other := newQuestion("q3", "s1", "r2")
	l.append(runChanged(r), asked(q1), asked(q2), asked(other))
	a := *q1
	a.Answer, a.AnsweredAt = ptr("yes"), ptr(t0)
	l.append(answered(&a))
	waiting := *r
	waiting.Status = service.RunRunning
	l.append(runChanged(&waiting)) // not final: nothing is withdrawn
	if got, _ := s.Question(ctx, "q2"); got == nil || got.Withdrawn {
		t.Errorf("q2 withdrawn while its run goes on: %+v", got)
	}
	ended := *r
	ended.Status = service.RunCancelled
	l.append(runChanged(&ended))
	for id, want := range map[string]bool{"q1": false, "q2": true, "q3": false} {
		got, err := s.Question(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Withdrawn != want {
			t.Errorf("%s withdrawn = %v, want %v", id, got.Withdrawn, want)
		}
	}
}

func testAppendActivity(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	reply := newMessage("m1", "s1")
	reply.CreatedAt = at(time.Hour)
	ev := added(reply)
	ev.At = at(time.Hour)
	l.append(ev)
	if got, _ := s.Session(ctx, "s1"); got == nil || !got.UpdatedAt.Equal(t0) {
		t.Errorf("an assistant message moved UpdatedAt to %v", got.UpdatedAt)
	}
	user := newMessage("m2", "s1")
	user.Role = service.RoleUser
	ev = added(user)
	ev.At = at(2 * time.Hour)
	l.append(ev)
	if got, _ := s.Session(ctx, "s1"); got == nil || !got.UpdatedAt.Equal(at(2*time.Hour)) {
		t.Errorf("UpdatedAt after a user message = %v, want %v", got.UpdatedAt, at(2*time.Hour))
	}
}

func testAppendDelete(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	keep := create(t, s, newSession("s2", "u1", t0))
	m := newMessage("m1", "s1")
	q := newQuestion("q1", "s1", "r1")
	tc := newToolCall("t1", "s1", "m1", t0)
	b := l.batch(added(m), runChanged(newRun("r1", "s1", service.RunRunning, t0)), asked(q), toolStarted(tc))
	b.Idempotency = &service.IdempotencyRecord{UserID: "u1", Key: "k", SessionID: "s1", MessageID: "m1", RunID: "r1", CreatedAt: t0}
	mustAppend(t, s, b)
	keep.append(added(newMessage("m2", "s2")))
	mustAppend(t, s, &service.Batch{SessionID: "s1", Delete: true})

	_, err := s.Session(ctx, "s1")
	wantCode(t, "deleted session", err, service.ENOTFOUND)
	_, err = s.Message(ctx, "m1")
	wantCode(t, "its message", err, service.ENOTFOUND)
	_, err = s.Run(ctx, "r1")
	wantCode(t, "its run", err, service.ENOTFOUND)
	_, err = s.Question(ctx, "q1")
	wantCode(t, "its question", err, service.ENOTFOUND)
	_, err = s.Idempotency(ctx, "u1", "k")
	wantCode(t, "its idempotency record", err, service.ENOTFOUND)
	if calls, _ := s.ToolCalls(ctx, []string{"m1"}); len(calls) != 0 {
		t.Errorf("its tool calls remain: %d", len(calls))
	}
	if evs, _ := s.Events(ctx, "s1", 0, 0); len(evs) != 0 {
		t.Errorf("its events remain: %d", len(evs))
	}
	if _, err := s.Message(ctx, "m2"); err != nil {
		t.Errorf("another session's message: %v", err)
	}
}

func testAppendAdmit(t *testing.T, s service.Store) {
	ctx := t.Context()
	l1 := create(t, s, newSession("s1", "u1", t0))
	l2 := create(t, s, newSession("s2", "u1", t0))
	l3 := create(t, s, newSession("s3", "u2", t0))
	running := func(id, session, user string) *service.Run {
		r := newRun(id, session, service.RunRunning, t0)
		r.UserID = user
		r.Owner = "replica-a"
		return r
	}
	l1.append(runChanged(running("r1", "s1", "u1")))
	l3.append(runChanged(running("r3", "s3", "u2"))) // another user's run does not count
	b := l2.batch(runChanged(running("r2", "s2", "u1")))
	b.Admit = &service.Admission{UserID: "u1", RunID: "r2", Limit: 1}
	wantCode(t, "a second run of u1 with a limit of 1", appendOne(s, b), service.ERATELIMIT)
	if _, err := s.Run(ctx, "r2"); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("the refused admission wrote its run: %v", err)
	}
	b.Admit.Limit = 2
	if err := appendOne(s, b); err != nil {
		t.Fatalf("a second run of u1 with a limit of 2: %v", err)
	}
	l2.last++
	// A run that is already RUNNING is not counted against itself.
	again := l2.batch(runChanged(running("r2", "s2", "u1")))
	again.Admit = &service.Admission{UserID: "u1", RunID: "r2", Limit: 2}
	if err := appendOne(s, again); err != nil {
		t.Errorf("admitting r2 again: %v", err)
	}
	got, err := s.Run(ctx, "r2")
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "replica-a" {
		t.Errorf("Owner = %q, want it kept", got.Owner)
	}
}

func testAppendConcurrent(t *testing.T, s service.Store) {
	const sessions, rounds = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		id := fmt.Sprintf("s%d", i)
		l := create(t, s, newSession(id, "u1", t0))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				b := l.batch(chunk("m", "x", r))
				if err := appendOne(s, b); err != nil {
					errs <- err
					return
				}
				l.last++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range sessions {
		got, err := s.Session(t.Context(), fmt.Sprintf("s%d", i))
		if err != nil || got.LastSeq != rounds {
			t.Errorf("session s%d: %+v, %v; want LastSeq %d", i, got, err, rounds)
		}
	}
}

func testCompact(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	m := newMessage("m1", "s1")
	tc := newToolCall("t1", "s1", "m1", t0)
	l.append(added(m), // 1
		chunk("m1", "Hel", 0), chunk("m1", "lo", 3), // 2, 3
		toolStarted(tc),                              // 4
		chunk("m1", ", ", 5), toolOutput(tc, "o", 0), // 5, 6
		chunk("m1", "wor", 7), chunk("m1", "ld", 10), // 7, 8
		completed(m)) // 9
	if err := s.Compact(ctx, []service.Compaction{{SessionID: "s1", Key: "m1", FromSeq: 2}}); err != nil {
		t.Fatal(err)
	}
	evs := wantHelloWorldFolded(t, s, "s1")
	// Compacting again changes nothing; another stream's key leaves these alone.
	if err := s.Compact(ctx, []service.Compaction{{SessionID: "s1", Key: "m1", FromSeq: 2}, {SessionID: "s1", Key: "t1", FromSeq: 2}}); err != nil {
		t.Fatal(err)
	}
	again, _ := s.Events(ctx, "s1", 0, 0)
	wantEqual(t, "events after compacting again", again, evs)
	if got, _ := s.Session(ctx, "s1"); got == nil || got.LastSeq != 9 {
		t.Errorf("LastSeq after compaction = %+v, want 9", got)
	}
}

// testCompactMany folds several sessions' streams in one call: a session that does not
// exist is skipped, and the others are folded as one at a time would fold them.
func testCompactMany(t *testing.T, s service.Store) {
	ctx := t.Context()
	var cs []service.Compaction
	for _, id := range []string{"s1", "s2"} {
		l := create(t, s, newSession(id, "u1", t0))
		m := newMessage(id+"m", id)
		l.append(added(m), chunk(m.ID, "a", 0), chunk(m.ID, "b", 1), chunk(m.ID, "c", 2), completed(m))
		cs = append(cs, service.Compaction{SessionID: "missing", Key: "m", FromSeq: 1}, service.Compaction{SessionID: id, Key: m.ID, FromSeq: 2})
	}
	if err := s.Compact(ctx, cs); err != nil {
		t.Fatalf("Compact with a missing session: %v, want it skipped", err)
	}
	for _, id := range []string{"s1", "s2"} {
		evs, err := s.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, id+": seqs after compaction", seqsOf(evs), []int64{1, 4, 5})
		if e := evs[1]; e.Delta != "abc" || e.Offset != 0 || e.CoalescedFrom != 2 {
			t.Errorf("%s: folded chunk %+v, want abc from offset 0, coalesced from 2", id, e)
		}
	}
}

// testCompactPrepared gives Compact the folding the service made of the events it wrote:
// the result is the same as folding what the store reads. A prepared folding whose runs
// the store no longer holds whole (folded before) is not written as it is: here its text
// is wrong, and the events stay as the first folding left them.
func testCompactPrepared(t *testing.T, s service.Store) {
	ctx := t.Context()
	written := func(id string) []*service.Event {
		l := create(t, s, newSession(id, "u1", t0))
		m := newMessage("m"+id, id)
		tc := newToolCall("t"+id, id, m.ID, t0)
		evs := []*service.Event{added(m), // 1
			chunk(m.ID, "Hel", 0), chunk(m.ID, "lo", 3), // 2, 3
			toolStarted(tc),                              // 4
			chunk(m.ID, ", ", 5), toolOutput(tc, "o", 0), // 5, 6
			chunk(m.ID, "wor", 7), chunk(m.ID, "ld", 10), // 7, 8
			completed(m)} // 9
		l.append(evs...)
		return evs
	}
	prepared := func(id string, evs []*service.Event) service.Compaction {
		folded, _ := service.Coalesce(evs[1:], "m"+id)
		return service.Compaction{SessionID: id, Key: "m" + id, FromSeq: 2, Prepared: true, Folded: folded}
	}
	evs := written("s1")
	if err := s.Compact(ctx, []service.Compaction{prepared("s1", evs)}); err != nil {
		t.Fatal(err)
	}
	wantHelloWorldFolded(t, s, "s1")

	evs = written("s2")
	stale := prepared("s2", evs)
	if err := s.Compact(ctx, []service.Compaction{{SessionID: "s2", Key: "ms2", FromSeq: 2}}); err != nil {
		t.Fatal(err)
	}
	for i, e := range stale.Folded {
		cp := *e
		cp.Delta = strings.Repeat("?", len(e.Delta))
		stale.Folded[i] = &cp
	}
	if err := s.Compact(ctx, []service.Compaction{stale}); err != nil {
		t.Fatal(err)
	}
	wantHelloWorldFolded(t, s, "s2")
}

// wantHelloWorldFolded checks session id's log as the stream "Hello, world" broken by a
// tool call's start and output (see testCompact) is left once folded: seqs 2 and 7 gone,
// "Hello" at 3 from 2 and "world" at 8 from 7. It returns the log.
func wantHelloWorldFolded(t *testing.T, s service.Store, id string) []*service.Event {
	t.Helper()
	evs, err := s.Events(t.Context(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, id+": seqs after compaction", seqsOf(evs), []int64{1, 3, 4, 5, 6, 8, 9})
	byseq := map[int64]*service.Event{}
	for _, e := range evs {
		byseq[e.Seq] = e
	}
	for seq, want := range map[int64][3]any{3: {"Hello", 0, int64(2)}, 5: {", ", 5, int64(0)}, 8: {"world", 7, int64(7)}} {
		e := byseq[seq]
		if got := [3]any{e.Delta, e.Offset, e.CoalescedFrom}; got != want {
			t.Errorf("%s: event %d: delta, offset, coalesced from = %v, want %v", id, seq, got, want)
		}
	}
	return evs
}

func testSessionNotFound(t *testing.T, s service.Store) {
	_, err := s.Session(t.Context(), "missing")
	wantCode(t, "Session(missing)", err, service.ENOTFOUND)
}

func testSessionRoundTrip(t *testing.T, s service.Store) {
	sess := newSession("s1", "u1", at(time.Hour))
	sess.Title = "ünïcode ✓ 'quotes' \"double\""
	sess.Settings.Model, sess.Settings.Temperature = nil, nil
	l := create(t, s, sess)
	got, err := s.Session(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "new session", got, utcSession(sess, 0))
	l.append(chunk("m", "a", 0), chunk("m", "b", 1))
	got, _ = s.Session(t.Context(), "s1")
	wantEqual(t, "session with two events", got, utcSession(sess, 2))
}

func testSessions(t *testing.T, s service.Store) {
	ctx := t.Context()
	// a and b share an UpdatedAt: ID descending breaks the tie.
	for _, ss := range []*service.TalkSession{
		newSession("a", "u1", at(2*time.Hour)), newSession("b", "u1", at(2*time.Hour)),
		newSession("c", "u1", at(3*time.Hour)), newSession("d", "u1", at(time.Hour)),
		newSession("x", "u2", at(4*time.Hour)),
	} {
		create(t, s, ss)
	}
	all, err := s.Sessions(ctx, "u1", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "all of u1", sessionIDs(all), []string{"c", "b", "a", "d"})
	page, _ := s.Sessions(ctx, "u1", nil, 2)
	wantEqual(t, "first page", sessionIDs(page), []string{"c", "b"})
	last := page[len(page)-1]
	rest, _ := s.Sessions(ctx, "u1", &service.SessionPosition{UpdatedAt: last.UpdatedAt, ID: last.ID}, 10)
	wantEqual(t, "after b", sessionIDs(rest), []string{"a", "d"})
	none, _ := s.Sessions(ctx, "u3", nil, 10)
	wantEqual(t, "of a user with none", sessionIDs(none), []string{})
}

func testMessagesEmpty(t *testing.T, s service.Store) {
	create(t, s, newSession("s1", "u1", t0))
	for name, id := range map[string]string{"no messages": "s1", "missing session": "nope"} {
		got, err := s.Messages(t.Context(), id, service.MessagePage{First: 10})
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("%s: %v, %v; want an empty slice", name, got, err)
		}
	}
}

func testMessagesPage(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	for i := 1; i <= 6; i++ {
		l.append(added(newMessage(fmt.Sprintf("m%d", i), "s1")), chunk("x", "y", i))
	}
	// Message mi has Seq 2i-1.
	for _, tt := range []struct {
		name string
		page service.MessagePage
		want []string
	}{
		{"all", service.MessagePage{}, []string{"m1", "m2", "m3", "m4", "m5", "m6"}},
		{"first 2", service.MessagePage{First: 2}, []string{"m1", "m2"}},
		{"first 2 after m2", service.MessagePage{First: 2, After: 3}, []string{"m3", "m4"}},
		{"last 2", service.MessagePage{Last: 2}, []string{"m5", "m6"}},
		{"last 2 before m5", service.MessagePage{Last: 2, Before: 9}, []string{"m3", "m4"}},
		{"first 10 between m2 and m5", service.MessagePage{First: 10, After: 3, Before: 9}, []string{"m3", "m4"}},
		{"last wins over first", service.MessagePage{First: 1, Last: 1}, []string{"m6"}},
	} {
		got, err := s.Messages(ctx, "s1", tt.page)
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, tt.name, messageIDs(got), tt.want)
	}
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
	l1 := create(t, s, newSession("s1", "u1", t0))
	l2 := create(t, s, newSession("s2", "u1", t0))
	l1.append(runChanged(newRun("r3", "s1", service.RunQueued, at(3*time.Second))),
		runChanged(newRun("r1", "s1", service.RunRunning, at(time.Second))),
		runChanged(newRun("r9", "s1", service.RunCompleted, at(0))))
	l2.append(runChanged(newRun("r2b", "s2", service.RunWaitingForInput, at(2*time.Second))),
		runChanged(newRun("r2a", "s2", service.RunQueued, at(2*time.Second))))
	got, err := s.RunsByStatus(t.Context(), service.RunRunning, service.RunQueued, service.RunWaitingForInput)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "active runs", idsOf(got, func(r *service.Run) string { return r.ID }), []string{"r1", "r2a", "r2b", "r3"})
	none, _ := s.RunsByStatus(t.Context(), service.RunFailed)
	wantEqual(t, "failed runs", idsOf(none, func(r *service.Run) string { return r.ID }), []string{})
}

func testQuestionNotFound(t *testing.T, s service.Store) {
	_, err := s.Question(t.Context(), "missing")
	wantCode(t, "Question(missing)", err, service.ENOTFOUND)
}

func testQuestions(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", t0))
	q1, q2 := newQuestion("q1", "s1", "r1"), newQuestion("q2", "s1", "r1")
	q2.Choices = nil
	l.append(asked(q1), asked(q2))
	got, err := s.Questions(t.Context(), []string{"q2", "missing", "q1"})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*service.Question{}
	for _, q := range got {
		byID[q.ID] = q
	}
	wantEqual(t, "questions", byID, map[string]*service.Question{"q1": utcQuestion(q1), "q2": utcQuestion(q2)})
	none, err := s.Questions(t.Context(), nil)
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("Questions(nil) = %v, %v; want an empty slice", none, err)
	}
}

func testToolCalls(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", t0))
	l.append(toolStarted(newToolCall("t3", "s1", "m1", at(3*time.Second))),
		toolStarted(newToolCall("t2b", "s1", "m1", at(2*time.Second))),
		toolStarted(newToolCall("t2a", "s1", "m2", at(2*time.Second))),
		toolStarted(newToolCall("t9", "s1", "m9", at(0))))
	got, err := s.ToolCalls(t.Context(), []string{"m1", "m2"})
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "tool calls of m1 and m2", idsOf(got, func(c *service.ToolCall) string { return c.ID }), []string{"t2a", "t2b", "t3"})
	none, err := s.ToolCalls(t.Context(), nil)
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("ToolCalls(nil) = %v, %v; want an empty slice", none, err)
	}
}

func testToolCall(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", t0))
	tc := newToolCall("t1", "s1", "m1", at(time.Second))
	l.append(toolStarted(tc))
	got, err := s.ToolCall(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "tool call", got, utcToolCall(tc))
	_, err = s.ToolCall(t.Context(), "missing")
	wantCode(t, "ToolCall(missing)", err, service.ENOTFOUND)
}

// testInputsRoundTrip writes what human in the loop adds to questions and tool calls, and
// reads it back whole: a multiple-choice question, a form with its schema, a question
// withdrawn on expiry with its reason, one answering a tool call; a call awaiting
// approval, then decided with edited arguments; a call rejected; a session's tool
// policies.
func testInputsRoundTrip(t *testing.T, s service.Store) {
	ctx := t.Context()
	sess := newSession("s1", "u1", t0)
	sess.Settings.ToolPolicies = map[string]service.ToolPolicy{"shell": service.PolicyAsk, "echo": service.PolicyDeny}
	l := create(t, s, sess)
	multi := newQuestion("q1", "s1", "r1")
	multi.Choices, multi.Multiple, multi.ExpiresAt = []string{"red", "green", "blue"}, true, ptr(at(time.Hour))
	form := newQuestion("q2", "s1", "r1")
	form.Choices, form.AnswerSchema, form.ExpiresAt = nil, `{"type":"object","required":["name"]}`, ptr(at(2*time.Hour))
	form.ToolCallID = "t0"
	waiting := newToolCall("t1", "s1", "m1", at(time.Second))
	waiting.Status = service.ToolAwaitingApproval
	waiting.Approval = &service.ToolApproval{RequestedArguments: `{"text":"asked"}`, ExpiresAt: at(24 * time.Hour)}
	l.append(asked(multi), asked(form), toolStarted(waiting),
		&service.Event{Type: service.EventToolApprovalRequested, At: t0, ToolCall: waiting})
	gq, err := s.Questions(ctx, []string{"q1", "q2"})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*service.Question{}
	for _, q := range gq {
		byID[q.ID] = q
	}
	wantEqual(t, "questions asked", byID, map[string]*service.Question{"q1": utcQuestion(multi), "q2": utcQuestion(form)})
	got, err := s.ToolCall(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "call awaiting approval", got, utcToolCall(waiting))

	expired := *multi
	expired.Withdrawn, expired.WithdrawnReason = true, service.ReasonExpired
	decided := *waiting
	approval := *waiting.Approval
	decision := service.DecisionApprove
	approval.Decision, approval.DecidedAt, approval.DecidedBy = &decision, ptr(at(time.Minute)), "u1"
	decided.Approval, decided.Status, decided.Arguments = &approval, service.ToolRunning, `{"text":"edited"}`
	rejected := newToolCall("t2", "s1", "m1", at(2*time.Second))
	reject := service.DecisionReject
	rejected.Status, rejected.FinishedAt = service.ToolRejected, ptr(at(3*time.Second))
	rejected.Approval = &service.ToolApproval{RequestedArguments: "{}", Decision: &reject, Reason: "no", DecidedAt: ptr(at(3 * time.Second)),
		DecidedBy: "u1", ExpiresAt: at(time.Hour)}
	l.append(&service.Event{Type: service.EventQuestionWithdrawn, At: t0, Question: &expired},
		&service.Event{Type: service.EventToolApprovalDecided, At: t0, ToolCall: &decided},
		toolStarted(rejected), &service.Event{Type: service.EventToolApprovalDecided, At: t0, ToolCall: rejected})
	q, err := s.Question(ctx, "q1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "question withdrawn on expiry", q, utcQuestion(&expired))
	calls, err := s.ToolCalls(ctx, []string{"m1"})
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "calls decided", calls, []*service.ToolCall{utcToolCall(&decided), utcToolCall(rejected)})
	gs, err := s.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "tool policies", gs.Settings.ToolPolicies, sess.Settings.ToolPolicies)
}

func testEvents(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	other := create(t, s, newSession("s2", "u1", t0))
	for i := range 5 {
		l.append(chunk("m", "x", i))
	}
	other.append(chunk("m", "y", 0))
	for _, tt := range []struct {
		after int64
		limit int
		want  []int64
	}{{0, 0, []int64{1, 2, 3, 4, 5}}, {2, 0, []int64{3, 4, 5}}, {2, 2, []int64{3, 4}}, {5, 0, []int64{}}} {
		got, err := s.Events(ctx, "s1", tt.after, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, fmt.Sprintf("after %d limit %d", tt.after, tt.limit), seqsOf(got), tt.want)
	}
	none, err := s.Events(ctx, "missing", 0, 0)
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("events of a missing session = %v, %v; want an empty slice", none, err)
	}
}

func testEventPayloads(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", t0))
	m := newMessage("m1", "s1")
	r := newRun("r1", "s1", service.RunFailed, t0)
	r.Usage = &service.Usage{InputTokens: 1, OutputTokens: 2}
	q := newQuestion("q1", "s1", "r1")
	tc := newToolCall("t1", "s1", "m1", t0)
	sess := newSession("s1", "u1", at(time.Hour))
	want := []*service.Event{added(m), chunk("m1", "ünï ✓", 3), runChanged(r), asked(q), toolStarted(tc),
		{Type: service.EventSessionUpdated, At: t0, Session: sess}}
	withQ := added(newMessage("m2", "s1"))
	withQ.Question = newQuestion("q2", "s1", "r1")
	want = append(want, withQ)
	l.append(want...)
	got, err := s.Events(t.Context(), "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range want {
		e.SessionID = "s1"
		e.At = e.At.UTC()
		if e.Message != nil {
			e.Message = utcMessage(e.Message)
		}
		if e.Run != nil {
			e.Run = utcRun(e.Run)
		}
		if e.Question != nil {
			e.Question = utcQuestion(e.Question)
		}
		if e.ToolCall != nil {
			e.ToolCall = utcToolCall(e.ToolCall)
		}
		if e.Session != nil {
			e.Session = utcSession(e.Session, 0)
		}
	}
	wantEqual(t, "events", got, want)
}

func testIdempotencyNotFound(t *testing.T, s service.Store) {
	_, err := s.Idempotency(t.Context(), "u1", "missing")
	wantCode(t, "Idempotency(missing)", err, service.ENOTFOUND)
}

func testCopies(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	q := newQuestion("q1", "s1", "r1")
	l.append(added(newMessage("m1", "s1")), asked(q), runChanged(newRun("r1", "s1", service.RunRunning, t0)))
	q1, _ := s.Question(ctx, "q1")
	q1.Choices[0] = "changed"
	q1.Prompt = "changed"
	if q2, _ := s.Question(ctx, "q1"); q2.Choices[0] != "this" || q2.Prompt != "Which one?" {
		t.Errorf("a change to a returned question reached the store: %+v", q2)
	}
	s1, _ := s.Session(ctx, "s1")
	*s1.Settings.Model = "changed"
	if s2, _ := s.Session(ctx, "s1"); *s2.Settings.Model != "model-s1" {
		t.Errorf("a change to a returned session reached the store: %s", *s2.Settings.Model)
	}
	evs, _ := s.Events(ctx, "s1", 0, 0)
	evs[0].Message.Content = "changed"
	if again, _ := s.Events(ctx, "s1", 0, 0); again[0].Message.Content == "changed" {
		t.Error("a change to a returned event reached the store")
	}
}

func testTimes(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", t0))
	l.append(added(newMessage("m1", "s1")))
	sess, _ := s.Session(t.Context(), "s1")
	m, _ := s.Message(t.Context(), "m1")
	evs, _ := s.Events(t.Context(), "s1", 0, 0)
	for name, got := range map[string]time.Time{"session CreatedAt": sess.CreatedAt, "message CreatedAt": m.CreatedAt, "event At": evs[0].At, "event's message": evs[0].Message.CreatedAt} {
		if got.Location() != time.UTC {
			t.Errorf("%s in %v, want UTC", name, got.Location())
		}
		if got != got.Round(0) {
			t.Errorf("%s has a monotonic clock reading", name)
		}
	}
	if !sess.CreatedAt.Equal(t0) || sess.CreatedAt.Nanosecond() != t0.Nanosecond() {
		t.Errorf("session CreatedAt = %v, want %v to the nanosecond", sess.CreatedAt, t0)
	}
}

func testPing(t *testing.T, s service.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func testFootprint(t *testing.T, s service.Store) {
	ctx := t.Context()
	a := newSession("s1", "u1", t0)
	l1 := create(t, s, a)
	b := newSession("s2", "u1", t0)
	create(t, s, b)
	create(t, s, newSession("s3", "u2", t0))
	user := newMessage("m1", "s1")
	user.Role, user.Content = service.RoleUser, "twelve bytes"
	reply := newMessage("m2", "s1") // the agent's words do not count
	renamed := newSession("s1", "u1", t0)
	renamed.Title = "a longer title than before"
	l1.append(added(user), added(reply), &service.Event{Type: service.EventSessionUpdated, At: t0, Session: renamed})
	n, bytes, err := s.Footprint(ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if want := a.Size() + b.Size() + 12 + renamed.Size(); n != 2 || bytes != want {
		t.Errorf("Footprint(u1) = %d sessions, %d bytes; want 2, %d", n, bytes, want)
	}
	mustAppend(t, s, &service.Batch{SessionID: "s1", Delete: true})
	if n, bytes, _ := s.Footprint(ctx, "u1"); n != 1 || bytes != b.Size() {
		t.Errorf("after deleting s1: %d sessions, %d bytes; want 1, %d", n, bytes, b.Size())
	}
	if n, bytes, _ := s.Footprint(ctx, "nobody"); n != 0 || bytes != 0 {
		t.Errorf("Footprint of a user with nothing = %d, %d", n, bytes)
	}
}
