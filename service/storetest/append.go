package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

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
	want := utcSession(renamed, 11)
	want.Unread = true // a question was asked, and a reply completed (failed)
	wantEqual(t, "updated session", gs, want)
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
