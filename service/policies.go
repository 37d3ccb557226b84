package service

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
)

// A tool's policy (ALLOW, ASK, DENY, from loosest to strictest) is the stricter of two:
//
//   - its ceiling, the loosest policy any session may give it: DENY for a tool that acts
//     on the server's machine (ToolInfo.Host) in a guest's session, unless
//     Config.GuestHostTools; else the operator's (Config.ToolPolicies: the tool's exact
//     name, else the longest pattern "prefix*" that matches it, such as "mcp__files__*"
//     for every tool of one MCP server); else the tool's own default (ToolInfo.Policy,
//     the shell's ASK); else ALLOW. The operator's word is final: a session cannot lift
//     it, and setting policies for other tools never loosens a tool's own default.
//   - the session's own (Settings.ToolPolicies, by the tool's exact name), which may only
//     make the tool stricter: a looser one is refused when it is set (EINVALID), and, set
//     before the ceiling was lowered, it no longer counts.
//
// The asking tool (ToolInfo.NoPolicy) has none.

// ToolPolicyEntry is one tool's effective policy, as listed with a session's settings,
// with the loosest policy the session may set for it.
type ToolPolicyEntry struct {
	Tool    string
	Policy  ToolPolicy
	Ceiling ToolPolicy
}

// strictness orders the policies from loosest to strictest.
func strictness(p ToolPolicy) int {
	switch p {
	case PolicyAsk:
		return 1
	case PolicyDeny:
		return 2
	}
	return 0
}

// policyLevel says whose word a tool's policy is, so that a call refused is told why.
type policyLevel int

const (
	levelTool    policyLevel = iota // the tool's own default
	levelServer                     // the operator's
	levelGuest                      // the tool acts on the server's machine; the session is a guest's
	levelSession                    // the session's
)

// deniedBy is what a call that a policy denies is told, by whose policy it is.
func deniedBy(l policyLevel) string {
	switch l {
	case levelServer:
		return "the server's tool policy denies this tool"
	case levelGuest:
		return "this tool acts on the server's machine and is not offered to guest users"
	case levelSession:
		return "the session's tool policy denies this tool"
	}
	return "this tool is denied by default"
}

// toolsOf lists the tools agent offers with set; none for an agent that lists none.
func (s *core) toolsOf(agent string, set Settings) []ToolInfo {
	r, ok := s.agents.Get(agent)
	if !ok {
		return nil
	}
	l, ok := r.(ToolLister)
	if !ok {
		return nil
	}
	return l.Tools(set)
}

// ceiling is the loosest policy a session with set may give the tool t, and whose word
// it is.
func (s *core) ceiling(t ToolInfo, set Settings) (ToolPolicy, policyLevel) {
	if t.Host && set.Guest && !s.cfg.GuestHostTools {
		return PolicyDeny, levelGuest
	}
	if p, ok := serverPolicy(s.cfg.ToolPolicies, t.Name); ok {
		return p, levelServer
	}
	if t.Policy != "" {
		return t.Policy, levelTool
	}
	return PolicyAllow, levelTool
}

// policyOf is the effective policy of the tool t under set, and whose word it is.
func (s *core) policyOf(t ToolInfo, set Settings) (ToolPolicy, policyLevel) {
	p, level := s.ceiling(t, set)
	if own, ok := set.ToolPolicies[t.Name]; ok && strictness(own) > strictness(p) {
		return own, levelSession
	}
	return p, level
}

// serverPolicy is the server's policy for the tool name in ps: the one of its exact name,
// else the one of the longest pattern (a name ending in "*") that name starts with.
func serverPolicy(ps map[string]ToolPolicy, name string) (ToolPolicy, bool) {
	if p, ok := ps[name]; ok {
		return p, true
	}
	var best string
	var policy ToolPolicy
	for pattern, p := range ps {
		prefix, ok := strings.CutSuffix(pattern, "*")
		if ok && strings.HasPrefix(name, prefix) && len(pattern) > len(best) {
			best, policy = pattern, p
		}
	}
	return policy, best != ""
}

