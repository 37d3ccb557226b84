package e2e

// AG-UI on POST /agui, checked with the protocol's reference client: @ag-ui/client 1.0.0's
// HttpAgent, run by Node (testdata/agui/steps.mjs, the version pinned in package-lock.json)
// against the real server. The client checks every stream as it applies it (the order of
// events, one run at a time, no message or call left open), so a step without an error
// is a stream the reference client accepts.

import (
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
)

const aguiDir = "testdata/agui"

// aguiStep is what steps.mjs printed of one run of the agent.
type aguiStep struct {
	Events     []aguiEvent
	Error      *string
	LastID     string
	Interrupts []struct {
		ID, Reason, Message, ToolCallID string
		ResponseSchema                  map[string]any
		ExpiresAt                       string
	}
	Messages []struct {
		ID, Role, ToolCallID string
		Content              any
	}
}

// aguiEvent is an AG-UI event as the client applied it.
type aguiEvent struct {
	Type, MessageID, Delta, ToolCallID, ToolCallName, ThreadID, RunID string
	Content                                                           any
	Outcome                                                           *struct{ Type string }
}

func (s aguiStep) types() []string {
	var ts []string
	for _, e := range s.Events {
		ts = append(ts, e.Type)
	}
	return ts
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

// runAGUI runs steps.mjs with cfg and returns what each step saw; a step that ended with an
// error fails the test unless it is one of wantErr's indexes.
func runAGUI(t *testing.T, node string, cfg map[string]any, wantErr ...int) []aguiStep {
	t.Helper()
	b, _ := json.Marshal(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "steps.mjs", string(b))
	cmd.Dir = aguiDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node steps.mjs: %v\n%s", err, stderr.Bytes())
	}
	var steps []aguiStep
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &steps); err != nil {
		t.Fatalf("node steps.mjs printed no steps (%v):\n%s\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	for i, s := range steps {
		if s.Error != nil && !slices.Contains(wantErr, i) {
			t.Fatalf("step %d: the client failed: %s (events %v)", i, *s.Error, s.types())
		}
	}
	return steps
}

func aguiCfg(a *testApp, c *tgtest.Client, thread string, steps ...map[string]any) map[string]any {
	return map[string]any{"url": a.URL + "/agui", "token": c.Token, "thread": thread, "steps": steps}
}

