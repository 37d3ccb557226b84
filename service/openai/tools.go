package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/talkgraph/talkgraph/service"
)

// Tool is a function the model may call. Register tools in Config.Tools; the agent offers
// each to the model on every request, reports each call live (service.Output.StartTool),
// streams what the tool prints and sends its result back to the model.
//
// Calls of one run happen one at a time, in the order the model asked for them, but
// several runs (of different sessions) may call the same Tool at once: Call must be safe
// for concurrent use.
type Tool interface {
	// Name is how the model calls the tool: unique among the agent's tools, matching
	// [a-zA-Z0-9_-]{1,64}. ask_user and shell are taken by the built-in tools.
	Name() string
	// Description tells the model what the tool does and when to use it.
	Description() string
	// Parameters is the JSON Schema of the arguments object, as a decoded JSON value,
	// for example {"type": "object", "properties": {…}, "required": […]}. nil means the
	// tool takes no arguments.
	Parameters() map[string]any
	// Call runs the tool. arguments is the JSON text the model wrote; it is not checked
	// against Parameters (models get it wrong at times) and may even be malformed, so
	// decode it carefully and return an error that helps the model correct itself.
	//
	// Whatever the tool prints along the way goes to out, which the user sees live. The
	// returned string is the result the model reads. A non-nil error marks the call
	// failed, and its text is what the model reads instead: write it for the model.
	//
	// ctx ends when the user stops the run or sends a newer message; return promptly
	// then. A panic is recovered and reported as an error.
	Call(ctx context.Context, arguments string, out ToolOutput) (string, error)
}

// ToolSet is a set of tools that changes while the server runs, such as the tools of MCP
// servers that start, stop and start again. The agent asks for its tools as each run
// begins, and a run keeps the tools it began with; the service lists them too
// (service.ToolLister). Tools must be safe for concurrent use and cheap: it is called
// for every run. Each tool's name follows Tool.Name's rule; a tool whose name does not, or
// is taken by a tool of Config.Tools, a built-in one or another set's, is left out.
type ToolSet interface {
	Tools() []Tool
}

// PolicyDefaulter is an optional ability of a Tool: DefaultPolicy is the tool's own
// default policy (service.ToolInfo.Policy: ALLOW, ASK or DENY), which the server's and
// the session's policies override. A tool without it is ALLOW unless they say otherwise.
type PolicyDefaulter interface {
	DefaultPolicy() service.ToolPolicy
}

// HostTool is an optional ability of a Tool that acts on the server's own machine, as
// the shell does: ActsOnHost reports true, and guests' sessions are not offered the tool
// unless the operator says so (service.ToolInfo.Host).
type HostTool interface {
	ActsOnHost() bool
}

// ToolOutput streams what a tool prints while it runs. The user sees it live, as part of
// the tool call; the model sees only the result. service.ToolHandle satisfies it.
type ToolOutput interface {
	// Output appends delta to the call's output. delta should be valid UTF-8. It returns
	// an error once the run has ended; the tool may then stop writing.
	Output(delta string) error
}

