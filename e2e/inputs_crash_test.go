package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// Human in the loop across crashes, with real processes killed with SIGKILL: what waits
// outlives the process and wakes the same run exactly once; what was running when the
// process died is never run again behind the user's back.

// toolCallsOf returns the session's tool calls by ID, as its messages show them, and the
// session's status.
func toolCallsOf(c *tgtest.Client, sid string) (string, map[string]tgtest.ToolCall, int) {
	c.T.Helper()
	var out struct {
		Session struct {
			Status   string
			Messages struct {
				Edges []struct {
					Node struct {
						Kind      string
						ToolCalls []tgtest.ToolCall
					}
				}
			}
		}
	}
	c.Must(`query($s: ID!){ session(id: $s){ status messages(last: 50){ edges { node { kind
		toolCalls { id name status output result error approval { decision reason } } } } } } }`, map[string]any{"s": sid}, &out)
	calls, n := map[string]tgtest.ToolCall{}, 0
	for _, e := range out.Session.Messages.Edges {
		for _, tc := range e.Node.ToolCalls {
			calls[tc.ID] = tc
			n++
		}
	}
	return out.Session.Status, calls, n
}

// TestCrashWhileApprovalWaits kills the server while a tool call waits for approval: after
// the restart the call still waits, a decision wakes the same run, the call runs exactly
// once, and a second decision is refused.
func TestCrashWhileApprovalWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test starts and kills processes")
	}
	dataDir := t.TempDir()
	port := freePort(t)
	srv := startChild(t, dataDir, port)
	c := tgtest.Guest(t, srv.URL)
	sid := c.CreateSession(nil)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "/approve printed once only")
	req := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" })
	callID := req.ToolCall.ID

	srv.kill()
	srv = startChild(t, dataDir, port)

	p := pendingOf(c, sid)
	if p.Status != "WAITING_FOR_INPUT" || len(p.PendingApprovals) != 1 || p.PendingApprovals[0].ID != callID ||
		p.PendingApprovals[0].Approval.RequestedArguments != `{"text":"printed once only"}` {
		t.Fatalf("after the crash the session shows %+v, want the call %s still waiting", p, callID)
	}
	ws := c.Connect("graphql-transport-ws")
	_, after := ws.Stream(sid, req.Cursor)
	var res struct {
		DecideToolCall struct {
			ToolCall struct{ ID, Status string }
			Run      struct{ ID string }
		}
	}
	c.Must(decideMutation, map[string]any{"in": map[string]any{"toolCallId": callID, "decision": "APPROVE"}}, &res)
	if res.DecideToolCall.Run.ID != run {
		t.Fatalf("the decision woke run %s, want the same run %s", res.DecideToolCall.Run.ID, run)
	}
	defer func() {
		if t.Failed() {
			for _, e := range after.All {
				t.Logf("event %s %+v %+v %+v", e.Typename, e.Run, e.ToolCall, e.Message)
			}
			log, _ := os.ReadFile(filepath.Join(dataDir, "child.log"))
			t.Logf("log:\n%s", log)
		}
	}()
	end := after.Until("the run's end", tgtest.RunEnds(run))
	if end.Run.Status != "COMPLETED" {
		t.Fatalf("the woken run ended %s: %s", end.Run.Status, end.Run.Error)
	}
	if got := lastReply(c, sid); got != "The echo tool printed: printed once only" {
		t.Errorf("reply %q", got)
	}
	for _, m := range c.Messages(sid) { // the reply that held the call ended with the crash
		if m.Status == "STREAMING" {
			t.Errorf("after the run, %s message %s %q is STREAMING", m.Role, m.ID, m.Content)
		}
	}

	// Exactly once: one call, finished once, whose output is the text once.
	finished := 0
	for _, e := range after.All {
		if e.Typename == "ToolCallFinished" && e.ToolCall.ID == callID {
			finished++
		}
		if e.Typename == "ToolCallStarted" && e.ToolCall.ID != callID {
			t.Errorf("another call was started: %+v", e.ToolCall)
		}
	}
	status, calls, n := toolCallsOf(c, sid)
	call := calls[callID]
	if finished != 1 || n != 1 || call.Status != "COMPLETED" || call.Output != "printed once only" || call.Result != "printed once only" ||
		call.Approval == nil || call.Approval.Decision != "APPROVE" {
		t.Errorf("after the run: %d finish events, %d calls, the call %+v", finished, n, call)
	}
	if status != "IDLE" {
		t.Errorf("session %s after the run", status)
	}
	if r := decide(c, map[string]any{"toolCallId": callID, "decision": "APPROVE"}); r.Code() != "CONFLICT" {
		t.Errorf("a second decision: %+v, want CONFLICT", r.Errors)
	}

	// Killed again after the run, the server does not run the call again.
	srv.kill()
	startChild(t, dataDir, port)
	if _, calls, n := toolCallsOf(c, sid); n != 1 || calls[callID].Output != "printed once only" {
		t.Errorf("after a second crash: %d calls, %+v", n, calls[callID])
	}
}

