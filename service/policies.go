package service

import (
	"maps"
	"sort"
	"strings"
)

// A tool's policy (ALLOW, ASK, DENY) is, from strongest to weakest: the session's
// (Settings.ToolPolicies, by the tool's exact name), the server's default for the tool
// (Config.ToolPolicies: its exact name, else the longest pattern "prefix*" that matches
// it, such as "mcp__files__*" for every tool of one MCP server), the agent's own default
// (ToolInfo.Policy), else ALLOW. The asking tool (ToolInfo.NoPolicy) has none.

// ToolPolicyEntry is one tool's effective policy, as listed with a session's settings.
type ToolPolicyEntry struct {
	Tool   string
	Policy ToolPolicy
}

// toolsOf lists the tools agent offers with set; none for an agent that lists none.
func (s *Service) toolsOf(agent string, set Settings) []ToolInfo {
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

// policyOf is the effective policy of the tool named name, whose own default is own ("":
// none), under set.
func (s *Service) policyOf(name string, own ToolPolicy, set Settings) ToolPolicy {
	if p, ok := set.ToolPolicies[name]; ok {
		return p
	}
	if p, ok := serverPolicy(s.cfg.ToolPolicies, name); ok {
		return p
	}
	if own != "" {
		return own
	}
	return PolicyAllow
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
func (s *Service) policies(tools []ToolInfo, set Settings) map[string]ToolPolicy {
	out := map[string]ToolPolicy{}
	for _, t := range tools {
		if !t.NoPolicy {
			out[t.Name] = s.policyOf(t.Name, t.Policy, set)
		}
	}
	return out
}

// ToolPolicies lists, for every tool the agent of set offers, its effective policy under
// set, by tool name.
func (s *Service) ToolPolicies(set Settings) []ToolPolicyEntry {
	ps := s.policies(s.toolsOf(set.Agent, set), set)
	out := make([]ToolPolicyEntry, 0, len(ps))
	for _, name := range sortedKeys(ps) {
		out = append(out, ToolPolicyEntry{Tool: name, Policy: ps[name]})
	}
	return out
}

// toolInfo returns the tool name of agent as it offers it with set.
func (s *Service) toolInfo(agent, name string, set Settings) (ToolInfo, bool) {
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
// they were.
func applyToolPolicies(set *Settings, in map[string]ToolPolicy) error {
	if len(in) == 0 {
		return nil
	}
	merged := maps.Clone(set.ToolPolicies)
	if merged == nil {
		merged = map[string]ToolPolicy{}
	}
	for name, p := range in {
		switch {
		case strings.TrimSpace(name) == "" || len(name) > maxToolName:
			return Errorf(EINVALID, "a tool policy needs a tool name of 1 to %d bytes", maxToolName)
		case !p.Valid():
			return Errorf(EINVALID, "the policy of %q is not ALLOW, ASK or DENY", truncate(name, 40))
		}
		merged[name] = p
	}
	if len(merged) > maxToolPolicies {
		return Errorf(EINVALID, "a session may set at most %d tool policies", maxToolPolicies)
	}
	set.ToolPolicies = merged
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