// TestAGUIClient runs @ag-ui/client against /agui: a run's text, a tool call, approvals
// approved, edited and rejected, a question with a schema and one declined, threads per
// user, and a dropped stream resumed with Last-Event-ID.
func TestAGUIClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node")
	}
	node := installNodePackages(t, aguiDir, "@ag-ui/client", "the AG-UI client tests")
	a := startApp(t, "sqlite", nil)

	t.Run("a run's text streams as one message, and the run finishes", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a, c, "text", map[string]any{"message": "hello there", "id": "m-1"},
			map[string]any{"message": "and again", "id": "m-2"}))
		want := []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}
		for i, step := range s {
			if got := slices.Compact(step.types()); !slices.Equal(got, want) {
				t.Errorf("step %d: events %v, want %v (contents compacted)", i, got, want)
			}
			if o := step.Events[len(step.Events)-1].Outcome; o == nil || o.Type != "success" {
				t.Errorf("step %d: RUN_FINISHED's outcome %+v, want success", i, o)
			}
		}
		if got := s[1].assistant(); got != "You said: hello thereYou said: and again" {
			t.Errorf("the assistant's messages read %q", got)
		}
		// One thread, one session: both messages are in it, and the run IDs are talkgraph's.
		sid := onlySession(t, c)
		msgs := c.Messages(sid)
		if len(msgs) != 4 || msgs[0].Content != "hello there" || msgs[2].Content != "and again" {
			t.Fatalf("the session holds %+v", msgs)
		}
		if got := s[1].Events[0].RunID; got != msgs[3].RunID {
			t.Errorf("RUN_STARTED's runId %q, the reply's run %q", got, msgs[3].RunID)
		}
	})

	t.Run("a tool call starts, takes its arguments, ends and returns its result", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a, c, "tool", map[string]any{"message": "/tool hi"}))[0]
		var start, args, result *aguiEvent
		for i, e := range s.Events {
			switch e.Type {
			case "TOOL_CALL_START":
				start = &s.Events[i]
			case "TOOL_CALL_ARGS":
				args = &s.Events[i]
			case "TOOL_CALL_RESULT":
				result = &s.Events[i]
			}
		}
		if start == nil || start.ToolCallName != "echo" || args == nil || args.Delta != `{"text":"hi"}` ||
			result == nil || result.Content != "hi" || result.ToolCallID != start.ToolCallID {
			t.Fatalf("events %+v", s.Events)
		}
		if !slices.Contains(s.types(), "TOOL_CALL_END") {
			t.Errorf("no TOOL_CALL_END: %v", s.types())
		}
	})

	for _, tc := range []struct {
		name   string
		resume map[string]any
		want   string
	}{
		{"approved", map[string]any{"status": "resolved"}, "The echo tool printed: hi"},
		{"edited", map[string]any{"status": "resolved", "payload": map[string]any{"arguments": map[string]any{"text": "edited"}}}, "The echo tool printed: edited"},
		{"rejected", map[string]any{"status": "cancelled", "payload": map[string]any{"reason": "not now"}}, "not now"},
	} {
		t.Run("an approval is an interrupt, "+tc.name+" by resume", func(t *testing.T) {
			t.Parallel()
			c := guest(t, a)
			s := runAGUI(t, node, aguiCfg(a, c, "approve", map[string]any{"message": "/approve hi"}, map[string]any{"resume": tc.resume}))
			last := s[0].Events[len(s[0].Events)-1]
			if last.Outcome == nil || last.Outcome.Type != "interrupt" || len(s[0].Interrupts) != 1 {
				t.Fatalf("the first run ended with %+v, interrupts %+v", last, s[0].Interrupts)
			}
			in := s[0].Interrupts[0]
			if in.Reason != "tool_call" || in.ToolCallID != in.ID || in.ExpiresAt == "" {
				t.Errorf("the interrupt %+v", in)
			}
			if !strings.Contains(s[1].assistant(), tc.want) || len(s[1].Interrupts) != 0 {
				t.Errorf("after the resume the assistant says %q, want %q; interrupts %+v", s[1].assistant(), tc.want, s[1].Interrupts)
			}
		})
	}

	t.Run("a question with a schema is an interrupt with its responseSchema; a bad answer is refused", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a, c, "form", map[string]any{"message": "/form"},
			map[string]any{"resume": map[string]any{"status": "resolved", "payload": map[string]any{"name": "Ada"}}},
			map[string]any{"resume": map[string]any{"status": "resolved", "payload": map[string]any{"name": "Ada", "age": 36}}}), 1)
		if len(s[0].Interrupts) != 1 {
			t.Fatalf("interrupts %+v", s[0].Interrupts)
		}
		in := s[0].Interrupts[0]
		if in.Reason != "input_required" || in.ResponseSchema["type"] != "object" || in.ResponseSchema["required"] == nil {
			t.Errorf("the interrupt %+v", in)
		}
		if e := s[1].Error; e == nil || !strings.Contains(*e, "400") || !strings.Contains(*e, "age") {
			t.Errorf("an answer without age: %v", e)
		}
		if got := s[2].assistant(); !strings.Contains(got, "Hello Ada, aged 36") {
			t.Errorf("after the answer the assistant says %q", got)
		}
	})

	t.Run("a question declined is withdrawn and the agent goes on", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a, c, "ask", map[string]any{"message": "/ask Your name?"},
			map[string]any{"resume": map[string]any{"status": "cancelled"}}))
		if len(s[0].Interrupts) != 1 || s[0].Interrupts[0].Message != "Your name?" {
			t.Fatalf("interrupts %+v", s[0].Interrupts)
		}
		if got := s[1].assistant(); !strings.Contains(got, "cancelled") {
			t.Errorf("after declining the assistant says %q", got)
		}
	})

	t.Run("another user's thread of the same ID, or named by the first user's session ID, is another session", func(t *testing.T) {
		t.Parallel()
		alice, bob := guest(t, a), guest(t, a)
		runAGUI(t, node, aguiCfg(a, alice, "shared", map[string]any{"message": "from alice"}))
		aliceSession := onlySession(t, alice)
		runAGUI(t, node, aguiCfg(a, bob, "shared", map[string]any{"message": "from bob"}))
		runAGUI(t, node, aguiCfg(a, bob, aliceSession, map[string]any{"message": "bob again"}))
		if msgs := alice.Messages(aliceSession); len(msgs) != 2 || msgs[0].Content != "from alice" {
			t.Errorf("alice's session holds %+v", msgs)
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
		runAGUI(t, node, aguiCfg(a, alice, aliceSession, map[string]any{"message": "alice again"}))
		if msgs := alice.Messages(aliceSession); len(msgs) != 4 {
			t.Errorf("alice's session by its ID holds %d messages, want 4", len(msgs))
		}
	})

	t.Run("a dropped stream resumed with Last-Event-ID has no gap and no duplicate", func(t *testing.T) {
		t.Parallel()
		c := guest(t, a)
		s := runAGUI(t, node, aguiCfg(a, c, "drop", map[string]any{"message": "/slow 6", "dropAfter": 3},
			map[string]any{"lastEventId": true}))
		checkResumed(t, c, s)
	})
}

