package e2e

// AG-UI streams resumed with Last-Event-ID: from every SSE id of whole runs of each kind,
// and from the cuts that need care (right before a message's end, inside a tool call),
// cut while the run goes on. The client is @ag-ui/client 1.0.0 (see agui_test.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// replayOf is frames as an SSE text, as the server wrote them.
func replayOf(frames []sseFrame) string {
	var b strings.Builder
	for _, f := range frames {
		b.WriteString(f.Text)
		b.WriteString("\n\n")
	}
	return b.String()
}

// flow is what a client makes of events, one line each: the events with what they say
// (not their timestamps), a message's text contents in a row joined into one.
func flow(evs []aguiEvent) []string {
	var out []string
	for _, e := range evs {
		line := e.Type + " " + e.MessageID + e.ToolCallID
		switch e.Type {
		case "TEXT_MESSAGE_CONTENT":
			if n := len(out); n > 0 && strings.HasPrefix(out[n-1], line+" ") {
				out[n-1] += e.Delta
				continue
			}
			line += " " + e.Delta
		case "TOOL_CALL_START":
			line += " " + e.ToolCallName + " in " + e.ParentMessageID
		case "TOOL_CALL_ARGS":
			line += " " + e.Delta
		case "TOOL_CALL_RESULT":
			line += fmt.Sprintf(" %v", e.Content)
		case "RUN_STARTED":
			line += e.ThreadID + " " + e.RunID
		case "RUN_FINISHED":
			line += e.ThreadID + " " + e.RunID
			if e.Outcome != nil {
				line += " " + e.Outcome.Type
				for _, in := range e.Outcome.Interrupts {
					line += fmt.Sprintf(" %+v", in)
				}
			}
		case "RUN_ERROR":
			line += e.Code + " " + e.Message
		}
		out = append(out, line)
	}
	return out
}

// openAfter returns the start events of the text messages and tool calls that evs leave
// open.
func openAfter(evs []aguiEvent) []aguiEvent {
	var open []aguiEvent
	for _, e := range evs {
		switch e.Type {
		case "TEXT_MESSAGE_START", "TOOL_CALL_START":
			open = append(open, e)
		case "TEXT_MESSAGE_END":
			open = slices.DeleteFunc(open, func(o aguiEvent) bool { return o.Type == "TEXT_MESSAGE_START" && o.MessageID == e.MessageID })
		case "TOOL_CALL_END":
			open = slices.DeleteFunc(open, func(o aguiEvent) bool { return o.Type == "TOOL_CALL_START" && o.ToolCallID == e.ToolCallID })
		}
	}
	return open
}

