package service_test

import (
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// Every assistant message that ends gets a MessageCompleted, whatever ends it.
func TestMessageCompleted(t *testing.T) {
	type outcome struct {
		status  service.MessageStatus
		content string
		err     string
	}
	check := func(t *testing.T, m *service.Message, want outcome) {
		t.Helper()
		if m.Status != want.status || m.Content != want.content || m.Error != want.err {
			t.Errorf("MessageCompleted %s %q (error %q), want %s %q (error %q)", m.Status, m.Content, m.Error, want.status, want.content, want.err)
		}
	}
	// run starts a puppet run, lets it say text, ends it with end, and returns the events
	// until the run ends.
	run := func(t *testing.T, text string, end func(*testing.T, *service.Service, string, *turn)) []*service.Event {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, r := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		if text != "" {
			tn.say(t, text)
		}
		end(t, svc, sess.ID, tn)
		return f.until(runEnds(r.ID))
	}

	t.Run("a reply that completes ends COMPLETE", func(t *testing.T) {
		evs := run(t, "all done", func(t *testing.T, _ *service.Service, _ string, tn *turn) { tn.finish(nil) })
		check(t, first(t, evs, service.EventMessageCompleted, nil).Message, outcome{service.MessageComplete, "all done", ""})
	})
	t.Run("a reply interrupted by a new message ends INTERRUPTED with its text", func(t *testing.T) {
		evs := run(t, "half", func(t *testing.T, svc *service.Service, id string, _ *turn) { send(t, svc, alice, id, "stop") })
		check(t, first(t, evs, service.EventMessageCompleted, nil).Message, outcome{service.MessageInterrupted, "half", ""})
	})
	t.Run("a cancelled reply ends INTERRUPTED with its text", func(t *testing.T) {
		evs := run(t, "half", func(t *testing.T, svc *service.Service, id string, _ *turn) {
			if _, err := svc.CancelRun(alice, id); err != nil {
				t.Fatal(err)
			}
		})
		check(t, first(t, evs, service.EventMessageCompleted, nil).Message, outcome{service.MessageInterrupted, "half", ""})
	})
	t.Run("a run that fails before any text ends a FAILED message with its error", func(t *testing.T) {
		evs := run(t, "", func(t *testing.T, _ *service.Service, _ string, tn *turn) {
			tn.finish(service.Errorf(service.EINVALID, "no model configured"))
		})
		m := first(t, evs, service.EventMessageCompleted, nil).Message
		check(t, m, outcome{service.MessageFailed, "", "no model configured"})
		if added := first(t, evs, service.EventMessageAdded, func(ev *service.Event) bool { return ev.Message.ID == m.ID }).Message; added.Role != service.RoleAssistant {
			t.Errorf("the failed message was added as %s", added.Role)
		}
	})
	t.Run("a run that fails after some text ends its message FAILED with the text and the error", func(t *testing.T) {
		evs := run(t, "so far", func(t *testing.T, _ *service.Service, _ string, tn *turn) {
			tn.finish(service.Errorf(service.EUNAVAILABLE, "the model went away"))
		})
		check(t, first(t, evs, service.EventMessageCompleted, nil).Message, outcome{service.MessageFailed, "so far", "the model went away"})
	})
	t.Run("a question ends the message before it COMPLETE", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, r := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "Let me ask.")
		tn.ask("Sure?", nil)
		evs := f.until(runIs(r.ID, service.RunWaitingForInput))
		check(t, first(t, evs, service.EventMessageCompleted, nil).Message, outcome{service.MessageComplete, "Let me ask.", ""})
	})
	t.Run("every assistant message the demo agent starts ends, FAILED ones with an error", func(t *testing.T) {
		// The demo agent's failure and crash each leave one FAILED message.
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		for _, text := range []string{"hi", "/fail", "/panic", "/tool x", "/ask what?"} {
			_, r := send(t, svc, alice, sess.ID, text)
			if text == "/ask what?" {
				f.until(runIs(r.ID, service.RunWaitingForInput))
				if _, err := svc.CancelRun(alice, sess.ID); err != nil {
					t.Fatal(err)
				}
			}
			f.until(runEnds(r.ID))
		}
		all, _ := subscribe(t, svc, sess.ID, sess.StreamCursor)
		evs := readAll(t, all)
		added := map[string]bool{}
		for _, ev := range evs {
			switch ev.Type {
			case service.EventMessageAdded:
				if ev.Message.Role == service.RoleAssistant && ev.Message.Kind == service.KindText {
					added[ev.Message.ID] = true
				}
			case service.EventMessageCompleted:
				if ev.Message.Status == service.MessageFailed && ev.Message.Error == "" {
					t.Errorf("FAILED message %s without an error", ev.Message.ID)
				}
				delete(added, ev.Message.ID)
			}
		}
		if len(added) != 0 {
			t.Errorf("%d assistant messages never completed", len(added))
		}
		for _, m := range history(t, svc, alice, sess.ID) {
			if m.Status == service.MessageStreaming {
				t.Errorf("message %q is still STREAMING", m.Content)
			}
		}
	})
}
