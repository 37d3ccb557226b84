package service

import (
	"context"
	"sort"
	"sync"
)

// Runner is an agent: Go code that reads a session's history and writes the reply. The
// service calls Run on its own goroutine for each run of a session whose settings name the
// agent, never two at once for one session: a run that follows a stopped one starts its
// agent once the stopped agent has returned (or StopTimeout has passed, which is logged).
//
// Writing an agent:
//
//   - Read req.History (oldest first). It holds every message of the session: the user's
//     messages, earlier replies (some INTERRUPTED or FAILED), and QUESTION/ANSWER pairs
//     with the tool calls each assistant message made. The history is the checkpoint: a
//     run that was waiting for an answer when the server restarted is started again on a
//     history that now ends with the question and its answer, so an agent that asks must
//     be able to pick up from there (see the demo agent's /ask).
//   - Stream the reply with out.Text as it is produced. Text goes to the run's current
//     assistant message; subscribers see it within the flush window.
//   - Ask with out.Ask: it blocks until the user answers (and returns the answer) or the
//     run ends (and returns ctx's error). Text written after the answer starts a new
//     assistant message.
//   - Report tool calls with out.StartTool; the service shows them live.
//   - Report what each call of a model cost with out.ReportUsage: it adds up on the run
//     (Run.usage in the API) and in the server's per-model counters.
//   - When the server traces, ctx carries the run's span: spans started from
//     trace.SpanFromContext(ctx).TracerProvider() are its children (see the openai agent).
//   - Return promptly when ctx is cancelled (stop, a newer message, deleting the session,
//     shutdown). Whatever was streamed is kept. Returning ctx.Err() or nil then is fine.
//   - Return an error to fail the run. The run shows ErrorMessage(err): use *Error (Errorf)
//     for a message fit for a user; any other error shows a generic one and is logged.
//     A panic fails the run the same way; the server goes on.
type Runner interface {
	Run(ctx context.Context, req RunRequest, out Output) error
}

// ModelNamer is implemented by agents that talk to a model: ModelFor names the model a run
// with the given settings uses (the session's choice, or the agent's default). The service
// puts it in the log line of a failed run and on the run's span.
type ModelNamer interface {
	ModelFor(Settings) string
}

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context, req RunRequest, out Output) error

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, req RunRequest, out Output) error {
	return f(ctx, req, out)
}

// RunRequest is what an agent gets to work on.
type RunRequest struct {
	SessionID string
	RunID     string
	UserID    string
	Settings  Settings
	// History is the session's messages, oldest first, each with its tool calls.
	History []HistoryMessage
}

// Output is how a running agent talks back. Its methods are safe to call from several
// goroutines; each returns ctx's error (or ECONFLICT) once the run has ended, after which
// nothing more is recorded.
type Output interface {
	// Text appends delta to the run's current assistant message, starting one if needed.
	Text(delta string) error
	// Ask stores and announces a question, marks the run WAITING_FOR_INPUT, and blocks
	// until it is answered (returning the answer) or the run ends (returning ctx's error).
	// choices may be nil for a free answer.
	Ask(ctx context.Context, prompt string, choices []string) (string, error)
	// StartTool records the start of a tool call on the current assistant message and
	// returns its handle. The call gets an ID of its own (ToolHandle.ID), unique in the
	// store; id, the agent's name for it (e.g. the model's tool_call_id), is kept as the
	// call's CallID and given back with the history; it may be empty.
	StartTool(id, name, arguments string) (ToolHandle, error)
	// ReportUsage adds what one call of model cost to the run's usage. EINVALID for
	// negative counts.
	ReportUsage(model string, u Usage) error
}

// ToolHandle reports on one tool call.
type ToolHandle interface {
	// ID is the tool call's ID.
	ID() string
	// Output streams what the tool prints.
	Output(delta string) error
	// Finish ends the call with a result, or with an error when err is non-nil.
	Finish(result string, err error) error
}

// AgentInfo describes a registered agent.
type AgentInfo struct {
	Name        string
	Description string
}

// Agents is a registry of runners by name. The zero value is empty and ready.
type Agents struct {
	mu     sync.RWMutex
	byName map[string]registered
}

type registered struct {
	runner Runner
	info   AgentInfo
}

// Register adds (or replaces) the agent name.
func (a *Agents) Register(name, description string, r Runner) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byName == nil {
		a.byName = make(map[string]registered)
	}
	a.byName[name] = registered{runner: r, info: AgentInfo{Name: name, Description: description}}
}

// Get returns the runner registered as name.
func (a *Agents) Get(name string) (Runner, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	r, ok := a.byName[name]
	return r.runner, ok
}

// List returns every registered agent, by name.
func (a *Agents) List() []AgentInfo {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]AgentInfo, 0, len(a.byName))
	for _, r := range a.byName {
		out = append(out, r.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