// toolDef is how t is offered to the model.
func toolDef(t Tool) oai.ChatCompletionToolUnionParam {
	params := t.Parameters()
	if params == nil {
		params = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	def := shared.FunctionDefinitionParam{
		Name:       t.Name(),
		Parameters: shared.FunctionParameters(params),
	}
	if d := t.Description(); d != "" {
		def.Description = oai.String(d)
	}
	return oai.ChatCompletionFunctionTool(def)
}

// toolbox is the tools of one run: the agent's own and those its ToolSets had as the run
// began.
type toolbox struct {
	a        *Agent
	byName   map[string]Tool
	order    []string
	changing map[string]bool // the names that came from a ToolSet
}

// toolbox returns the tools the agent offers now.
func (a *Agent) toolbox() *toolbox {
	if len(a.sets) == 0 {
		return &toolbox{a: a, byName: a.tools, order: a.order}
	}
	tb := &toolbox{a: a, byName: maps.Clone(a.tools), order: slices.Clone(a.order), changing: map[string]bool{}}
	for _, set := range a.sets {
		for _, t := range set.Tools() {
			if t == nil {
				continue
			}
			name := t.Name()
			if _, taken := tb.byName[name]; taken || !toolNameRE.MatchString(name) {
				continue
			}
			tb.byName[name] = t
			tb.order = append(tb.order, name)
			tb.changing[name] = true
		}
	}
	return tb
}

// def is how the tool name is offered to the model.
func (tb *toolbox) def(name string) oai.ChatCompletionToolUnionParam {
	if d, ok := tb.a.toolDefs[name]; ok {
		return d
	}
	return toolDef(tb.byName[name])
}

// runCalls runs the calls of one model turn and returns what the model should read of
// each, in their order. The calls that need no decision run first, in the model's order;
// those that wait for the user's approval (service.ToolHandle.Approval) wait together, so
// that the user may decide them in any order, and each runs as its decision comes. Calls
// run one at a time. A call the user rejects (or the policy denies, or that expired or was
// withdrawn) does not run, and the model reads why.
func (a *Agent) runCalls(ctx context.Context, tb *toolbox, calls []*call, out service.Output, rt *runTrace) []string {
	results := make([]string, len(calls))
	type approved struct {
		i    int
		args string
		err  error
	}
	run := func(a2 approved) {
		c := calls[a2.i]
		var rejected *service.Rejected
		switch {
		case errors.As(a2.err, &rejected):
			results[a2.i] = rejected.Text()
		case a2.err != nil || ctx.Err() != nil: // the run ended
			results[a2.i] = toolErrorText("not run: the run was stopped")
		default:
			results[a2.i] = a.runTool(ctx, tb, c, a2.args, out, rt)
		}
	}
	decided := make(chan approved, len(calls))
	waiting := 0
	for i, c := range calls {
		if c.handle.AwaitsApproval() {
			waiting++
			go func() {
				args, err := c.handle.Approval(ctx)
				decided <- approved{i, args, err}
			}()
			continue
		}
		args, err := c.handle.Approval(ctx)
		run(approved{i, args, err})
	}
	for range waiting {
		run(<-decided)
	}
	return results
}

// runTool runs one approved call with args and returns what the model should read. It
// finishes the call's handle with the result or the error.
func (a *Agent) runTool(ctx context.Context, tb *toolbox, c *call, args string, out service.Output, rt *runTrace) string {
	var result string
	var err error
	ctx, span := rt.startTool(ctx, c)
	defer func() { rt.endTool(span, err, a.secret) }()
	switch tool := tb.byName[c.name]; {
	case c.name == askUserName:
		result, err = askUser(ctx, args, c.handle.ID(), out)
	case tool == nil:
		err = fmt.Errorf("there is no tool named %q", c.name)
	default:
		result, err = safeCall(ctx, tool, args, c.handle)
	}
	_ = c.handle.Finish(result, err) // refused only once the run has ended; Run then sees ctx
	if err != nil {
		return toolErrorText(err.Error())
	}
	return result
}

// runApproved runs, when a run resumes on its history, the calls of its last reply that
// the user approved while it waited and that have not run (pending in wire), and puts
// their results in their place. The service gives back each call's handle (by its
// CallID); a call approved and then cut short by a crash is not among them: it ended
// FAILED and is never run again.
func (a *Agent) runApproved(ctx context.Context, tb *toolbox, wire []wireMsg, out service.Output, rt *runTrace) error {
	for i := range wire {
		tc := wire[i].pending
		if tc == nil {
			continue
		}
		h, err := out.StartTool(tc.CallID, tc.Name, tc.Arguments)
		if err != nil {
			return err
		}
		c := &call{modelID: tc.CallID, name: tc.Name, handle: h, id: wire[i].callID}
		c.args.WriteString(tc.Arguments)
		wire[i].content = a.runCalls(ctx, tb, []*call{c}, out, rt)[0]
		wire[i].pending = nil
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// Tools lists the agent's tools for the service (service.ToolLister): their names,
// descriptions, input schemas and own default policies (PolicyDefaulter), those of its
// ToolSets as they are now; ask_user is the asking itself and has no policy.
func (a *Agent) Tools(service.Settings) []service.ToolInfo {
	tb := a.toolbox()
	out := make([]service.ToolInfo, 0, len(tb.order))
	for _, name := range tb.order {
		t := tb.byName[name]
		info := service.ToolInfo{Name: name, Description: t.Description(), NoPolicy: name == askUserName}
		if d, ok := t.(PolicyDefaulter); ok {
			info.Policy = d.DefaultPolicy()
		}
		if h, ok := t.(HostTool); ok {
			info.Host = h.ActsOnHost()
		}
		if params := t.Parameters(); params != nil {
			if b, err := json.Marshal(params); err == nil {
				info.InputSchema = string(b)
			}
		}
		out = append(out, info)
	}
	return out
}

// toolErrorText is what the model reads for a failed call, in a run and when the history
// is rebuilt alike.
func toolErrorText(msg string) string { return "error: " + msg }

func safeCall(ctx context.Context, t Tool, args string, out ToolOutput) (result string, err error) {
	defer func() {
		if p := recover(); p != nil {
			result, err = "", fmt.Errorf("the tool %s failed unexpectedly", t.Name())
		}
	}()
	return t.Call(ctx, args, out)
}

const askUserName = "ask_user"

// askUserTool describes ask_user to the model. Its calls do not go through Call: the
// agent answers them with service.Output.Ask, which Tool.Call has no access to.
type askUserTool struct{}

func (askUserTool) Name() string { return askUserName }

func (askUserTool) Description() string {
	return "Ask the user a question and wait for the answer. Use it when you need information " +
		"or a decision only the user can give. Offer choices when the answer is one of a few options " +
		"(with multiple when several may be picked: the answer is then a JSON array of them), or an " +
		"answer_schema (a JSON Schema) when you need structured data: the user fills in a form and " +
		"the answer is JSON that satisfies it."
}

func (askUserTool) Parameters() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"question": map[string]any{
				"type":        "string",
				"description": "The question, as the user will read it.",
			},
			"choices": map[string]any{
				"type":        "array",
				"items":       map[string]any{"type": "string"},
				"description": "Optional answers to offer the user.",
			},
			"multiple": map[string]any{
				"type":        "boolean",
				"description": "With choices: the user may pick several; the answer is a JSON array of them.",
			},
			"answer_schema": map[string]any{
				"type":        "object",
				"description": "Optional JSON Schema the answer must satisfy (the user fills in a form); the answer is JSON.",
			},
		},
		"required": []any{"question"},
	}
}

