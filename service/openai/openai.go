// Package openai is the talkgraph agent for OpenAI-compatible chat-completions endpoints:
// OpenAI itself, Ollama, vLLM, llama.cpp's server and anything else that speaks the same
// streamed wire format. It adapts the openai-go SDK to service.Runner.
//
// On every run the agent rebuilds the model's message list from the session history (the
// history is the only checkpoint), streams the reply into service.Output as the model writes
// it, and runs the tools the model calls: ask_user (always offered; it asks the user through
// Output.Ask), shell (only when Config.EnableShell is set), any Tool an embedder
// registers in Config.Tools, and the tools of Config.ToolSets, which come and go while the
// server runs (the tools of MCP servers). Each tool call is shown live through
// Output.StartTool and its ToolHandle.
//
// What does not live here: storage, scheduling, GraphQL and the decision of which agent a
// session uses. The package imports only the domain package service and the SDK.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/talkgraph/talkgraph/service"
)

// Defaults for the zero values of Config and ShellConfig.
const (
	DefaultModel          = "gpt-4o-mini"
	DefaultBaseURL        = "https://api.openai.com/v1"
	DefaultIdleTimeout    = 60 * time.Second
	DefaultMaxRetries     = 2
	DefaultShellTimeout   = 2 * time.Minute
	DefaultShellMaxOutput = 64 << 10
)

// maxRounds bounds how many requests one run makes: a model that keeps calling tools
// without ever answering ends the run instead of looping forever.
const maxRounds = 32

// Config configures an Agent. Only Model is needed in practice; BaseURL and APIKey select
// the provider.
type Config struct {
	// BaseURL is the endpoint's base, the part before /chat/completions:
	// "https://api.openai.com/v1" (the default), "http://localhost:11434/v1" for Ollama,
	// "http://localhost:8000/v1" for vLLM. Environment variables are not consulted.
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none, as local servers expect. It is a
	// secret: it never appears in an error, a log line or anything written to Output.
	APIKey string
	// Model is the model a session uses unless its settings name another.
	Model string
	// Temperature is the sampling temperature unless the session sets one; nil leaves it to
	// the provider.
	Temperature *float64
	// SystemPrompt opens every conversation unless the session sets its own; empty sends
	// none.
	SystemPrompt string
	// IdleTimeout is how long a request may go without receiving a byte (connecting,
	// waiting for headers, or between chunks) before it is abandoned and the run fails.
	// Keep-alive comment lines count as bytes. Zero means DefaultIdleTimeout; negative turns
	// the watchdog off. There is no limit on a request's total duration.
	IdleTimeout time.Duration
	// MaxRetries is how often a request that failed before streaming anything (429, 5xx,
	// a connection error) is tried again. Zero means DefaultMaxRetries; negative means
	// never.
	MaxRetries int
	// Tools are offered to the model besides ask_user (and shell). Names must be unique,
	// match [a-zA-Z0-9_-]{1,64} and not be ask_user, or shell when EnableShell is set.
	Tools []Tool
	// ToolSets are sets of tools that change while the server runs (see ToolSet), offered
	// besides Tools.
	ToolSets []ToolSet
	// EnableShell offers the model the shell tool, which runs `sh -c <command>` on this
	// machine with the server's privileges. Off by default; turn it on only where the
	// people who can talk to the agent may run commands here.
	EnableShell bool
	// Shell configures the shell tool.
	Shell ShellConfig
}

// ShellConfig configures the shell tool.
type ShellConfig struct {
	// Dir is the working directory of the commands; empty means the server's.
	Dir string
	// Timeout ends a command that runs longer; zero means DefaultShellTimeout.
	Timeout time.Duration
	// MaxOutput caps, in bytes, the output streamed and returned to the model; the rest is
	// discarded and the result says so. Zero means DefaultShellMaxOutput.
	MaxOutput int
}

