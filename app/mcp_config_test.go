package app_test

import (
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// The MCP settings: each limit takes its value, refuses a bad one naming what it takes,
// and TOOL_POLICIES names every tool of an MCP server with a pattern.
func TestMCPSettings(t *testing.T) {
	c, err := load(t, map[string]string{"MCP_CONFIG": "/etc/talkgraph/mcp.json", "MCP_MAX_SERVERS": "3", "MCP_MAX_TOOLS": "7",
		"MCP_MAX_RESULT_BYTES": "1000", "MCP_MAX_MESSAGE_BYTES": "65536", "MCP_CALL_TIMEOUT": "30s", "MCP_START_TIMEOUT": "5s",
		"MCP_START_ATTEMPTS": "2", "TOOL_POLICIES": "shell=ASK, mcp__files__*=ASK, mcp__files__read_text_file=allow, mcp__*=DENY"})
	if err != nil {
		t.Fatal(err)
	}
	l := c.MCP.Limits
	if c.MCP.File != "/etc/talkgraph/mcp.json" || l.MaxServers != 3 || l.MaxTools != 7 || l.MaxResultBytes != 1000 || l.MaxMessageBytes != 65536 ||
		l.CallTimeout != 30*time.Second || l.StartTimeout != 5*time.Second || l.StartAttempts != 2 {
		t.Errorf("%+v", c.MCP)
	}
	want := map[string]service.ToolPolicy{"shell": service.PolicyAsk, "mcp__files__*": service.PolicyAsk,
		"mcp__files__read_text_file": service.PolicyAllow, "mcp__*": service.PolicyDeny}
	if len(c.Service.ToolPolicies) != len(want) {
		t.Errorf("TOOL_POLICIES = %v, want %v", c.Service.ToolPolicies, want)
	}
	for k, v := range want {
		if c.Service.ToolPolicies[k] != v {
			t.Errorf("TOOL_POLICIES = %v, want %v", c.Service.ToolPolicies, want)
		}
	}
	for env, bad := range map[string]struct{ value, valid string }{
		"MCP_MAX_SERVERS":       {"0", "a whole number ≥ 1"},
		"MCP_MAX_TOOLS":         {"none", "a whole number ≥ 1"},
		"MCP_MAX_RESULT_BYTES":  {"-1", "a whole number ≥ 1"},
		"MCP_MAX_MESSAGE_BYTES": {"100", "a whole number ≥ 1024"},
		"MCP_CALL_TIMEOUT":      {"10ms", "a duration ≥ 1s"},
		"MCP_START_TIMEOUT":     {"soon", "a duration ≥ 1s"},
		"MCP_START_ATTEMPTS":    {"0", "a whole number ≥ 1"},
		"TOOL_POLICIES":         {"mcp__*__read=ALLOW", "a * may only end a tool's name"},
	} {
		_, err := load(t, map[string]string{env: bad.value})
		if err == nil || !strings.Contains(err.Error(), env) || !strings.Contains(err.Error(), bad.valid) {
			t.Errorf("%s=%s: %v, want an error naming %s and %q", env, bad.value, err, env, bad.valid)
		}
	}
}