func (askUserTool) Call(context.Context, string, ToolOutput) (string, error) {
	return "", errors.New("ask_user is answered by the agent itself")
}

// askArgs are ask_user's arguments.
type askArgs struct {
	Question     string          `json:"question"`
	Choices      []string        `json:"choices"`
	Multiple     bool            `json:"multiple"`
	AnswerSchema json.RawMessage `json:"answer_schema"`
}

func parseAskArgs(args string) (askArgs, error) {
	var a askArgs
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		return a, fmt.Errorf("arguments must be a JSON object like {\"question\": \"…\", \"choices\": [\"…\"]}: %v", err)
	}
	if a.Question == "" {
		return a, errors.New(`"question" is required`)
	}
	if len(a.Choices) == 0 {
		a.Choices = nil
	}
	return a, nil
}

// askUser asks through out (as the call callID's question) and blocks until the user
// answers or ctx ends. A question that expired unanswered is answered so, for the model.
func askUser(ctx context.Context, args, callID string, out service.Output) (string, error) {
	a, err := parseAskArgs(args)
	if err != nil {
		return "", err
	}
	spec := service.QuestionSpec{Prompt: a.Question, Choices: a.Choices, Multiple: a.Multiple && len(a.Choices) > 0, ToolCallID: callID}
	if len(a.AnswerSchema) > 0 && string(a.AnswerSchema) != "null" {
		spec.AnswerSchema = string(a.AnswerSchema)
	}
	p, err := out.Pose(spec)
	if err != nil {
		return "", err
	}
	answer, err := p.Wait(ctx)
	var withdrawn *service.Withdrawn
	if errors.As(err, &withdrawn) {
		return "(the user did not answer: " + withdrawn.Reason + ")", nil
	}
	return answer, err
}
