package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/demo"
	"github.com/talkgraph/talkgraph/service/inmem"
)

func TestClose(t *testing.T) {
	t.Run("no new work is accepted", func(t *testing.T) {
		svc := start(t, setup{})
		_, run, q, f := asked(t, svc)
		idle := newSession(t, svc, alice, "", "")
		svc.Close()
		f.rest()
		checks := map[string]error{}
		_, checks["CreateTalkSession"] = svc.CreateTalkSession(alice, "", service.SettingsInput{})
		_, _, checks["AddMessage"] = svc.AddMessage(alice, idle.ID, "hi", "")
		_, _, checks["Respond"] = svc.Respond(alice, q.ID, "blue")
		_, checks["RenameTalkSession"] = svc.RenameTalkSession(alice, idle.ID, "x")
		_, checks["UpdateSettings"] = svc.UpdateSettings(alice, idle.ID, service.SettingsInput{Model: ptr("m")})
		_, checks["Subscribe"] = svc.Subscribe(alice, idle.ID, "", func() {})
		checks["DeleteTalkSession"] = svc.DeleteTalkSession(alice, idle.ID)
		for name, err := range checks {
			wantCode(t, name, err, service.EUNAVAILABLE)
		}
		if got := getRun(t, svc, alice, run.ID).Status; got != service.RunWaitingForInput {
			t.Errorf("the waiting run is %s", got)
		}
		if v := view(t, svc, alice, idle.ID); v.LastSeq != 0 {
			t.Errorf("the idle session was written: LastSeq %d", v.LastSeq)
		}
	})

	t.Run("CancelRun of a run left waiting is refused, not answered as if nothing ran", func(t *testing.T) {
		svc := start(t, setup{})
		sess, _, _, f := asked(t, svc)
		svc.Close()
		f.rest()
		_, err := svc.CancelRun(alice, sess.ID)
		wantCode(t, "CancelRun after Close", err, service.EUNAVAILABLE)
	})

	t.Run("running runs end INTERRUPTED with their partial replies kept", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "partial ")
		f.until(is(service.EventMessageChunk))
		tn.say(t, "reply")
		svc.Close()
		tn.stopped(t)
		if got := getRun(t, svc, alice, run.ID); got.Status != service.RunInterrupted || got.FinishedAt == nil {
			t.Errorf("run %s, finished %v", got.Status, got.FinishedAt)
		}
		h := history(t, svc, alice, sess.ID)
		if len(h) != 2 || h[1].Content != "partial reply" || h[1].Status != service.MessageInterrupted {
			t.Errorf("reply %s %q, want INTERRUPTED %q", h[1].Status, h[1].Content, "partial reply")
		}
		if got := svc.Stats().RunsFinished[service.RunInterrupted]; got != 1 {
			t.Errorf("%d interrupted runs counted", got)
		}
	})

	t.Run("runs waiting for an answer stay waiting, and resume when answered after a restart", func(t *testing.T) {
		store := inmem.New()
		svc, _ := startService(t, setup{store: store})
		sess, run, q, _ := asked(t, svc)
		svc.Close()
		if got := getRun(t, svc, alice, run.ID).Status; got != service.RunWaitingForInput {
			t.Errorf("run %s after Close", got)
		}
		if stored, _ := svc.Question(alice, q.ID); stored.Withdrawn {
			t.Error("the question was withdrawn")
		}
		next, _ := startService(t, setup{store: store})
		f := follow(t, next, alice, sess.ID, "")
		if _, _, err := next.Respond(alice, q.ID, "blue"); err != nil {
			t.Fatal(err)
		}
		if got := lastEnd(t, f.until(runEnds(run.ID))).Status; got != service.RunCompleted {
			t.Errorf("the resumed run ended %s", got)
		}
	})

	t.Run("queued runs stay queued, and start at the next start", func(t *testing.T) {
		store := inmem.New()
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		sess := newSession(t, svc, alice, "puppet", service.BusyEnqueue)
		_, r1 := send(t, svc, alice, sess.ID, "one")
		p.next(t)
		_, r2 := send(t, svc, alice, sess.ID, "two")
		svc.Close()
		if got := getRun(t, svc, alice, r1.ID).Status; got != service.RunInterrupted {
			t.Errorf("the running run is %s", got)
		}
		if got := getRun(t, svc, alice, r2.ID).Status; got != service.RunQueued {
			t.Errorf("the queued run is %s", got)
		}
		p.idle(t)
		p2 := newPuppet()
		startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p2}})
		if tn := p2.next(t); tn.req.RunID != r2.ID {
			t.Errorf("run %s started, want the queued one", tn.req.RunID)
		}
	})

	t.Run("subscriptions end once they have delivered what was recorded, with ErrShutdown", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor) // not read until after Close
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "some text")
		svc.Close()
		evs, err := f.rest()
		if err != service.ErrShutdown {
			t.Errorf("the subscription ended with %v, want ErrShutdown", err)
		}
		if len(evs) == 0 || !runEnds(run.ID)(evs[len(evs)-1]) || evs[len(evs)-1].Run.Status != service.RunInterrupted {
			t.Fatalf("events %s, want the run's end last", describe(evs))
		}
		if got := continueText(t, "", evs, replyOf(t, evs, run.ID).ID); got != "some text" {
			t.Errorf("streamed %q", got)
		}
	})

	t.Run("it waits for agents to return", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		svc.Close()
		select {
		case <-tn.returned:
		default:
			t.Error("Close returned before the agent did")
		}
	})

	t.Run("it waits up to StopTimeout for agents that do not return", func(t *testing.T) {
		p := newPuppet()
		p.stubborn = true
		svc := start(t, setup{agents: map[string]service.Runner{"puppet": p}, config: func(c *service.Config) { c.StopTimeout = 50 * time.Millisecond }})
		sess := newSession(t, svc, alice, "puppet", "")
		send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		t.Cleanup(func() { tn.finish(nil) })
		closed := make(chan struct{})
		go func() { svc.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(patience):
			t.Fatal("Close waits for an agent that does not return")
		}
		select {
		case <-tn.returned:
			t.Error("the stubborn agent returned")
		default:
		}
	})

	t.Run("it may be called more than once", func(t *testing.T) {
		svc := start(t, setup{})
		svc.Close()
		svc.Close()
	})
}

