package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// lister is an agent whose tools are given by a function, called at every listing.
type lister struct {
	tools func() []service.ToolInfo
	run   func(ctx context.Context, req service.RunRequest, out service.Output) error
}

func (l *lister) Tools(service.Settings) []service.ToolInfo { return l.tools() }

func (l *lister) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	return l.run(ctx, req, out)
}

// The server's policies name tools exactly or by a pattern ending in "*" (every tool of
// an MCP server is "mcp__<server>__…"): the exact name wins, then the longest pattern,
// then the agent's own default; a session's policy, by exact name, wins over all.
func TestServerPoliciesByPattern(t *testing.T) {
	tools := []service.ToolInfo{
		{Name: "mcp__fs__read", Policy: service.PolicyAllow},
		{Name: "mcp__fs__write", Policy: service.PolicyAsk},
		{Name: "mcp__fs__write_all", Policy: service.PolicyAsk},
		{Name: "mcp__web__get", Policy: service.PolicyAllow},
		{Name: "calc"},
		{Name: "ask", NoPolicy: true},
	}
	agent := &lister{tools: func() []service.ToolInfo { return tools }}
	svc := start(t, setup{agents: map[string]service.Runner{"tools": agent}, config: func(c *service.Config) {
		c.ToolPolicies = map[string]service.ToolPolicy{
			"mcp__*":              service.PolicyAsk,
			"mcp__fs__*":          service.PolicyDeny,
			"mcp__fs__read":       service.PolicyAllow,
			"mcp__fs__write_all*": service.PolicyAsk, // longer than mcp__fs__*
		}
	}})
	want := map[string]service.ToolPolicy{
		"mcp__fs__read":      service.PolicyAllow, // its exact name
		"mcp__fs__write":     service.PolicyDeny,  // mcp__fs__* over mcp__*
		"mcp__fs__write_all": service.PolicyAsk,   // the longest pattern
		"mcp__web__get":      service.PolicyAsk,   // mcp__* over the agent's ALLOW
		"calc":               service.PolicyAllow, // nothing says otherwise
	}
	var listed []service.ToolInfo
	for _, a := range svc.Agents() {
		if a.Name == "tools" {
			listed = a.Tools
		}
	}
	if len(listed) != len(tools) {
		t.Fatalf("agents lists %d tools, want %d: %+v", len(listed), len(tools), listed)
	}
	for _, tool := range listed {
		if tool.NoPolicy {
			if tool.Policy != "" {
				t.Errorf("the asking tool is listed with policy %q", tool.Policy)
			}
			continue
		}
		if got := tool.Policy; got != want[tool.Name] {
			t.Errorf("agents lists %s as %s, want %s", tool.Name, got, want[tool.Name])
		}
	}

	set := service.Settings{Agent: "tools", ToolPolicies: map[string]service.ToolPolicy{
		"mcp__fs__write": service.PolicyAllow,
		"mcp__web__*":    service.PolicyDeny, // a session names tools exactly: no pattern
	}}
	want["mcp__fs__write"] = service.PolicyAllow
	got := map[string]service.ToolPolicy{}
	for _, e := range svc.ToolPolicies(set) {
		got[e.Tool] = e.Policy
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a session's effective policies = %v, want %v", got, want)
	}
}

// An agent whose tools come and go (an MCP server starting while a run begins) gets in
// RunRequest.Policies the policies of exactly the tools StartTool knows for the run, so
// that a tool it offers a model never runs under a policy the service guessed: here each
// listing has one tool more than the one before, every one ASK by the agent's own
// default, and every tool the run's policies name waits for approval.
func TestRunPoliciesAreThoseOfTheToolsOffered(t *testing.T) {
	var mu sync.Mutex
	listings := 0
	type started struct {
		name     string
		awaiting bool
	}
	calls := make(chan []started, 1)
	agent := &lister{
		tools: func() []service.ToolInfo {
			mu.Lock()
			defer mu.Unlock()
			listings++
			var out []service.ToolInfo
			for i := range listings {
				out = append(out, service.ToolInfo{Name: fmt.Sprintf("t%d", i), Policy: service.PolicyAsk})
			}
			return out
		},
		run: func(ctx context.Context, req service.RunRequest, out service.Output) error {
			var got []started
			for name := range req.Policies {
				h, err := out.StartTool("", name, "{}")
				if err != nil {
					return err
				}
				got = append(got, started{name, h.AwaitsApproval()})
			}
			calls <- got
			<-ctx.Done()
			return ctx.Err()
		},
	}
	svc := start(t, setup{agents: map[string]service.Runner{"tools": agent}})
	sess := newSession(t, svc, alice, "tools", service.BusyInterrupt)
	send(t, svc, alice, sess.ID, "go")
	got := <-calls
	if len(got) == 0 {
		t.Fatal("the run's policies name no tool")
	}
	for _, c := range got {
		if !c.awaiting {
			t.Errorf("%s, ASK by its agent's default, ran without approval (of %d tools)", c.name, len(got))
		}
	}
	if _, err := svc.CancelRun(alice, sess.ID); err != nil {
		t.Fatal(err)
	}
}
