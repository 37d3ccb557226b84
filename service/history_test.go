package service_test

import (
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// conversation has the demo agent answer n messages in a new session of alice's, and
// returns the session with its 2n messages.
func conversation(t *testing.T, svc *service.Service, n int) (*service.SessionView, []*service.HistoryMessage) {
	t.Helper()
	sess := newSession(t, svc, alice, "", "")
	f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
	for i := 0; i < n; i++ {
		_, run := send(t, svc, alice, sess.ID, string(rune('a'+i)))
		f.until(runEnds(run.ID))
	}
	h := history(t, svc, alice, sess.ID)
	if len(h) != 2*n {
		t.Fatalf("%d messages, want %d", len(h), 2*n)
	}
	return sess, h
}

func TestHistory(t *testing.T) {
	t.Run("returns a page of the caller's session history, oldest first", func(t *testing.T) {
		svc := start(t, setup{})
		sess, all := conversation(t, svc, 5)
		for i := 1; i < len(all); i++ {
			if all[i].Seq <= all[i-1].Seq {
				t.Fatalf("message %d is not after message %d", i, i-1)
			}
		}
		cur := func(i int) string { return service.EncodeMessageCursor(&all[i].Message) }
		for _, tc := range []struct {
			name             string
			first            *int
			after            string
			last             *int
			before           string
			from, to         int // all[from:to]
			hasPrev, hasNext bool
		}{
			{"the first 3", ptr(3), "", nil, "", 0, 3, false, true},
			{"3 after the 3rd", ptr(3), cur(2), nil, "", 3, 6, true, true},
			{"3 after the 8th: the last 2", ptr(3), cur(7), nil, "", 8, 10, true, false},
			{"all 10", ptr(10), "", nil, "", 0, 10, false, false},
			{"the last 3", nil, "", ptr(3), "", 7, 10, true, false},
			{"3 before the 8th", nil, "", ptr(3), cur(7), 4, 7, true, true},
			{"3 before the 3rd: the first 2", nil, "", ptr(3), cur(2), 0, 2, false, true},
			{"none after the last", ptr(3), cur(9), nil, "", 10, 10, true, false},
		} {
			got, hasPrev, hasNext, err := svc.History(alice, sess.ID, nil, tc.first, tc.after, tc.last, tc.before)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			var gotIDs, wantIDs []string
			for _, m := range got {
				gotIDs = append(gotIDs, m.ID)
			}
			for _, m := range all[tc.from:tc.to] {
				wantIDs = append(wantIDs, m.ID)
			}
			if !equalStrings(gotIDs, wantIDs) || hasPrev != tc.hasPrev || hasNext != tc.hasNext {
				t.Errorf("%s: %d messages (hasPrev %v, hasNext %v), want messages %d to %d (hasPrev %v, hasNext %v)",
					tc.name, len(got), hasPrev, hasNext, tc.from+1, tc.to, tc.hasPrev, tc.hasNext)
			}
		}
	})

	t.Run("without first or last, a page has the default size; a larger count is clamped", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.DefaultPageSize = 3; c.MaxPageSize = 4 }})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		for _, text := range []string{"a", "b", "c"} { // 6 messages
			_, run := send(t, svc, alice, sess.ID, text)
			f.until(runEnds(run.ID))
		}
		got, _, hasNext, err := svc.History(alice, sess.ID, nil, nil, "", nil, "")
		if err != nil || len(got) != 3 || !hasNext {
			t.Errorf("default page: %d messages, hasNext %v, %v", len(got), hasNext, err)
		}
		got, _, hasNext, err = svc.History(alice, sess.ID, nil, ptr(100), "", nil, "")
		if err != nil || len(got) != 4 || !hasNext {
			t.Errorf("first 100: %d messages, hasNext %v, %v; want the limit of 4", len(got), hasNext, err)
		}
	})

	t.Run("as of the view when asOf is not nil", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "one ")
		f.until(is(service.EventMessageChunk))
		v := view(t, svc, alice, sess.ID)
		tn.say(t, "two ")
		tn.say(t, "three")
		tn.finish(nil)
		evs := f.until(runEnds(run.ID))
		send(t, svc, alice, sess.ID, "later")

		got, _, _, err := svc.History(alice, sess.ID, v, ptr(10), "", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("%d messages as of the view, want the 2 it saw", len(got))
		}
		reply := replyOf(t, evs, run.ID)
		if got[1].ID != reply.ID || got[1].Content != "one " || got[1].Status != service.MessageStreaming {
			t.Errorf("the reply as of the view: %s %q, want STREAMING %q", got[1].Status, got[1].Content, "one ")
		}
		// Backwards too.
		got, _, _, err = svc.History(alice, sess.ID, v, nil, "", ptr(10), "")
		if err != nil || len(got) != 2 || got[1].Content != "one " {
			t.Errorf("last 10 as of the view: %d messages, %v", len(got), err)
		}
	})

	t.Run("without asOf, a message being written shows its text so far", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "so far")
		f.until(is(service.EventMessageChunk))
		h := history(t, svc, alice, sess.ID)
		if len(h) != 2 || h[1].Content != "so far" || h[1].Status != service.MessageStreaming {
			t.Errorf("history %+v", h)
		}
	})

	t.Run("the question of a QUESTION or ANSWER message, and the tool calls of an assistant message by start time, come with it", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		t1, _ := tn.out.StartTool("c1", "first", "")
		t1.Finish("1", nil)
		t2, _ := tn.out.StartTool("c2", "second", "")
		t2.Finish("2", nil)
		a := tn.ask("Pick", []string{"x", "y"})
		q := first(t, f.until(runIs(run.ID, service.RunWaitingForInput)), service.EventQuestionAsked, nil).Question
		svc.Respond(alice, q.ID, "y")
		a.wait(t)
		tn.finish(nil)
		f.until(runEnds(run.ID))
		h := history(t, svc, alice, sess.ID)
		if len(h) != 4 {
			t.Fatalf("%d messages", len(h))
		}
		for i, m := range h {
			if !m.Loaded || m.ToolCalls == nil {
				t.Errorf("message %d: Loaded %v, tool calls %v", i, m.Loaded, m.ToolCalls)
			}
		}
		if calls := h[1].ToolCalls; len(calls) != 2 || calls[0].ID != t1.ID() || calls[1].ID != t2.ID() {
			t.Errorf("tool calls %+v, want first then second", calls)
		}
		if len(h[0].ToolCalls) != 0 || len(h[2].ToolCalls) != 0 {
			t.Error("tool calls on a user message or a question")
		}
		for _, m := range h[2:] {
			if m.Question == nil || m.Question.ID != q.ID || !equalStrings(m.Question.Choices, []string{"x", "y"}) || *m.Question.Answer != "y" {
				t.Errorf("%s message's question %+v", m.Kind, m.Question)
			}
		}
		if h[0].Question != nil || h[1].Question != nil {
			t.Error("a question on a text message")
		}
	})

	t.Run("cursors are history cursors", func(t *testing.T) {
		svc := start(t, setup{})
		sess, all := conversation(t, svc, 1)
		_, _, _, err := svc.History(alice, sess.ID, nil, ptr(1), service.EncodeCursor(sess.ID, service.CursorOf(&service.Event{Seq: all[0].Seq})), nil, "")
		wantCode(t, "a log cursor", err, service.EINVALID)
		got, _, _, err := svc.History(alice, sess.ID, nil, ptr(1), service.EncodeMessageCursor(&all[0].Message), nil, "")
		if err != nil || len(got) != 1 || got[0].ID != all[1].ID {
			t.Errorf("after the first message: %v, %v", got, err)
		}
	})

	t.Run("EINVALID for a bad cursor or a negative count", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		for name, call := range map[string]func() error{
			"a bad after":      func() error { _, _, _, err := svc.History(alice, sess.ID, nil, nil, "%%%", nil, ""); return err },
			"a bad before":     func() error { _, _, _, err := svc.History(alice, sess.ID, nil, nil, "", ptr(1), "bTp4"); return err },
			"a negative first": func() error { _, _, _, err := svc.History(alice, sess.ID, nil, ptr(-1), "", nil, ""); return err },
			"a negative last":  func() error { _, _, _, err := svc.History(alice, sess.ID, nil, nil, "", ptr(-1), ""); return err },
		} {
			wantCode(t, name, call(), service.EINVALID)
		}
	})

	t.Run("ENOTFOUND for a session that is missing or not the caller's", func(t *testing.T) {
		svc := start(t, setup{})
		sess, _ := conversation(t, svc, 1)
		_, _, _, other := svc.History(bob, sess.ID, nil, nil, "", nil, "")
		_, _, _, missing := svc.History(bob, missingID, nil, nil, "", nil, "")
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, _, _, err := svc.History(nobody, sess.ID, nil, nil, "", nil, "")
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
}

// A view, the history read with it, and a subscription after its StreamCursor add up to
// everything, with no gap and no duplicate, whenever the view is taken.
func TestViewHistoryAndSubscriptionAgree(t *testing.T) {
	t.Run("in the middle of a message", func(t *testing.T) {
		for _, said := range []int{0, 1, 2} { // chunks durable when the view is taken
			p := newPuppet()
			svc := start(t, withPuppet(p))
			sess := newSession(t, svc, alice, "puppet", "")
			f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
			_, run := send(t, svc, alice, sess.ID, "go")
			tn := p.next(t)
			f.until(runIs(run.ID, service.RunRunning))
			words := []string{"one ", "two ", "three"}
			for _, w := range words[:said] {
				tn.say(t, w)
				f.until(is(service.EventMessageChunk))
			}
			v := view(t, svc, alice, sess.ID)
			hist, _, _, err := svc.History(alice, sess.ID, v, ptr(10), "", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			later := follow(t, svc, alice, sess.ID, v.StreamCursor)
			for _, w := range words[said:] {
				tn.say(t, w)
			}
			tn.finish(nil)
			evs := later.until(runEnds(run.ID))
			reply := replyOf(t, evs, run.ID)
			text := ""
			switch {
			case said == 0 && len(hist) != 1:
				t.Fatalf("before any text: %d messages", len(hist))
			case said > 0:
				if len(hist) != 2 || hist[1].ID != reply.ID {
					t.Fatalf("after %d chunks: %d messages", said, len(hist))
				}
				text = hist[1].Content
			}
			if said == 0 {
				first(t, evs, service.EventMessageAdded, func(ev *service.Event) bool { return ev.Message.ID == reply.ID })
			} else if n := count(evs, is(service.EventMessageAdded)); n != 0 {
				t.Errorf("after %d chunks: the reply is added again", said)
			}
			if got := continueText(t, text, evs, reply.ID); got != "one two three" || got != reply.Content {
				t.Errorf("after %d chunks: history and stream make %q, the reply is %q", said, got, reply.Content)
			}
		}
	})

	t.Run("in the middle of a tool's output", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tool, _ := tn.out.StartTool("", "files", "ls")
		tool.Output("a ")
		f.until(is(service.EventToolCallOutput))
		v := view(t, svc, alice, sess.ID)
		tool.Output("b ")
		tool.Finish("done", nil)
		f.until(is(service.EventToolCallFinished))
		hist, _, _, err := svc.History(alice, sess.ID, v, ptr(10), "", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		later := follow(t, svc, alice, sess.ID, v.StreamCursor)
		tn.finish(nil)
		evs := later.until(runEnds(run.ID))
		if len(hist) != 2 || len(hist[1].ToolCalls) != 1 {
			t.Fatalf("history as of the view: %d messages", len(hist))
		}
		call := hist[1].ToolCalls[0]
		if call.Output != "a " || call.Status != service.ToolRunning {
			t.Errorf("History as of a view taken when the tool had printed %q shows it %s with output %q", "a ", call.Status, call.Output)
		}
		if got := continueText(t, call.Output, evs, tool.ID()); got != "a b " {
			t.Errorf("history and stream make %q", got)
		}
	})

	t.Run("before a tool call starts", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "Let me see. ")
		f.until(is(service.EventMessageChunk))
		v := view(t, svc, alice, sess.ID)
		tool, _ := tn.out.StartTool("", "files", "ls")
		tool.Finish("done", nil)
		f.until(is(service.EventToolCallFinished))
		hist, _, _, err := svc.History(alice, sess.ID, v, ptr(10), "", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		later := follow(t, svc, alice, sess.ID, v.StreamCursor)
		tn.finish(nil)
		evs := later.until(runEnds(run.ID))
		first(t, evs, service.EventToolCallStarted, nil) // the stream brings the call
		if n := len(hist[1].ToolCalls); n != 0 {
			t.Errorf("History as of a view taken before a tool call started shows %d tool call(s)", n)
		}
	})
}

func TestToolCalls(t *testing.T) {
	t.Run("returns the tool calls of one message of one of the caller's sessions, by start time", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		t1, _ := tn.out.StartTool("", "one", "")
		t1.Finish("1", nil)
		t2, _ := tn.out.StartTool("", "two", "")
		t2.Finish("2", nil)
		tn.finish(nil)
		msg := replyOf(t, f.until(runEnds(run.ID)), run.ID)
		calls, err := svc.ToolCalls(alice, sess.ID, msg.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 2 || calls[0].ID != t1.ID() || calls[1].ID != t2.ID() || *calls[1].Result != "2" {
			t.Errorf("tool calls %+v", calls)
		}
	})

	t.Run("ENOTFOUND for a session that is missing or not the caller's", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "/tool hi")
		msg := replyOf(t, f.until(runEnds(run.ID)), run.ID)
		_, other := svc.ToolCalls(bob, sess.ID, msg.ID)
		_, missing := svc.ToolCalls(bob, missingID, msg.ID)
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
	})

	t.Run("only messages of the session named: another user's message gives nothing", func(t *testing.T) {
		svc := start(t, setup{})
		theirs := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, theirs.ID, theirs.StreamCursor)
		_, run := send(t, svc, alice, theirs.ID, "/tool secret")
		msg := replyOf(t, f.until(runEnds(run.ID)), run.ID)
		mine := newSession(t, svc, bob, "", "")
		calls, err := svc.ToolCalls(bob, mine.ID, msg.ID)
		if err != nil || len(calls) > 0 {
			t.Fatalf("ToolCalls(bob, bob's session, alice's message) = %d calls, %v; want none", len(calls), err)
		}
	})
}
