package service_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
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
// then the tool's own default; a session's policy, by exact name, counts only where it
// is stricter.
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
	for _, a := range svc.Agents(context.Background()) {
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

	// A session may make a tool stricter (and names tools exactly: a pattern is just a
	// name no tool has); a looser policy, stored before the operator tightened the
	// server's, no longer counts.
	set := service.Settings{Agent: "tools", ToolPolicies: map[string]service.ToolPolicy{
		"mcp__fs__read":  service.PolicyAsk,   // stricter than the server's ALLOW
		"mcp__fs__write": service.PolicyAllow, // looser than the server's DENY: not taken
		"mcp__web__*":    service.PolicyDeny,
	}}
	want["mcp__fs__read"] = service.PolicyAsk
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

// hostTools is an agent with a shell-like tool (its own default ASK, acting on the
// server's machine), a plain tool, and the MCP-like tools of a server "files"; each run
// starts every tool its policies name and reports how each call began.
func hostTools(calls chan<- map[string]*service.ToolCall) *lister {
	return &lister{
		tools: func() []service.ToolInfo {
			return []service.ToolInfo{
				{Name: "shell", Policy: service.PolicyAsk, Host: true},
				{Name: "calc"},
				{Name: "mcp__files__write", Policy: service.PolicyAsk},
			}
		},
		run: func(ctx context.Context, req service.RunRequest, out service.Output) error {
			got := map[string]*service.ToolCall{}
			for _, name := range []string{"shell", "calc", "mcp__files__write"} {
				h, err := out.StartTool("", name, "{}")
				if err != nil {
					return err
				}
				call := &service.ToolCall{Name: name, Status: service.ToolRunning}
				if h.AwaitsApproval() {
					call.Status = service.ToolAwaitingApproval
					got[name] = call
					continue
				}
				_, err = h.Approval(ctx)
				var rejected *service.Rejected
				switch {
				case errors.As(err, &rejected):
					reason := rejected.Reason
					call.Status, call.Error = service.ToolRejected, &reason
				}
				got[name] = call
				if call.Status == service.ToolRunning {
					_ = h.Finish("ok", nil)
				}
			}
			calls <- got
			<-ctx.Done()
			return ctx.Err()
		},
	}
}

// The operator's policy is a ceiling: a session that asks for a looser one is refused
// with EINVALID naming the tool and nothing changes, whether the operator named the tool
// exactly or by a pattern; a stricter one is taken.
func TestOperatorPolicyIsACeiling(t *testing.T) {
	calls := make(chan map[string]*service.ToolCall, 1)
	svc := start(t, setup{agents: map[string]service.Runner{"tools": hostTools(calls)}, config: func(c *service.Config) {
		c.ToolPolicies = map[string]service.ToolPolicy{"shell": service.PolicyDeny, "mcp__files__*": service.PolicyDeny}
	}})
	agent := "tools"
	for _, tool := range []string{"shell", "mcp__files__write"} {
		for _, loose := range []service.ToolPolicy{service.PolicyAllow, service.PolicyAsk} {
			_, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: &agent, ToolPolicies: map[string]service.ToolPolicy{tool: loose}})
			wantCode(t, "creating a session with "+tool+"="+string(loose), err, service.EINVALID)
			if err != nil && !strings.Contains(service.ErrorMessage(err), tool) {
				t.Errorf("the refusal does not name the tool: %q", service.ErrorMessage(err))
			}
		}
	}
	if page, _, err := svc.Sessions(alice, nil, ""); err != nil || len(page) != 0 {
		t.Fatalf("refused creations left %d sessions (%v)", len(page), err)
	}
	sess, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: &agent, ToolPolicies: map[string]service.ToolPolicy{"calc": service.PolicyAsk}})
	if err != nil {
		t.Fatal(err)
	}
	before := view(t, svc, alice, sess.ID)
	_, err = svc.UpdateSettings(alice, sess.ID, service.SettingsInput{ToolPolicies: map[string]service.ToolPolicy{"calc": service.PolicyDeny, "shell": service.PolicyAllow}})
	wantCode(t, "lifting the server's DENY in a session's settings", err, service.EINVALID)
	if after := view(t, svc, alice, sess.ID); !reflect.DeepEqual(after.Settings, before.Settings) || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("a refused settings change changed the session: %+v, was %+v", after.Settings, before.Settings)
	}
	if _, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{ToolPolicies: map[string]service.ToolPolicy{"shell": service.PolicyDeny}}); err != nil {
		t.Errorf("repeating the server's DENY in a session: %v", err)
	}

	send(t, svc, alice, sess.ID, "go")
	got := <-calls
	for _, tool := range []string{"shell", "mcp__files__write"} {
		c := got[tool]
		if c.Status != service.ToolRejected || c.Error == nil || *c.Error != "the server's tool policy denies this tool" {
			t.Errorf("%s under the server's DENY began %s (%v), want REJECTED by the server's policy", tool, c.Status, c.Error)
		}
	}
	if c := got["calc"]; c.Status != service.ToolAwaitingApproval {
		t.Errorf("calc, ASK by the session's choice, began %s", c.Status)
	}
	if _, err := svc.CancelRun(alice, sess.ID); err != nil {
		t.Fatal(err)
	}
}

