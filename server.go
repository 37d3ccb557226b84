// Command talkgraph serves talk sessions with AI agents over GraphQL: HTTP, websocket
// (graphql-transport-ws and graphql-ws) and server-sent events on /query, and the chat app
// at /. `go run .` starts it with embedded defaults: an SQLite file under ./data, the demo
// agent, guest sign-in.
//
// This file only wires: it reads the configuration and runs the app (package app) until
// SIGINT or SIGTERM, then shuts down gracefully.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/talkgraph/talkgraph/app"
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
	cfg, err := app.LoadConfig(args, getenv)
	if err != nil {
		return err
	}
	a, err := app.Open(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	return a.ListenAndServe(ctx)
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
