package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// asked starts a demo /ask run in a new session of alice's and returns the session, the
// run, the question and a feed of the session from its start.
func asked(t *testing.T, svc *service.Service) (*service.SessionView, *service.Run, *service.Question, *feed) {
	t.Helper()
	sess := newSession(t, svc, alice, "", "")
	f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
	_, run := send(t, svc, alice, sess.ID, "/ask Favourite colour?")
	evs := f.until(runIs(run.ID, service.RunWaitingForInput))
	return sess, run, first(t, evs, service.EventQuestionAsked, nil).Question, f
}

func TestRespond(t *testing.T) {
	t.Run("answers a question of the caller's: the answer is stored, shown in the history, and the waiting run goes on", func(t *testing.T) {
		svc := start(t, setup{})
		sess, run, q, f := asked(t, svc)
		answered, r, err := svc.Respond(alice, q.ID, "blue")
		if err != nil {
			t.Fatal(err)
		}
		if answered.ID != q.ID || answered.Answer == nil || *answered.Answer != "blue" || answered.AnsweredAt == nil {
			t.Errorf("answered question %+v", answered)
		}
		if r.ID != run.ID || r.Status != service.RunRunning {
			t.Errorf("run %s %s, want %s RUNNING", r.ID, r.Status, run.ID)
		}
		evs := f.until(runEnds(run.ID))
		if got := lastEnd(t, evs).Status; got != service.RunCompleted {
			t.Errorf("run ended %s", got)
		}
		first(t, evs, service.EventQuestionAnswered, func(ev *service.Event) bool { return *ev.Question.Answer == "blue" })
		stored, err := svc.Question(alice, q.ID)
		if err != nil || stored.Answer == nil || *stored.Answer != "blue" || stored.Withdrawn {
			t.Errorf("stored question %+v, %v", stored, err)
		}
		h := history(t, svc, alice, sess.ID)
		var got []string
		for _, m := range h {
			got = append(got, string(m.Kind)+":"+m.Content)
		}
		want := []string{"TEXT:/ask Favourite colour?", "QUESTION:Favourite colour?", "ANSWER:blue", `TEXT:You answered "blue". Thank you!`}
		if !equalStrings(got, want) {
			t.Fatalf("history %q, want %q", got, want)
		}
		for _, m := range h[1:3] {
			if m.QuestionID != q.ID || m.Question == nil || m.Question.Answer == nil || *m.Question.Answer != "blue" {
				t.Errorf("%s message without its answered question: %+v", m.Kind, m.Question)
			}
		}
		if h[2].Role != service.RoleUser || h[2].RunID != run.ID {
			t.Errorf("the answer is %s of run %s", h[2].Role, h[2].RunID)
		}
	})

	t.Run("the waiting run goes on, started again on the history when the server restarted meanwhile", func(t *testing.T) {
		store := inmem.New()
		svc, _ := startService(t, setup{store: store})
		sess, run, q, _ := asked(t, svc)
		svc.Close()
		svc, _ = startService(t, setup{store: store})
		if v := view(t, svc, alice, sess.ID); v.Status != service.SessionWaitingForInput || v.PendingQuestion == nil || v.PendingQuestion.ID != q.ID {
			t.Fatalf("after the restart: %s, question %+v", v.Status, v.PendingQuestion)
		}
		f := follow(t, svc, alice, sess.ID, "")
		if _, _, err := svc.Respond(alice, q.ID, "green"); err != nil {
			t.Fatal(err)
		}
		evs := f.until(runEnds(run.ID))
		if got := lastEnd(t, evs).Status; got != service.RunCompleted {
			t.Errorf("run ended %s", got)
		}
		if got, want := replyOf(t, evs, run.ID).Content, `You answered "green". Thank you!`; got != want {
			t.Errorf("reply %q, want %q", got, want)
		}
	})

	t.Run("ENOTFOUND when the question is missing", func(t *testing.T) {
		svc := start(t, setup{})
		_, _, err := svc.Respond(alice, missingID, "blue")
		wantCode(t, "missing", err, service.ENOTFOUND)
	})

	t.Run("ENOTFOUND when the question is not the caller's, as when missing", func(t *testing.T) {
		svc := start(t, setup{})
		sess, _, q, _ := asked(t, svc)
		_, _, other := svc.Respond(bob, q.ID, "blue")
		_, _, missing := svc.Respond(bob, missingID, "blue")
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
		if v := view(t, svc, alice, sess.ID); v.PendingQuestion == nil {
			t.Error("bob's answer was taken")
		}
	})

	t.Run("ECONFLICT when it was already answered", func(t *testing.T) {
		svc := start(t, setup{})
		_, run, q, f := asked(t, svc)
		if _, _, err := svc.Respond(alice, q.ID, "blue"); err != nil {
			t.Fatal(err)
		}
		_, _, err := svc.Respond(alice, q.ID, "red")
		wantCode(t, "a second answer while the run goes on", err, service.ECONFLICT)
		f.until(runEnds(run.ID))
		_, _, err = svc.Respond(alice, q.ID, "red")
		wantCode(t, "a second answer after the run", err, service.ECONFLICT)
		if stored, _ := svc.Question(alice, q.ID); *stored.Answer != "blue" {
			t.Errorf("answer %q, want the first", *stored.Answer)
		}
	})

	t.Run("ECONFLICT when it is no longer waited for", func(t *testing.T) {
		svc := start(t, setup{})
		sess, run, q, f := asked(t, svc)
		if _, err := svc.CancelRun(alice, sess.ID); err != nil {
			t.Fatal(err)
		}
		f.until(runEnds(run.ID))
		_, _, err := svc.Respond(alice, q.ID, "blue")
		wantCode(t, "a withdrawn question", err, service.ECONFLICT)
		if stored, _ := svc.Question(alice, q.ID); !stored.Withdrawn || stored.Answer != nil {
			t.Errorf("question %+v", stored)
		}
		if h := history(t, svc, alice, sess.ID); withContent(h, "blue") != 0 {
			t.Error("the refused answer is in the history")
		}
	})

	t.Run("EINVALID for a malformed ID or an empty or oversized answer", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxMessageBytes = 32 }})
		_, _, q, _ := asked(t, svc)
		for name, tc := range map[string][2]string{
			"a malformed ID":         {"q-1", "blue"},
			"an empty answer":        {q.ID, ""},
			"a blank answer":         {q.ID, "  \n"},
			"an answer of 33 bytes":  {q.ID, strings.Repeat("x", 33)},
			"an answer not in UTF-8": {q.ID, "bl\xffue"},
		} {
			_, _, err := svc.Respond(alice, tc[0], tc[1])
			wantCode(t, name, err, service.EINVALID)
		}
		if _, _, err := svc.Respond(alice, q.ID, strings.Repeat("x", 32)); err != nil {
			t.Errorf("an answer of 32 bytes: %v", err)
		}
	})

	t.Run("EUNAVAILABLE when it cannot be written, and then the question stays waiting", func(t *testing.T) {
		store := newFlakyStore()
		svc, _ := startService(t, setup{store: store})
		sess, run, q, f := asked(t, svc)
		store.writesFail.Store(true)
		_, _, err := svc.Respond(alice, q.ID, "blue")
		wantCode(t, "storage failing", err, service.EUNAVAILABLE)
		store.writesFail.Store(false)
		v := view(t, svc, alice, sess.ID)
		if v.Status != service.SessionWaitingForInput || v.PendingQuestion == nil || v.PendingQuestion.ID != q.ID {
			t.Errorf("after the failed answer: %s, question %+v", v.Status, v.PendingQuestion)
		}
		if stored, _ := svc.Question(alice, q.ID); stored.Answer != nil {
			t.Errorf("the failed answer was stored: %q", *stored.Answer)
		}
		if _, _, err := svc.Respond(alice, q.ID, "red"); err != nil {
			t.Fatalf("answering again once it can be written: %v", err)
		}
		evs := f.until(runEnds(run.ID))
		if got, want := replyOf(t, evs, run.ID).Content, `You answered "red". Thank you!`; got != want {
			t.Errorf("reply %q, want %q", got, want)
		}
	})

	t.Run("EUNAVAILABLE after Close", func(t *testing.T) {
		svc := start(t, setup{})
		_, _, q, _ := asked(t, svc)
		svc.Close()
		_, _, err := svc.Respond(alice, q.ID, "blue")
		wantCode(t, "after Close", err, service.EUNAVAILABLE)
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		_, _, q, _ := asked(t, svc)
		_, _, err := svc.Respond(nobody, q.ID, "blue")
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
}

func TestQuestion(t *testing.T) {
	t.Run("returns a question of the caller's", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, "")
		_, run := send(t, svc, alice, sess.ID, "go")
		p.next(t).ask("Pick one", []string{"red", "green"})
		id := first(t, f.until(runIs(run.ID, service.RunWaitingForInput)), service.EventQuestionAsked, nil).Question.ID
		q, err := svc.Question(alice, id)
		if err != nil {
			t.Fatal(err)
		}
		if q.RunID != run.ID || q.SessionID != sess.ID || q.Prompt != "Pick one" || !equalStrings(q.Choices, []string{"red", "green"}) ||
			q.Answer != nil || q.AnsweredAt != nil || q.Withdrawn || q.AskedAt.IsZero() {
			t.Errorf("question %+v", q)
		}
	})

	t.Run("ENOTFOUND when missing or another user's", func(t *testing.T) {
		svc := start(t, setup{})
		_, _, q, _ := asked(t, svc)
		_, other := svc.Question(bob, q.ID)
		_, missing := svc.Question(bob, missingID)
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
	})

	t.Run("both cases cost the same reads, so the answer's timing does not tell them apart", func(t *testing.T) {
		store := &countingStore{Store: inmem.New()}
		svc, _ := startService(t, setup{store: store})
		_, _, q, _ := asked(t, svc)
		store.take()
		svc.Question(bob, q.ID)
		other := store.take()
		svc.Question(bob, missingID)
		missing := store.take()
		if len(other) != len(missing) {
			t.Fatalf("reads for another user's question %v, for a missing one %v", other, missing)
		}
		for method, n := range other {
			if missing[method] != n {
				t.Errorf("reads for another user's question %v, for a missing one %v", other, missing)
			}
		}
	})

	t.Run("EINVALID for a malformed ID", func(t *testing.T) {
		svc := start(t, setup{})
		_, err := svc.Question(alice, "question-1")
		wantCode(t, "malformed", err, service.EINVALID)
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		_, _, q, _ := asked(t, svc)
		_, err := svc.Question(nobody, q.ID)
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
}

// A question that expires unanswered is withdrawn and the demo agent goes on without the
// answer, as it does for a call whose approval expired: its run completes, it says so,
// and nothing is logged as a failure.
func TestDemoGoesOnWhenItsQuestionExpires(t *testing.T) {
	svc := start(t, setup{config: func(c *service.Config) { c.InputExpiry = 50 * time.Millisecond }})
	for cmd, want := range map[string]string{
		"/ask Your name?": "You did not answer (expired). Ask me again any time.",
		"/form":           "You did not fill in the form (expired).",
	} {
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, cmd)
		evs := f.until(runEnds(run.ID))
		if end := lastEnd(t, evs); end.Status != service.RunCompleted {
			t.Errorf("%s: the run ended %s (%s), want COMPLETED", cmd, end.Status, end.Error)
		}
		if n := count(evs, is(service.EventQuestionWithdrawn)); n != 1 {
			t.Errorf("%s: %d questions withdrawn, want 1", cmd, n)
		}
		h := history(t, svc, alice, sess.ID)
		if got := h[len(h)-1].Content; got != want {
			t.Errorf("%s: the reply %q, want %q", cmd, got, want)
		}
	}
}

// An agent that returns the *Withdrawn of a question that expired fails its run with a
// message fit to show, never "internal error".
func TestAgentGivingUpOnAWithdrawnQuestionSaysWhy(t *testing.T) {
	giveUp := service.RunnerFunc(func(ctx context.Context, req service.RunRequest, out service.Output) error {
		_, err := out.Ask(ctx, "Quick?", nil)
		return err
	})
	svc := start(t, setup{agents: map[string]service.Runner{"giveup": giveUp}, config: func(c *service.Config) { c.InputExpiry = 50 * time.Millisecond }})
	sess := newSession(t, svc, alice, "giveup", "")
	f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
	_, run := send(t, svc, alice, sess.ID, "go")
	end := lastEnd(t, f.until(runEnds(run.ID)))
	if end.Status != service.RunFailed || !strings.Contains(end.Error, "withdrawn") || strings.Contains(end.Error, "internal") {
		t.Errorf("the run ended %s with %q, want FAILED saying the question was withdrawn", end.Status, end.Error)
	}
}
