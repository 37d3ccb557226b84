package service_test

import (
	"context"
	"errors"
	"fmt"
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

func TestOutputStartTool(t *testing.T) {
	t.Run("records the start of a tool call on the current assistant message and returns its handle", func(t *testing.T) {
		svc, sess, run, tn, f := puppetRun(t, setup{})
		tn.say(t, "Searching. ")
		tool, err := tn.out.StartTool("call_1", "search", `{"q":"go"}`)
		if err != nil {
			t.Fatal(err)
		}
		evs := f.until(is(service.EventToolCallStarted))
		call := evs[len(evs)-1].ToolCall
		msg := first(t, evs, service.EventMessageAdded, func(ev *service.Event) bool { return ev.Message.Role == service.RoleAssistant }).Message
		if call.ID != tool.ID() || call.MessageID != msg.ID || call.RunID != run.ID || call.SessionID != sess.ID ||
			call.Name != "search" || call.Arguments != `{"q":"go"}` || call.Status != service.ToolRunning {
			t.Errorf("tool call %+v on message %s", call, msg.ID)
		}
		// The text before the call is written before it.
		if got := continueText(t, "", evs, msg.ID); got != "Searching. " {
			t.Errorf("text before the call %q", got)
		}
		h := history(t, svc, alice, sess.ID)
		if calls := h[len(h)-1].ToolCalls; len(calls) != 1 || calls[0].ID != tool.ID() || calls[0].Status != service.ToolRunning {
			t.Errorf("history's tool calls %+v", calls)
		}
	})

	t.Run("starts a message when the agent wrote none", func(t *testing.T) {
		_, _, run, tn, f := puppetRun(t, setup{})
		tool, err := tn.out.StartTool("", "t", "")
		if err != nil {
			t.Fatal(err)
		}
		tool.Finish("r", nil)
		tn.finish(nil)
		evs := f.until(runEnds(run.ID))
		m := replyOf(t, evs, run.ID)
		if call := first(t, evs, service.EventToolCallStarted, nil).ToolCall; call.MessageID != m.ID || m.Status != service.MessageComplete {
			t.Errorf("tool call on %s, message %+v", call.MessageID, m)
		}
	})

	t.Run("the call gets an ID of its own, unique in the store, and the agent's id is kept as its CallID", func(t *testing.T) {
		svc, sess, run, tn, f := puppetRun(t, setup{})
		t1, err1 := tn.out.StartTool("call_1", "a", "")
		t2, err2 := tn.out.StartTool("call_1", "b", "")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if t1.ID() == t2.ID() || t1.ID() == "call_1" {
			t.Errorf("IDs %q and %q", t1.ID(), t2.ID())
		}
		t1.Finish("1", nil)
		t2.Finish("2", nil)
		tn.finish(nil)
		f.until(runEnds(run.ID))
		h := history(t, svc, alice, sess.ID)
		calls := h[len(h)-1].ToolCalls
		if len(calls) != 2 {
			t.Fatalf("%d tool calls", len(calls))
		}
		for _, c := range calls {
			if c.CallID != "call_1" {
				t.Errorf("CallID %q, want the agent's call_1", c.CallID)
			}
		}
		if calls[0].ID == calls[1].ID {
			t.Error("two calls share an ID")
		}
	})

	t.Run("the CallID is given back with the history", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		send(t, svc, alice, sess.ID, "one")
		tn := p.next(t)
		tool, _ := tn.out.StartTool("toolu_01", "calc", `{"x":1}`)
		tool.Finish("2", nil)
		tn.finish(nil)
		send(t, svc, alice, sess.ID, "two")
		hist := p.next(t).req.History
		calls := hist[1].ToolCalls
		if len(calls) != 1 || calls[0].CallID != "toolu_01" || calls[0].ID != tool.ID() || *calls[0].Result != "2" {
			t.Errorf("tool calls in the next run's history %+v", calls)
		}
	})

	t.Run("the agent's id may be empty", func(t *testing.T) {
		_, _, _, tn, f := puppetRun(t, setup{})
		tool, err := tn.out.StartTool("", "t", "")
		if err != nil {
			t.Fatal(err)
		}
		call := f.until(is(service.EventToolCallStarted))
		if c := call[len(call)-1].ToolCall; c.CallID != "" || c.ID != tool.ID() || c.ID == "" {
			t.Errorf("tool call %+v", c)
		}
	})
}