// policies returns the effective policy under set of every tool in tools (as an agent
// lists them), the asking tool left out.
func (s *core) policies(tools []ToolInfo, set Settings) map[string]ToolPolicy {
	out := map[string]ToolPolicy{}
	for _, t := range tools {
		if !t.NoPolicy {
			out[t.Name], _ = s.policyOf(t, set)
		}
	}
	return out
}

// ToolPolicies lists, for every tool the agent of set offers, its effective policy under
// set and the loosest the session may set, by tool name.
func (s *Service) ToolPolicies(set Settings) []ToolPolicyEntry {
	tools := s.toolsOf(set.Agent, set)
	sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	out := make([]ToolPolicyEntry, 0, len(tools))
	for _, t := range tools {
		if t.NoPolicy {
			continue
		}
		p, _ := s.policyOf(t, set)
		c, _ := s.ceiling(t, set)
		out = append(out, ToolPolicyEntry{Tool: t.Name, Policy: p, Ceiling: c})
	}
	return out
}

// toolInfo returns the tool name of agent as it offers it with set.
func (s *core) toolInfo(agent, name string, set Settings) (ToolInfo, bool) {
	for _, t := range s.toolsOf(agent, set) {
		if t.Name == name {
			return t, true
		}
	}
	return ToolInfo{}, false
}

// maxToolPolicies bounds the policies one session may set, and maxToolName a tool's name.
const (
	maxToolPolicies = 200
	maxToolName     = 200
)

// applyToolPolicies sets in set the policies in, leaving the tools it does not name as
// they were. EINVALID, changing nothing, for a policy looser than the tool's ceiling (a
// tool the agent does not offer is judged by the operator's policies alone).
func (s *core) applyToolPolicies(set *Settings, in map[string]ToolPolicy) error {
	if len(in) == 0 {
		return nil
	}
	merged := maps.Clone(set.ToolPolicies)
	if merged == nil {
		merged = map[string]ToolPolicy{}
	}
	var offered map[string]ToolInfo
	for _, name := range sortedKeys(in) {
		p := in[name]
		switch {
		case strings.TrimSpace(name) == "" || len(name) > maxToolName:
			return Errorf(EINVALID, "a tool policy needs a tool name of 1 to %d bytes", maxToolName)
		case !p.Valid():
			return Errorf(EINVALID, "the policy of %q is not ALLOW, ASK or DENY", truncate(name, 40))
		}
		if offered == nil {
			offered = map[string]ToolInfo{}
			for _, t := range s.toolsOf(set.Agent, *set) {
				offered[t.Name] = t
			}
		}
		t, ok := offered[name]
		if !ok {
			t = ToolInfo{Name: name}
		}
		if c, level := s.ceiling(t, *set); strictness(p) < strictness(c) {
			return Errorf(EINVALID, "%s cannot be %s in a session: %s (a session may only make a tool stricter)",
				truncate(name, 60), p, ceilingWhy(c, level))
		}
		merged[name] = p
	}
	if len(merged) > maxToolPolicies {
		return Errorf(EINVALID, "a session may set at most %d tool policies", maxToolPolicies)
	}
	set.ToolPolicies = merged
	return nil
}

// ceilingWhy says what a tool's ceiling c is and whose word it is.
func ceilingWhy(c ToolPolicy, level policyLevel) string {
	switch level {
	case levelServer:
		return fmt.Sprintf("the server's policy for it is %s", c)
	case levelGuest:
		return "it acts on the server's machine and is not offered to guest users"
	}
	return fmt.Sprintf("its own policy is %s unless the server's operator says otherwise", c)
}

// GuestHostToolsWarning is what the server logs at start when guests are offered the
// tools that act on its machine.
const GuestHostToolsWarning = "guest users are offered tools that act on this machine (GuestHostTools): anyone who can sign in as a guest may run commands here once they approve their own calls"

// guestSettings returns set marked as a guest's when ctx's user is one.
func guestSettings(ctx context.Context, set Settings) Settings {
	set.Guest = GuestFrom(ctx)
	return set
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
