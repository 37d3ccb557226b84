package mcp

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The outcomes of a call, as talkgraph_mcp_calls_total counts them.
const (
	outcomeOK          = "ok"                // the tool returned a result
	outcomeError       = "error"             // the tool (or the server) said the call failed
	outcomeInvalid     = "invalid_arguments" // refused before it went out: not the tool's schema
	outcomeUnavailable = "unavailable"       // the server was not up
	outcomeFailed      = "failed"            // the connection failed under the call
	outcomeTimeout     = "timeout"           // longer than Limits.CallTimeout
	outcomeCancelled   = "cancelled"         // the run was stopped
)

// otherTool counts the calls of tools beyond the first Limits.MaxTools names a server
// listed (its tools changed), so that the metric's series stay bounded.
const otherTool = "other"

type callKey struct{ tool, outcome string }

// count adds a call of the tool name with outcome.
func (s *server) count(name, outcome string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.labels[name] {
		name = otherTool
	}
	s.calls[callKey{name, outcome}]++
}

var (
	descState = prometheus.NewDesc("talkgraph_mcp_server_state",
		"Each configured MCP server's state: 1 for the one it is in (starting, up, restarting, failed), 0 for the others.",
		[]string{"server", "state"}, nil)
	descTools = prometheus.NewDesc("talkgraph_mcp_server_tools",
		"Tools each MCP server offers now (none unless it is up).", []string{"server"}, nil)
	descRestarts = prometheus.NewDesc("talkgraph_mcp_server_restarts_total",
		"Times each MCP server was started again after a failed start or its death.", []string{"server"}, nil)
	descCalls = prometheus.NewDesc("talkgraph_mcp_calls_total",
		"Calls of MCP tools by server, tool and outcome (ok, error, invalid_arguments, unavailable, failed, timeout, cancelled).",
		[]string{"server", "tool", "outcome"}, nil)
)

// Describe is prometheus.Collector's.
func (m *Manager) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descTools, descRestarts, descCalls} {
		ch <- d
	}
}

// Collect is prometheus.Collector's. Its label values are the configured servers' names,
// the names of the tools they listed (at most Limits.MaxTools a server, the rest
// "other"), and fixed words.
func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.servers {
		name := s.cfg.Name
		s.mu.Lock()
		state, tools, restarts := s.state, len(s.tools), s.restarts
		calls := make(map[callKey]int64, len(s.calls))
		for k, v := range s.calls {
			calls[k] = v
		}
		s.mu.Unlock()
		for _, st := range States {
			v := 0.0
			if st == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, name, string(st))
		}
		ch <- prometheus.MustNewConstMetric(descTools, prometheus.GaugeValue, float64(tools), name)
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(restarts), name)
		for k, v := range calls {
			ch <- prometheus.MustNewConstMetric(descCalls, prometheus.CounterValue, float64(v), name, k.tool, k.outcome)
		}
	}
}