// TestCrashWhileApprovedCallRuns kills the server while an approved call runs: after the
// restart the call is FAILED with what it printed, its run INTERRUPTED, and nothing runs it
// again.
func TestCrashWhileApprovedCallRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test starts and kills processes")
	}
	dataDir := t.TempDir()
	port := freePort(t)
	slow := "DEMO_CHUNK_DELAY=100ms" // echo prints a word each 100 ms
	srv := startChild(t, dataDir, port, slow)
	c := tgtest.Guest(t, srv.URL)
	sid := c.CreateSession(nil)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "/approve "+strings.Repeat("word ", 200))
	req := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" })
	callID := req.ToolCall.ID
	c.Must(decideMutation, map[string]any{"in": map[string]any{"toolCallId": callID, "decision": "APPROVE"}}, nil)
	evs.Until("the call's output", func(e tgtest.Event) bool { return e.Typename == "ToolCallOutput" && e.ToolCallID == callID })

	srv.kill()
	startChild(t, dataDir, port, slow)

	status, calls, n := toolCallsOf(c, sid)
	call := calls[callID]
	if n != 1 || call.Status != "FAILED" || !strings.Contains(call.Error, "stopped") || !strings.HasPrefix(call.Output, "word ") {
		t.Errorf("after the crash: %d calls, the call %+v; want it FAILED with its output kept", n, call)
	}
	if status != "IDLE" {
		t.Errorf("session %s after the crash", status)
	}
	var runs struct {
		Run struct{ Status string }
	}
	c.Must(`query($r: ID!){ run(id: $r){ status } }`, map[string]any{"r": run}, &runs)
	if runs.Run.Status != "INTERRUPTED" {
		t.Errorf("run %s after the crash, want INTERRUPTED", runs.Run.Status)
	}
	if r := decide(c, map[string]any{"toolCallId": callID, "decision": "APPROVE"}); r.Code() != "CONFLICT" {
		t.Errorf("deciding the crashed call: %+v, want CONFLICT", r.Errors)
	}

	// Nothing runs it again: the next message's run ends, and the call's output has not
	// grown meanwhile.
	_, evs2 := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	_, next := c.Send(sid, "still there?")
	if end := evs2.Until("the next run", tgtest.RunEnds(next)); end.Run.Status != "COMPLETED" {
		t.Errorf("next run ended %s", end.Run.Status)
	}
	for _, e := range evs2.All {
		if e.ToolCallID == callID || (e.ToolCall != nil && e.ToolCall.ID == callID) {
			t.Errorf("the crashed call moved after the restart: %+v", e)
		}
	}
	if _, calls, _ := toolCallsOf(c, sid); calls[callID].Output != call.Output {
		t.Errorf("the crashed call's output grew: %q, then %q", call.Output, calls[callID].Output)
	}
}

// TestReplicasApprovalOnSurvivor kills the replica whose run waits for an approval: a
// survivor takes the run over (once the killed replica's lease is over), a decision sent
// to a survivor is taken and wakes the run there, and the call runs exactly once.
func TestReplicasApprovalOnSurvivor(t *testing.T) {
	t.Parallel()
	rs := newReplicaSet(t, setOptions{})
	r := rs.reps
	c := tgtest.Guest(t, r[0].URL)
	sid := c.CreateSession(nil)
	on1 := c.On(r[1].URL)
	ws := on1.Connect("graphql-transport-ws")
	_, evs := ws.Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "/approve across replicas") // taken, and run, by replica 0
	req := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" })
	callID := req.ToolCall.ID
	if owner := rs.owner(t, run); owner != r[0].id {
		t.Fatalf("the run is %s's, want replica 0's (%s): killing replica 0 would prove nothing", owner, r[0].id)
	}

	r[0].kill()
	on2 := c.On(r[2].URL)
	res, waited := untilOK(t, takeoverWait, func() *tgtest.Response {
		return decide(on2, map[string]any{"toolCallId": callID, "decision": "APPROVE"})
	})
	if len(res.Errors) > 0 {
		t.Fatalf("the decision on a survivor: %+v", res.Errors)
	}
	t.Logf("the decision on a survivor was taken after %v of retrying", waited)
	defer func() {
		if t.Failed() {
			for _, e := range evs.All {
				t.Logf("event %s %+v %+v", e.Typename, e.Run, e.ToolCall)
			}
			select {
			case err := <-ws.Closed:
				t.Logf("socket closed: %v", err)
			default:
			}
		}
	}()
	if end := evs.Until("the woken run", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
		t.Fatalf("the woken run ended %s: %s", end.Run.Status, end.Run.Error)
	}
	if got := lastReply(on1, sid); got != "The echo tool printed: across replicas" {
		t.Errorf("reply %q", got)
	}
	finished := 0
	for _, e := range evs.All {
		if e.Typename == "ToolCallFinished" && e.ToolCall.ID == callID {
			finished++
		}
	}
	_, calls, n := toolCallsOf(on2, sid)
	if finished != 1 || n != 1 || calls[callID].Status != "COMPLETED" || calls[callID].Output != "across replicas" {
		t.Errorf("%d finish events, %d calls, the call %+v", finished, n, calls[callID])
	}
	if r := decide(on1, map[string]any{"toolCallId": callID, "decision": "REJECT"}); r.Code() != "CONFLICT" {
		t.Errorf("a second decision on another replica: %+v, want CONFLICT", r.Errors)
	}

	// A survivor took the run over: it owns it, logged the takeover once, and counted it.
	owner := rs.owner(t, run)
	if owner != r[1].id && owner != r[2].id {
		t.Errorf("the run is %s's after the kill, want a survivor's", owner)
	}
	if lines := logLines(r[1:], `"msg":"took over a run"`, run); len(lines) != 1 || !strings.Contains(lines[0], owner) {
		t.Errorf("log lines of the takeover of %s by %s: %q", run, owner, lines)
	}
	if n := r[1].metric(t, "talkgraph_runs_taken_over_total") + r[2].metric(t, "talkgraph_runs_taken_over_total"); n != 1 {
		t.Errorf("talkgraph_runs_taken_over_total adds up to %v on the survivors, want 1", n)
	}
}