// Agent is a service.Runner backed by an OpenAI-compatible chat-completions endpoint. It
// is safe for concurrent use: runs share nothing but the HTTP client.
type Agent struct {
	cfg       Config
	client    oai.ChatCompletionService
	secret    *secret
	tools     map[string]Tool // the tools that never change (Config.Tools and the built-in ones)
	order     []string        // their names, in the order they are offered
	toolDefs  map[string]oai.ChatCompletionToolUnionParam
	sets      []ToolSet
	idle      time.Duration
	retries   int
	maxDelay  time.Duration
	baseDelay time.Duration
}

var _ service.Runner = (*Agent)(nil)

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// New returns an agent for cfg. It fails when BaseURL is not an http(s) URL or a tool is
// nil, badly named or registered twice; it does not contact the provider.
func New(cfg Config) (*Agent, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL itself is not repeated: it may carry a credential.
		return nil, errors.New("openai: Config.BaseURL must be an http or https URL")
	}
	if cfg.Shell.Timeout <= 0 {
		cfg.Shell.Timeout = DefaultShellTimeout
	}
	if cfg.Shell.MaxOutput <= 0 {
		cfg.Shell.MaxOutput = DefaultShellMaxOutput
	}

	a := &Agent{
		cfg:       cfg,
		secret:    newSecret(cfg.APIKey),
		tools:     make(map[string]Tool),
		toolDefs:  make(map[string]oai.ChatCompletionToolUnionParam),
		sets:      cfg.ToolSets,
		idle:      cfg.IdleTimeout,
		retries:   cfg.MaxRetries,
		maxDelay:  30 * time.Second,
		baseDelay: 500 * time.Millisecond,
	}
	switch {
	case a.idle == 0:
		a.idle = DefaultIdleTimeout
	case a.idle < 0:
		a.idle = 0
	}
	switch {
	case a.retries == 0:
		a.retries = DefaultMaxRetries
	case a.retries < 0:
		a.retries = 0
	}

	builtin := []Tool{askUserTool{}}
	if cfg.EnableShell {
		builtin = append(builtin, newShellTool(cfg.Shell))
	}
	for i, t := range append(builtin, cfg.Tools...) {
		if t == nil {
			return nil, fmt.Errorf("openai: Config.Tools[%d] is nil", i-len(builtin))
		}
		name := t.Name()
		if !toolNameRE.MatchString(name) {
			return nil, fmt.Errorf("openai: tool name %q must match %s", name, toolNameRE)
		}
		if _, dup := a.tools[name]; dup {
			return nil, fmt.Errorf("openai: tool %q is registered twice (or uses a built-in name)", name)
		}
		a.tools[name] = t
		a.order = append(a.order, name)
		a.toolDefs[name] = toolDef(t)
	}

	transport := http.DefaultTransport.(*http.Transport).Clone()
	a.client = oai.NewChatCompletionService(
		option.WithHTTPClient(&http.Client{Transport: transport}),
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		// The agent retries on its own terms (only before anything was streamed), so the
		// SDK must not retry behind its back.
		option.WithMaxRetries(0),
	)
	return a, nil
}