func TestToolHandle(t *testing.T) {
	t.Run("Output streams what the tool prints", func(t *testing.T) {
		svc, sess, _, tn, f := puppetRun(t, setup{})
		tool, _ := tn.out.StartTool("", "files", "ls")
		tool.Output("a.txt\n")
		evs := f.until(is(service.EventToolCallOutput))
		tool.Output("b.txt\n")
		evs = append(evs, f.until(is(service.EventToolCallOutput))...)
		ev := evs[len(evs)-1]
		if ev.Key != tool.ID() || ev.MessageID == "" {
			t.Errorf("output event key %q message %q", ev.Key, ev.MessageID)
		}
		if got := continueText(t, "", evs, tool.ID()); got != "a.txt\nb.txt\n" {
			t.Errorf("streamed output %q", got)
		}
		// The history shows the output so far while the tool runs.
		h := history(t, svc, alice, sess.ID)
		if calls := h[len(h)-1].ToolCalls; len(calls) != 1 || calls[0].Output != "a.txt\nb.txt\n" || calls[0].Status != service.ToolRunning {
			t.Errorf("history's tool call %+v", calls)
		}
	})

	t.Run("Finish ends the call with a result", func(t *testing.T) {
		_, _, run, tn, f := puppetRun(t, setup{})
		tool, _ := tn.out.StartTool("", "files", "ls")
		tool.Output("a.txt\n")
		if err := tool.Finish("1 file", nil); err != nil {
			t.Fatal(err)
		}
		tn.finish(nil)
		call := first(t, f.until(runEnds(run.ID)), service.EventToolCallFinished, nil).ToolCall
		if call.Status != service.ToolCompleted || call.Result == nil || *call.Result != "1 file" || call.Error != nil || call.Output != "a.txt\n" || call.FinishedAt == nil {
			t.Errorf("finished call %+v", call)
		}
	})

	t.Run("Finish ends the call with an error when err is non-nil", func(t *testing.T) {
		_, _, run, tn, f := puppetRun(t, setup{})
		t1, _ := tn.out.StartTool("", "files", "rm")
		t1.Finish("ignored", service.Errorf(service.EINVALID, "permission denied"))
		t2, _ := tn.out.StartTool("", "files", "cat")
		t2.Finish("", errors.New("no such file"))
		tn.finish(nil)
		evs := f.until(runEnds(run.ID))
		for _, want := range []struct{ id, err string }{{t1.ID(), "permission denied"}, {t2.ID(), "no such file"}} {
			call := first(t, evs, service.EventToolCallFinished, func(ev *service.Event) bool { return ev.ToolCall.ID == want.id }).ToolCall
			if call.Status != service.ToolFailed || call.Error == nil || *call.Error != want.err || call.Result != nil {
				t.Errorf("failed call %s, error %v, result %v; want FAILED with %q", call.Status, call.Error, call.Result, want.err)
			}
		}
		if got := lastEnd(t, evs).Status; got != service.RunCompleted {
			t.Errorf("a failed tool call ended the run %s", got)
		}
	})

	t.Run("EINVALID for output longer than MaxReplyBytes", func(t *testing.T) {
		_, _, _, tn, _ := puppetRun(t, setup{config: func(c *service.Config) { c.MaxReplyBytes = 10 }})
		tool, _ := tn.out.StartTool("", "t", "")
		if err := tool.Output("0123456789"); err != nil {
			t.Fatal(err)
		}
		wantCode(t, "the 11th byte", tool.Output("x"), service.EINVALID)
	})

	t.Run("a result is cut to MaxReplyBytes", func(t *testing.T) {
		_, _, run, tn, f := puppetRun(t, setup{config: func(c *service.Config) { c.MaxReplyBytes = 10 }})
		t1, _ := tn.out.StartTool("", "t", "")
		t1.Finish(strings.Repeat("é", 10), nil)
		t2, _ := tn.out.StartTool("", "t", "")
		t2.Finish(strings.Repeat("x", 11), nil)
		tn.finish(nil)
		var long []string
		for _, ev := range f.until(runEnds(run.ID)) {
			if ev.Type == service.EventToolCallFinished && len(*ev.ToolCall.Result) > 10 {
				long = append(long, fmt.Sprintf("%q (%d bytes)", *ev.ToolCall.Result, len(*ev.ToolCall.Result)))
			}
		}
		if len(long) > 0 {
			t.Errorf("with MaxReplyBytes 10, Finish keeps results %s", strings.Join(long, ", "))
		}
	})

	t.Run("ECONFLICT for Output or Finish once the call has finished", func(t *testing.T) {
		_, _, _, tn, _ := puppetRun(t, setup{})
		tool, _ := tn.out.StartTool("", "t", "")
		tool.Finish("r", nil)
		wantCode(t, "Output", tool.Output("more"), service.ECONFLICT)
		wantCode(t, "Finish", tool.Finish("again", nil), service.ECONFLICT)
	})

	t.Run("a tool call still running when the run ends is cancelled, or failed with the run", func(t *testing.T) {
		for _, tc := range []struct {
			end  error
			want service.ToolCallStatus
		}{{nil, service.ToolCancelled}, {service.Errorf(service.EINVALID, "x"), service.ToolFailed}} {
			_, _, run, tn, f := puppetRun(t, setup{})
			tool, _ := tn.out.StartTool("", "t", "")
			tool.Output("half")
			tn.finish(tc.end)
			call := first(t, f.until(runEnds(run.ID)), service.EventToolCallFinished, nil).ToolCall
			if call.Status != tc.want || call.Output != "half" {
				t.Errorf("run ended with %v: tool call %s with %q, want %s", tc.end, call.Status, call.Output, tc.want)
			}
		}
	})
}

