package service

import (
	"context"
	"sort"
	"sync"
	"time"
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
//     assistant message. out.Pose asks without waiting, so that several questions (and
//     tool approvals) wait at once; out.Ask is out.Pose and Pending.Wait.
//   - Report tool calls with out.StartTool; the service shows them live. Before running a
//     call, ask its handle for its Approval: under the session's tool policy it may run at
//     once (ALLOW), only once the user approves it (ASK: Approval waits, and gives the
//     arguments as the user may have edited them), or never (DENY, or the user rejected
//     it: Approval returns a *Rejected whose Reason the model should get as the call's
//     result). Run the call only after Approval returned nil; a call approved and not yet
//     finished when the server stopped is never run again (it ends FAILED), so an
//     approved side effect happens at most once. List your tools (ToolLister) so that
//     users see them and their policies, and leave out of a model's tools those
//     req.Denied names.
//   - Call out.BeforeModelCall before each call of a model, with what you expect it to
//     cost: it returns at once while the session's and the user's token budgets allow the
//     call, and otherwise holds the run as a wait (WAITING_FOR_INPUT, the run's Budget
//     set) until the cap is raised or its period turns, then returns; it returns ctx's
//     error when the run ends meanwhile. It never fails a run: an agent that does not
//     call it is simply not held by budgets.
//   - Report what each call of a model cost with out.ReportUsage: it adds up on the run
//     (Run.usage in the API), in the server's per-model counters, and against the
//     session's and the user's budgets; it settles the call's reservation.
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
	// Policies are the effective policies of the tools the agent listed (ToolLister) for
	// this run's settings when the run began: the tools StartTool knows for this run. An
	// agent whose tools come and go offers a model only the tools named here.
	Policies map[string]ToolPolicy
}

// Denied reports whether the session's policy denies the tool name: a model should not be
// offered it (its calls would be refused unasked).
func (r RunRequest) Denied(name string) bool { return r.Policies[name] == PolicyDeny }

// ToolInfo describes a tool an agent offers.
type ToolInfo struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema of the call's arguments, as JSON text ("" for none):
	// arguments a user edits before approving a call must satisfy it.
	InputSchema string
	// Policy is the tool's own default ("": ALLOW): it holds unless the operator names
	// the tool (Config.ToolPolicies), and a session may only make it stricter.
	Policy ToolPolicy
	// Host marks a tool that acts on the server's own machine (a shell): it is never
	// offered to a guest's session unless Config.GuestHostTools says so.
	Host bool
	// NoPolicy marks the tool that is the asking itself (an ask_user tool): its calls
	// never wait for approval, and it is listed without a policy.
	NoPolicy bool
}

// ToolLister is implemented by agents that call tools: Tools lists those a run with the
// given settings offers, so that the service can apply their policies and show them. The
// list may change from one call to the next (tools of an MCP server that starts or
// stops); the service lists them once as a run begins (RunRequest.Policies), and Tools
// must be safe for concurrent use.
type ToolLister interface {
	Tools(Settings) []ToolInfo
}

// Output is how a running agent talks back. Its methods are safe to call from several
// goroutines; each returns ctx's error (or ECONFLICT) once the run has ended, after which
// nothing more is recorded.
type Output interface {
	// Text appends delta to the run's current assistant message, starting one if needed.
	Text(delta string) error
	// Ask stores and announces a question, marks the run WAITING_FOR_INPUT, and blocks
	// until it is answered (returning the answer), withdrawn (a *Withdrawn error: it
	// expired) or the run ends (returning ctx's error). choices may be nil for a free
	// answer. It is Pose(QuestionSpec{Prompt: prompt, Choices: choices}) and Wait.
	Ask(ctx context.Context, prompt string, choices []string) (string, error)
	// Pose stores and announces a question and returns at once; the run is
	// WAITING_FOR_INPUT while anything it asked waits. EINVALID for an empty prompt or an
	// AnswerSchema that is not a valid JSON Schema.
	Pose(q QuestionSpec) (Pending, error)
	// StartTool records the start of a tool call on the current assistant message and
	// returns its handle. The call gets an ID of its own (ToolHandle.ID), unique in the
	// store; id, the agent's name for it (e.g. the model's tool_call_id), is kept as the
	// call's CallID and given back with the history; it may be empty. Under the session's
	// policy for name the call runs (ALLOW), waits AWAITING_APPROVAL for the user's
	// decision (ASK, or AlwaysAsk), or is refused REJECTED at once (DENY); see
	// ToolHandle.Approval. Started again with the CallID of a call of this run (a run
	// that resumed after an approval, on its history), it returns that call's handle.
	StartTool(id, name, arguments string, opts ...ToolOption) (ToolHandle, error)
	// ReportUsage adds what one call of model cost to the run's usage, and counts it
	// against the session's and the user's token budgets (settling the reservation the
	// call's BeforeModelCall made). EINVALID for negative counts.
	ReportUsage(model string, u Usage) error
	// BeforeModelCall weighs the next call of a model against the session's and the
	// user's token budgets, reserving estimate tokens (input and output together; 0 when
	// the agent cannot say, and then what the run's costliest call so far cost) until
	// the call's ReportUsage. It returns nil at once while every cap leaves room; when a
	// cap is reached, the run waits (WAITING_FOR_INPUT, Run.Budget naming the cap) until
	// the cap is raised or removed or the user's period turns, then weighs again; it
	// returns ctx's error when the run ends meanwhile. EINVALID for a negative estimate.
	BeforeModelCall(ctx context.Context, estimate int) error
	// Steers returns the messages the user sent to the run with the busy policy STEER
	// since the last call, oldest first, and hands them over: add them to the
	// conversation (as user messages) before the next step. When it returns any, the
	// reply written so far is complete, and text written after starts a new assistant
	// message. Only a Steerable agent gets steers; others may ignore this method.
	Steers() ([]Message, error)
}

