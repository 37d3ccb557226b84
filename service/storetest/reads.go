package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

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