func TestOutputReportUsage(t *testing.T) {
	t.Run("adds what one call of model cost to the run's usage", func(t *testing.T) {
		svc, _, run, tn, f := puppetRun(t, setup{})
		if err := tn.out.ReportUsage("m1", service.Usage{InputTokens: 100, OutputTokens: 20, CachedInputTokens: ptr(60)}); err != nil {
			t.Fatal(err)
		}
		if err := tn.out.ReportUsage("m1", service.Usage{InputTokens: 50, OutputTokens: 5}); err != nil {
			t.Fatal(err)
		}
		if err := tn.out.ReportUsage("m2", service.Usage{InputTokens: 1, OutputTokens: 2, CachedInputTokens: ptr(1)}); err != nil {
			t.Fatal(err)
		}
		tn.finish(nil)
		end := lastEnd(t, f.until(runEnds(run.ID)))
		for what, u := range map[string]*service.Usage{"the run's end": end.Usage, "Service.Run": getRun(t, svc, alice, run.ID).Usage} {
			if u == nil || u.InputTokens != 151 || u.OutputTokens != 27 || u.CachedInputTokens == nil || *u.CachedInputTokens != 61 {
				t.Errorf("%s: usage %+v, want 151 in, 27 out, 61 cached", what, u)
			}
		}
	})

	t.Run("and in the server's per-model counters", func(t *testing.T) {
		svc, _, run, tn, f := puppetRun(t, setup{config: func(c *service.Config) { c.Models = []string{"m1", "m2"} }})
		tn.out.ReportUsage("m1", service.Usage{InputTokens: 100, OutputTokens: 20, CachedInputTokens: ptr(60)})
		tn.out.ReportUsage("m2", service.Usage{InputTokens: 7, OutputTokens: 3})
		tn.finish(nil)
		f.until(runEnds(run.ID))
		stats := svc.Stats().Usage
		m1, m2 := stats["m1"], stats["m2"]
		if m1.InputTokens != 100 || m1.OutputTokens != 20 || m1.CachedInputTokens == nil || *m1.CachedInputTokens != 60 {
			t.Errorf("m1 %+v", m1)
		}
		if m2.InputTokens != 7 || m2.OutputTokens != 3 || m2.CachedInputTokens != nil {
			t.Errorf("m2 %+v", m2)
		}
	})

	t.Run("models not configured are counted together", func(t *testing.T) {
		svc, _, run, tn, f := puppetRun(t, setup{config: func(c *service.Config) { c.Models = []string{"m1"} }})
		tn.out.ReportUsage("m1", service.Usage{InputTokens: 1, OutputTokens: 1})
		for i := range 50 {
			tn.out.ReportUsage(fmt.Sprintf("chosen-%d", i), service.Usage{InputTokens: 2, OutputTokens: 1})
		}
		tn.finish(nil)
		f.until(runEnds(run.ID))
		stats := svc.Stats().Usage
		if len(stats) != 2 || stats["m1"].InputTokens != 1 || stats[service.OtherModel].InputTokens != 100 || stats[service.OtherModel].OutputTokens != 50 {
			t.Errorf("per-model counters %+v, want m1 and %q (100 in, 50 out) only", stats, service.OtherModel)
		}
	})

	t.Run("a run that reports nothing has no usage", func(t *testing.T) {
		svc, _, run, tn, f := puppetRun(t, setup{})
		tn.finish(nil)
		f.until(runEnds(run.ID))
		if u := getRun(t, svc, alice, run.ID).Usage; u != nil {
			t.Errorf("usage %+v", u)
		}
	})

	t.Run("usage reported before a cancellation is kept", func(t *testing.T) {
		svc, sess, run, tn, f := puppetRun(t, setup{})
		tn.out.ReportUsage("m1", service.Usage{InputTokens: 3, OutputTokens: 4})
		svc.CancelRun(alice, sess.ID)
		f.until(runEnds(run.ID))
		if u := getRun(t, svc, alice, run.ID).Usage; u == nil || u.InputTokens != 3 || u.OutputTokens != 4 {
			t.Errorf("usage %+v", u)
		}
	})

	t.Run("EINVALID for negative counts", func(t *testing.T) {
		svc, _, run, tn, f := puppetRun(t, setup{})
		for name, u := range map[string]service.Usage{
			"input":  {InputTokens: -1},
			"output": {OutputTokens: -1},
			"cached": {CachedInputTokens: ptr(-1)},
		} {
			wantCode(t, "negative "+name, tn.out.ReportUsage("m1", u), service.EINVALID)
		}
		tn.finish(nil)
		f.until(runEnds(run.ID))
		if u := getRun(t, svc, alice, run.ID).Usage; u != nil {
			t.Errorf("refused usage was added: %+v", u)
		}
		if u := svc.Stats().Usage; len(u) != 0 {
			t.Errorf("refused usage was counted: %+v", u)
		}
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