func TestReady(t *testing.T) {
	t.Run("nil while the service accepts work and its store can be written", func(t *testing.T) {
		svc := start(t, setup{})
		if err := svc.Ready(alice); err != nil {
			t.Errorf("Ready: %v", err)
		}
	})
	t.Run("EUNAVAILABLE once it is closed", func(t *testing.T) {
		svc := start(t, setup{})
		svc.Close()
		wantCode(t, "after Close", svc.Ready(alice), service.EUNAVAILABLE)
	})
	t.Run("EUNAVAILABLE when the store cannot be written", func(t *testing.T) {
		store := inmem.New()
		svc, _ := startService(t, setup{store: store})
		store.Close()
		wantCode(t, "store closed", svc.Ready(alice), service.EUNAVAILABLE)
	})
}

func TestStats(t *testing.T) {
	t.Run("counts runs finished by status", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		for _, text := range []string{"hi", "there", "/fail", "/ask what?"} {
			_, run := send(t, svc, alice, sess.ID, text)
			if text == "/ask what?" {
				f.until(runIs(run.ID, service.RunWaitingForInput))
				svc.CancelRun(alice, sess.ID)
			}
			f.until(runEnds(run.ID))
		}
		got := svc.Stats().RunsFinished
		want := map[service.RunStatus]int64{service.RunCompleted: 2, service.RunFailed: 1, service.RunCancelled: 1}
		if len(got) != len(want) {
			t.Errorf("RunsFinished %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("RunsFinished %v, want %v", got, want)
			}
		}
	})

	t.Run("counts chunks streamed, open subscriptions and busy slots", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		s2, _ := subscribe(t, svc, sess.ID, "")
		if got := svc.Stats().Subscriptions; got != 2 {
			t.Errorf("%d subscriptions, want 2", got)
		}
		s2.Close()
		if got := svc.Stats().Subscriptions; got != 1 {
			t.Errorf("%d subscriptions after closing one, want 1", got)
		}
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		if st := svc.Stats(); st.RunsBusy != 1 {
			t.Errorf("%d slots busy while one agent works", st.RunsBusy)
		}
		tn.say(t, "a")
		evs := f.until(is(service.EventMessageChunk))
		tool, _ := tn.out.StartTool("", "t", "")
		tool.Output("b")
		evs = append(evs, f.until(is(service.EventToolCallOutput))...)
		tool.Finish("", nil)
		tn.say(t, "c")
		tn.finish(nil)
		evs = append(evs, f.until(runEnds(run.ID))...)
		st := svc.Stats()
		if want := int64(count(evs, func(ev *service.Event) bool { return ev.Type.Chunky() })); st.ChunksStreamed != want {
			t.Errorf("ChunksStreamed %d, want the %d chunk events", st.ChunksStreamed, want)
		}
		if st.Writes.Rounds == 0 || st.Writes.Batches < st.Writes.Rounds || st.Writes.Failed != 0 {
			t.Errorf("Writes %+v", st.Writes)
		}
	})

	t.Run("counts failed writes", func(t *testing.T) {
		store := newFlakyStore()
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		store.writesFail.Store(true)
		svc.RenameTalkSession(alice, sess.ID, "x")
		store.writesFail.Store(false)
		if got := svc.Stats().Writes.Failed; got != 1 {
			t.Errorf("%d failed writes counted, want 1", got)
		}
	})
}

