package e2e

// End-to-end tests of the tools of MCP servers: the whole server (in this process, or a
// real child process), its openai agent streaming from a fakellm.Server, and
// examples/mcpserver as a real MCP server process, over stdio (talkgraph starts it) and
// over streamable HTTP (the test starts it, and talkgraph reaches it with a bearer token
// the server asks for). The example server appends every call to a file as it arrives,
// before anything checks it, so that a test can say what did and did not reach it.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service/mcp"
)

// built is examples/mcpserver, built once for the test binary's run.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// mcpServerBin builds examples/mcpserver (once) and returns the program's path.
func mcpServerBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts an MCP server")
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "talkgraph-e2e-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "mcpserver")
		if out, err := exec.Command("go", "build", "-o", built.bin, "../examples/mcpserver").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build ./examples/mcpserver: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// removeBuilt removes what mcpServerBin built.
func removeBuilt() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}

// notesServer is an examples/mcpserver of one test: the directory of its notes, the file
// it records calls to, and its entry in MCP_CONFIG.
type notesServer struct {
	t      *testing.T
	dir    string
	record string
	entry  map[string]any
}

// mcpToken is the bearer token the example server asks for over HTTP.
const mcpToken = "mcp-e2e-token-7d2f"

// transports are the ways talkgraph speaks to an MCP server.
var transports = []string{"stdio", "http"}

// newNotesServer prepares an example server: over "stdio" an entry for talkgraph to start
// it, over "http" a server started here and an entry with its URL and token.
func newNotesServer(t *testing.T, transport string) *notesServer {
	t.Helper()
	bin := mcpServerBin(t)
	dir := t.TempDir()
	n := &notesServer{t: t, dir: filepath.Join(dir, "notes"), record: filepath.Join(dir, "calls.jsonl")}
	if err := os.Mkdir(n.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"-dir", n.dir, "-record", n.record}
	if transport == "stdio" {
		n.entry = map[string]any{"command": bin, "args": args}
		return n
	}
	cmd := exec.Command(bin, append(args, "-http", "127.0.0.1:0", "-token", mcpToken)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stderr)
	const says = "serving MCP over streamable HTTP at "
	for lines.Scan() { // the server says where it listens before it serves
		if _, url, ok := strings.Cut(lines.Text(), says); ok {
			n.entry = map[string]any{"url": url, "headers": map[string]string{"Authorization": "Bearer " + mcpToken}}
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return n
		}
	}
	t.Fatalf("the MCP server exited without saying where it listens")
	return nil
}

// note writes a note the server can read.
func (n *notesServer) note(name, text string) {
	n.t.Helper()
	if err := os.WriteFile(filepath.Join(n.dir, name+".txt"), []byte(text), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// noted returns the text of a note, and whether it exists.
func (n *notesServer) noted(name string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(n.dir, name+".txt"))
	return string(b), err == nil
}

// record is a line of the example server's record.
type record struct {
	Event, Tool string
	PID         int
	Arguments   json.RawMessage
}

// records reads what the server recorded so far.
func (n *notesServer) records() []record {
	n.t.Helper()
	b, err := os.ReadFile(n.record)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		n.t.Fatal(err)
	}
	var out []record
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r record
		if err := json.Unmarshal([]byte(l), &r); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// calls returns the calls of tool the server received.
func (n *notesServer) calls(tool string) []record {
	var out []record
	for _, r := range n.records() {
		if r.Event == "call" && r.Tool == tool {
			out = append(out, r)
		}
	}
	return out
}

// waitRecord waits until the server recorded what match accepts, and returns it. The
// file is another process's and says nothing when it grows: it is read again every 10 ms
// until the deadline.
func (n *notesServer) waitRecord(what string, match func(record) bool) record {
	n.t.Helper()
	deadline := time.Now().Add(tgtest.Wait)
	for {
		for _, r := range n.records() {
			if match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the MCP server never recorded %s; it recorded %+v", what, n.records())
		}
		time.Sleep(10 * time.Millisecond) // polling another process's file, with a deadline
	}
}

// mcpConfig writes an MCP_CONFIG file of servers by name and returns its path.
func mcpConfig(t *testing.T, servers map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"mcpServers": servers})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startMCP starts the whole server in this process with the openai agent talking to f
// and the MCP servers of the file at config, its log going to log (nil: nowhere), and
// waits until every server of want is up.
func startMCP(t *testing.T, f *fakellm.Server, config string, log io.Writer, change func(*app.Config), want ...string) *testApp {
	t.Helper()
	cfg := appConfig(t, "sqlite", func(c *app.Config) {
		c.OpenAI.BaseURL = f.URL + "/v1"
		c.OpenAI.APIKey = llmKey
		c.MCP.File = config
		if change != nil {
			change(c)
		}
	})
	if log == nil {
		log = io.Discard
	}
	a := serveAppLog(t, cfg, log)
	for _, name := range want {
		waitMCPState(t, a, name, mcp.StateUp)
	}
	return a
}