// checkEveryID checks stream, the frames of one whole /agui answer of session sid (after
// the answers before, which a client got whole), against a client that got it up to each
// of its SSE ids and then sent the request again with that id as Last-Event-ID. The ids are
// the session's cursors, in order. Each resumed answer begins with RUN_STARTED and the
// start of each message and call the cut left open, these without an id; then comes
// exactly what the whole answer had after the id: no gap, no duplicate. An answer resumed
// after its run's end gives that end again. The client accepts each, and ends up with the
// messages and interrupts of the whole answer.
func checkEveryID(t *testing.T, node, base string, c *tgtest.Client, thread, sid string, before [][]sseFrame, stream []sseFrame) {
	t.Helper()
	// Each step answers the interrupts the client holds, as a client must: the replays as
	// the answers that came after them did; the requests with Last-Event-ID as the request
	// they resume did, or with answers the server must not take.
	resolved := map[string]any{"status": "resolved"}
	replays := func(last string) []map[string]any {
		var steps []map[string]any
		for _, b := range before {
			steps = append(steps, map[string]any{"replay": replayOf(b), "resume": resolved})
		}
		steps = append(steps, map[string]any{"replay": last, "resume": resolved})
		steps[0]["fresh"] = true
		return steps
	}
	steps := replays(replayOf(stream))
	var ids []int // indexes of the frames with an id
	var last service.Cursor
	for i, f := range stream {
		if f.ID == "" {
			continue
		}
		ids = append(ids, i)
		cur, err := service.DecodeCursor(sid, f.ID)
		if err != nil || cur.Seq < last.Seq || cur.Seq == last.Seq && cur.Off <= last.Off {
			t.Fatalf("frame %d's id %q is not a cursor of the session after %+v (%v)", i, f.ID, last, err)
		}
		last = cur
		steps = append(steps, replays(replayOf(stream[:i+1]))...)
		steps = append(steps, map[string]any{"lastEventId": f.ID, "resume": resolved})
	}
	if len(ids) == 0 {
		t.Fatalf("no frame has an id: %+v", stream)
	}
	s := runAGUI(t, node, aguiCfg(base, c, thread, steps...))
	whole := s[len(before)]
	per := len(before) + 2
	for n, i := range ids {
		prefix, resumed := s[len(before)+1+n*per+len(before)], s[len(before)+1+n*per+len(before)+1]
		what := fmt.Sprintf("resumed after frame %d (%s)", i, stream[i].Type)
		if len(resumed.Frames) != len(resumed.Events) || len(resumed.Frames) == 0 || resumed.Frames[0] != (aguiFrame{Type: "RUN_STARTED"}) {
			t.Errorf("%s: frames %+v, events %v", what, resumed.Frames, resumed.types())
			continue
		}
		want := flow(whole.Events)
		skip := 1 // RUN_STARTED
		if end := prefix.last().Type; end == "RUN_FINISHED" || end == "RUN_ERROR" {
			want = flow(append(slices.Clone(prefix.Events), prefix.last())) // the end again
		} else {
			open := openAfter(prefix.Events)
			for j, o := range open {
				if j+1 >= len(resumed.Events) || resumed.Frames[j+1].ID != "" || flow(resumed.Events[j+1 : j+2])[0] != flow([]aguiEvent{o})[0] {
					t.Errorf("%s: %v left open, the resumed answer begins %+v", what, flow(open), resumed.Frames)
				}
			}
			skip = min(1+len(open), len(resumed.Events))
		}
		got := flow(append(slices.Clone(prefix.Events), resumed.Events[skip:]...))
		if !slices.Equal(got, want) {
			t.Errorf("%s: the client got\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if !jsonEqual(resumed.Messages, whole.Messages) || !jsonEqual(resumed.Interrupts, whole.Interrupts) {
			t.Errorf("%s: the client holds %+v, interrupts %+v; want %+v, %+v", what, resumed.Messages, resumed.Interrupts, whole.Messages, whole.Interrupts)
		}
	}
}

// noteTool is a tool of the openai agent that runs at once.
type noteTool struct{}

func (noteTool) Name() string                      { return "note" }
func (noteTool) Description() string               { return "Notes the text." }
func (noteTool) Parameters() map[string]any        { return nil }
func (noteTool) DefaultPolicy() service.ToolPolicy { return service.PolicyAllow }
func (noteTool) Call(_ context.Context, args string, out openai.ToolOutput) (string, error) {
	_ = out.Output("noting")
	return "noted " + args, nil
}

// textAndCallReply streams text, then a call of tool name, in one completion: a message
// whose text is open around its call.
func textAndCallReply(text, id, name, args string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fakellm.WriteSSE(w, fakellm.Chunk(fakellm.RoleDelta, ""), fakellm.Chunk(fakellm.TextDelta(text), ""),
			fakellm.Chunk(fakellm.ToolCallDelta(0, id, name), ""), fakellm.Chunk(fakellm.ArgumentsDelta(0, args), ""),
			fakellm.Chunk(`{}`, "tool_calls"), fakellm.Done)
	}
}

// TestAGUIResumesAtEveryID: a stream resumed from any of its SSE ids has no gap and no
// duplicate, and @ag-ui/client takes it, for every kind of run: text, a tool call that
// prints, a call refused by policy, an approval and the run after it, a question, a failed
// run, and text that is open around a tool call (the openai agent).
func TestAGUIResumesAtEveryID(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node")
	}
	node := installNodePackages(t, aguiDir, "@ag-ui/client", "the AG-UI client tests")
	f := fakellm.New(t, textAndCallReply("Let me note that. ", "call_1", "note", `{"text":"milk"}`), fakellm.TextReply())
	a := startOpenAI(t, "sqlite", f, func(c *app.Config) { c.OpenAI.Tools = []openai.Tool{noteTool{}} })

	// run sends a message to a new thread of a new user and returns the whole answer.
	run := func(t *testing.T, settings map[string]any, message string) (*tgtest.Client, string, []sseFrame) {
		t.Helper()
		c := guest(t, a)
		sid := c.CreateSession(settings)
		status, frames, body := postAGUI(t, a.URL, c, aguiInput(sid, "m-1", message), "")
		if status != 200 {
			t.Fatalf("%s: %d %s", message, status, body)
		}
		return c, sid, frames
	}
	for _, tc := range []struct {
		name, message string
		settings      map[string]any
	}{
		{"text", "/slow 3", nil},
		{"a tool call that prints", "/tool one two three", nil},
		{"a call refused by policy", "/tool hi", map[string]any{"toolPolicies": []any{map[string]any{"tool": "echo", "policy": "DENY"}}}},
		{"a question", "/form", nil},
		{"a failed run", "/fail", nil},
		{"text open around a tool call", "note milk", map[string]any{"agent": "openai"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, sid, frames := run(t, tc.settings, tc.message)
			checkEveryID(t, node, a.URL, c, sid, sid, nil, frames)
		})
	}

	t.Run("an approval, and the run after it", func(t *testing.T) {
		t.Parallel()
		c, sid, first := run(t, nil, "/approve hi")
		checkEveryID(t, node, a.URL, c, sid, sid, nil, first)
		_, calls := aguiPendingOf(c, sid)
		if len(calls) != 1 {
			t.Fatalf("waiting on %+v", calls)
		}
		status, second, body := postAGUI(t, a.URL, c, aguiInput(sid, "", "", map[string]any{"interruptId": calls[0].ID, "status": "resolved"}), "")
		if status != 200 {
			t.Fatalf("the approval: %d %s", status, body)
		}
		checkEveryID(t, node, a.URL, c, sid, sid, [][]sseFrame{first}, second)
	})
}