func TestServiceAgents(t *testing.T) {
	t.Run("returns the registry of agents sessions can use", func(t *testing.T) {
		svc := start(t, withPuppet(newPuppet()))
		list := svc.Agents(context.Background())
		if len(list) != 2 || list[0].Name != "demo" || list[0].Description != demo.Description || list[1].Name != "puppet" {
			t.Errorf("Agents = %+v", list)
		}
	})
}

// Every operation is the caller's: without a user in the context it is EUNAUTHORIZED, and
// an ID that is not one this server makes is EINVALID.
func TestEveryOperation(t *testing.T) {
	svc := start(t, setup{})
	sess, run, q, _ := asked(t, svc)
	ops := func(ctx context.Context, sessionID, runID, questionID string) map[string]error {
		errs := map[string]error{}
		_, errs["View"] = svc.View(ctx, sessionID)
		_, errs["RenameTalkSession"] = svc.RenameTalkSession(ctx, sessionID, "x")
		_, errs["UpdateSettings"] = svc.UpdateSettings(ctx, sessionID, service.SettingsInput{Model: ptr("m")})
		_, _, errs["AddMessage"] = svc.AddMessage(ctx, sessionID, "hi", "")
		_, errs["CancelRun"] = svc.CancelRun(ctx, sessionID)
		_, _, _, errs["History"] = svc.History(ctx, sessionID, nil, nil, "", nil, "")
		_, errs["ToolCalls"] = svc.ToolCalls(ctx, sessionID, missingID)
		_, errs["Subscribe"] = svc.Subscribe(ctx, sessionID, "", func() {})
		_, errs["Run"] = svc.Run(ctx, runID)
		_, errs["Question"] = svc.Question(ctx, questionID)
		_, _, errs["Respond"] = svc.Respond(ctx, questionID, "blue")
		errs["DeleteTalkSession"] = svc.DeleteTalkSession(ctx, sessionID)
		return errs
	}
	t.Run("EUNAUTHORIZED without a user in the context", func(t *testing.T) {
		errs := ops(nobody, sess.ID, run.ID, q.ID)
		_, _, errs["Sessions"] = svc.Sessions(nobody, nil, "")
		_, errs["CreateTalkSession"] = svc.CreateTalkSession(nobody, "", service.SettingsInput{})
		for op, err := range errs {
			wantCode(t, op, err, service.EUNAUTHORIZED)
		}
	})
	t.Run("EINVALID for a malformed ID", func(t *testing.T) {
		for op, err := range ops(alice, "not-an-id", "not-an-id", "not-an-id") {
			wantCode(t, op, err, service.EINVALID)
		}
	})
	t.Run("ENOTFOUND for another user's, as for a missing one", func(t *testing.T) {
		theirs := ops(bob, sess.ID, run.ID, q.ID)
		missing := ops(bob, missingID, missingID, missingID)
		for op, err := range theirs {
			wantCode(t, op, err, service.ENOTFOUND)
			wantSameError(t, err, missing[op])
		}
	})
	t.Run("and nothing of alice's changed", func(t *testing.T) {
		v := view(t, svc, alice, sess.ID)
		if v.Title != "/ask Favourite colour?" || v.Settings.Model != nil || v.Status != service.SessionWaitingForInput || v.PendingQuestion.ID != q.ID {
			t.Errorf("alice's session %q %+v %s", v.Title, v.Settings, v.Status)
		}
	})
}
