// Package app assembles a talkgraph server from a Config: the store DATABASE_URL names, the
// service, the agents, and the HTTP handler with its transports. The talkgraph command is a
// thin main around it; a Go program that embeds talkgraph uses it the same way, adding its
// own agents (Config.Agents) and tools for the openai agent (Config.OpenAI.Tools):
//
//	cfg, err := app.LoadConfig(os.Args[1:], os.Getenv)
//	cfg.Agents = func(a *service.Agents) { a.Register("mine", "My agent", myRunner) }
//	a, err := app.Open(ctx, cfg, os.Stderr)
//	err = a.ListenAndServe(ctx) // until ctx ends, then a graceful shutdown
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/talkgraph/talkgraph/httpapi"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/mcp"
	natsc "github.com/talkgraph/talkgraph/service/nats"
	"github.com/talkgraph/talkgraph/service/webhook"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// App is a running talkgraph: the store, the service and the HTTP server.
type App struct {
	Config  Config
	Log     *slog.Logger
	Store   service.Store
	Service *service.Service
	Handler *httpapi.Server
	// MCP runs the MCP servers of the configuration (nil when there are none, or no
	// openai agent to use their tools).
	MCP *mcp.Manager

	http     *http.Server
	cancelFn context.CancelFunc
	cluster  *natsc.Cluster
	traces   *sdktrace.TracerProvider // the exporter's, when the settings asked for one
}

