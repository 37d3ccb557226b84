package mcp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/mcp"
)

// patience is how long a test waits for what should happen at once.
const patience = 15 * time.Second

// TestMain lets the test binary double as an MCP server, so that the tests start and kill
// real processes: over stdio a testServer (MCP_TEST_SERVER=1) or a hostileServer
// (MCP_TEST_SERVER=hostile), over HTTP a testServer (MCP_TEST_SERVER=http, see serveHTTP).
func TestMain(m *testing.M) {
	if kind := os.Getenv("MCP_TEST_SERVER"); kind == "http" {
		serveHTTP()
	} else if kind != "" {
		s := testServer(nil)
		if kind == "hostile" {
			s = hostileServer()
		}
		if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// observed is what an in-process server saw.
type observed struct {
	mu        sync.Mutex
	calls     []string // tool names, as calls arrived
	headers   []string // Authorization headers
	cancelled chan string
}

func (o *observed) called() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.calls...)
}

type nameIn struct {
	Name string `json:"name"`
}

// testServer is a server with a read-only tool, a destructive one, a slow one, one that
// answers a picture, one whose result is long and one that fails.
func testServer(o *observed) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if p, ok := req.GetParams().(*sdk.CallToolParamsRaw); ok && o != nil {
				o.mu.Lock()
				o.calls = append(o.calls, p.Name)
				o.mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	yes := true
	text := func(s string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
	}
	sdk.AddTool(s, &sdk.Tool{Name: "greet", Description: "Greets.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, in nameIn) (*sdk.CallToolResult, any, error) {
			return text("hello " + in.Name), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "erase", Description: "Erases.", Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes}},
		func(ctx context.Context, req *sdk.CallToolRequest, in nameIn) (*sdk.CallToolResult, any, error) {
			return text("erased " + in.Name), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "slow", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			for i := 1; ; i++ {
				_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(),
					Progress: float64(i), Total: 1000, Message: fmt.Sprintf("step %d", i)})
				select {
				case <-ctx.Done():
					if o != nil {
						o.cancelled <- "slow"
					}
					return nil, nil, ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	sdk.AddTool(s, &sdk.Tool{Name: "picture", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a dot"}, &sdk.ImageContent{MIMEType: "image/png", Data: []byte("12345")}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "long", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			return text(strings.Repeat("é", 100)), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			return nil, nil, errors.New("it went wrong")
		})
	return s
}

// httpServer serves a testServer over streamable HTTP, recording what it sees.
func httpServer(t *testing.T) (*httptest.Server, *observed) {
	o := &observed{cancelled: make(chan string, 1)}
	s := testServer(o)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.headers = append(o.headers, r.Header.Get("Authorization"))
		o.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, o
}

// syncLog is a log the manager writes while the test reads.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// start starts a manager of servers and stops it when the test ends.
func start(t *testing.T, limits mcp.Limits, servers ...mcp.ServerConfig) (*mcp.Manager, *syncLog) {
	t.Helper()
	log := &syncLog{}
	m := mcp.New(servers, mcp.Options{Limits: limits, Log: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	m.Start()
	t.Cleanup(m.Close)
	return m, log
}

// waitState waits until the server name is in state want.
func waitState(t *testing.T, m *mcp.Manager, name string, want mcp.State) {
	t.Helper()
	deadline := time.NewTimer(patience)
	defer deadline.Stop()
	for {
		changed := m.Changed()
		if m.States()[name] == want {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("server %s is %s after %v, want %s", name, m.States()[name], patience, want)
		}
	}
}

func tools(m *mcp.Manager) map[string]*mcp.Tool {
	out := map[string]*mcp.Tool{}
	for _, t := range m.Tools() {
		out[t.Name()] = t
	}
	return out
}

// printed collects a call's output.
type printed struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{}
}

func (p *printed) Output(delta string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.b.WriteString(delta)
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
	return nil
}

// waitFor waits until the output holds s.
func (p *printed) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.NewTimer(patience)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		if strings.Contains(p.b.String(), s) {
			p.mu.Unlock()
			return
		}
		ch := make(chan struct{})
		p.changed = ch
		p.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("the output %q does not hold %q after %v", p.String(), s, patience)
		}
	}
}

func (p *printed) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.b.String()
}