// waitMCPState waits until the MCP server name is in state want.
func waitMCPState(t *testing.T, a *testApp, name string, want mcp.State) {
	t.Helper()
	if a.MCP == nil {
		t.Fatal("the server runs no MCP servers")
	}
	deadline := time.NewTimer(tgtest.Wait)
	defer deadline.Stop()
	for {
		changed := a.MCP.Changed()
		if a.MCP.States()[name] == want {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("the MCP server %s is %s after %v, want %s", name, a.MCP.States()[name], tgtest.Wait, want)
		}
	}
}

// fakeCall is a tool call a fake model makes.
type fakeCall struct{ id, name, args string }

// callsReply streams the calls of one model turn.
func callsReply(calls ...fakeCall) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i, c := range calls {
			fakellm.WriteSSE(w, fakellm.Chunk(fakellm.ToolCallDelta(i, c.id, c.name), ""),
				fakellm.Chunk(fakellm.ArgumentsDelta(i, c.args), ""))
		}
		fakellm.WriteSSE(w, fakellm.Chunk(`{}`, "tool_calls"), fakellm.Done)
	}
}

// toolResults returns what a request tells the model of its tool calls, by call ID.
func toolResults(r *fakellm.Request) map[string]string {
	out := map[string]string{}
	for _, l := range r.Transcript() {
		if rest, ok := strings.CutPrefix(l, "tool "); ok {
			id, text, _ := strings.Cut(rest, ": ")
			out[id] = text
		}
	}
	return out
}

// metricsText reads the server's /metrics.
func metricsText(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// finishedCall returns the ToolCallFinished event of call id among evs.
func finishedCall(evs []tgtest.Event, id string) *tgtest.ToolCall {
	for _, ev := range evs {
		if ev.Typename == "ToolCallFinished" && ev.ToolCall.ID == id {
			return ev.ToolCall
		}
	}
	return nil
}

// eachTransport runs test over stdio and over streamable HTTP.
func eachTransport(t *testing.T, test func(t *testing.T, transport string)) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { test(t, tr) })
	}
}

