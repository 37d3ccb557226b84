package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// server is one configured server: its supervisor (run), its connection while it is up,
// its tools, the progress of its calls and its counters.
type server struct {
	m      *Manager
	cfg    ServerConfig
	log    *slog.Logger
	client *sdk.Client
	http   *http.Client  // for a server reached by URL
	relist chan struct{} // the server said its tools changed

	mu       sync.Mutex
	state    State
	conn     *conn // while up
	tools    []*Tool
	progress map[string]*progress
	tokens   int64
	calls    map[callKey]int64
	labels   map[string]bool // the tool names counted by name; the rest are "other"
	restarts int64
	netErr   error // a server reached by URL: the last request of this connection that got no answer
}

// conn is one connection to a server: a session, and for a stdio server its process.
type conn struct {
	cs   *sdk.ClientSession
	proc *process
	// ctx ends when the connection is closed: the calls made on it end then. Its cause
	// says why, in words for the model and the user (see cause.go).
	ctx    context.Context
	cancel context.CancelCauseFunc
	// broke is closed when a call found the connection broken; brokeErr says how.
	broke     chan struct{}
	brokeOnce sync.Once
	brokeErr  error

	// The first read or write of a stdio connection that failed (see notedConn).
	failMu     sync.Mutex
	failure    error
	readFailed bool
}

// broken tells the supervisor that a call found the connection broken, with err.
func (c *conn) broken(err error) {
	c.brokeOnce.Do(func() {
		c.brokeErr = err
		close(c.broke)
	})
}

// close ends the connection, for cause: the calls on it, the process, the session.
// Closing a session waits for the calls on it, which are cancelled first; over HTTP it
// also tells the server, which is given a moment at most.
func (c *conn) close(cause error) {
	c.cancel(cause)
	if c.proc != nil {
		c.proc.stop()
	}
	done := make(chan struct{})
	go func() {
		_ = c.cs.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopGrace):
	}
}

func newServer(m *Manager, cfg ServerConfig) *server {
	s := &server{m: m, cfg: cfg, log: m.log.With("mcp_server", cfg.Name), relist: make(chan struct{}, 1),
		state: StateStarting, progress: map[string]*progress{}, calls: map[callKey]int64{}, labels: map[string]bool{}}
	s.client = sdk.NewClient(&sdk.Implementation{Name: "talkgraph", Version: m.version}, &sdk.ClientOptions{
		// No roots, sampling or elicitation: a server offers tools, and talkgraph calls them.
		// (A filesystem server that is told of roots would take them for its directories.)
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case s.relist <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: s.onProgress,
		Logger:                      s.log,
	})
	if !cfg.Stdio() {
		s.http = httpClient(cfg, int64(m.limits.MaxMessageBytes), s.noteNet)
	}
	return s
}

// State returns where the server stands.
func (s *server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *server) current() *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

func (s *server) currentTools() []*Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools
}

// setState moves the server to st, and logs it: one line per change, saying why.
func (s *server) setState(st State, err error, attrs ...any) {
	s.mu.Lock()
	prev := s.state
	s.state = st
	if st != StateUp {
		s.conn, s.tools = nil, nil
	}
	if st == StateRestarting {
		s.restarts++
	}
	s.mu.Unlock()
	args := []any{"state", string(st)}
	if prev != st {
		args = append(args, "was", string(prev))
	}
	args = append(args, attrs...)
	if err != nil {
		args = append(args, "err", err.Error())
	}
	switch st {
	case StateRestarting:
		s.log.Warn("mcp server restarting", args...)
	case StateFailed:
		s.log.Error("mcp server failed: its tools are left out until talkgraph starts again", args...)
	default:
		s.log.Info("mcp server "+string(st), args...)
	}
	s.m.notify()
}

// setUp marks the server up on c with tools.
func (s *server) setUp(c *conn, tools []*Tool) {
	s.mu.Lock()
	s.conn = c
	s.mu.Unlock()
	s.setTools(tools)
	attrs := []any{"tools", len(tools), "transport", s.transport()}
	if c.proc != nil {
		attrs = append(attrs, "pid", c.proc.cmd.Process.Pid)
	}
	s.setState(StateUp, nil, attrs...)
}

func (s *server) setTools(tools []*Tool) {
	s.mu.Lock()
	s.tools = tools
	for _, t := range tools {
		if len(s.labels) < s.m.limits.MaxTools {
			s.labels[t.name] = true
		}
	}
	s.mu.Unlock()
	s.m.notify()
}