// checkLiveCuts cuts streams of runs that go on at the cuts that need care, as a dropped
// connection does, and resumes them with Last-Event-ID, sent to resumeAt (another
// replica's /agui, or the same). The resumed answers begin with RUN_STARTED, then the start
// of the message the cut left open, without ids, and the client ends up with the session's
// messages, each once.
func checkLiveCuts(t *testing.T, node, base, resumeAt string, guest func(*testing.T) *tgtest.Client) {
	types := func(fs []aguiFrame) []string {
		var out []string
		for _, f := range fs {
			s := f.Type
			if f.ID == "" {
				s += " (no id)"
			}
			out = append(out, s)
		}
		return slices.Compact(out)
	}
	// theSession checks that the client holds the session's assistant text and its calls,
	// each once, with their arguments as the agent gave them.
	theSession := func(t *testing.T, c *tgtest.Client, s aguiStep) {
		t.Helper()
		sid := onlySession(t, c)
		var text string
		for _, m := range c.Messages(sid) {
			if m.Role == "ASSISTANT" {
				text += m.Content
			}
		}
		if got := s.assistant(); got != text {
			t.Errorf("the client assembled %q, the session holds %q", got, text)
		}
		calls := aguiCallsOf(c, sid)
		var got []string
		for _, m := range s.Messages {
			for _, tc := range m.ToolCalls {
				got = append(got, tc.ID+" "+tc.Function.Arguments)
			}
		}
		var want []string
		for _, tc := range calls {
			want = append(want, tc.ID+" "+tc.Arguments)
		}
		if !slices.Equal(got, want) {
			t.Errorf("the client holds the calls %q, the session %q", got, want)
		}
	}

	t.Run("a cut inside a message", func(t *testing.T) {
		t.Parallel()
		c := guest(t)
		s := runAGUI(t, node, aguiCfg(base, c, "drop", map[string]any{"message": "/slow 6", "cut": map[string]any{"after": 3}},
			map[string]any{"lastEventId": true, "url": resumeAt + "/agui"}))
		if !s[0].Cut || slices.Contains(s[0].types(), "RUN_FINISHED") {
			t.Fatalf("the first stream was not cut: %v", s[0].types())
		}
		if got, want := types(s[1].Frames), []string{"RUN_STARTED (no id)", "TEXT_MESSAGE_START (no id)", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}; !slices.Equal(got, want) {
			t.Errorf("the resumed stream: %v, want %v", got, want)
		}
		theSession(t, c, s[1])
	})

	t.Run("a cut right before a message's TEXT_MESSAGE_END", func(t *testing.T) {
		t.Parallel()
		c := guest(t)
		s := runAGUI(t, node, aguiCfg(base, c, "end", map[string]any{"message": "/slow 3", "cut": map[string]any{"before": "TEXT_MESSAGE_END"}},
			map[string]any{"lastEventId": true, "url": resumeAt + "/agui"}))
		if !s[0].Cut || s[0].last().Type != "TEXT_MESSAGE_CONTENT" {
			t.Fatalf("the first stream was not cut before the end: %v", s[0].types())
		}
		if got, want := types(s[1].Frames), []string{"RUN_STARTED (no id)", "TEXT_MESSAGE_START (no id)", "TEXT_MESSAGE_END", "RUN_FINISHED"}; !slices.Equal(got, want) {
			t.Errorf("the resumed stream: %v, want %v", got, want)
		}
		if got, want := s[1].only(t, "TEXT_MESSAGE_START").MessageID, s[0].only(t, "TEXT_MESSAGE_START").MessageID; got != want {
			t.Errorf("the resumed stream starts message %s, the cut one was %s", got, want)
		}
		theSession(t, c, s[1])
	})

	t.Run("a cut inside a tool call while it runs", func(t *testing.T) {
		t.Parallel()
		c := guest(t)
		s := runAGUI(t, node, aguiCfg(base, c, "call", map[string]any{"message": "/tool a b c d e f g h i j", "cut": map[string]any{"after": "TOOL_CALL_END"}},
			map[string]any{"lastEventId": true, "url": resumeAt + "/agui"}))
		if !s[0].Cut || s[0].last().Type != "TOOL_CALL_END" {
			t.Fatalf("the first stream was not cut after the call: %v", s[0].types())
		}
		if got, want := types(s[1].Frames), []string{"RUN_STARTED (no id)", "TOOL_CALL_RESULT", "TEXT_MESSAGE_START (no id)", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}; !slices.Equal(got, want) {
			t.Errorf("the resumed stream: %v, want %v", got, want)
		}
		theSession(t, c, s[1])
	})

	t.Run("a cut inside a tool call that awaits approval", func(t *testing.T) {
		t.Parallel()
		c := guest(t)
		s := runAGUI(t, node, aguiCfg(base, c, "approve", map[string]any{"message": "/approve hi", "cut": map[string]any{"after": "TOOL_CALL_END"}},
			map[string]any{"lastEventId": true, "url": resumeAt + "/agui"},
			map[string]any{"resume": map[string]any{"status": "resolved"}, "url": resumeAt + "/agui"}))
		if !s[0].Cut || s[0].last().Type != "TOOL_CALL_END" {
			t.Fatalf("the first stream was not cut after the call: %v", s[0].types())
		}
		if got, want := types(s[1].Frames), []string{"RUN_STARTED (no id)", "RUN_FINISHED"}; !slices.Equal(got, want) || s[1].outcome() != "interrupt" || len(s[1].Interrupts) != 1 {
			t.Errorf("the resumed stream: %v, want %v and an interrupt; interrupts %+v", got, want, s[1].Interrupts)
		}
		if !strings.Contains(s[2].assistant(), "The echo tool printed: hi") {
			t.Errorf("after the approval the assistant says %q", s[2].assistant())
		}
		theSession(t, c, s[2])
	})
}