// The model is offered every tool of the server, named mcp__<server>__<tool> with its
// description and input schema; the agents query lists them with their policies (ALLOW for
// a tool annotated readOnlyHint, ASK otherwise, a pattern of TOOL_POLICIES over both); a
// tool a session DENYs is kept from the model.
func TestMCPToolsAreOfferedWithTheirPolicies(t *testing.T) {
	eachTransport(t, func(t *testing.T, transport string) {
		n := newNotesServer(t, transport)
		f := fakellm.New(t, fakellm.TextReply("Hi."), fakellm.TextReply("Hi again."))
		a := startMCP(t, f, mcpConfig(t, map[string]any{"notes": n.entry}), nil, func(c *app.Config) {
			c.Service.ToolPolicies["mcp__notes__c*"] = "DENY" // count
		}, "notes")
		c := guest(t, a)

		var agents struct {
			Agents []struct {
				Name  string
				Tools []struct{ Name, Description, InputSchema, Policy string }
			}
		}
		c.Must(`{ agents { name tools { name description inputSchema policy } } }`, nil, &agents)
		listed := map[string]string{}
		for _, ag := range agents.Agents {
			for _, tool := range ag.Tools {
				if ag.Name == "openai" && strings.HasPrefix(tool.Name, "mcp__") {
					listed[tool.Name] = tool.Policy
					if tool.Name == "mcp__notes__write_note" && (tool.Description != "Write a note, replacing one of the same name." ||
						!strings.Contains(tool.InputSchema, `"text"`) || !strings.Contains(tool.InputSchema, `"required"`)) {
						t.Errorf("write_note as the agents query lists it: %+v", tool)
					}
				}
			}
		}
		want := map[string]string{"mcp__notes__list_notes": "ALLOW", "mcp__notes__read_note": "ALLOW", "mcp__notes__write_note": "ASK",
			"mcp__notes__count": "DENY", "mcp__notes__sketch": "ALLOW"}
		if fmt.Sprint(listed) != fmt.Sprint(want) {
			t.Errorf("MCP tools the agents query lists: %v, want %v", listed, want)
		}

		sid := openAISession(c, nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		_, run := c.Send(sid, "hello")
		evs.Until("the run's end", tgtest.RunEnds(run))
		offered := f.Request(0).ToolNames()
		if want := []string{"ask_user", "mcp__notes__list_notes", "mcp__notes__read_note", "mcp__notes__sketch", "mcp__notes__write_note"}; !slices.Equal(sorted(offered), want) {
			t.Errorf("tools offered to the model: %q, want %q (count is DENY)", offered, want)
		}
		for _, tool := range f.Request(0).Body.Tools {
			if tool.Function.Name == "mcp__notes__read_note" {
				props, _ := tool.Function.Parameters["properties"].(map[string]any)
				if tool.Function.Description != "Read a note." || props["name"] == nil {
					t.Errorf("read_note as the model is offered it: %+v", tool.Function)
				}
			}
		}

		var set struct {
			UpdateTalkSessionSettings struct {
				Settings struct {
					ToolPolicies []struct{ Tool, Policy string }
				}
			}
		}
		c.Must(`mutation($s: ID!){ updateTalkSessionSettings(input: {id: $s, settings: {toolPolicies: [{tool: "mcp__notes__write_note", policy: DENY}]}}){
			settings { toolPolicies { tool policy } } } }`, map[string]any{"s": sid}, &set)
		effective := map[string]string{}
		for _, p := range set.UpdateTalkSessionSettings.Settings.ToolPolicies {
			effective[p.Tool] = p.Policy
		}
		want["mcp__notes__write_note"] = "DENY"
		if fmt.Sprint(effective) != fmt.Sprint(want) {
			t.Errorf("the session's tool policies: %v, want %v", effective, want)
		}
		_, run = c.Send(sid, "again")
		evs.Until("the second run's end", tgtest.RunEnds(run))
		if offered := f.Request(1).ToolNames(); slices.Contains(offered, "mcp__notes__write_note") || !slices.Contains(offered, "mcp__notes__read_note") {
			t.Errorf("tools offered once the session denies write_note: %q", offered)
		}
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// A call of a read-only tool runs at once, live like any tool call, and its text goes
// back to the model, with a note for an image the model is not shown; /metrics counts
// the calls by server, tool and outcome.
func TestMCPReadOnlyCallRunsAtOnce(t *testing.T) {
	eachTransport(t, func(t *testing.T, transport string) {
		n := newNotesServer(t, transport)
		n.note("hello", "Hello from a note.")
		f := fakellm.New(t, callsReply(fakeCall{"call_r", "mcp__notes__read_note", `{"name":"hello"}`}, fakeCall{"call_s", "mcp__notes__sketch", `{}`}),
			fakellm.TextReply("It says hello."))
		a := startMCP(t, f, mcpConfig(t, map[string]any{"notes": n.entry}), nil, nil, "notes")
		c := guest(t, a)
		sid := openAISession(c, nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		_, run := c.Send(sid, "read my note")
		started := evs.Until("the call's start", func(e tgtest.Event) bool {
			return e.Typename == "ToolCallStarted" && e.ToolCall.Name == "mcp__notes__read_note"
		})
		if started.ToolCall.Status != "RUNNING" || started.ToolCall.Arguments != `{"name":"hello"}` {
			t.Errorf("the call started: %+v", started.ToolCall)
		}
		if end := evs.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
			t.Fatalf("the run ended %s: %s", end.Run.Status, end.Run.Error)
		}
		for _, ev := range evs.All {
			if ev.Typename == "ToolApprovalRequested" {
				t.Errorf("a read-only call waited for approval: %+v", ev.ToolCall)
			}
		}
		if fin := finishedCall(evs.All, started.ToolCall.ID); fin == nil || fin.Status != "COMPLETED" || fin.Result != "Hello from a note." {
			t.Errorf("the call finished: %+v", fin)
		}
		results := toolResults(f.Request(1))
		if results["call_r"] != "Hello from a note." ||
			results["call_s"] != "a red dot\n[an image (image/png, 70 bytes) is not shown: talkgraph passes only text to the model]" {
			t.Errorf("what the model read: %q", results)
		}
		if calls := n.calls("read_note"); len(calls) != 1 || string(calls[0].Arguments) != `{"name":"hello"}` {
			t.Errorf("read_note calls the server got: %+v", calls)
		}
		m := metricsText(t, a.URL)
		for _, want := range []string{`talkgraph_mcp_calls_total{outcome="ok",server="notes",tool="read_note"} 1`,
			`talkgraph_mcp_calls_total{outcome="ok",server="notes",tool="sketch"} 1`,
			`talkgraph_mcp_server_state{server="notes",state="up"} 1`, `talkgraph_mcp_server_tools{server="notes"} 5`} {
			if !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// A call of a destructive tool waits for approval, and nothing reaches the server until
// the user approves it; then it runs once, with the arguments as the user edited them.
func TestMCPDestructiveCallWaitsForApprovalAndRunsOnce(t *testing.T) {
	eachTransport(t, func(t *testing.T, transport string) {
		n := newNotesServer(t, transport)
		f := fakellm.New(t, callsReply(fakeCall{"call_w", "mcp__notes__write_note", `{"name":"plan","text":"draft"}`}), fakellm.TextReply("Written."))
		a := startMCP(t, f, mcpConfig(t, map[string]any{"notes": n.entry}), nil, nil, "notes")
		c := guest(t, a)
		sid := openAISession(c, nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		_, run := c.Send(sid, "write the plan")
		asked := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" })
		if asked.ToolCall.Name != "mcp__notes__write_note" || asked.ToolCall.Status != "AWAITING_APPROVAL" {
			t.Fatalf("approval requested for %+v", asked.ToolCall)
		}
		evs.Until("the run waiting", func(e tgtest.Event) bool {
			return e.Typename == "RunStatusChanged" && e.Run.ID == run && e.Run.Status == "WAITING_FOR_INPUT"
		})
		if calls := n.calls("write_note"); len(calls) != 0 {
			t.Fatalf("the server got the call before it was approved: %+v", calls)
		}
		if r := decide(c, map[string]any{"toolCallId": asked.ToolCall.ID, "decision": "APPROVE", "arguments": `{"name":"plan","text":"final"}`}); len(r.Errors) > 0 {
			t.Fatal(r.Errors)
		}
		if end := evs.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
			t.Fatalf("the run ended %s: %s", end.Run.Status, end.Run.Error)
		}
		if fin := finishedCall(evs.All, asked.ToolCall.ID); fin == nil || fin.Status != "COMPLETED" || fin.Result != "wrote plan (5 bytes)" {
			t.Errorf("the call finished: %+v", fin)
		}
		if text, ok := n.noted("plan"); !ok || text != "final" {
			t.Errorf("the note: %q, %v; want the edited text", text, ok)
		}
		if calls := n.calls("write_note"); len(calls) != 1 || string(calls[0].Arguments) != `{"name":"plan","text":"final"}` {
			t.Errorf("write_note calls the server got: %+v, want one, as edited", calls)
		}
		if got := toolResults(f.Request(1))["call_w"]; got != "wrote plan (5 bytes)" {
			t.Errorf("the model read %q", got)
		}
	})
}

// A rejected call never reaches the server; the model reads the user's reason.
func TestMCPRejectedCallNeverReachesTheServer(t *testing.T) {
	eachTransport(t, func(t *testing.T, transport string) {
		n := newNotesServer(t, transport)
		f := fakellm.New(t, callsReply(fakeCall{"call_w", "mcp__notes__write_note", `{"name":"plan","text":"draft"}`}), fakellm.TextReply("As you wish."))
		a := startMCP(t, f, mcpConfig(t, map[string]any{"notes": n.entry}), nil, nil, "notes")
		c := guest(t, a)
		sid := openAISession(c, nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		_, run := c.Send(sid, "write the plan")
		asked := evs.Until("the approval request", func(e tgtest.Event) bool { return e.Typename == "ToolApprovalRequested" })
		if r := decide(c, map[string]any{"toolCallId": asked.ToolCall.ID, "decision": "REJECT", "reason": "not now"}); len(r.Errors) > 0 {
			t.Fatal(r.Errors)
		}
		if end := evs.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
			t.Fatalf("the run ended %s: %s", end.Run.Status, end.Run.Error)
		}
		if got := toolResults(f.Request(1))["call_w"]; got != "the user rejected this call: not now" {
			t.Errorf("the model read %q", got)
		}
		// The server records a call as it arrives: one that came after the run ended would
		// show here too, as would a note.
		if calls := n.calls("write_note"); len(calls) != 0 {
			t.Errorf("the server got the rejected call: %+v", calls)
		}
		if _, ok := n.noted("plan"); ok {
			t.Error("the rejected call wrote the note")
		}
		if m := metricsText(t, a.URL); strings.Contains(m, `tool="write_note"`) {
			t.Error("/metrics counts a call of write_note, which was rejected")
		}
	})
}

// Arguments that do not fit the tool's input schema come back to the model as the call's
// error, saying where; the server never gets them.
func TestMCPSchemaViolatingArgumentsGoBackToTheModel(t *testing.T) {
	n := newNotesServer(t, "stdio")
	f := fakellm.New(t, callsReply(fakeCall{"call_bad", "mcp__notes__read_note", `{"name":42}`}), fakellm.TextReply("Oops."))
	a := startMCP(t, f, mcpConfig(t, map[string]any{"notes": n.entry}), nil, nil, "notes")
	c := guest(t, a)
	sid := openAISession(c, nil)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "read note 42")
	started := evs.Until("the call's start", func(e tgtest.Event) bool { return e.Typename == "ToolCallStarted" })
	if end := evs.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
		t.Fatalf("the run ended %s: %s", end.Run.Status, end.Run.Error)
	}
	const why = "the arguments do not fit the tool's input schema: at /name: got number, want string"
	if fin := finishedCall(evs.All, started.ToolCall.ID); fin == nil || fin.Status != "FAILED" || fin.Error != why {
		t.Errorf("the call finished: %+v, want FAILED: %s", fin, why)
	}
	if got := toolResults(f.Request(1))["call_bad"]; got != "error: "+why {
		t.Errorf("the model read %q", got)
	}
	if calls := n.calls("read_note"); len(calls) != 0 {
		t.Errorf("the server got the call: %+v", calls)
	}
	if m := metricsText(t, a.URL); !strings.Contains(m, `talkgraph_mcp_calls_total{outcome="invalid_arguments",server="notes",tool="read_note"} 1`) {
		t.Error("/metrics does not count the refused call")
	}
}

// Stop cancels a long call within 2 s: the run ends CANCELLED, the call with the progress
// it streamed, and the server is told to cancel it.
func TestMCPStopCancelsALongCall(t *testing.T) {
	eachTransport(t, func(t *testing.T, transport string) {
		n := newNotesServer(t, transport)
		f := fakellm.New(t, callsReply(fakeCall{"call_c", "mcp__notes__count", `{"to":1000,"every_ms":20}`}))
		a := startMCP(t, f, mcpConfig(t, map[string]any{"notes": n.entry}), nil, nil, "notes")
		c := guest(t, a)
		sid := openAISession(c, nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		_, run := c.Send(sid, "count to a thousand")
		started := evs.Until("the call's start", func(e tgtest.Event) bool { return e.Typename == "ToolCallStarted" })
		evs.Until("progress", func(e tgtest.Event) bool {
			return e.Typename == "ToolCallOutput" && e.ToolCallID == started.ToolCall.ID && strings.Contains(e.Delta, "counted 2 of 1000")
		})
		if r := c.Cancel(sid); r == nil || r.ID != run {
			t.Fatalf("cancelRun = %+v", r)
		}
		stopped := time.Now()
		end := evs.Until("the run's end", tgtest.RunEnds(run))
		if took := time.Since(stopped); end.Run.Status != "CANCELLED" || took > 2*time.Second {
			t.Fatalf("the run ended %s %v after the stop, want CANCELLED within 2s", end.Run.Status, took)
		}
		fin := finishedCall(evs.All, started.ToolCall.ID)
		if fin == nil || fin.Status != "CANCELLED" || !strings.HasPrefix(fin.Output, "counted 1 of 1000\ncounted 2 of 1000\n") {
			t.Errorf("the call finished: %+v", fin)
		}
		n.waitRecord("the cancellation of count", func(r record) bool { return r.Event == "cancelled" && r.Tool == "count" })
		if len(f.Requests()) != 1 {
			t.Errorf("%d requests to the model, want 1 (nothing after the stop)", len(f.Requests()))
		}
	})
}

// A stdio server killed is started again (logged, and shown on /metrics), and its tools
// work again, those of a run that began before the restart included.
func TestMCPKilledServerIsRestarted(t *testing.T) {
	n := newNotesServer(t, "stdio")
	n.note("hello", "still here")
	f := fakellm.New(t, callsReply(fakeCall{"call_r", "mcp__notes__read_note", `{"name":"hello"}`}), fakellm.TextReply("Read."))
	log := &syncBuffer{}
	a := startMCP(t, f, mcpConfig(t, map[string]any{"notes": n.entry}), log, nil, "notes")
	first := n.waitRecord("its start", func(r record) bool { return r.Event == "start" })
	proc, err := os.FindProcess(first.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	waitMCPState(t, a, "notes", mcp.StateRestarting)
	waitMCPState(t, a, "notes", mcp.StateUp)
	again := n.waitRecord("its second start", func(r record) bool { return r.Event == "start" && r.PID != first.PID })

	c := guest(t, a)
	sid := openAISession(c, nil)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "read it")
	if end := evs.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
		t.Fatalf("the run ended %s: %s", end.Run.Status, end.Run.Error)
	}
	if got := toolResults(f.Request(1))["call_r"]; got != "still here" {
		t.Errorf("the model read %q after the restart", got)
	}
	if calls := n.calls("read_note"); len(calls) != 1 || calls[0].PID != again.PID {
		t.Errorf("read_note calls: %+v, want one, by the restarted server %d", calls, again.PID)
	}
	var states []string
	for _, l := range log.lines(`"mcp_server":"notes"`) {
		if s, _ := l["state"].(string); s != "" {
			states = append(states, s)
		}
	}
	if want := []string{"starting", "up", "restarting", "up"}; !slices.Equal(states, want) {
		t.Errorf("the log's lines of the server's states: %q, want %q", states, want)
	}
	m := metricsText(t, a.URL)
	for _, want := range []string{`talkgraph_mcp_server_restarts_total{server="notes"} 1`, `talkgraph_mcp_server_state{server="notes",state="up"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A server that never starts is logged and given up; the other servers' tools work, and
// the server is ready.
func TestMCPServerThatNeverStartsIsSkipped(t *testing.T) {
	n := newNotesServer(t, "stdio")
	n.note("hello", "hi")
	f := fakellm.New(t, callsReply(fakeCall{"call_r", "mcp__notes__read_note", `{"name":"hello"}`}), fakellm.TextReply("Read."))
	log := &syncBuffer{}
	config := mcpConfig(t, map[string]any{"notes": n.entry, "ghost": map[string]any{"command": filepath.Join(t.TempDir(), "no-such-server")}})
	a := startMCP(t, f, config, log, func(c *app.Config) { c.MCP.Limits.StartAttempts = 2 }, "notes")
	waitMCPState(t, a, "ghost", mcp.StateFailed)
	failed := log.lines(`"mcp server failed`)
	if len(failed) != 1 || failed[0]["mcp_server"] != "ghost" || failed[0]["level"] != "ERROR" || !strings.Contains(fmt.Sprint(failed[0]["err"]), "no-such-server") {
		t.Errorf("the log's lines of the failure: %v", failed)
	}
	resp, err := http.Get(a.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/readyz answered %d with a failed MCP server, want 200", resp.StatusCode)
	}
	c := guest(t, a)
	sid := openAISession(c, nil)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "read it")
	if end := evs.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
		t.Fatalf("the run ended %s: %s", end.Run.Status, end.Run.Error)
	}
	for _, name := range f.Request(0).ToolNames() {
		if strings.HasPrefix(name, "mcp__ghost__") {
			t.Errorf("a tool of the server that never started is offered: %s", name)
		}
	}
	if got := toolResults(f.Request(1))["call_r"]; got != "hi" {
		t.Errorf("the model read %q from the server that works", got)
	}
	if m := metricsText(t, a.URL); !strings.Contains(m, `talkgraph_mcp_server_state{server="ghost",state="failed"} 1`) {
		t.Error(`/metrics does not show ghost failed`)
	}
}

// A malformed MCP_CONFIG stops the real server at start, with a message naming the file,
// the server and the field at fault.
func TestMCPMalformedConfigStopsStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.json")
	if err := os.WriteFile(typo, []byte(`{"mcpServers": {"notes": {"comand": "mcpserver"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(broken, []byte("{\"mcpServers\": {\n  \"notes\": {\"command\": \"x\",}\n}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{typo, `MCP_CONFIG (-mcp-config): ` + typo + `: server "notes": unknown field "comand"`},
		{broken, `MCP_CONFIG (-mcp-config): ` + broken + `: not a JSON object: invalid character '}' looking for beginning of object key string (line 2, column`},
		{filepath.Join(dir, "missing.json"), `MCP_CONFIG (-mcp-config): ` + filepath.Join(dir, "missing.json") + `: no such file or directory`},
	} {
		out, err := runChild(t, "MCP_CONFIG="+tc.file, "OPENAI_BASE_URL=http://127.0.0.1:1/v1")
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("MCP_CONFIG=%s: %v, output %q; want a failure saying %q", filepath.Base(tc.file), err, out, tc.want)
		}
	}
}
