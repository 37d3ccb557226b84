// Command talkgraph serves talk sessions with AI agents over GraphQL: HTTP, websocket
// (graphql-transport-ws and graphql-ws) and server-sent events on /query, and the chat app
// at /. `go run .` starts it with embedded defaults: an SQLite file under ./data, the demo
// agent, guest sign-in.
//
// This file only wires: package app reads the configuration and serves until SIGINT or
// SIGTERM, then shuts down gracefully.
package main

import (
	"fmt"
	"os"

	"github.com/talkgraph/talkgraph/app"
)

func main() {
	ctx, stop := app.SignalContext()
	defer stop()
	if err := app.Run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "talkgraph:", err)
		os.Exit(1)
	}
}