// QuestionSpec is a question an agent asks.
type QuestionSpec struct {
	Prompt string
	// Choices are offered to pick from (nil for a free answer); with Multiple several may
	// be picked, and the answer is a JSON array of them.
	Choices  []string
	Multiple bool
	// AnswerSchema, when set, is a JSON Schema (as JSON text) the answer must satisfy:
	// the answer is then JSON (a form, for the user).
	AnswerSchema string
	// ExpiresIn is how long the question waits at most; 0 or more than the server's
	// limit (Config.InputExpiry) is that limit.
	ExpiresIn time.Duration
	// ToolCallID is the ID of the tool call (ToolHandle.ID) this question answers, for an
	// agent whose asking is a tool (ask_user): the answer is then that call's result.
	ToolCallID string
}

// Pending is a question that waits for its answer.
type Pending interface {
	// ID is the question's ID.
	ID() string
	// Wait blocks until the question is answered, and returns the answer. It returns a
	// *Withdrawn error when the question stopped waiting without one (it expired), and
	// ctx's error when the run ends. When ctx ends first (the agent's own deadline), the
	// question is withdrawn, unless an answer came first, which is returned.
	Wait(ctx context.Context) (string, error)
}

// Withdrawn is the error of a question that stopped waiting without an answer: Reason
// says why (ReasonExpired, ...).
type Withdrawn struct{ Reason string }

func (w *Withdrawn) Error() string { return "the question was withdrawn: " + w.Reason }

// Unwrap makes a Withdrawn an *Error too (ECONFLICT, with a message fit for a user): an
// agent that gives up when its question is withdrawn fails its run saying why, not with
// an internal error. Better, an agent goes on without the answer.
func (w *Withdrawn) Unwrap() error {
	return Errorf(ECONFLICT, "the agent stopped: its question was withdrawn unanswered (%s)", w.Reason)
}

// Rejected is ToolHandle.Approval's error for a call that must not run: the user rejected
// it (ByUser, and Reason is theirs, maybe empty), the tool policy denies it, or it was
// withdrawn without a decision (it expired). Give the model Text() as the call's result.
type Rejected struct {
	Reason string
	ByUser bool
}

func (r *Rejected) Error() string { return r.Text() }

// Text says, for a model, why the call did not run.
func (r *Rejected) Text() string {
	switch {
	case r.ByUser && r.Reason != "":
		return "the user rejected this call: " + r.Reason
	case r.ByUser:
		return "the user rejected this call"
	}
	return "this call was not run: " + r.Reason
}

// ToolOption changes how StartTool treats a call.
type ToolOption func(*toolOptions)

type toolOptions struct {
	alwaysAsk bool
	expiresIn time.Duration
}

// AlwaysAsk has the call wait for the user's approval even where its policy is ALLOW (a
// DENY still refuses it unasked).
func AlwaysAsk() ToolOption { return func(o *toolOptions) { o.alwaysAsk = true } }

// ApprovalExpiresIn bounds how long the call waits for approval, as QuestionSpec.ExpiresIn.
func ApprovalExpiresIn(d time.Duration) ToolOption {
	return func(o *toolOptions) { o.expiresIn = d }
}

// ToolHandle reports on one tool call.
type ToolHandle interface {
	// ID is the tool call's ID.
	ID() string
	// Approval returns the arguments to run the call with, once it may run: at once when
	// no approval is needed; when the user approved it, with the arguments as they may
	// have edited them. It returns a *Rejected error when the call must not run, and
	// ctx's error when the run ends. When ctx ends first (the agent's own deadline), the
	// call is withdrawn and ends CANCELLED, unless a decision came first.
	Approval(ctx context.Context) (arguments string, err error)
	// AwaitsApproval reports whether the call waits for the user's decision now (so that
	// Approval would block).
	AwaitsApproval() bool
	// Output streams what the tool prints.
	Output(delta string) error
	// Finish ends the call with a result, or with an error when err is non-nil.
	Finish(result string, err error) error
}

// AgentInfo describes a registered agent, with the tools it offers (for the server's
// default settings, with the server's default policies).
type AgentInfo struct {
	Name        string
	Description string
	Tools       []ToolInfo
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
