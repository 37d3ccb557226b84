// Command embed runs talkgraph with an agent of its own, the way a Go program embeds the
// server: `go run ./examples/embed`, then create a session with settings {agent: "shout"}.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/service"
)

// shout repeats the user's last message, in capitals if the user agrees.
func shout(ctx context.Context, req service.RunRequest, out service.Output) error {
	var text, answer string
	answered := false
	for _, m := range req.History {
		switch {
		case m.Role == service.RoleUser && m.Kind == service.KindText:
			text, answered = m.Content, false
		case m.Kind == service.KindAnswer:
			answer, answered = m.Content, true
		}
	}
	if !answered { // after a restart the answer may already be in the history
		var err error
		if answer, err = out.Ask(ctx, "Shall I shout it?", []string{"yes", "no"}); err != nil {
			return err
		}
	}
	if answer == "yes" {
		text = strings.ToUpper(text)
	}
	return out.Text(text)
}

func main() {
	ctx, stop := app.SignalContext() // SIGINT or SIGTERM: shut down gracefully
	defer stop()
	err := app.Run(ctx, os.Args[1:], os.Getenv, os.Stderr, func(cfg *app.Config) {
		cfg.Agents = func(a *service.Agents) {
			a.Register("shout", "Repeats you, in capitals if you agree", service.RunnerFunc(shout))
		}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