// TestAGUIResumesLive: streams cut while their run goes on, at the cuts that need care,
// resumed with Last-Event-ID on the same server.
func TestAGUIResumesLive(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node")
	}
	node := installNodePackages(t, aguiDir, "@ag-ui/client", "the AG-UI client tests")
	a := startApp(t, "sqlite", func(c *app.Config) { c.DemoChunkDelay = 20_000_000 }) // 20 ms a word
	checkLiveCuts(t, node, a.URL, a.URL, func(t *testing.T) *tgtest.Client { return guest(t, a) })
}

// TestAGUILastEventIDChangesNothing: a request with Last-Event-ID adds no message and
// applies no resume, whatever its body says: it only replays.
func TestAGUILastEventIDChangesNothing(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	_, frames, body := postAGUI(t, a.URL, c, aguiInput("t", "m-1", "/approve hi"), "")
	var callEnd string
	for _, f := range frames {
		if f.Type == "TOOL_CALL_END" {
			callEnd = f.ID
		}
	}
	sid := onlySession(t, c)
	_, calls := aguiPendingOf(c, sid)
	if callEnd == "" || len(calls) != 1 {
		t.Fatalf("the first answer %s; waiting on %+v", body, calls)
	}
	again := aguiInput("t", "m-2", "a new message", map[string]any{"interruptId": calls[0].ID, "status": "resolved"})
	status, frames, body := postAGUI(t, a.URL, c, again, callEnd)
	if status != 200 || len(frames) != 2 || frames[0].Type != "RUN_STARTED" || frames[1].Type != "RUN_FINISHED" || !strings.Contains(string(body), `"interrupt"`) {
		t.Fatalf("the resumed answer: %d %s", status, body)
	}
	if msgs := c.Messages(sid); len(msgs) != 2 || msgs[0].Content != "/approve hi" {
		t.Errorf("the session holds %+v", msgs)
	}
	if _, calls := aguiPendingOf(c, sid); len(calls) != 1 {
		t.Errorf("the call was decided: waiting on %+v", calls)
	}
}

