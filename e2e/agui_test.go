package e2e

// AG-UI on POST /agui, checked with the protocol's reference client: @ag-ui/client 1.0.0's
// HttpAgent, run by Node (testdata/agui/steps.mjs, the version pinned in package-lock.json)
// against the real server. The client checks every stream as it applies it (the order of
// events, one run at a time, no message or call left open), so a step without an error
// is a stream the reference client accepts. Each promise of the contract (docs/API.md,
// POST /agui) has its test here or in agui_resume_test.go and agui_replicas_test.go.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service/demo"
)

const aguiDir = "testdata/agui"

// aguiStep is what steps.mjs printed of one run of the agent.
type aguiStep struct {
	Events     []aguiEvent
	Error      *string
	LastID     string
	Cut        bool
	Frames     []aguiFrame
	Interrupts []aguiInterrupt
	Messages   []aguiMessage
}

// aguiFrame is an SSE frame as the client got it: its id ("" for none) and its event's type.
type aguiFrame struct{ ID, Type string }

// aguiEvent is an AG-UI event as the client applied it.
type aguiEvent struct {
	Type, MessageID, Delta, ToolCallID, ToolCallName, ParentMessageID, ThreadID, RunID, Code, Message string
	Content                                                                                           any
	Outcome                                                                                           *struct {
		Type       string
		Interrupts []aguiInterrupt
	}
}

// aguiInterrupt is an interrupt of a RUN_FINISHED.
type aguiInterrupt struct {
	ID, Reason, Message, ToolCallID string
	ResponseSchema                  map[string]any
	ExpiresAt                       string
}

// aguiMessage is a message of the client's agent.messages.
type aguiMessage struct {
	ID, Role, ToolCallID string
	Content              any
	ToolCalls            []struct {
		ID       string
		Function struct{ Name, Arguments string }
	}
}

func (s aguiStep) types() []string {
	var ts []string
	for _, e := range s.Events {
		ts = append(ts, e.Type)
	}
	return ts
}

// last is the step's last event.
func (s aguiStep) last() aguiEvent {
	if len(s.Events) == 0 {
		return aguiEvent{}
	}
	return s.Events[len(s.Events)-1]
}

// outcome is the type of the outcome of the step's RUN_FINISHED, or the type of its last
// event when that is not RUN_FINISHED.
func (s aguiStep) outcome() string {
	if e := s.last(); e.Type != "RUN_FINISHED" {
		return e.Type
	} else if e.Outcome != nil {
		return e.Outcome.Type
	}
	return "success"
}

// assistant is the content of the step's assistant messages, joined.
func (s aguiStep) assistant() string {
	var b strings.Builder
	for _, m := range s.Messages {
		if c, ok := m.Content.(string); ok && m.Role == "assistant" {
			b.WriteString(c)
		}
	}
	return b.String()
}

// only returns the step's only event of type typ, failing the test unless there is one.
func (s aguiStep) only(t *testing.T, typ string) aguiEvent {
	t.Helper()
	var found []aguiEvent
	for _, e := range s.Events {
		if e.Type == typ {
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s events, want 1: %v", len(found), typ, s.types())
	}
	return found[0]
}

// runAGUI runs steps.mjs with cfg and returns what each step saw; a step that ended with an
// error fails the test unless it is one of wantErr's indexes.
func runAGUI(t *testing.T, node string, cfg map[string]any, wantErr ...int) []aguiStep {
	t.Helper()
	return startAGUI(t, node, cfg, wantErr...)()
}

// startAGUI starts steps.mjs with cfg and returns a function that waits for it and
// returns what runAGUI does.
func startAGUI(t *testing.T, node string, cfg map[string]any, wantErr ...int) func() []aguiStep {
	t.Helper()
	b, _ := json.Marshal(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, node, "steps.mjs", string(b))
	cmd.Dir = aguiDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("node steps.mjs: %v", err)
	}
	t.Cleanup(cancel)
	return func() []aguiStep {
		t.Helper()
		defer cancel()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("node steps.mjs: %v\n%s", err, stderr.Bytes())
		}
		return stepsOf(t, stdout.Bytes(), stderr.Bytes(), wantErr)
	}
}

