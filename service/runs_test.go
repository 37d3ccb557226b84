package service_test

import (
	"testing"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

func TestCancelRun(t *testing.T) {
	t.Run("stops the caller's active run in the session, keeping its partial reply; the run ends CANCELLED", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "partial ")
		f.until(is(service.EventMessageChunk))
		tn.say(t, "reply")
		got, err := svc.CancelRun(alice, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got == nil || got.ID != run.ID || got.Status != service.RunCancelled || got.FinishedAt == nil {
			t.Fatalf("CancelRun returned %+v, want the run CANCELLED", got)
		}
		tn.stopped(t)
		evs := f.until(runEnds(run.ID))
		if got := lastEnd(t, evs).Status; got != service.RunCancelled {
			t.Errorf("run ended %s", got)
		}
		if m := replyOf(t, evs, run.ID); m.Status != service.MessageInterrupted || m.Content != "partial reply" {
			t.Errorf("reply %s %q, want INTERRUPTED %q", m.Status, m.Content, "partial reply")
		}
		if got := getRun(t, svc, alice, run.ID).Status; got != service.RunCancelled {
			t.Errorf("stored run %s", got)
		}
		if v := view(t, svc, alice, sess.ID); v.Status != service.SessionIdle || v.ActiveRun != nil {
			t.Errorf("after cancelling: %s, %+v", v.Status, v.ActiveRun)
		}
	})

	t.Run("it returns nil (and no error) when nothing was running", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		if r, err := svc.CancelRun(alice, sess.ID); r != nil || err != nil {
			t.Errorf("on a new session: %v, %v", r, err)
		}
		f := follow(t, svc, alice, sess.ID, "")
		_, run := send(t, svc, alice, sess.ID, "hi")
		f.until(runEnds(run.ID))
		if r, err := svc.CancelRun(alice, sess.ID); r != nil || err != nil {
			t.Errorf("after the run ended: %v, %v", r, err)
		}
		if got := getRun(t, svc, alice, run.ID).Status; got != service.RunCompleted {
			t.Errorf("the ended run is now %s", got)
		}
	})

	t.Run("the run ends CANCELLED at once while its agent waits in Ask", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		a := tn.ask("Sure?", nil)
		q := first(t, f.until(runIs(run.ID, service.RunWaitingForInput)), service.EventQuestionAsked, nil).Question
		got, err := svc.CancelRun(alice, sess.ID)
		if err != nil || got == nil || got.Status != service.RunCancelled {
			t.Fatalf("CancelRun: %+v, %v", got, err)
		}
		if _, err := a.wait(t); !isCtxErr(err) {
			t.Errorf("Ask returned %v, want the context's error", err)
		}
		if stored, _ := svc.Question(alice, q.ID); !stored.Withdrawn {
			t.Error("the question was not withdrawn")
		}
		f.until(runIs(run.ID, service.RunCancelled))
	})

	t.Run("the run ends CANCELLED at once while its agent works in a tool, and the tool call is cancelled with its output", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tool, err := tn.out.StartTool("call_1", "sleep", "{}")
		if err != nil {
			t.Fatal(err)
		}
		if err := tool.Output("working..."); err != nil {
			t.Fatal(err)
		}
		got, err := svc.CancelRun(alice, sess.ID)
		if err != nil || got == nil || got.Status != service.RunCancelled {
			t.Fatalf("CancelRun: %+v, %v", got, err)
		}
		evs := f.until(runEnds(run.ID))
		call := first(t, evs, service.EventToolCallFinished, nil).ToolCall
		if call.Status != service.ToolCancelled || call.Output != "working..." || call.FinishedAt == nil {
			t.Errorf("tool call %s with output %q", call.Status, call.Output)
		}
		if err := tool.Finish("late", nil); err == nil {
			t.Error("the tool could finish after the run ended")
		}
	})

	t.Run("the run ends CANCELLED at once even when its agent ignores the cancellation, and what it writes afterwards is dropped", func(t *testing.T) {
		p := newPuppet()
		p.stubborn = true
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		t.Cleanup(func() { tn.finish(nil) })
		tn.say(t, "before")
		got, err := svc.CancelRun(alice, sess.ID)
		if err != nil || got == nil || got.Status != service.RunCancelled {
			t.Fatalf("CancelRun: %+v, %v", got, err)
		}
		f.until(runEnds(run.ID))
		cursor := view(t, svc, alice, sess.ID).StreamCursor
		if err := tn.out.Text("after"); err == nil {
			t.Error("Text after the cancellation was accepted")
		}
		if view(t, svc, alice, sess.ID).StreamCursor != cursor {
			t.Error("something was written after the run ended")
		}
		if h := history(t, svc, alice, sess.ID); h[len(h)-1].Content != "before" {
			t.Errorf("the reply is %q", h[len(h)-1].Content)
		}
		// The session takes the next message although the agent has not returned.
		_, r2 := send(t, svc, alice, sess.ID, "again")
		tn2 := p.next(t)
		tn2.finish(nil)
		f.until(runEnds(r2.ID))
	})

	t.Run("the next queued run starts", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", service.BusyEnqueue)
		send(t, svc, alice, sess.ID, "one")
		tn := p.next(t)
		_, r2 := send(t, svc, alice, sess.ID, "two")
		if _, err := svc.CancelRun(alice, sess.ID); err != nil {
			t.Fatal(err)
		}
		tn.stopped(t)
		if next := p.next(t); next.req.RunID != r2.ID {
			t.Errorf("run %s started, want the queued one", next.req.RunID)
		}
	})

	t.Run("ENOTFOUND when the session is missing", func(t *testing.T) {
		svc := start(t, setup{})
		_, err := svc.CancelRun(alice, missingID)
		wantCode(t, "missing", err, service.ENOTFOUND)
	})

	t.Run("ENOTFOUND when the session is not the caller's, as when missing, and the run goes on", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		_, other := svc.CancelRun(bob, sess.ID)
		_, missing := svc.CancelRun(bob, missingID)
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
		tn.running(t)
	})

	t.Run("EUNAVAILABLE when the end cannot be written, and then the run goes on as it was", func(t *testing.T) {
		store := newFlakyStore()
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "partial ")
		f.until(is(service.EventMessageChunk))
		tn.say(t, "pending ")

		store.writesFail.Store(true)
		_, err := svc.CancelRun(alice, sess.ID)
		wantCode(t, "storage failing", err, service.EUNAVAILABLE)
		tn.running(t)
		if v := view(t, svc, alice, sess.ID); v.ActiveRun == nil || v.ActiveRun.ID != run.ID || v.ActiveRun.Status != service.RunRunning {
			t.Errorf("after the failed cancel the active run is %+v", v.ActiveRun)
		}
		store.writesFail.Store(false)

		tn.say(t, "end")
		tn.finish(nil)
		evs := f.until(runEnds(run.ID))
		if got := lastEnd(t, evs).Status; got != service.RunCompleted {
			t.Errorf("run ended %s, want COMPLETED", got)
		}
		if m := replyOf(t, evs, run.ID); m.Status != service.MessageComplete || m.Content != "partial pending end" {
			t.Errorf("reply %s %q", m.Status, m.Content)
		}
		if n := count(evs, is(service.EventMessageCompleted)); n != 1 {
			t.Errorf("%d MessageCompleted, want 1", n)
		}
		// The text the failed cancel took to write went back: it is streamed once, in order.
		text := continueText(t, "partial ", evs, replyOf(t, evs, run.ID).ID)
		if text != "partial pending end" {
			t.Errorf("streamed %q", text)
		}
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, err := svc.CancelRun(nobody, sess.ID)
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
}

