package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/fakellm"
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
	// decide, when set, answers the Approval of each call, as the user would.
	decide func(ctx context.Context, name, args string) (string, error)
	usage  []usageRec
	steers []service.Message
}

type usageRec struct {
	model string
	usage service.Usage
}

// Steers hands over the messages a test queued with steer.
func (r *recorder) Steers() ([]service.Message, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.steers
	r.steers = nil
	return out, nil
}

// steer queues a message for the agent's next Steers.
func (r *recorder) steer(content string) {
	r.mu.Lock()
	r.steers = append(r.steers, service.Message{Role: service.RoleUser, Content: content})
	r.mu.Unlock()
}

func (r *recorder) BeforeModelCall(context.Context, int) error { return nil }

func (r *recorder) ReportUsage(model string, u service.Usage) error {
	r.mu.Lock()
	r.usage = append(r.usage, usageRec{model, u})
	r.mu.Unlock()
	r.notify()
	return nil
}

type askRec struct {
	prompt  string
	choices []string
	spec    service.QuestionSpec
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
	p, err := r.Pose(service.QuestionSpec{Prompt: prompt, Choices: choices})
	if err != nil {
		return "", err
	}
	return p.Wait(ctx)
}

func (r *recorder) Pose(q service.QuestionSpec) (service.Pending, error) {
	r.mu.Lock()
	r.asks = append(r.asks, askRec{q.Prompt, q.Choices, q})
	answer := r.answer
	r.notify()
	r.mu.Unlock()
	return posed{q, answer}, nil
}

// posed is a question the recorder was asked: answer answers it, or it waits for ctx.
type posed struct {
	q      service.QuestionSpec
	answer func(prompt string, choices []string) (string, error)
}

func (p posed) ID() string { return "q-" + p.q.Prompt }

func (p posed) Wait(ctx context.Context) (string, error) {
	if p.answer == nil {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return p.answer(p.q.Prompt, p.q.Choices)
}

func (r *recorder) StartTool(id, name, arguments string, opts ...service.ToolOption) (service.ToolHandle, error) {
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

// AwaitsApproval says whether the recorder's decide will be asked.
func (t *toolRec) AwaitsApproval() bool {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	return t.r.decide != nil
}

// Approval lets every call run as asked, unless the recorder's decide says otherwise.
func (t *toolRec) Approval(ctx context.Context) (string, error) {
	t.r.mu.Lock()
	decide := t.r.decide
	t.r.mu.Unlock()
	if decide == nil {
		return t.args, nil
	}
	return decide(ctx, t.name, t.args)
}

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

// newFakeServer is a fake provider that answers with script. A request past the script
// fails the test and gets a 500, which the agent retries.
func newFakeServer(t *testing.T, script ...http.HandlerFunc) *fakellm.Server {
	t.Helper()
	return fakellm.New(t, script...).PastScript(fakellm.UnscriptedServerError)
}

// ping is a keep-alive comment of the event stream.
const ping = ": ping\n\n"

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// newAgent returns an agent talking to srv, with cfg's zero fields filled for tests.
func newAgent(t *testing.T, srv *fakellm.Server, cfg openai.Config) *openai.Agent {
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