// Open builds an App from cfg: it opens the store (running migrations), recovers runs
// left by a previous process, and prepares the HTTP handler. Logs go to logOut.
func Open(ctx context.Context, cfg Config, logOut io.Writer) (*App, error) {
	log := newLogger(cfg, logOut)
	servers, err := cfg.MCP.servers() // a malformed MCP_CONFIG stops start-up before anything opens
	if err != nil {
		return nil, err
	}
	tp, traces, err := tracing(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	store, err := openStore(ctx, cfg)
	if err != nil {
		shutdownTraces(traces)
		return nil, fmt.Errorf("open store: %w", err)
	}
	auth, guest, err := buildAuth(ctx, cfg, store, log)
	if err != nil {
		store.Close()
		shutdownTraces(traces)
		return nil, err
	}
	var tools *mcp.Manager
	switch {
	case len(servers) == 0:
	case cfg.OpenAI.BaseURL == "" && cfg.OpenAI.APIKey == "":
		log.Warn("MCP_CONFIG names MCP servers, but the openai agent that would use their tools is not configured (OPENAI_BASE_URL or OPENAI_API_KEY): they are not started")
	default:
		tools = mcp.New(servers, mcp.Options{Limits: cfg.MCP.Limits, Log: log, Version: Build().Version})
	}
	agents, err := buildAgents(cfg, tools)
	if err != nil {
		store.Close()
		shutdownTraces(traces)
		return nil, err
	}
	if tools != nil {
		tools.Start() // start-up does not wait for the servers
	}
	if cfg.Service.GuestHostTools && cfg.OpenAI.Shell && guest {
		log.Warn(service.GuestHostToolsWarning)
	}
	scfg := cfg.Service
	var cluster *natsc.Cluster
	if cfg.NatsURL != "" {
		if scfg.ReplicaID == "" {
			scfg.ReplicaID = defaultReplicaID(cfg.Addr)
		}
		cfg.Service.ReplicaID = scfg.ReplicaID
		secret, err := busSecret(ctx, cfg, store)
		if err != nil {
			if tools != nil {
				tools.Close()
			}
			store.Close()
			shutdownTraces(traces)
			return nil, fmt.Errorf("the bus secret: %w", err)
		}
		n := cfg.Nats
		// The database the replicas share remembers the commands they took, so that one
		// replayed after a replica restarted is not done again.
		replays, _ := store.(service.ReplayGuard)
		if cluster, err = natsc.Connect(cfg.NatsURL, natsc.Options{Name: scfg.ReplicaID, Log: log, Secret: secret, Replays: replays,
			CredsFile: n.Creds, NKeyFile: n.NKey, CAFile: n.CA, CertFile: n.TLSCert, KeyFile: n.TLSKey}); err != nil {
			if tools != nil {
				tools.Close()
			}
			store.Close()
			shutdownTraces(traces)
			return nil, fmt.Errorf("NATS_URL: %w", err)
		}
		scfg.Cluster = cluster
	}
	scfg.Tracing = tp
	scfg.Models = cfg.meteredModels()
	if scfg.Hooks == nil {
		scfg.Hooks = webhook.New(cfg.Webhooks)
	}
	svc, err := service.New(ctx, store, agents, scfg, log)
	if err != nil {
		if tools != nil {
			tools.Close()
		}
		if cluster != nil {
			cluster.Close()
		}
		store.Close()
		shutdownTraces(traces)
		return nil, fmt.Errorf("start service: %w", err)
	}
	hcfg := cfg.HTTP
	hcfg.Auth = auth
	hcfg.GuestSignIn = guest
	hcfg.Log = log
	hcfg.Web = webFiles()
	b := Build()
	hcfg.Build = map[string]string{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion}
	hcfg.Tracing = tp
	if tools != nil {
		hcfg.Collectors = append(hcfg.Collectors, tools)
	}
	h := httpapi.New(svc, hcfg)
	base, cancel := context.WithCancel(context.Background())
	go releaseMemory(base, log, svc, svc.Sweep, h.Sweep)
	a := &App{Config: cfg, Log: log, Store: store, Service: svc, Handler: h, MCP: tools, cancelFn: cancel, cluster: cluster, traces: traces}
	a.http = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return a, nil
}

// buildAuth makes the token verifier. With AUTH_JWKS_URL it loads the identity provider's
// keys; a provider out of reach is only a warning, tokens being refused until its keys
// arrive. HS256 tokens (and so guest sign-in) then need AUTH_SECRET as well; without
// AUTH_JWKS_URL they use AUTH_SECRET or the secret kept with the data.
func buildAuth(ctx context.Context, cfg Config, store service.Store, log *slog.Logger) (a *jwtauth.Auth, guest bool, err error) {
	a = &jwtauth.Auth{Issuer: cfg.AuthIssuer, Audience: cfg.AuthAudience, TokenTTL: cfg.TokenTTL, Leeway: 30 * time.Second}
	guest = cfg.GuestSignIn
	if cfg.AuthJWKSURL == "" || cfg.AuthSecret != "" {
		secret, err := authSecret(ctx, cfg, store)
		if err != nil {
			return nil, false, err
		}
		a.Secret = secret
	} else if guest {
		guest = false
		log.Info("guest sign-in is off: with AUTH_JWKS_URL it needs AUTH_SECRET too")
	}
	if cfg.AuthJWKSURL != "" {
		a.JWKS = &jwtauth.JWKS{URL: cfg.AuthJWKSURL, Refresh: cfg.AuthJWKSRefresh, Log: log}
		if err := a.JWKS.Load(ctx); err != nil {
			log.Warn("cannot load the identity provider's keys; its tokens are refused until they arrive", "err", err)
		}
	}
	return a, guest, nil
}

// Serve serves HTTP on ln until Close.
func (a *App) Serve(ln net.Listener) error {
	err := a.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ListenAndServe listens on the configured address and serves until ctx ends, then shuts
// down gracefully within the configured timeout.
func (a *App) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.Config.Addr)
	if err != nil {
		a.Close(context.Background())
		return err
	}
	var agents []string
	for _, ag := range a.Service.Agents(ctx) {
		agents = append(agents, ag.Name)
	}
	var servers []string
	if a.MCP != nil {
		for name := range a.MCP.States() {
			servers = append(servers, name)
		}
		slices.Sort(servers)
	}
	a.Log.Info("talkgraph listening: open "+browseURL(ln.Addr()),
		"addr", ln.Addr().String(), "store", a.Config.RedactedDatabaseURL(), "agents", strings.Join(agents, ","), "mcp_servers", strings.Join(servers, ","),
		"replica", a.Config.Service.ReplicaID, "traces", a.Config.Traces.Where(), "version", Build().String())
	if a.Config.PprofAddr != "" {
		// Bound before the API serves: once /readyz answers, so does the profiler.
		if pln, err := net.Listen("tcp", a.Config.PprofAddr); err != nil {
			a.Log.Warn("profiler", "err", err)
		} else {
			go a.servePprof(pln)
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- a.Serve(ln) }()
	select {
	case err := <-errc:
		a.Close(context.Background())
		return err
	case <-ctx.Done():
	}
	a.Log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
	defer cancel()
	a.Close(sctx)
	return nil
}

// Close shuts down gracefully within ctx: the service stops accepting work and ends
// running runs INTERRUPTED (keeping partial replies; waiting runs stay waiting),
// subscriptions deliver their last events, open websockets and streams are closed,
// in-flight requests finish, and the store is closed.
func (a *App) Close(ctx context.Context) {
	a.Service.Close()
	mcpStopped := make(chan struct{})
	go func() { // the runs are over: their calls ended with them
		defer close(mcpStopped)
		if a.MCP != nil {
			a.MCP.Close()
			a.Log.Info("mcp servers stopped")
		}
	}()
	a.Handler.Drain(ctx) // websockets deliver their last events, then close with 1001
	a.cancelFn()         // ends every request context: server-sent events end without complete
	if err := a.http.Shutdown(ctx); err != nil {
		a.Log.Warn("http shutdown", "err", err)
		_ = a.http.Close()
	}
	if a.cluster != nil {
		a.cluster.Close()
	}
	select {
	case <-mcpStopped:
	case <-ctx.Done():
		a.Log.Warn("mcp servers: not all stopped within the shutdown timeout")
	}
	if err := a.Store.Close(); err != nil {
		a.Log.Warn("store close", "err", err)
	}
	if a.traces != nil {
		if err := shutdownTraces(a.traces); err != nil {
			a.Log.Warn("traces: the last spans were not sent", "err", err)
		}
	}
}

// shutdownTraces sends the spans not sent yet, for at most two seconds: a collector out of
// reach does not hold up the shutdown.
func shutdownTraces(tp *sdktrace.TracerProvider) error {
	if tp == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return tp.Shutdown(ctx)
}

// browseURL is the address a person opens in a browser for a server listening on addr.
func browseURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// defaultReplicaID names a replica after its host and port, so that a replica restarted
// in the same place takes its own runs back at once.
func defaultReplicaID(addr string) string {
	host, _ := os.Hostname()
	_, port, _ := net.SplitHostPort(addr)
	return host + ":" + port
}

// servePprof serves Go's profiler (CPU, heap, goroutines) on ln, apart from the API: for
// the operator measuring a load run, never to be exposed. Its command line leaves out the
// secrets given as flags (see RedactArgs).
func (a *App) servePprof(ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, r *http.Request) {
		// Like pprof.Cmdline, but the values of secret settings given as flags are left out.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, strings.Join(RedactArgs(os.Args), "\x00"))
	})
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	a.Log.Info("profiler listening", "addr", ln.Addr().String())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		a.Log.Warn("profiler", "err", err)
	}
}

func newLogger(cfg Config, out io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(out, opts))
	}
	return slog.New(slog.NewJSONHandler(out, opts))
}
