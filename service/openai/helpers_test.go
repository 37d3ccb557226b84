package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// testKey is the API key every test agent uses; no error may ever contain it.
const testKey = "sk-test-Zq8dKkS3cr3tK3y-0042"

// wait is how long a test waits for something that should happen at once.
const wait = 10 * time.Second

// recorder is a fake service.Output: it records what the agent streams, asks and reports.
// Methods lock mu; waitFor wakes on every change.
type recorder struct {
	mu      sync.Mutex
	changed chan struct{}

	deltas []string
	tools  []*toolRec
	asks   []askRec
	// answer answers Ask; nil blocks until ctx ends, like a user who never answers.
	answer func(prompt string, choices []string) (string, error)
	// idPrefix, when set, makes the recorder hand out IDs of its own, as a service may.
	idPrefix string
}

type askRec struct {
	prompt  string
	choices []string
}

type toolRec struct {
	r        *recorder
	id       string
	name     string
	args     string
	output   strings.Builder
	result   string
	err      error
	finished bool
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

// notify wakes waiters; called with mu held.
func (r *recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) Text(delta string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deltas = append(r.deltas, delta)
	r.notify()
	return nil
}

func (r *recorder) Ask(ctx context.Context, prompt string, choices []string) (string, error) {
	r.mu.Lock()
	r.asks = append(r.asks, askRec{prompt, choices})
	answer := r.answer
	r.notify()
	r.mu.Unlock()
	if answer == nil {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return answer(prompt, choices)
}

func (r *recorder) StartTool(id, name, arguments string) (service.ToolHandle, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id == "" || r.idPrefix != "" {
		id = fmt.Sprintf("%stool%d", r.idPrefix, len(r.tools)+1)
	}
	t := &toolRec{r: r, id: id, name: name, args: arguments}
	r.tools = append(r.tools, t)
	r.notify()
	return t, nil
}

func (t *toolRec) ID() string { return t.id }

func (t *toolRec) Output(delta string) error {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	t.output.WriteString(delta)
	t.r.notify()
	return nil
}

func (t *toolRec) Finish(result string, err error) error {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	if t.finished {
		return errors.New("finished twice")
	}
	t.result, t.err, t.finished = result, err, true
	t.r.notify()
	return nil
}

// text is everything streamed so far.
func (r *recorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.deltas, "")
}

// snapshot returns copies of the tool records.
func (r *recorder) toolCalls() []toolRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]toolRec, len(r.tools))
	for i, t := range r.tools {
		out[i] = toolRec{id: t.id, name: t.name, args: t.args, result: t.result, err: t.err, finished: t.finished}
		out[i].output.WriteString(t.output.String())
	}
	return out
}

// waitFor waits until cond (called with the lock held) holds, failing the test after
// a deadline.
func (r *recorder) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, ch := cond(), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// fakeServer is an OpenAI-compatible endpoint that answers each request with the next
// handler of its script and records what it received.
type fakeServer struct {
	*httptest.Server
	t    *testing.T
	quit chan struct{} // closed when the test ends: handlers that hold a stream give up

	mu     sync.Mutex
	script []http.HandlerFunc
	reqs   []*received
}

// received is one request as the server saw it.
type received struct {
	At     time.Time
	Path   string
	Header http.Header
	Body   chatRequest
	Raw    map[string]any
	// Done is closed when the request's context ends on the server's side.
	Done chan struct{}
}

type chatRequest struct {
	Model       string        `json:"model"`
	Temperature *float64      `json:"temperature"`
	Stream      bool          `json:"stream"`
	Messages    []wireMessage `json:"messages"`
	Tools       []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			Parameters  map[string]any `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

type wireMessage struct {
	Role       string  `json:"role"`
	Content    *string `json:"content"`
	ToolCallID string  `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// String shows a message compactly, for comparisons that read like a transcript:
// "user: hi", "assistant: Hello [call_1 get_weather {…}]", "tool call_1: sunny".
func (m wireMessage) String() string {
	var b strings.Builder
	b.WriteString(m.Role)
	if m.ToolCallID != "" {
		b.WriteString(" " + m.ToolCallID)
	}
	b.WriteString(":")
	if m.Content != nil {
		b.WriteString(" " + *m.Content)
	}
	for _, c := range m.ToolCalls {
		fmt.Fprintf(&b, " [%s %s %s]", c.ID, c.Function.Name, c.Function.Arguments)
	}
	return b.String()
}

func (r *received) transcript() []string {
	out := make([]string, len(r.Body.Messages))
	for i, m := range r.Body.Messages {
		out[i] = m.String()
	}
	return out
}

func (r *received) toolNames() []string {
	var out []string
	for _, t := range r.Body.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}

func newFakeServer(t *testing.T, script ...http.HandlerFunc) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, quit: make(chan struct{}), script: script}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	t.Cleanup(func() { close(f.quit) }) // runs first: releases held streams
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	rec := &received{At: time.Now(), Path: r.URL.Path, Header: r.Header.Clone(), Done: make(chan struct{})}
	if err := json.Unmarshal(raw, &rec.Body); err != nil {
		f.t.Errorf("request body is not JSON: %v", err)
	}
	_ = json.Unmarshal(raw, &rec.Raw)
	go func() {
		<-r.Context().Done()
		close(rec.Done)
	}()

	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, rec)
	var h http.HandlerFunc
	if n < len(f.script) {
		h = f.script[n]
	}
	f.mu.Unlock()
	if h == nil {
		f.t.Errorf("unexpected request #%d", n+1)
		http.Error(w, `{"error":{"message":"no more scripted replies"}}`, http.StatusInternalServerError)
		return
	}
	h(w, r)
}

