package service_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// puppetRun starts a puppet run in a new session of alice's and returns the service, the
// session, the run, its turn and a feed of the session from its start.
func puppetRun(t *testing.T, s setup) (*service.Service, *service.SessionView, *service.Run, *turn, *feed) {
	t.Helper()
	p := newPuppet()
	if s.agents == nil {
		s.agents = map[string]service.Runner{}
	}
	s.agents["puppet"] = p
	svc := start(t, s)
	sess := newSession(t, svc, alice, "puppet", "")
	f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
	_, run := send(t, svc, alice, sess.ID, "go")
	return svc, sess, run, p.next(t), f
}

func TestOutputText(t *testing.T) {
	t.Run("appends delta to the run's current assistant message, starting one if needed", func(t *testing.T) {
		_, _, run, tn, f := puppetRun(t, setup{})
		tn.say(t, "Hello, ")
		evs := f.until(is(service.EventMessageChunk))
		added := first(t, evs, service.EventMessageAdded, func(ev *service.Event) bool { return ev.Message.Role == service.RoleAssistant }).Message
		if added.RunID != run.ID || added.Kind != service.KindText || added.Status != service.MessageStreaming {
			t.Errorf("the started message %+v", added)
		}
		tn.say(t, "wörld")
		tn.say(t, "!")
		tn.finish(nil)
		evs = append(evs, f.until(runEnds(run.ID))...)
		if n := count(evs, func(ev *service.Event) bool {
			return ev.Type == service.EventMessageAdded && ev.Message.Role == service.RoleAssistant
		}); n != 1 {
			t.Errorf("%d assistant messages, want 1", n)
		}
		if got, want := continueText(t, "", evs, added.ID), "Hello, wörld!"; got != want {
			t.Errorf("streamed %q, want %q", got, want)
		}
		if got := completedMessage(t, evs, added.ID).Content; got != "Hello, wörld!" {
			t.Errorf("completed with %q", got)
		}
	})

	t.Run("text after a tool call goes on in the same message", func(t *testing.T) {
		_, _, run, tn, f := puppetRun(t, setup{})
		tn.say(t, "Let me look. ")
		tool, err := tn.out.StartTool("", "look", "{}")
		if err != nil {
			t.Fatal(err)
		}
		tool.Finish("ok", nil)
		tn.say(t, "Found it.")
		tn.finish(nil)
		evs := f.until(runEnds(run.ID))
		m := replyOf(t, evs, run.ID)
		if m.Content != "Let me look. Found it." {
			t.Errorf("reply %q", m.Content)
		}
		if call := first(t, evs, service.EventToolCallStarted, nil).ToolCall; call.MessageID != m.ID {
			t.Errorf("the tool call is on message %s, want %s", call.MessageID, m.ID)
		}
	})

	t.Run("text written after the answer starts a new assistant message", func(t *testing.T) {
		svc, _, run, tn, f := puppetRun(t, setup{})
		tn.say(t, "Before.")
		a := tn.ask("Go on?", nil)
		q := first(t, f.until(runIs(run.ID, service.RunWaitingForInput)), service.EventQuestionAsked, nil).Question
		svc.Respond(alice, q.ID, "yes")
		a.wait(t)
		tn.say(t, "After.")
		tn.finish(nil)
		evs := f.until(runEnds(run.ID))
		var texts []string
		for _, ev := range evs {
			if ev.Type == service.EventMessageCompleted && ev.Message.Kind == service.KindText {
				texts = append(texts, ev.Message.Content)
			}
		}
		if !equalStrings(texts, []string{"After."}) {
			t.Errorf("messages completed after the answer %q, want one with %q", texts, "After.")
		}
	})

	t.Run("an empty delta is nothing", func(t *testing.T) {
		_, _, run, tn, f := puppetRun(t, setup{})
		if err := tn.out.Text(""); err != nil {
			t.Errorf("Text(\"\"): %v", err)
		}
		tn.finish(nil)
		evs := f.until(runEnds(run.ID))
		if n := count(evs, is(service.EventMessageAdded)); n != 1 {
			t.Errorf("%d messages added, want only the user's", n)
		}
	})

	t.Run("EINVALID for a reply longer than MaxReplyBytes, and the reply keeps what fit", func(t *testing.T) {
		_, _, run, tn, f := puppetRun(t, setup{config: func(c *service.Config) { c.MaxReplyBytes = 10 }})
		tn.say(t, "12345")
		tn.say(t, "67890")
		wantCode(t, "the 11th byte", tn.out.Text("x"), service.EINVALID)
		tn.finish(nil)
		if m := replyOf(t, f.until(runEnds(run.ID)), run.ID); m.Content != "1234567890" {
			t.Errorf("reply %q", m.Content)
		}
	})

	t.Run("is safe to call from several goroutines", func(t *testing.T) {
		_, _, run, tn, f := puppetRun(t, setup{})
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					tn.out.Text("ab")
				}
				tool, err := tn.out.StartTool("", "t", "")
				if err == nil {
					tool.Output("out")
					tool.Finish("r", nil)
				}
				tn.out.ReportUsage("m", service.Usage{InputTokens: 1})
			}()
		}
		wg.Wait()
		tn.finish(nil)
		evs := f.until(runEnds(run.ID))
		m := replyOf(t, evs, run.ID)
		if got, want := m.Content, strings.Repeat("ab", 400); got != want {
			t.Errorf("reply of %d bytes, want %d", len(got), len(want))
		}
		if got := continueText(t, "", evs, m.ID); got != m.Content {
			t.Errorf("streamed text differs from the reply")
		}
		if n := count(evs, is(service.EventToolCallFinished)); n != 8 {
			t.Errorf("%d tool calls finished, want 8", n)
		}
		if u := lastEnd(t, evs).Usage; u == nil || u.InputTokens != 8 {
			t.Errorf("usage %+v, want 8 input tokens", u)
		}
	})
}