// Run answers the last message of req.History. It streams the reply into out, runs the
// tools the model calls and sends their results back to the model until it answers
// without calling a tool. The calls of one turn wait for their approval together (see
// runCalls), run one at a time as their approvals come, and their results go back
// together, in the model's order.
//
// It returns nil when the reply is complete; ctx's error when ctx ends (stop, a newer
// message), after closing the HTTP stream; and otherwise a failure whose
// service.ErrorMessage is fit for the user (EUNAVAILABLE for the provider's failures,
// EINVALID when no model is configured). Neither errors nor anything written to out
// contain the API key, even when the provider or a tool echoes it.
func (a *Agent) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	model, temperature, system := a.ModelFor(req.Settings), a.cfg.Temperature, a.cfg.SystemPrompt
	if s := req.Settings.Temperature; s != nil {
		temperature = s
	}
	if s := req.Settings.SystemPrompt; s != nil && *s != "" {
		system = *s
	}
	if model == "" {
		return service.Errorf(service.EINVALID, "the openai agent has no model: set one in the session settings")
	}

	g := guard(out, a.secret)
	rt := a.tracing(ctx, req, model)
	tb := a.toolbox() // the run keeps the tools it began with
	used := map[string]bool{"": true}
	for _, h := range req.History {
		for _, tc := range h.ToolCalls {
			if tc != nil {
				used[tc.CallID] = true
			}
		}
	}
	wire := rebuild(system, req.History)
	// A run that resumes after the user decided on its calls (the server restarted while
	// it waited) runs the calls approved meanwhile before it asks the model again.
	if err := a.runApproved(ctx, tb, wire, g, rt); err != nil {
		return err
	}
	var offered []oai.ChatCompletionToolUnionParam
	for _, name := range tb.order {
		_, known := req.Policies[name]
		switch {
		case req.Denied(name): // a denied tool is kept from the model
		case tb.changing[name] && !known:
			// Listed since the run began: the service does not know its policy, so it
			// waits for the next run.
		default:
			offered = append(offered, tb.def(name))
		}
	}
	params := oai.ChatCompletionNewParams{
		Model:    shared.ChatModel(model),
		Messages: toParams(wire),
		Tools:    offered,
		// The provider reports what each request cost in a last chunk; the run adds it up.
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
	}
	if temperature != nil {
		params.Temperature = oai.Float(*temperature)
	}

	for round := 0; ; round++ {
		if round == maxRounds {
			return service.Errorf(service.EUNAVAILABLE, "the model kept calling tools without finishing its reply")
		}
		// The session's and the user's budgets are weighed before each request; a run
		// whose budget is spent waits here until it is raised.
		if err := g.BeforeModelCall(ctx, estimate(params)); err != nil {
			return err
		}
		t, err := a.stream(ctx, params, g, used, rt)
		if t != nil && t.usage != nil {
			if uerr := g.ReportUsage(model, *t.usage); uerr != nil {
				return uerr
			}
		}
		if err != nil {
			return err
		}
		if len(t.calls) > 0 {
			params.Messages = append(params.Messages, assistantParam(t.text.String(), t.wireCalls()))
			results := a.runCalls(ctx, tb, t.calls, g, rt)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			for i, c := range t.calls {
				params.Messages = append(params.Messages, oai.ToolMessage(results[i], c.id))
			}
		}
		// What the user sent meanwhile with STEER goes to the model before its next call,
		// after the tool results; a reply that was done goes on with it.
		steers, err := g.Steers()
		if err != nil {
			return err
		}
		if len(t.calls) == 0 {
			if len(steers) == 0 {
				return nil
			}
			params.Messages = append(params.Messages, assistantParam(t.text.String(), nil))
		}
		for _, m := range steers {
			params.Messages = append(params.Messages, oai.UserMessage(m.Content))
		}
	}
}

// outputAllowance is what a reply may write as far as the budgets are concerned: a
// request holds that much besides what it reads until it reports what it cost, so that
// near a cap requests are made one at a time and overshoot it by one reply at most.
const outputAllowance = 4096

// estimate is what a request may cost, for the budgets: about a token per four bytes of
// what it sends, and outputAllowance.
func estimate(params oai.ChatCompletionNewParams) int {
	b, err := json.Marshal(params.Messages)
	if err != nil {
		return outputAllowance
	}
	return (len(b)+3)/4 + outputAllowance
}

// TakesSteers implements service.Steerable: messages sent with STEER reach the model
// before its next call.
func (a *Agent) TakesSteers() bool { return true }

// ModelFor names the model a run with set uses: the session's model, or the agent's
// default (service.ModelNamer).
func (a *Agent) ModelFor(set service.Settings) string {
	if m := set.Model; m != nil && *m != "" {
		return *m
	}
	return a.cfg.Model
}