// TestAGUIResumeStaysInTheUsersThread: a Last-Event-ID of another user's stream, under
// their session's ID or their thread's name, reaches nothing of theirs.
func TestAGUIResumeStaysInTheUsersThread(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", nil)
	alice, bob := guest(t, a), guest(t, a)
	_, frames, _ := postAGUI(t, a.URL, alice, aguiInput("x", "m-1", "from alice"), "")
	aliceSession := onlySession(t, alice)
	var first string
	for _, f := range frames {
		if f.ID != "" && first == "" {
			first = f.ID
		}
	}
	check := func(thread string, want int) {
		t.Helper()
		status, _, body := postAGUI(t, a.URL, bob, aguiInput(thread, "", ""), first)
		if status != want || strings.Contains(string(body), "alice") {
			t.Errorf("bob resuming alice's stream under thread %q: %d %s; want %d", thread, status, body, want)
		}
	}
	check(aliceSession, http.StatusNotFound)
	check("x", http.StatusNotFound)
	if status, _, body := postAGUI(t, a.URL, bob, aguiInput("x", "m-2", "from bob"), ""); status != 200 {
		t.Fatalf("bob's own thread x: %d %s", status, body)
	}
	check("x", http.StatusBadRequest) // a cursor of another session
	if msgs := alice.Messages(aliceSession); len(msgs) != 2 {
		t.Errorf("alice's session holds %+v", msgs)
	}
}

// TestAGUIMessageIDIsItsKey: a RunAgentInput sent again adds its message once: its ID is
// its idempotency key; the answer takes its run up where it is (here, at its end).
func TestAGUIMessageIDIsItsKey(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	var types []string
	for range 2 {
		status, frames, body := postAGUI(t, a.URL, c, aguiInput("t", "m-1", "hello"), "")
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		types = nil
		for _, f := range frames {
			types = append(types, f.Type)
		}
	}
	if !slices.Equal(types, []string{"RUN_STARTED", "RUN_FINISHED"}) {
		t.Errorf("the retry's answer: %v", types)
	}
	if msgs := c.Messages(onlySession(t, c)); len(msgs) != 2 || msgs[0].Content != "hello" {
		t.Errorf("the session holds %+v", msgs)
	}
}

// TestAGUIRefusesBadResumes: resume entries that cannot be taken are refused with 400,
// naming the entry, and nothing of the request is taken: what waited still waits.
func TestAGUIRefusesBadResumes(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	postAGUI(t, a.URL, c, aguiInput("t", "m-1", "/approve hi"), "")
	sid := onlySession(t, c)
	_, calls := aguiPendingOf(c, sid)
	if len(calls) != 1 {
		t.Fatalf("waiting on %+v", calls)
	}
	id := calls[0].ID
	for _, tc := range []struct {
		name   string
		resume []map[string]any
		says   string
	}{
		{"arguments that are not an object", []map[string]any{{"interruptId": id, "status": "resolved", "payload": map[string]any{"arguments": "hi"}}},
			"resume[0]: payload.arguments must be a JSON object"},
		{"arguments the tool's schema refuses", []map[string]any{{"interruptId": id, "status": "resolved", "payload": map[string]any{"arguments": map[string]any{"text": 5}}}},
			"resume[0]: the arguments do not fit the tool's input schema"},
		{"a payload that is not an object", []map[string]any{{"interruptId": id, "status": "resolved", "payload": "yes"}},
			"resume[0]: the payload of an approval is an object"},
		{"the call twice", []map[string]any{{"interruptId": id, "status": "resolved"}, {"interruptId": id, "status": "cancelled"}},
			"resume[1]: the call is decided twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := postAGUI(t, a.URL, c, aguiInput("t", "", "", tc.resume...), "")
			var r struct{ Errors []tgtest.GQLError }
			if err := json.Unmarshal(body, &r); err != nil || status != http.StatusBadRequest || len(r.Errors) != 1 || !strings.HasPrefix(r.Errors[0].Message, tc.says) {
				t.Errorf("%d %s; want 400 saying %q", status, body, tc.says)
			}
		})
	}
	if _, calls := aguiPendingOf(c, sid); len(calls) != 1 || calls[0].Arguments != `{"text":"hi"}` {
		t.Errorf("after the refusals the session waits on %+v", calls)
	}
}