func TestOutputAsk(t *testing.T) {
	t.Run("stores and announces a question, marks the run WAITING_FOR_INPUT", func(t *testing.T) {
		svc, sess, run, tn, f := puppetRun(t, setup{})
		tn.ask("Which file?", []string{"a.txt", "b.txt"})
		evs := f.until(runIs(run.ID, service.RunWaitingForInput))
		q := first(t, evs, service.EventQuestionAsked, nil).Question
		if q.RunID != run.ID || q.SessionID != sess.ID || q.Prompt != "Which file?" || !equalStrings(q.Choices, []string{"a.txt", "b.txt"}) {
			t.Errorf("question %+v", q)
		}
		m := first(t, evs, service.EventMessageAdded, func(ev *service.Event) bool { return ev.Message.Kind == service.KindQuestion }).Message
		if m.Role != service.RoleAssistant || m.Content != "Which file?" || m.QuestionID != q.ID || m.RunID != run.ID || m.Status != service.MessageComplete {
			t.Errorf("question message %+v", m)
		}
		if stored, err := svc.Question(alice, q.ID); err != nil || stored.Prompt != "Which file?" {
			t.Errorf("stored question %+v, %v", stored, err)
		}
		if got := getRun(t, svc, alice, run.ID).Status; got != service.RunWaitingForInput {
			t.Errorf("stored run %s", got)
		}
	})

	t.Run("blocks until it is answered, returning the answer", func(t *testing.T) {
		svc, _, run, tn, f := puppetRun(t, setup{})
		a := tn.ask("Name?", nil)
		q := first(t, f.until(runIs(run.ID, service.RunWaitingForInput)), service.EventQuestionAsked, nil).Question
		select {
		case <-a.done:
			t.Fatal("Ask returned before the answer")
		default:
		}
		if _, _, err := svc.Respond(alice, q.ID, "Ada"); err != nil {
			t.Fatal(err)
		}
		if answer, err := a.wait(t); err != nil || answer != "Ada" {
			t.Errorf("Ask returned %q, %v", answer, err)
		}
		f.until(runIs(run.ID, service.RunRunning))
	})

	t.Run("or the run ends, returning ctx's error", func(t *testing.T) {
		svc, sess, run, tn, f := puppetRun(t, setup{})
		a := tn.ask("Name?", nil)
		f.until(runIs(run.ID, service.RunWaitingForInput))
		svc.CancelRun(alice, sess.ID)
		if _, err := a.wait(t); !errors.Is(err, tn.ctx.Err()) || err == nil {
			t.Errorf("Ask returned %v, want the run's context's error", err)
		}
	})

	t.Run("choices may be nil for a free answer", func(t *testing.T) {
		_, _, run, tn, f := puppetRun(t, setup{})
		tn.ask("Anything?", nil)
		q := first(t, f.until(runIs(run.ID, service.RunWaitingForInput)), service.EventQuestionAsked, nil).Question
		if len(q.Choices) != 0 {
			t.Errorf("choices %q", q.Choices)
		}
	})

	t.Run("an Ask that returns because its own context ended leaves the run working, not waiting, with a slot", func(t *testing.T) {
		svc, sess, run, tn, f := puppetRun(t, setup{})
		ctx, cancel := context.WithCancel(tn.ctx)
		cancel() // e.g. the agent's own timeout for an answer
		if _, err := tn.out.Ask(ctx, "Now?", nil); !isCtxErr(err) {
			t.Fatalf("Ask returned %v, want its context's error", err)
		}
		f.until(runIs(run.ID, service.RunWaitingForInput))
		tn.say(t, "going on without an answer")
		f.until(is(service.EventMessageChunk))
		v := view(t, svc, alice, sess.ID)
		if busy := svc.Stats().RunsBusy; busy != 1 {
			t.Errorf("the agent works again with %d slots taken, want 1", busy)
		}
		if v.Status != service.SessionRunning || v.PendingQuestion != nil {
			t.Errorf("session %s, question %+v", v.Status, v.PendingQuestion)
		}
	})

	t.Run("EINVALID for an empty question", func(t *testing.T) {
		_, _, _, tn, _ := puppetRun(t, setup{})
		_, err := tn.out.Ask(tn.ctx, "  ", nil)
		wantCode(t, "empty prompt", err, service.EINVALID)
	})
}