// checkResumed checks a dropped run (s[0]) and its resumption (s[1]): the resumed stream
// begins with RUN_STARTED and the message's start, and the message the client assembled
// is the session's, whole.
func checkResumed(t *testing.T, c *tgtest.Client, s []aguiStep) {
	t.Helper()
	if slices.Contains(s[0].types(), "RUN_FINISHED") || s[0].LastID == "" {
		t.Fatalf("the first stream was not cut: %v", s[0].types())
	}
	if got := s[1].types(); len(got) < 3 || got[0] != "RUN_STARTED" || got[1] != "TEXT_MESSAGE_START" || got[len(got)-1] != "RUN_FINISHED" {
		t.Errorf("the resumed stream: %v", got)
	}
	msgs := c.Messages(onlySession(t, c))
	if len(msgs) != 2 || msgs[1].Status != "COMPLETE" {
		t.Fatalf("the session holds %+v", msgs)
	}
	if got := s[1].assistant(); got != msgs[1].Content {
		t.Errorf("the client assembled %q, the session holds %q", got, msgs[1].Content)
	}
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

// TestAGUIRefusesBadRequests: a request without a token or with a bad one is 401, a body
// that is not a RunAgentInput (or a Last-Event-ID no stream sent) is 400, a Last-Event-ID
// for a thread that has no session 404, each with a JSON error saying why; GET is 405.
func TestAGUIRefusesBadRequests(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	good := `{"threadId":"t","runId":"r","messages":[{"id":"m","role":"user","content":"hi"}]}`
	req, _ := http.NewRequest("POST", a.URL+"/agui", strings.NewReader(good))
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if status, _, body := roundTrip(t, req); status != 200 || !strings.Contains(string(body), "RUN_FINISHED") {
		t.Fatalf("a good request: %d %s", status, body)
	}
	for _, tc := range []struct {
		name, method, token, body, lastID string
		status                            int
		code, says                        string
	}{
		{"no token", "POST", "", good, "", 401, "UNAUTHENTICATED", "Authorization"},
		{"a bad token", "POST", "nope", good, "", 401, "UNAUTHENTICATED", "token"},
		{"not JSON", "POST", c.Token, "{", "", 400, "BAD_USER_INPUT", "RunAgentInput"},
		{"no threadId", "POST", c.Token, `{"runId":"r","messages":[]}`, "", 400, "BAD_USER_INPUT", "threadId"},
		{"no messages", "POST", c.Token, `{"threadId":"t","runId":"r"}`, "", 400, "BAD_USER_INPUT", "messages"},
		{"a bad resume", "POST", c.Token, `{"threadId":"t","runId":"r","messages":[],"resume":[{"interruptId":"x","status":"maybe"}]}`, "", 400, "BAD_USER_INPUT", "resolved or cancelled"},
		{"content without text", "POST", c.Token, `{"threadId":"t","runId":"r","messages":[{"id":"m","role":"user","content":[{"type":"image","source":{"type":"url","value":"http://x"}}]}]}`, "", 400, "BAD_USER_INPUT", "text"},
		{"nothing to run", "POST", c.Token, `{"threadId":"t2","runId":"r","messages":[]}`, "", 400, "BAD_USER_INPUT", "nothing to run"},
		{"a bad Last-Event-ID", "POST", c.Token, good, "garbage", 400, "BAD_USER_INPUT", "cursor"},
		{"Last-Event-ID of an unknown thread", "POST", c.Token, `{"threadId":"t3","runId":"r","messages":[]}`, "garbage", 404, "NOT_FOUND", "thread"},
		{"GET", "GET", c.Token, "", "", 405, "BAD_USER_INPUT", "POST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, a.URL+"/agui", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
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