// requests returns what the server received so far.
func (f *fakeServer) requests() []*received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*received(nil), f.reqs...)
}

// request returns the i-th request, failing the test when there is none.
func (f *fakeServer) request(i int) *received {
	f.t.Helper()
	reqs := f.requests()
	if i >= len(reqs) {
		f.t.Fatalf("server received %d requests, want at least %d", len(reqs), i+1)
	}
	return reqs[i]
}

// The SSE wire format of chat completions.
const (
	done = "data: [DONE]\n\n"
	ping = ": ping\n\n"
)

func data(chunk string) string { return "data: " + chunk + "\n\n" }

// sse returns a handler that streams the given events (data, done, ping …) with a flush
// after each, as servers do.
func sse(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, events...)
	}
}

func writeSSE(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	for _, e := range events {
		_, _ = io.WriteString(w, e)
		w.(http.Flusher).Flush()
	}
}

// chunk is an OpenAI chat.completion.chunk with one choice; delta is raw JSON and
// finish "" means null.
func chunk(delta, finish string) string {
	fr := "null"
	if finish != "" {
		fr = `"` + finish + `"`
	}
	return fmt.Sprintf(`{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1730000000,`+
		`"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_f33640a400",`+
		`"choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}],"obfuscation":"x1"}`, delta, fr)
}

const roleDelta = `{"role":"assistant","content":"","refusal":null}`

// textDelta is a delta carrying s as content.
func textDelta(s string) string {
	b, _ := json.Marshal(s)
	return `{"content":` + string(b) + `}`
}

// textReply is a whole reply streamed as the given deltas.
func textReply(deltas ...string) http.HandlerFunc {
	events := []string{data(chunk(roleDelta, ""))}
	for _, d := range deltas {
		events = append(events, data(chunk(textDelta(d), "")))
	}
	events = append(events, data(chunk(`{}`, "stop")), done)
	return sse(events...)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// newAgent returns an agent talking to srv, with cfg's zero fields filled for tests.
func newAgent(t *testing.T, srv *fakeServer, cfg openai.Config) *openai.Agent {
	t.Helper()
	cfg.BaseURL = srv.URL + "/v1"
	cfg.APIKey = testKey
	if cfg.Model == "" {
		cfg.Model = "gpt-test"
	}
	a, err := openai.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

// userSays is a history of one user message.
func userSays(text string) []service.HistoryMessage {
	return []service.HistoryMessage{{Message: service.Message{
		ID: "m1", Seq: 1, Role: service.RoleUser, Kind: service.KindText, Content: text, Status: service.MessageComplete,
	}}}
}

// run runs the agent on history and returns its error; it fails the test if the run
// does not end in time.
func run(t *testing.T, a *openai.Agent, history []service.HistoryMessage, out service.Output) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	return a.Run(ctx, service.RunRequest{SessionID: "s1", RunID: "r1", UserID: "u1", History: history}, out)
}

// runAsync starts the agent and returns a channel with its result.
func runAsync(ctx context.Context, a *openai.Agent, req service.RunRequest, out service.Output) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx, req, out) }()
	return errc
}

// waitErr waits for a run's result.
func waitErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(wait):
		t.Fatal("the run did not return in time")
		return nil
	}
}

// waitClosed waits for ch to be closed.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// weatherTool is a custom tool that records its calls and prints while it works.
type weatherTool struct {
	mu    sync.Mutex
	calls []string
	fail  error
}

func (*weatherTool) Name() string        { return "get_weather" }
func (*weatherTool) Description() string { return "Current weather in a city." }
func (*weatherTool) Parameters() map[string]any {
	return map[string]any{
		"type":       "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required":   []any{"city"},
	}
}

func (w *weatherTool) Call(ctx context.Context, arguments string, out openai.ToolOutput) (string, error) {
	w.mu.Lock()
	w.calls = append(w.calls, arguments)
	w.mu.Unlock()
	var args struct {
		City string `json:"city"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", err
	}
	if err := out.Output("looking up " + args.City + "\n"); err != nil {
		return "", err
	}
	if w.fail != nil {
		return "", w.fail
	}
	return fmt.Sprintf(`{"city":%q,"sky":"clear"}`, args.City), nil
}

func (w *weatherTool) received() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.calls...)
}

// equal compares string slices and reports the difference.
func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != len(want) {
		t.Errorf("%s:\n got: %q\nwant: %q", what, got, want)
	}
}