func TestRun(t *testing.T) {
	t.Run("returns a run of the caller's", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, "")
		_, run := send(t, svc, alice, sess.ID, "hi")
		f.until(runEnds(run.ID))
		r := getRun(t, svc, alice, run.ID)
		if r.ID != run.ID || r.SessionID != sess.ID || r.UserID != "alice" || r.Agent != "demo" || r.Status != service.RunCompleted || r.Error != "" || r.Usage == nil || r.Usage.OutputTokens <= 0 {
			t.Errorf("run %+v", r)
		}
		if r.StartedAt == nil || r.FinishedAt == nil || r.StartedAt.Before(r.CreatedAt) || r.FinishedAt.Before(*r.StartedAt) {
			t.Errorf("times: created %v started %v finished %v", r.CreatedAt, r.StartedAt, r.FinishedAt)
		}
	})

	t.Run("ENOTFOUND when missing or another user's", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, run := send(t, svc, alice, sess.ID, "hi")
		_, other := svc.Run(bob, run.ID)
		_, missing := svc.Run(bob, missingID)
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
	})

	t.Run("EINVALID for a malformed ID", func(t *testing.T) {
		svc := start(t, setup{})
		_, err := svc.Run(alice, "run-1")
		wantCode(t, "malformed", err, service.EINVALID)
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		_, err := svc.Run(nobody, missingID)
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
}

// A run that fails ends FAILED with a message fit to show a user, and the session goes on.
func TestFailedRuns(t *testing.T) {
	// failed checks that the run ended FAILED with want, on the run and on its message.
	failed := func(t *testing.T, svc *service.Service, f *feed, runID, want string) {
		t.Helper()
		evs := f.until(runEnds(runID))
		r := lastEnd(t, evs)
		if r.Status != service.RunFailed || r.Error != want {
			t.Errorf("run ended %s with %q, want FAILED with %q", r.Status, r.Error, want)
		}
		if m := replyOf(t, evs, runID); m.Status != service.MessageFailed || m.Error != want {
			t.Errorf("message %s with %q, want FAILED with %q", m.Status, m.Error, want)
		}
		if stored := getRun(t, svc, alice, runID); stored.Status != service.RunFailed || stored.Error != want {
			t.Errorf("stored run %s %q", stored.Status, stored.Error)
		}
	}
	// usable checks that the session answers its next message.
	usable := func(t *testing.T, svc *service.Service, f *feed, sessionID string, p *puppet) {
		t.Helper()
		_, run := send(t, svc, alice, sessionID, "again")
		if p != nil {
			p.next(t).finish(nil)
		}
		if got := lastEnd(t, f.until(runEnds(run.ID))).Status; got != service.RunCompleted {
			t.Errorf("the next run ended %s, want COMPLETED", got)
		}
	}

	t.Run("an agent's error ends the run FAILED with its message, and the session stays usable", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		p.next(t).finish(service.Errorf(service.EUNAVAILABLE, "The model is overloaded; try again."))
		failed(t, svc, f, run.ID, "The model is overloaded; try again.")
		usable(t, svc, f, sess.ID, p)
	})

	t.Run("an error without a code shows a generic message, not its text", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		p.next(t).finish(errPlain)
		failed(t, svc, f, run.ID, "internal error")
		usable(t, svc, f, sess.ID, p)
	})

	t.Run("a panic fails the run the same way; the server goes on", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "/panic")
		failed(t, svc, f, run.ID, "the agent crashed")
		usable(t, svc, f, sess.ID, nil)
	})

	t.Run("the demo agent's /fail fails the run with its message", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "/fail")
		failed(t, svc, f, run.ID, "The demo agent failed, as you asked.")
		usable(t, svc, f, sess.ID, nil)
	})

	t.Run("an agent that is not available on this server fails the run", func(t *testing.T) {
		store := inmem.New()
		first, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"gone": newPuppet()}})
		sess := newSession(t, first, alice, "gone", "")
		first.Close()
		svc, _ := startService(t, setup{store: store})
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "hello")
		failed(t, svc, f, run.ID, `the agent "gone" is not available on this server`)
		if _, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Agent: ptr("demo")}); err != nil {
			t.Fatal(err)
		}
		usable(t, svc, f, sess.ID, nil)
	})

	t.Run("failed runs are counted", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		for _, text := range []string{"/fail", "/panic"} {
			_, run := send(t, svc, alice, sess.ID, text)
			f.until(runEnds(run.ID))
		}
		if got := svc.Stats().RunsFinished[service.RunFailed]; got != 2 {
			t.Errorf("%d failed runs counted, want 2", got)
		}
	})
}