// stepsOf reads what steps.mjs printed.
func stepsOf(t *testing.T, stdout, stderr []byte, wantErr []int) []aguiStep {
	t.Helper()
	var steps []aguiStep
	if err := json.Unmarshal(bytes.TrimSpace(stdout), &steps); err != nil {
		t.Fatalf("node steps.mjs printed no steps (%v):\n%s\n%s", err, stdout, stderr)
	}
	for i, s := range steps {
		if s.Error != nil && !slices.Contains(wantErr, i) {
			t.Fatalf("step %d: the client failed: %s (events %v)", i, *s.Error, s.types())
		}
	}
	return steps
}

func aguiCfg(base string, c *tgtest.Client, thread string, steps ...map[string]any) map[string]any {
	return map[string]any{"url": base + "/agui", "token": c.Token, "thread": thread, "steps": steps}
}

// sseFrame is one server-sent event of an /agui answer, as the server wrote it.
type sseFrame struct {
	ID, Type string
	Text     string // the frame as written, without its blank line
}

// postAGUI sends body to base's /agui as c, with Last-Event-ID lastID when it is not "",
// and returns the answer's status and, for a stream, its frames (all of them: the stream
// ends when its run ends or waits), else its body.
func postAGUI(t *testing.T, base string, c *tgtest.Client, body any, lastID string) (int, []sseFrame, []byte) {
	t.Helper()
	b, ok := body.([]byte)
	if !ok {
		b, _ = json.Marshal(body)
	}
	req, _ := http.NewRequest("POST", base+"/agui", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := (&http.Client{Timeout: tgtest.Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp.StatusCode, nil, raw.Bytes()
	}
	var frames []sseFrame
	for _, text := range strings.Split(raw.String(), "\n\n") {
		f := sseFrame{Text: text}
		sc := bufio.NewScanner(strings.NewReader(text))
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				f.ID = line[4:]
			case strings.HasPrefix(line, "data: "):
				var ev struct{ Type string }
				if err := json.Unmarshal([]byte(line[6:]), &ev); err != nil {
					t.Fatalf("an event that is not JSON: %q", line)
				}
				f.Type = ev.Type
			}
		}
		if f.Type != "" {
			frames = append(frames, f)
		}
	}
	return resp.StatusCode, frames, raw.Bytes()
}

// aguiInput is a RunAgentInput of thread, with a user message (none when content is "")
// and resume entries.
func aguiInput(thread, msgID, content string, resume ...map[string]any) map[string]any {
	in := map[string]any{"threadId": thread, "runId": "client-run", "messages": []any{}}
	if content != "" {
		in["messages"] = []any{map[string]any{"id": msgID, "role": "user", "content": content}}
	}
	if len(resume) > 0 {
		in["resume"] = resume
	}
	return in
}

// sessionCall is what the session's messages say of their tool calls.
type sessionCall struct {
	ID, Name, Arguments, Output, Status string
	Result, Error                       *string
	Approval                            *struct{ ExpiresAt, Decision string }
}

// aguiCallsOf returns the tool calls of session sid's messages, in order.
func aguiCallsOf(c *tgtest.Client, sid string) []sessionCall {
	c.T.Helper()
	var out struct {
		Session struct {
			Messages struct {
				Edges []struct {
					Node struct{ ToolCalls []sessionCall }
				}
			}
		}
	}
	c.Must(`query($s: ID!){ session(id: $s){ messages(first: 100){ edges { node {
		toolCalls { id name arguments output result error status approval { expiresAt decision } } } } } } }`,
		map[string]any{"s": sid}, &out)
	var calls []sessionCall
	for _, e := range out.Session.Messages.Edges {
		calls = append(calls, e.Node.ToolCalls...)
	}
	return calls
}

// aguiPendingOf returns what session sid waits on: its questions and its calls awaiting
// approval.
func aguiPendingOf(c *tgtest.Client, sid string) (questions []tgtest.Question, approvals []sessionCall) {
	c.T.Helper()
	var out struct {
		Session struct {
			PendingQuestions []tgtest.Question
			PendingApprovals []sessionCall
		}
	}
	c.Must(`query($s: ID!){ session(id: $s){ pendingQuestions { id prompt answerSchema expiresAt }
		pendingApprovals { id name arguments status approval { expiresAt } } } }`, map[string]any{"s": sid}, &out)
	return out.Session.PendingQuestions, out.Session.PendingApprovals
}

// sameTime reports whether two timestamps (RFC 3339) name the same instant.
func sameTime(a, b string) bool {
	ta, err1 := time.Parse(time.RFC3339Nano, a)
	tb, err2 := time.Parse(time.RFC3339Nano, b)
	return err1 == nil && err2 == nil && ta.Equal(tb)
}

