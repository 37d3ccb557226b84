// Command talkgraph serves talk sessions with AI agents over GraphQL: HTTP, websocket
// (graphql-transport-ws and graphql-ws) and server-sent events on /query. `go run .` starts
// it with embedded defaults: an SQLite file under ./data, the demo agent, guest sign-in.
//
// This file only wires: configuration, the store, the service, the agents, the HTTP
// handler, graceful shutdown.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/service"
)

func main() {
	ctx, stop := signalContext()
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "talkgraph:", err)
		os.Exit(1)
	}
}

// run starts the server and serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := loadConfig(args, getenv)
	if err != nil {
		return err
	}
	app, err := Open(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		app.Close(context.Background())
		return err
	}
	app.Log.Info("talkgraph listening", "addr", ln.Addr().String(), "store", cfg.redactedDatabaseURL(), "agents", len(app.Service.Agents()))
	errc := make(chan error, 1)
	go func() { errc <- app.Serve(ln) }()
	select {
	case err := <-errc:
		app.Close(context.Background())
		return err
	case <-ctx.Done():
	}
	app.Log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	app.Close(sctx)
	return nil
}

// App is a running talkgraph: the store, the service and the HTTP server. Tests build
// one with Open and talk to it over a real listener.
type App struct {
	Config  Config
	Log     *slog.Logger
	Store   service.Store
	Service *service.Service
	Handler *graph.Server

	http     *http.Server
	baseCtx  context.Context
	cancelFn context.CancelFunc
}

// Open builds an App from cfg: it opens the store (running migrations), recovers runs
// left by a previous process, and prepares the HTTP handler.
func Open(ctx context.Context, cfg Config, logOut io.Writer) (*App, error) {
	log := newLogger(cfg, logOut)
	store, err := openStore(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	secret, err := authSecret(ctx, cfg, store)
	if err != nil {
		store.Close()
		return nil, err
	}
	agents, err := buildAgents(cfg)
	if err != nil {
		store.Close()
		return nil, err
	}
	svc, err := service.New(ctx, store, agents, cfg.Service, log)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("start service: %w", err)
	}
	hcfg := cfg.HTTP
	hcfg.Auth = &graph.Auth{Secret: secret, Issuer: cfg.AuthIssuer, Audience: cfg.AuthAudience, TokenTTL: cfg.TokenTTL, Guest: cfg.GuestSignIn, Leeway: 30 * time.Second}
	hcfg.Log = log
	hcfg.Web = webFiles()
	h := graph.New(svc, hcfg)
	base, cancel := context.WithCancel(context.Background())
	app := &App{Config: cfg, Log: log, Store: store, Service: svc, Handler: h, baseCtx: base, cancelFn: cancel}
	app.http = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return app, nil
}

// Serve serves HTTP on ln until Close.
func (a *App) Serve(ln net.Listener) error {
	err := a.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close shuts down gracefully within ctx: the service stops accepting work and ends
// running runs INTERRUPTED (keeping partial replies; waiting runs stay waiting), open
// websockets and streams are closed, in-flight requests finish, and the store is closed.
func (a *App) Close(ctx context.Context) {
	a.Service.Close()
	a.Handler.Drain(ctx)
	a.cancelFn() // ends every request context, hijacked websockets included
	a.Handler.CloseWebsockets()
	if err := a.http.Shutdown(ctx); err != nil {
		a.Log.Warn("http shutdown", "err", err)
		_ = a.http.Close()
	}
	if err := a.Store.Close(); err != nil {
		a.Log.Warn("store close", "err", err)
	}
}

func newLogger(cfg Config, out io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(out, opts))
	}
	return slog.New(slog.NewJSONHandler(out, opts))
}
