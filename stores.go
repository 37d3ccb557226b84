package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// openStore opens the store DATABASE_URL names.
func openStore(ctx context.Context, c Config) (service.Store, error) {
	switch {
	case c.DatabaseURL == "memory:" || c.DatabaseURL == "memory://":
		return inmem.New(), nil
	case strings.HasPrefix(c.DatabaseURL, "sqlite:"):
		return nil, fmt.Errorf("sqlite is not wired yet")
	}
	return nil, fmt.Errorf("DATABASE_URL %q: unsupported scheme (use sqlite:///path or memory:)", c.redactedDatabaseURL())
}