// TestAGUIClient runs @ag-ui/client against /agui, a promise of the contract a subtest.
func TestAGUIClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node")
	}
	node := installNodePackages(t, aguiDir, "@ag-ui/client", "the AG-UI client tests")
	a := startApp(t, "sqlite", nil)

	t.Run("a run's text streams as one message with talkgraph's IDs, the user's not echoed", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a.URL, c, "text", map[string]any{"message": "hello there", "id": "m-1"},
			map[string]any{"message": "and again", "id": "m-2"}))
		want := []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}
		for i, step := range s {
			if got := slices.Compact(step.types()); !slices.Equal(got, want) {
				t.Errorf("step %d: events %v, want %v (contents compacted)", i, got, want)
			}
			if o := step.outcome(); o != "success" {
				t.Errorf("step %d: RUN_FINISHED's outcome %s, want success", i, o)
			}
		}
		if got := s[1].assistant(); got != "You said: hello thereYou said: and again" {
			t.Errorf("the assistant's messages read %q", got)
		}
		// One thread, one session: both messages are in it, and the IDs are talkgraph's.
		sid := onlySession(t, c)
		msgs := c.Messages(sid)
		if len(msgs) != 4 || msgs[0].Content != "hello there" || msgs[2].Content != "and again" {
			t.Fatalf("the session holds %+v", msgs)
		}
		if got := s[1].Events[0].RunID; got != msgs[3].RunID {
			t.Errorf("RUN_STARTED's runId %q, the reply's run %q", got, msgs[3].RunID)
		}
		if got := s[1].only(t, "TEXT_MESSAGE_START").MessageID; got != msgs[3].ID {
			t.Errorf("the message's ID %q, the reply's %q", got, msgs[3].ID)
		}
	})

	t.Run("a tool call starts, takes its arguments, ends and returns its result", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a.URL, c, "tool", map[string]any{"message": "/tool hi"}))[0]
		start, args, end, result := s.only(t, "TOOL_CALL_START"), s.only(t, "TOOL_CALL_ARGS"), s.only(t, "TOOL_CALL_END"), s.only(t, "TOOL_CALL_RESULT")
		calls := aguiCallsOf(c, onlySession(t, c))
		if len(calls) != 1 {
			t.Fatalf("the session's calls: %+v", calls)
		}
		if start.ToolCallName != "echo" || start.ToolCallID != calls[0].ID || args.Delta != `{"text":"hi"}` ||
			end.ToolCallID != start.ToolCallID || result.Content != "hi" || result.ToolCallID != start.ToolCallID {
			t.Fatalf("events %+v; the call %+v", s.Events, calls[0])
		}
		if !strings.Contains(s.assistant(), "The echo tool printed: hi") {
			t.Errorf("the assistant says %q", s.assistant())
		}
	})

	for _, tc := range []struct {
		name                 string
		resume               map[string]any
		says, status         string
		args, output, result string
	}{
		{"approved", map[string]any{"status": "resolved"}, "The echo tool printed: hi", "COMPLETED", `{"text":"hi"}`, "hi", "hi"},
		{"approved with {}", map[string]any{"status": "resolved", "payload": map[string]any{}}, "The echo tool printed: hi", "COMPLETED", `{"text":"hi"}`, "hi", "hi"},
		{"edited", map[string]any{"status": "resolved", "payload": map[string]any{"arguments": map[string]any{"text": "edited"}}},
			"The echo tool printed: edited", "COMPLETED", `{"text":"edited"}`, "edited", "edited"},
		{"rejected", map[string]any{"status": "cancelled", "payload": map[string]any{"reason": "not now"}}, "not now", "REJECTED", `{"text":"hi"}`, "", "REJECTED: not now"},
	} {
		t.Run("an approval is an interrupt, "+tc.name+" by resume", func(t *testing.T) {
			t.Parallel()
			c := guest(t, a)
			s := runAGUI(t, node, aguiCfg(a.URL, c, "approve", map[string]any{"message": "/approve hi"}, map[string]any{"resume": tc.resume}))
			if s[0].outcome() != "interrupt" || len(s[0].Interrupts) != 1 {
				t.Fatalf("the first run ended with %+v, interrupts %+v", s[0].last(), s[0].Interrupts)
			}
			calls := aguiCallsOf(c, onlySession(t, c))
			if len(calls) != 1 {
				t.Fatalf("the session's calls: %+v", calls)
			}
			call, in := calls[0], s[0].Interrupts[0]
			if in.ID != call.ID || in.Reason != "tool_call" || in.ToolCallID != call.ID || call.Approval == nil || !sameTime(in.ExpiresAt, call.Approval.ExpiresAt) {
				t.Errorf("the interrupt %+v; the call %+v", in, call)
			}
			if !strings.Contains(s[1].assistant(), tc.says) || len(s[1].Interrupts) != 0 {
				t.Errorf("after the resume the assistant says %q, want %q; interrupts %+v", s[1].assistant(), tc.says, s[1].Interrupts)
			}
			// The call ran with the arguments approved, or never ran.
			if call.Status != tc.status || call.Arguments != tc.args || call.Output != tc.output {
				t.Errorf("the call ended %s with arguments %s and output %q, want %s, %s and %q", call.Status, call.Arguments, call.Output, tc.status, tc.args, tc.output)
			}
			if got := s[1].only(t, "TOOL_CALL_RESULT"); got.ToolCallID != call.ID || got.Content != tc.result {
				t.Errorf("TOOL_CALL_RESULT %+v, want %q", got, tc.result)
			}
		})
	}

	t.Run("a question with a schema is an interrupt with its responseSchema; a bad answer is refused, a good one taken", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a.URL, c, "form", map[string]any{"message": "/form"},
			map[string]any{"resume": map[string]any{"status": "resolved", "payload": map[string]any{"name": "Ada"}}},
			map[string]any{"resume": map[string]any{"status": "resolved", "payload": map[string]any{"name": "Ada", "age": 36}}}), 1)
		if len(s[0].Interrupts) != 1 {
			t.Fatalf("interrupts %+v", s[0].Interrupts)
		}
		in := s[0].Interrupts[0]
		var schema map[string]any
		_ = json.Unmarshal([]byte(demo.FormSchema), &schema)
		if in.Reason != "input_required" || !jsonEqual(in.ResponseSchema, schema) || in.ToolCallID != "" || in.Message == "" {
			t.Errorf("the interrupt %+v, want the form's schema %v", in, schema)
		}
		if e := s[1].Error; e == nil || !strings.Contains(*e, "400") || !strings.Contains(*e, "age") {
			t.Errorf("an answer without age: %v", e)
		}
		if got := s[2].assistant(); !strings.Contains(got, "Hello Ada, aged 36") {
			t.Errorf("after the answer the assistant says %q", got)
		}
	})

	t.Run("a question's interrupt has its ID and expiry; a string answers it", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a.URL, c, "ask", map[string]any{"message": "/ask Your name?"}))
		qs, _ := aguiPendingOf(c, onlySession(t, c))
		if len(s[0].Interrupts) != 1 || len(qs) != 1 {
			t.Fatalf("interrupts %+v, the session's questions %+v", s[0].Interrupts, qs)
		}
		in := s[0].Interrupts[0]
		if in.ID != qs[0].ID || in.Reason != "input_required" || in.Message != "Your name?" || !sameTime(in.ExpiresAt, qs[0].ExpiresAt) || in.ResponseSchema != nil {
			t.Errorf("the interrupt %+v; the question %+v", in, qs[0])
		}
		st, frames, body := postAGUI(t, a.URL, c, aguiInput("ask", "", "", map[string]any{"interruptId": qs[0].ID, "status": "resolved", "payload": "Ada"}), "")
		if st != 200 || len(frames) == 0 || frames[len(frames)-1].Type != "RUN_FINISHED" || !strings.Contains(string(body), `You answered \"Ada\"`) {
			t.Errorf("the answer: %d %s", st, body)
		}
	})

	t.Run("a question declined is withdrawn and the agent goes on", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a.URL, c, "ask", map[string]any{"message": "/ask Your name?"},
			map[string]any{"resume": map[string]any{"status": "cancelled"}}))
		if len(s[0].Interrupts) != 1 || s[0].Interrupts[0].Message != "Your name?" {
			t.Fatalf("interrupts %+v", s[0].Interrupts)
		}
		if got := s[1].assistant(); !strings.Contains(got, "You did not answer (cancelled)") {
			t.Errorf("after declining the assistant says %q", got)
		}
	})

	t.Run("a run waiting on two questions is one interrupt each; a resume answers both", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a.URL, c, "many", map[string]any{"message": "/ask-many 2"},
			map[string]any{"resume": map[string]any{"status": "resolved", "payload": "yes"}}))
		qs, _ := aguiPendingOf(c, onlySession(t, c))
		if len(qs) != 0 || len(s[0].Interrupts) != 2 || s[0].Interrupts[0].ID == s[0].Interrupts[1].ID {
			t.Fatalf("interrupts %+v; pending now %+v", s[0].Interrupts, qs)
		}
		for _, in := range s[0].Interrupts {
			if in.Reason != "input_required" || !strings.HasPrefix(in.Message, "Question ") {
				t.Errorf("the interrupt %+v", in)
			}
		}
		if got := s[1].assistant(); !strings.Contains(got, "Your answers: 1. yes 2. yes") {
			t.Errorf("after the answers the assistant says %q", got)
		}
	})

	t.Run("a failed run ends with RUN_ERROR", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a.URL, c, "fail", map[string]any{"message": "/fail"}), 0)[0]
		if e := s.last(); e.Type != "RUN_ERROR" || e.Code != "RUN_FAILED" || !strings.Contains(e.Message, "failed, as you asked") {
			t.Errorf("the run ended with %+v (error %v)", e, s.Error)
		}
	})

	t.Run("a deleted session ends the stream with RUN_ERROR NOT_FOUND", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		sid := c.CreateSession(nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		wait := startAGUI(t, node, aguiCfg(a.URL, c, sid, map[string]any{"message": "/slow 50"}), 0)
		evs.Until("the first chunk", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
		c.Must(`mutation($s: ID!){ deleteTalkSession(id: $s) }`, map[string]any{"s": sid}, nil)
		if e := wait()[0].last(); e.Type != "RUN_ERROR" || e.Code != "NOT_FOUND" {
			t.Errorf("the stream ended with %+v", e)
		}
	})

	t.Run("another user's thread of the same ID, or named by the first user's session ID, is another session", func(t *testing.T) {
		t.Parallel()
		alice, bob := guest(t, a), guest(t, a)
		runAGUI(t, node, aguiCfg(a.URL, alice, "shared", map[string]any{"message": "from alice"}))
		aliceSession := onlySession(t, alice)
		s := runAGUI(t, node, aguiCfg(a.URL, bob, "shared", map[string]any{"message": "from bob"}))
		s = append(s, runAGUI(t, node, aguiCfg(a.URL, bob, aliceSession, map[string]any{"message": "bob again"}))...)
		if msgs := alice.Messages(aliceSession); len(msgs) != 2 || msgs[0].Content != "from alice" {
			t.Errorf("alice's session holds %+v", msgs)
		}
		for i, step := range s {
			if got := step.assistant(); strings.Contains(got, "alice") {
				t.Errorf("bob's step %d reads %q", i, got)
			}
		}
		var bobs struct {
			Sessions struct {
				Edges []struct{ Node struct{ ID string } }
			}
		}
		bob.Must(`{ sessions { edges { node { id } } } }`, nil, &bobs)
		if n := len(bobs.Sessions.Edges); n != 2 {
			t.Errorf("bob has %d sessions, want 2", n)
		}
		for _, e := range bobs.Sessions.Edges {
			if e.Node.ID == aliceSession {
				t.Errorf("bob's sessions include alice's")
			}
		}
		// And alice, naming her session by its ID, reaches it.
		runAGUI(t, node, aguiCfg(a.URL, alice, aliceSession, map[string]any{"message": "alice again"}))
		if msgs := alice.Messages(aliceSession); len(msgs) != 4 {
			t.Errorf("alice's session by its ID holds %d messages, want 4", len(msgs))
		}
	})
}

