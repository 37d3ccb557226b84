package service_test

import (
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// TestStreamAt: a stream resumed after any cursor of a run learns the run, and the
// message whose text was open there with how much of it came before; a message's text is
// open from its first text to its completion, around its tool calls, and not before.
func TestStreamAt(t *testing.T) {
	p := newPuppet()
	svc := start(t, withPuppet(p))
	v := newSession(t, svc, alice, "puppet", "")
	f := follow(t, svc, alice, v.ID, v.StreamCursor)
	_, run := send(t, svc, alice, v.ID, "go")
	tn := p.next(t)
	call := func(output string) {
		tool, err := tn.out.StartTool("", "note", `{}`)
		if err != nil {
			t.Fatal(err)
		}
		if err := tool.Output(output); err != nil {
			t.Fatal(err)
		}
		if err := tool.Finish("ok", nil); err != nil {
			t.Fatal(err)
		}
	}
	call("before any text")
	tn.say(t, "Let me ")
	evs := f.until(is(service.EventMessageChunk))
	call("inside the text")
	tn.say(t, "see.")
	tn.finish(nil)
	evs = append(evs, f.until(runEnds(run.ID))...)

	var reply string // the reply, and how much of its text the log held so far
	sent, done := 0, false
	for _, ev := range evs {
		cursor := service.EncodeCursor(v.ID, service.CursorOf(ev))
		at, err := svc.StreamAt(alice, v.ID, cursor)
		if err != nil {
			t.Fatalf("after %s: %v", ev.Type, err)
		}
		var ofReply bool
		switch {
		case ev.Type == service.EventMessageAdded && ev.Message.Role == service.RoleAssistant:
			reply, ofReply = ev.Message.ID, true
		case ev.Type == service.EventMessageChunk:
			sent, ofReply = service.CursorOf(ev).Off, true
		case ev.Type == service.EventMessageCompleted:
			done = true
		case ev.ToolCall != nil:
			ofReply = ev.ToolCall.MessageID == reply
		case ev.Type == service.EventToolCallOutput:
			ofReply = ev.MessageID == reply
		}
		want := service.StreamPoint{Event: at.Event, RunID: run.ID}
		if ev.Type == service.EventSessionUpdated || ev.Type == service.EventBranchSelected {
			want.RunID = "" // of no run
		}
		if ofReply && sent > 0 && !done {
			want.Open, want.Sent = reply, sent
		}
		if *at != want || at.Event.Seq != ev.Seq {
			t.Errorf("after %s (%d): %+v, want %+v", ev.Type, ev.Seq, *at, want)
		}
	}
	if sent == 0 || !done {
		t.Fatalf("no text, or no completion: %s", describe(evs))
	}

	cursor := service.EncodeCursor(v.ID, service.CursorOf(evs[len(evs)-1]))
	_, err := svc.StreamAt(bob, v.ID, cursor)
	wantCode(t, "another user's session", err, service.ENOTFOUND)
	_, err = svc.StreamAt(alice, v.ID, "garbage")
	wantCode(t, "a malformed cursor", err, service.EINVALID)
	other := newSession(t, svc, alice, "", "")
	_, err = svc.StreamAt(alice, other.ID, cursor)
	wantCode(t, "a cursor of another session", err, service.EINVALID)
}