func (s *server) transport() string {
	if s.cfg.Stdio() {
		return "stdio"
	}
	return "http"
}

// run starts the server and starts it again whenever it dies, with backoff, until ctx
// ends; a server that never came up is given up after Limits.StartAttempts failed starts.
func (s *server) run(ctx context.Context) {
	s.setState(StateStarting, nil, "transport", s.transport())
	failures, restarts, everUp := 0, 0, false
	for {
		c, tools, err := s.connect(ctx)
		if ctx.Err() != nil {
			if c != nil {
				c.close(errShutdown)
			}
			return
		}
		if err == nil {
			everUp, failures = true, 0
			began := time.Now()
			err = s.serve(ctx, c, tools)
			if ctx.Err() != nil {
				return
			}
			if time.Since(began) > maxRestartDelay {
				restarts = 0
			}
		} else if failures++; !everUp && failures >= s.m.limits.StartAttempts {
			s.setState(StateFailed, err, "attempts", failures)
			return
		}
		delay := backoff(restarts)
		restarts++
		s.setState(StateRestarting, err, "in", delay.String())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// connect starts the server (or reaches it), makes the MCP handshake and lists its tools,
// within Limits.StartTimeout.
func (s *server) connect(ctx context.Context) (*conn, []*Tool, error) {
	sctx, cancel := context.WithTimeout(ctx, s.m.limits.StartTimeout)
	defer cancel()
	c := &conn{broke: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	var transport sdk.Transport
	if s.cfg.Stdio() {
		proc, err := startProcess(s.cfg, s.log)
		if err != nil {
			c.cancel(err)
			return nil, nil, fmt.Errorf("could not start %s: %w", s.cfg.Command, err)
		}
		c.proc = proc
		// The length of a line is bounded by lineReader, whose error says so, not by the SDK.
		stdout := &lineReader{r: proc.stdout, max: s.m.limits.MaxMessageBytes}
		transport = &stdioTransport{IOTransport: sdk.IOTransport{Reader: stdout, Writer: proc.stdin, MaxLineLength: -1}, c: c}
	} else {
		s.noteNet(nil) // what failed before is not this connection's
		transport = &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.http, MaxEventSize: s.m.limits.MaxMessageBytes}
	}
	fail := func(err error) (*conn, []*Tool, error) {
		if sctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s (MCP_START_TIMEOUT): %w", s.m.limits.StartTimeout, err)
		}
		if c.proc != nil {
			c.proc.stop()
			if said := c.proc.stderr.last(); said != "" {
				err = fmt.Errorf("%w; its stderr said: %s", err, said)
			}
		}
		if c.cs != nil {
			c.close(err)
		}
		c.cancel(err)
		return nil, nil, err
	}
	cs, err := s.client.Connect(sctx, transport, nil)
	if err != nil {
		return fail(fmt.Errorf("the MCP handshake failed: %w", err))
	}
	c.cs = cs
	tools, err := s.list(sctx, cs)
	if err != nil {
		return fail(fmt.Errorf("listing its tools failed: %w", err))
	}
	return c, tools, nil
}

// serve keeps the server up on c until the connection ends (the process exited, the
// session broke off, a call found it broken) or ctx ends, and lists the tools again when
// the server says they changed. It returns why the connection ended: the cause the calls
// on it report (see cause.go), and for the log the last lines the server wrote to stderr.
func (s *server) serve(ctx context.Context, c *conn, tools []*Tool) error {
	s.setUp(c, tools)
	ended := make(chan error, 1)
	done := make(chan struct{}) // closed once the session has ended
	go func() {
		ended <- c.cs.Wait()
		close(done)
	}()
	var exited <-chan struct{}
	if c.proc != nil {
		exited = c.proc.exited
	}
	down := func(cause error) error {
		s.mu.Lock()
		s.conn, s.tools = nil, nil
		s.mu.Unlock()
		c.close(cause)
		if c.proc != nil {
			if said := c.proc.stderr.last(); said != "" {
				return fmt.Errorf("%w; its stderr said: %s", cause, said)
			}
		}
		return cause
	}
	for {
		select {
		case <-ctx.Done():
			down(errShutdown)
			return nil
		case err := <-ended:
			if c.proc != nil {
				return down(c.stdioCause(done))
			}
			return down(s.httpCause(err))
		case <-exited:
			return down(c.stdioCause(done))
		case <-c.broke:
			if c.proc != nil {
				return down(c.stdioCause(done))
			}
			err := c.brokeErr
			if errors.Is(err, sdk.ErrConnectionClosed) {
				// The session is ending: its own error says why better than the call's.
				select {
				case err = <-ended:
				case <-time.After(stopGrace):
				}
			}
			return down(s.httpCause(err))
		case <-s.relist:
			lctx, cancel := context.WithTimeout(ctx, s.m.limits.StartTimeout)
			tools, err := s.list(lctx, c.cs)
			cancel()
			if err != nil {
				s.log.Warn("mcp server's tools changed, and listing them again failed: the old ones stay", "err", err)
				continue
			}
			s.setTools(tools)
			s.log.Info("mcp server's tools changed", "tools", len(tools))
		}
	}
}

// list lists the server's tools: at most Limits.MaxTools, each of a name, description
// and schema talkgraph can offer (the others are left out, and logged).
func (s *server) list(ctx context.Context, cs *sdk.ClientSession) ([]*Tool, error) {
	var out []*Tool
	seen := map[string]bool{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if len(out) == s.m.limits.MaxTools {
			s.log.Warn("mcp server lists more tools than MCP_MAX_TOOLS: the rest are left out", "max", s.m.limits.MaxTools)
			break
		}
		tool, err := s.newTool(t)
		if err == nil && seen[tool.full] {
			err = errors.New("the server lists it twice")
		}
		if err != nil {
			s.log.Warn("mcp tool left out", "tool", cut(t.Name, 100), "why", err.Error())
			continue
		}
		seen[tool.full] = true
		out = append(out, tool)
	}
	return out, nil
}

// track starts following the progress of a call, which goes to out.
func (s *server) track(out Output) *progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens++
	p := &progress{token: fmt.Sprintf("talkgraph-%d", s.tokens), out: out}
	s.progress[p.token] = p
	return p
}

