package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Run is the whole server as a program runs it: it reads the configuration from args and
// getenv (see Settings), lets configure adjust it (a program that embeds talkgraph adds its
// agents there; nil for none), opens the App and serves until ctx ends, then shuts down
// gracefully. Logs go to logOut.
func Run(ctx context.Context, args []string, getenv func(string) string, logOut io.Writer, configure func(*Config)) error {
	for _, a := range args {
		if a == "-version" || a == "--version" {
			_, err := fmt.Fprintln(logOut, Build())
			return err
		}
	}
	cfg, err := LoadConfig(args, getenv)
	if err != nil {
		return err
	}
	if configure != nil {
		configure(&cfg)
	}
	a, err := Open(ctx, cfg, logOut)
	if err != nil {
		return err
	}
	return a.ListenAndServe(ctx)
}

// SignalContext returns a context that ends on SIGINT (Ctrl-C) or SIGTERM (what process
// managers and container runtimes send), which is when a server should shut down
// gracefully.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