// A tool's own default (the shell's ASK) holds unless the operator names that very tool:
// policies the operator sets for other tools never loosen it, and a session cannot either.
func TestToolDefaultHoldsUnlessTheOperatorNamesIt(t *testing.T) {
	calls := make(chan map[string]*service.ToolCall, 1)
	svc := start(t, setup{agents: map[string]service.Runner{"tools": hostTools(calls)}, config: func(c *service.Config) {
		c.ToolPolicies = map[string]service.ToolPolicy{"mcp__files__*": service.PolicyAllow, "calc": service.PolicyDeny}
	}})
	agent := "tools"
	_, err := svc.CreateTalkSession(alice, "", service.SettingsInput{Agent: &agent, ToolPolicies: map[string]service.ToolPolicy{"shell": service.PolicyAllow}})
	wantCode(t, "a session making the shell ALLOW", err, service.EINVALID)

	sess := newSession(t, svc, alice, "tools", service.BusyInterrupt)
	got := map[string]service.ToolPolicyEntry{}
	for _, e := range svc.ToolPolicies(view(t, svc, alice, sess.ID).Settings) {
		got[e.Tool] = e
	}
	if e := got["shell"]; e.Policy != service.PolicyAsk || e.Ceiling != service.PolicyAsk {
		t.Errorf("the shell is listed %s (ceiling %s), want ASK by its own default", e.Policy, e.Ceiling)
	}
	if e := got["mcp__files__write"]; e.Policy != service.PolicyAllow {
		t.Errorf("mcp__files__write is %s, want the operator's ALLOW over its own ASK", e.Policy)
	}
	send(t, svc, alice, sess.ID, "go")
	calls2 := <-calls
	if c := calls2["shell"]; c.Status != service.ToolAwaitingApproval {
		t.Errorf("with TOOL_POLICIES naming other tools, the shell began %s, want AWAITING_APPROVAL", c.Status)
	}
	if c := calls2["calc"]; c.Status != service.ToolRejected || *c.Error != "the server's tool policy denies this tool" {
		t.Errorf("calc began %s, want REJECTED by the server", c.Status)
	}
	if _, err := svc.CancelRun(alice, sess.ID); err != nil {
		t.Fatal(err)
	}
}

// A tool that acts on the server's machine is never offered to a guest's session: it is
// DENY there (listed so, kept from the model, refused if called anyway, and a session
// cannot lift it), unless Config.GuestHostTools; a signed-in user's sessions keep it.
func TestHostToolsAreNotOfferedToGuests(t *testing.T) {
	guest := service.WithGuest(service.WithUser(context.Background(), "a-guest"))
	for _, offered := range []bool{false, true} {
		t.Run(fmt.Sprintf("GuestHostTools=%v", offered), func(t *testing.T) {
			calls := make(chan map[string]*service.ToolCall, 1)
			svc := start(t, setup{agents: map[string]service.Runner{"tools": hostTools(calls)}, config: func(c *service.Config) {
				c.GuestHostTools = offered
			}})
			want := service.PolicyDeny
			if offered {
				want = service.PolicyAsk
			}
			for _, a := range svc.Agents(guest) {
				for _, tool := range a.Tools {
					if tool.Name == "shell" && tool.Policy != want {
						t.Errorf("agents lists the shell to a guest as %s, want %s", tool.Policy, want)
					}
				}
			}
			for _, a := range svc.Agents(alice) {
				for _, tool := range a.Tools {
					if tool.Name == "shell" && tool.Policy != service.PolicyAsk {
						t.Errorf("agents lists the shell to a signed-in user as %s, want ASK", tool.Policy)
					}
				}
			}
			agent := "tools"
			_, err := svc.CreateTalkSession(guest, "", service.SettingsInput{Agent: &agent, ToolPolicies: map[string]service.ToolPolicy{"shell": service.PolicyAsk}})
			if offered {
				if err != nil {
					t.Errorf("a guest asking the shell ASK where guests may have it: %v", err)
				}
			} else {
				wantCode(t, "a guest asking for the shell", err, service.EINVALID)
			}
			sess := newSession(t, svc, guest, "tools", service.BusyInterrupt)
			send(t, svc, guest, sess.ID, "go")
			got := (<-calls)["shell"]
			switch {
			case offered && got.Status != service.ToolAwaitingApproval:
				t.Errorf("the shell in a guest's session began %s, want AWAITING_APPROVAL", got.Status)
			case !offered && (got.Status != service.ToolRejected || !strings.Contains(*got.Error, "guest")):
				t.Errorf("the shell in a guest's session began %s (%v), want REJECTED for guests", got.Status, got.Error)
			}
			if _, err := svc.CancelRun(guest, sess.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