func (s *server) untrack(p *progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.progress, p.token)
}

// onProgress writes a progress notification to its call's output, up to the result's
// limit; one for no call under way (it ended) is dropped.
func (s *server) onProgress(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	token, _ := req.Params.ProgressToken.(string)
	s.mu.Lock()
	p := s.progress[token]
	s.mu.Unlock()
	if p == nil {
		return
	}
	line := progressLine(req.Params)
	p.mu.Lock() // in order, and never under s.mu: Output takes the service's locks
	defer p.mu.Unlock()
	if p.cut {
		return
	}
	if max := s.m.limits.MaxResultBytes; p.written+len(line) > max {
		p.cut, line = true, fmt.Sprintf("[progress cut at %d bytes]\n", max)
	}
	p.written += len(line)
	_ = p.out.Output(line)
}

// noteNet notes err, a request to a server reached by URL that got no answer (nil to
// forget it), for httpCause.
func (s *server) noteNet(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.netErr = err
}

func (s *server) lastNetErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.netErr
}

// httpClient is the HTTP client of a server reached by URL: it sends the configured
// headers to the server's origin only, follows redirects within it, refuses a response
// that is not an event stream and holds more than max bytes, and gives note the error of
// a request that got no answer (the server cannot be reached).
func httpClient(cfg ServerConfig, max int64, note func(error)) *http.Client {
	u, _ := url.Parse(cfg.URL)
	home := origin(u)
	base := http.DefaultTransport.(*http.Transport).Clone()
	return &http.Client{
		Transport: &headerTransport{base: base, origin: home, headers: cfg.Headers, max: max, note: note},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if origin(req.URL) != home {
				return errors.New("the MCP server redirected to another origin")
			}
			if len(via) >= 5 {
				return errors.New("the MCP server redirected too often")
			}
			return nil
		},
	}
}

func origin(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

type headerTransport struct {
	base    http.RoundTripper
	origin  string
	headers map[string]string
	max     int64
	note    func(error)
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 && origin(r.URL) == t.origin {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	res, err := t.base.RoundTrip(r)
	if err != nil && r.Context().Err() == nil {
		t.note(err)
	}
	if err == nil && !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		res.Body = &limitedBody{ReadCloser: res.Body, left: t.max}
	}
	return res, err
}

// limitedBody fails a response body once it goes past its limit.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errors.New("the MCP server's response is larger than MCP_MAX_MESSAGE_BYTES")
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errors.New("the MCP server's response is larger than MCP_MAX_MESSAGE_BYTES")
	}
	return n, err
}
