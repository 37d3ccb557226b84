// Package mcp runs the MCP servers an operator configures (MCP_CONFIG) and offers their
// tools to the openai agent: servers talkgraph starts and speaks to over stdio, started
// again with backoff when they die and stopped with talkgraph, and servers reached over
// streamable HTTP. It adapts the official Go SDK (github.com/modelcontextprotocol/go-sdk)
// as a client.
//
// A server's tools are listed once it is up (start-up does not wait for a slow server),
// each named mcp__<server>__<tool>; a server that is down has none, and one that never
// comes up is logged and given up, while the others work on. Calls are checked against
// the tool's input schema before they go out, run under the run's context (a stop cancels
// them, and the server is told), stream the server's progress notifications as the
// call's output, and return text for the model. Each server's state and every call's
// outcome are metrics (Manager is a prometheus.Collector) and each change of state a log
// line.
//
// What does not live here: which calls need a person's approval (the service's tool
// policies; this package gives each tool its default from its annotations), and the
// model's side of a call (the openai agent).
package mcp

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// State is where a server stands.
type State string

// A server is starting until its first start succeeds or fails; up while its tools are
// offered; restarting between a failure (or its death) and its next start; failed once
// given up (it never came up in Limits.StartAttempts starts).
const (
	StateStarting   State = "starting"
	StateUp         State = "up"
	StateRestarting State = "restarting"
	StateFailed     State = "failed"
)

// States lists every state, as the metrics show them.
var States = []State{StateStarting, StateUp, StateRestarting, StateFailed}

// Options configure a Manager.
type Options struct {
	Limits Limits
	Log    *slog.Logger
	// Version is talkgraph's, as servers are told it.
	Version string
}

// Manager runs the servers of a configuration and lists their tools. Its methods are
// safe for concurrent use.
type Manager struct {
	limits  Limits
	log     *slog.Logger
	version string
	servers []*server
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	changed chan struct{}
	started bool
}

// New returns a Manager of servers; nothing starts before Start. Zero limits take their
// defaults (DefaultLimits).
func New(servers []ServerConfig, opts Options) *Manager {
	opts.Limits.fill()
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{limits: opts.Limits, log: opts.Log, version: opts.Version, ctx: ctx, cancel: cancel, changed: make(chan struct{})}
	for _, cfg := range servers {
		m.servers = append(m.servers, newServer(m, cfg))
	}
	return m
}

func (l *Limits) fill() {
	d := DefaultLimits()
	if l.MaxServers <= 0 {
		l.MaxServers = d.MaxServers
	}
	if l.MaxTools <= 0 {
		l.MaxTools = d.MaxTools
	}
	if l.MaxResultBytes <= 0 {
		l.MaxResultBytes = d.MaxResultBytes
	}
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = d.MaxMessageBytes
	}
	if l.CallTimeout <= 0 {
		l.CallTimeout = d.CallTimeout
	}
	if l.StartTimeout <= 0 {
		l.StartTimeout = d.StartTimeout
	}
	if l.StartAttempts <= 0 {
		l.StartAttempts = d.StartAttempts
	}
}

// Start starts every server, each on a goroutine of its own, and returns at once.
func (m *Manager) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.ctx.Err() != nil {
		return
	}
	m.started = true
	for _, s := range m.servers {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			s.run(m.ctx)
		}()
	}
}

// Close stops every server and returns once they are stopped: a stdio server's stdin is
// closed, and its process group gets SIGTERM, then SIGKILL, if it has not exited within a
// second of each; calls still under way end. It takes at most a few seconds.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// Tools lists the tools of every server that is up, by server (in the configuration's
// order of names), each server's in the order it lists them.
func (m *Manager) Tools() []*Tool {
	var out []*Tool
	for _, s := range m.servers {
		out = append(out, s.currentTools()...)
	}
	return out
}

// States returns each server's state, by name.
func (m *Manager) States() map[string]State {
	out := make(map[string]State, len(m.servers))
	for _, s := range m.servers {
		out[s.cfg.Name] = s.State()
	}
	return out
}

// Changed returns a channel closed at the next change of a server's state or tools:
// for a caller that waits for a server to be up, without polling.
func (m *Manager) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *Manager) notify() {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.changed)
	m.changed = make(chan struct{})
}

// Backoff between two starts of a server: from restartDelay, doubling up to
// maxRestartDelay; a server that stayed up longer than maxRestartDelay starts again at
// restartDelay.
const (
	restartDelay    = 500 * time.Millisecond
	maxRestartDelay = 30 * time.Second
)

func backoff(restarts int) time.Duration {
	if restarts > 10 {
		return maxRestartDelay
	}
	return min(restartDelay<<restarts, maxRestartDelay)
}