// jsonEqual reports whether a and b are the same JSON.
func jsonEqual(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// onlySession returns the ID of c's one session.
func onlySession(t *testing.T, c *tgtest.Client) string {
	t.Helper()
	var out struct {
		Sessions struct {
			Edges []struct{ Node struct{ ID string } }
		}
	}
	c.Must(`{ sessions { edges { node { id } } } }`, nil, &out)
	if len(out.Sessions.Edges) != 1 {
		t.Fatalf("%d sessions, want 1", len(out.Sessions.Edges))
	}
	return out.Sessions.Edges[0].Node.ID
}

// TestAGUIPolicies: a session's busy policy and tool policies apply to /agui as to /query.
func TestAGUIPolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node")
	}
	node := installNodePackages(t, aguiDir, "@ag-ui/client", "the AG-UI client tests")
	a := startApp(t, "sqlite", nil)

	t.Run("a DENY tool is refused: its call ends with a result saying why, and never runs", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		sid := c.CreateSession(map[string]any{"toolPolicies": []any{map[string]any{"tool": "echo", "policy": "DENY"}}})
		s := runAGUI(t, node, aguiCfg(a.URL, c, sid, map[string]any{"message": "/tool hi"}))[0]
		calls := aguiCallsOf(c, sid)
		if len(calls) != 1 || calls[0].Status != "REJECTED" || calls[0].Output != "" || calls[0].Error == nil {
			t.Fatalf("the session's calls: %+v", calls)
		}
		start, result := s.only(t, "TOOL_CALL_START"), s.only(t, "TOOL_CALL_RESULT")
		if start.ToolCallID != calls[0].ID || result.ToolCallID != calls[0].ID || result.Content != *calls[0].Error {
			t.Errorf("the call %+v, its result %+v; the session's %+v", start, result, calls[0])
		}
		if !strings.Contains(s.assistant(), "The echo tool did not run") {
			t.Errorf("the assistant says %q", s.assistant())
		}
	})

	t.Run("under REJECT a message while the agent works is refused with 409 and not stored", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		sid := c.CreateSession(map[string]any{"busyPolicy": "REJECT"})
		c.Send(sid, "/slow 50")
		status, _, body := postAGUI(t, a.URL, c, aguiInput(sid, "busy-1", "while busy"), "")
		var r struct{ Errors []tgtest.GQLError }
		if err := json.Unmarshal(body, &r); err != nil || status != http.StatusConflict || len(r.Errors) != 1 || r.Errors[0].Code() != "CONFLICT" {
			t.Fatalf("a message while busy: %d %s", status, body)
		}
		c.Cancel(sid)
		for _, m := range c.Messages(sid) {
			if m.Content == "while busy" {
				t.Errorf("the refused message was stored: %+v", m)
			}
		}
	})

	t.Run("under ENQUEUE the stream of a queued message follows its own run only", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		sid := c.CreateSession(map[string]any{"busyPolicy": "ENQUEUE"})
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		_, first := c.Send(sid, "/slow 50")
		evs.Until("the first run's first chunk", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
		s := runAGUI(t, node, aguiCfg(a.URL, c, sid, map[string]any{"message": "queued"}))[0]
		if got := s.assistant(); got != "You said: queued" {
			t.Errorf("the queued run's stream reads %q", got)
		}
		var runs struct {
			First, Queued struct{ CreatedAt, StartedAt, FinishedAt string }
		}
		c.Must(`query($a: ID!, $b: ID!){ first: run(id: $a){ createdAt startedAt finishedAt } queued: run(id: $b){ createdAt startedAt finishedAt } }`,
			map[string]any{"a": first, "b": s.Events[0].RunID}, &runs)
		created, _ := time.Parse(time.RFC3339Nano, runs.Queued.CreatedAt)
		finished, _ := time.Parse(time.RFC3339Nano, runs.First.FinishedAt)
		if s.Events[0].RunID == first || !created.Before(finished) {
			t.Errorf("the stream's run %s was not queued behind %s: %+v", s.Events[0].RunID, first, runs)
		}
	})

	t.Run("under INTERRUPT a run a newer message interrupts finishes cancelled", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		sid := c.CreateSession(nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		wait := startAGUI(t, node, aguiCfg(a.URL, c, sid, map[string]any{"message": "/slow 50"}))
		evs.Until("the first chunk", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
		c.Send(sid, "newer")
		s := wait()
		if got := s[0].types(); s[0].outcome() != "cancelled" || !slices.Contains(got, "TEXT_MESSAGE_END") {
			t.Errorf("the interrupted run's stream: %v, outcome %s", got, s[0].outcome())
		}
	})
}

