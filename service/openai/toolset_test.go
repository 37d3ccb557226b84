package openai_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// setTool is a tool of a ToolSet, with its own default policy, that records its calls.
type setTool struct {
	name   string
	policy service.ToolPolicy
	onCall func()
	mu     sync.Mutex
	calls  []string
}

func (t *setTool) Name() string                      { return t.name }
func (t *setTool) Description() string               { return "The tool " + t.name + "." }
func (t *setTool) Parameters() map[string]any        { return nil }
func (t *setTool) DefaultPolicy() service.ToolPolicy { return t.policy }

func (t *setTool) Call(ctx context.Context, arguments string, out openai.ToolOutput) (string, error) {
	t.mu.Lock()
	t.calls = append(t.calls, arguments)
	t.mu.Unlock()
	if t.onCall != nil {
		t.onCall()
	}
	return t.name + " ran", nil
}

func (t *setTool) called() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.calls)
}

// changingSet is a ToolSet whose tools the test changes.
type changingSet struct {
	mu    sync.Mutex
	tools []openai.Tool
}

func (s *changingSet) Tools() []openai.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tools)
}

func (s *changingSet) set(tools ...openai.Tool) {
	s.mu.Lock()
	s.tools = tools
	s.mu.Unlock()
}

// toolInfos returns the agent's tools by name.
func toolInfos(a *openai.Agent) map[string]service.ToolInfo {
	out := map[string]service.ToolInfo{}
	for _, t := range a.Tools(service.Settings{}) {
		out[t.Name] = t
	}
	return out
}

// The tools of a ToolSet are listed as they are now, with their own default policies;
// one whose name is taken or malformed is left out. A run offers the model those the
// service knew as it began (RunRequest.Policies), none it denies, and keeps them to the
// end: a call runs the tool the run began with, even once the set has dropped it.
func TestToolSetsComeAndGo(t *testing.T) {
	read := &setTool{name: "mcp__notes__read", policy: service.PolicyAllow}
	write := &setTool{name: "mcp__notes__write", policy: service.PolicyAsk}
	late := &setTool{name: "mcp__notes__late", policy: service.PolicyAllow}
	clash := &setTool{name: "ask_user", policy: service.PolicyAllow}
	bad := &setTool{name: "has spaces", policy: service.PolicyAllow}
	set := &changingSet{}

	read.onCall = func() { set.set() } // the server goes away while the run goes on
	srv := newFakeServer(t, fakellm.SSE(
		fakellm.Chunk(fakellm.ToolCallDelta(0, "c1", "mcp__notes__read"), ""),
		fakellm.Chunk(fakellm.ArgumentsDelta(0, `{}`), ""),
		fakellm.Chunk(`{}`, "tool_calls"),
		fakellm.Done,
	), fakellm.TextReply("Done."))
	a := newAgent(t, srv, openai.Config{ToolSets: []openai.ToolSet{set}})

	if got := toolInfos(a); len(got) != 1 {
		t.Errorf("tools of an empty set: %v, want ask_user alone", got)
	}
	set.set(read, write, clash, bad)
	got := toolInfos(a)
	if len(got) != 3 || got["mcp__notes__read"].Policy != service.PolicyAllow || got["mcp__notes__write"].Policy != service.PolicyAsk ||
		got["mcp__notes__read"].Description != "The tool mcp__notes__read." || got["ask_user"].Policy != "" || !got["ask_user"].NoPolicy {
		t.Errorf("tools = %+v, want ask_user, mcp__notes__read (ALLOW) and mcp__notes__write (ASK)", got)
	}

	set.set(read, write, late)
	out := newRecorder()
	req := service.RunRequest{SessionID: "s1", RunID: "r1", History: userSays("read it"),
		// late was listed after the service's listing; write is denied.
		Policies: map[string]service.ToolPolicy{"mcp__notes__read": service.PolicyAllow, "mcp__notes__write": service.PolicyDeny}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	if err := waitErr(t, runAsync(ctx, a, req, out)); err != nil {
		t.Fatalf("Run: %v", err)
	}
	equal(t, "tools offered", srv.Request(0).ToolNames(), []string{"ask_user", "mcp__notes__read"})
	equal(t, "tools offered after the set dropped them", srv.Request(1).ToolNames(), []string{"ask_user", "mcp__notes__read"})
	if got := toolInfos(a); len(got) != 1 {
		t.Errorf("tools once the set is empty again: %v, want ask_user alone", got)
	}
	if calls := out.toolCalls(); len(calls) != 1 || calls[0].result != "mcp__notes__read ran" || calls[0].err != nil {
		t.Errorf("the call: %+v", calls)
	}
	if read.called() != 1 || write.called()+late.called()+clash.called() != 0 {
		t.Errorf("calls: read %d, write %d, late %d, clash %d; want read once", read.called(), write.called(), late.called(), clash.called())
	}
}