// A server reached over streamable HTTP: its tools are listed with their names, schemas
// and default policies (readOnlyHint: ALLOW, otherwise ASK); the configured headers go
// with every request; a call's text comes back, a picture as a note, a long result cut,
// the tool's error as an error; arguments that do not fit the schema never reach it; and
// each call is counted by server, tool and outcome.
func TestHTTPServerTools(t *testing.T) {
	srv, o := httpServer(t)
	limits := mcp.DefaultLimits()
	limits.MaxResultBytes = 150
	m, _ := start(t, limits, mcp.ServerConfig{Name: "web", URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer s3cret"}})
	waitState(t, m, "web", mcp.StateUp)

	ts := tools(m)
	greet, erase := ts["mcp__web__greet"], ts["mcp__web__erase"]
	if len(ts) != 6 || greet == nil || erase == nil {
		t.Fatalf("tools: %v", ts)
	}
	if greet.DefaultPolicy() != service.PolicyAllow || erase.DefaultPolicy() != service.PolicyAsk {
		t.Errorf("default policies: greet %s, erase %s; want ALLOW and ASK", greet.DefaultPolicy(), erase.DefaultPolicy())
	}
	if greet.Description() != "Greets." || !strings.Contains(greet.InputSchema(), `"name"`) || greet.Parameters()["type"] != "object" {
		t.Errorf("greet: %q, schema %s", greet.Description(), greet.InputSchema())
	}

	ctx := context.Background()
	for _, tc := range []struct {
		tool, args, want, err string
	}{
		{"greet", `{"name": "Ada"}`, "hello Ada", ""},
		{"picture", `{}`, "a dot\n[an image (image/png, 5 bytes) is not shown: talkgraph passes only text to the model]", ""},
		{"long", ``, strings.Repeat("é", 75) + "\n[the result was cut at 150 bytes]", ""},
		{"fail", `{}`, "", "it went wrong"},
		{"greet", `{"name": 7}`, "", "the arguments do not fit the tool's input schema: at /name: got number, want string"},
		{"greet", `[1]`, "", "the arguments must be a JSON object"},
	} {
		got, err := ts["mcp__web__"+tc.tool].Call(ctx, tc.args, &printed{})
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s %s = %q, %v; want %q, %q", tc.tool, tc.args, got, err, tc.want, tc.err)
		}
	}
	if got := o.called(); strings.Join(got, ",") != "greet,picture,long,fail" {
		t.Errorf("calls the server got: %q (the ones with bad arguments must not reach it)", got)
	}
	o.mu.Lock()
	for _, h := range o.headers {
		if h != "Bearer s3cret" {
			t.Errorf("a request came with Authorization %q", h)
		}
	}
	o.mu.Unlock()

	want := `
# HELP talkgraph_mcp_calls_total Calls of MCP tools by server, tool and outcome (ok, error, invalid_arguments, unavailable, failed, timeout, cancelled).
# TYPE talkgraph_mcp_calls_total counter
talkgraph_mcp_calls_total{outcome="error",server="web",tool="fail"} 1
talkgraph_mcp_calls_total{outcome="invalid_arguments",server="web",tool="greet"} 2
talkgraph_mcp_calls_total{outcome="ok",server="web",tool="greet"} 1
talkgraph_mcp_calls_total{outcome="ok",server="web",tool="long"} 1
talkgraph_mcp_calls_total{outcome="ok",server="web",tool="picture"} 1
# HELP talkgraph_mcp_server_state Each configured MCP server's state: 1 for the one it is in (starting, up, restarting, failed), 0 for the others.
# TYPE talkgraph_mcp_server_state gauge
talkgraph_mcp_server_state{server="web",state="failed"} 0
talkgraph_mcp_server_state{server="web",state="restarting"} 0
talkgraph_mcp_server_state{server="web",state="starting"} 0
talkgraph_mcp_server_state{server="web",state="up"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "talkgraph_mcp_calls_total", "talkgraph_mcp_server_state"); err != nil {
		t.Error(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
}

// A call streams the server's progress as its output; when its context ends (the run was
// stopped) it returns at once, and the server is told to cancel it.
func TestCallProgressAndCancellation(t *testing.T) {
	srv, o := httpServer(t)
	m, _ := start(t, mcp.DefaultLimits(), mcp.ServerConfig{Name: "web", URL: srv.URL})
	waitState(t, m, "web", mcp.StateUp)
	slow := tools(m)["mcp__web__slow"]

	ctx, cancel := context.WithCancel(context.Background())
	out := &printed{}
	done := make(chan error, 1)
	go func() {
		_, err := slow.Call(ctx, `{}`, out)
		done <- err
	}()
	out.waitFor(t, "step 3\n")
	cancel()
	stopped := time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || time.Since(stopped) > 2*time.Second {
			t.Errorf("the call returned %v after %v, want context.Canceled at once", err, time.Since(stopped))
		}
	case <-time.After(patience):
		t.Fatal("the call did not return once its context ended")
	}
	select {
	case <-o.cancelled:
	case <-time.After(patience):
		t.Fatal("the server was not told to cancel the call")
	}
	if got := out.String(); !strings.HasPrefix(got, "step 1\nstep 2\nstep 3\n") {
		t.Errorf("progress printed %q, want it to begin with the steps", got)
	}
}

// A server that never starts (its command does not exist) is tried Limits.StartAttempts
// times, then given up and logged, and its tools are none; the other servers work on.
func TestServerThatNeverStartsIsGivenUp(t *testing.T) {
	srv, _ := httpServer(t)
	limits := mcp.DefaultLimits()
	limits.StartAttempts = 2
	m, log := start(t, limits, mcp.ServerConfig{Name: "ghost", Command: "/nonexistent/mcp-server"}, mcp.ServerConfig{Name: "web", URL: srv.URL})
	waitState(t, m, "ghost", mcp.StateFailed)
	waitState(t, m, "web", mcp.StateUp)
	for name := range tools(m) {
		if strings.HasPrefix(name, "mcp__ghost__") {
			t.Errorf("a tool of the server that never started: %s", name)
		}
	}
	if got := log.String(); !strings.Contains(got, `level=ERROR msg="mcp server failed: its tools are left out until talkgraph starts again" mcp_server=ghost state=failed`) ||
		!strings.Contains(got, "/nonexistent/mcp-server") || strings.Count(got, "mcp_server=ghost state=restarting") != 1 {
		t.Errorf("log:\n%s", got)
	}
	if got, err := tools(m)["mcp__web__greet"].Call(context.Background(), `{"name":"B"}`, &printed{}); got != "hello B" || err != nil {
		t.Errorf("the other server's tool: %q, %v", got, err)
	}
}

// A stdio server killed is started again, with its tools; a call while it is down says
// so; Close leaves no process behind.
func TestStdioServerIsRestartedAndStopped(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, log := start(t, mcp.DefaultLimits(), mcp.ServerConfig{Name: "local", Command: self, Env: map[string]string{"MCP_TEST_SERVER": "1"}})
	waitState(t, m, "local", mcp.StateUp)
	greet := tools(m)["mcp__local__greet"]
	if got, err := greet.Call(context.Background(), `{"name":"A"}`, &printed{}); got != "hello A" || err != nil {
		t.Fatalf("greet: %q, %v", got, err)
	}
	pid := serverPID(t, log, 0)
	if err := killPID(pid); err != nil {
		t.Fatal(err)
	}
	waitState(t, m, "local", mcp.StateRestarting)
	if _, err := greet.Call(context.Background(), `{"name":"A"}`, &printed{}); err == nil || !strings.Contains(err.Error(), `the MCP server "local" is not available now`) {
		t.Errorf("a call while the server is down: %v", err)
	}
	waitState(t, m, "local", mcp.StateUp)
	if got, err := greet.Call(context.Background(), `{"name":"B"}`, &printed{}); got != "hello B" || err != nil {
		t.Errorf("greet after the restart (a tool listed before it): %q, %v", got, err)
	}
	again := serverPID(t, log, pid) // a new process, or the test fails
	m.Close()
	if alive(again) {
		t.Errorf("the server's process %d lives on after Close", again)
	}
}

// serverPID is the process ID of the last stdio server started, as the log says, once it
// is not not: the state turns up just before its log line is written, so the line is
// waited for.
func serverPID(t *testing.T, log *syncLog, not int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pid int
		for _, l := range strings.Split(log.String(), "\n") {
			if i := strings.Index(l, " pid="); i >= 0 && strings.Contains(l, "state=up") {
				fmt.Sscanf(l[i+5:], "%d", &pid)
			}
		}
		if pid != 0 && pid != not {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new pid in the log:\n%s", log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