// TestAGUIRefusesBadRequests: a request without a token or with a bad one is 401, a body
// that is not a RunAgentInput (or a Last-Event-ID no stream sent) is 400, a Last-Event-ID
// for a thread that has no session 404, each with a JSON error saying why; GET is 405.
func TestAGUIRefusesBadRequests(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	good := `{"threadId":"t","runId":"r","messages":[{"id":"m","role":"user","content":"hi"}]}`
	status, frames, body := postAGUI(t, a.URL, c, []byte(good), "")
	if status != 200 || len(frames) == 0 || frames[len(frames)-1].Type != "RUN_FINISHED" {
		t.Fatalf("a good request: %d %s", status, body)
	}
	other := c.CreateSession(nil)
	otherCursor := c.Cursor(other)
	for _, tc := range []struct {
		name, method, auth, body, lastID string
		status                           int
		code, says                       string
	}{
		{"no token", "POST", "", good, "", 401, "UNAUTHENTICATED", "Authorization"},
		{"a bad token", "POST", "Bearer nope", good, "", 401, "UNAUTHENTICATED", "token"},
		{"not a bearer token", "POST", "Basic dTpw", good, "", 401, "UNAUTHENTICATED", "Bearer"},
		{"not JSON", "POST", "", "{", "", 400, "BAD_USER_INPUT", "RunAgentInput"},
		{"not an object", "POST", "", "[]", "", 400, "BAD_USER_INPUT", "RunAgentInput"},
		{"no threadId", "POST", "", `{"runId":"r","messages":[]}`, "", 400, "BAD_USER_INPUT", "threadId"},
		{"no messages", "POST", "", `{"threadId":"t","runId":"r"}`, "", 400, "BAD_USER_INPUT", "messages"},
		{"messages not a list", "POST", "", `{"threadId":"t","runId":"r","messages":{}}`, "", 400, "BAD_USER_INPUT", "RunAgentInput"},
		{"a message without an id", "POST", "", `{"threadId":"t","runId":"r","messages":[{"role":"user","content":"hi"}]}`, "", 400, "BAD_USER_INPUT", "id"},
		{"a thread ID over 200 bytes", "POST", "", `{"threadId":"` + strings.Repeat("x", 201) + `","runId":"r","messages":[{"id":"m2","role":"user","content":"hi"}]}`, "", 400, "BAD_USER_INPUT", "thread ID is too long"},
		{"a bad resume", "POST", "", `{"threadId":"t","runId":"r","messages":[],"resume":[{"interruptId":"x","status":"maybe"}]}`, "", 400, "BAD_USER_INPUT", "resolved or cancelled"},
		{"a resume naming nothing pending", "POST", "", `{"threadId":"t","runId":"r","messages":[],"resume":[{"interruptId":"x","status":"resolved","payload":"a"}]}`, "", 400, "BAD_USER_INPUT", "resume[0]"},
		{"content without text", "POST", "", `{"threadId":"t","runId":"r","messages":[{"id":"m","role":"user","content":[{"type":"image","source":{"type":"url","value":"http://x"}}]}]}`, "", 400, "BAD_USER_INPUT", "text"},
		{"nothing to run", "POST", "", `{"threadId":"t2","runId":"r","messages":[]}`, "", 400, "BAD_USER_INPUT", "nothing to run"},
		{"a bad Last-Event-ID", "POST", "", good, "garbage", 400, "BAD_USER_INPUT", "cursor"},
		{"a Last-Event-ID of another session", "POST", "", good, otherCursor, 400, "BAD_USER_INPUT", "cursor"},
		{"Last-Event-ID of an unknown thread", "POST", "", `{"threadId":"t3","runId":"r","messages":[]}`, "garbage", 404, "NOT_FOUND", "thread"},
		{"GET", "GET", "", "", "", 405, "BAD_USER_INPUT", "POST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, a.URL+"/agui", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			switch {
			case tc.code == "UNAUTHENTICATED" && tc.auth != "":
				req.Header.Set("Authorization", tc.auth)
			case tc.code != "UNAUTHENTICATED":
				req.Header.Set("Authorization", "Bearer "+c.Token)
			}
			if tc.lastID != "" {
				req.Header.Set("Last-Event-ID", tc.lastID)
			}
			status, ctype, body := roundTrip(t, req)
			var r struct{ Errors []tgtest.GQLError }
			if err := json.Unmarshal(body, &r); err != nil || len(r.Errors) != 1 {
				t.Fatalf("status %d, %s: %s", status, ctype, body)
			}
			if status != tc.status || ctype != "application/json" || r.Errors[0].Code() != tc.code || !strings.Contains(r.Errors[0].Message, tc.says) {
				t.Errorf("status %d, %s, %s %q; want %d, application/json, %s, saying %q", status, ctype, r.Errors[0].Code(), r.Errors[0].Message, tc.status, tc.code, tc.says)
			}
		})
	}
}