// Once the run has ended, every method of its Output returns an error, and nothing more is
// recorded.
func TestOutputAfterTheRunEnded(t *testing.T) {
	for _, how := range []string{"cancelled", "completed"} {
		t.Run("once the run is "+how, func(t *testing.T) {
			p := newPuppet()
			p.stubborn = true // keeps the Output in use after the end
			svc := start(t, withPuppet(p))
			sess := newSession(t, svc, alice, "puppet", "")
			f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
			_, run := send(t, svc, alice, sess.ID, "go")
			tn := p.next(t)
			tn.say(t, "reply")
			tool, _ := tn.out.StartTool("", "t", "")
			if how == "cancelled" {
				svc.CancelRun(alice, sess.ID)
				t.Cleanup(func() { tn.finish(nil) })
			} else {
				tool.Finish("r", nil)
				tn.finish(nil)
				<-tn.returned
			}
			f.until(runEnds(run.ID))
			before := view(t, svc, alice, sess.ID).StreamCursor
			if err := tn.out.Text("late"); err == nil {
				t.Error("Text succeeded")
			}
			if _, err := tn.out.Ask(tn.ctx, "late?", nil); err == nil {
				t.Error("Ask succeeded")
			}
			if _, err := tn.out.StartTool("", "late", ""); err == nil {
				t.Error("StartTool succeeded")
			}
			if err := tn.out.ReportUsage("m", service.Usage{InputTokens: 1}); err == nil {
				t.Error("ReportUsage succeeded")
			}
			if err := tool.Output("late"); err == nil {
				t.Error("ToolHandle.Output succeeded")
			}
			if err := tool.Finish("late", nil); err == nil {
				t.Error("ToolHandle.Finish succeeded")
			}
			if after := view(t, svc, alice, sess.ID).StreamCursor; after != before {
				t.Error("something was written after the run ended")
			}
			if u := svc.Stats().Usage; len(u) != 0 {
				t.Errorf("usage reported after the end was counted: %+v", u)
			}
		})
	}
}
