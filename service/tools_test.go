package service_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

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
