package app

import (
	"context"
	"fmt"
	"strings"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
	"github.com/talkgraph/talkgraph/service/postgres"
	"github.com/talkgraph/talkgraph/service/sqlite"
)

// openStore opens the store DATABASE_URL names.
func openStore(ctx context.Context, c Config) (service.Store, error) {
	switch {
	case c.DatabaseURL == "memory:" || c.DatabaseURL == "memory://":
		return inmem.New(), nil
	case strings.HasPrefix(c.DatabaseURL, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(c.DatabaseURL, "sqlite:"), "//")
		if path == "" {
			return nil, fmt.Errorf("DATABASE_URL %q: no file path", c.DatabaseURL)
		}
		return sqlite.Open(ctx, path, sqlite.Options{BusyTimeout: c.SQLiteBusyTimeout, FullSync: c.SQLiteFullSync, MaxBytes: c.SQLiteMaxBytes})
	case strings.HasPrefix(c.DatabaseURL, "postgres://") || strings.HasPrefix(c.DatabaseURL, "postgresql://"):
		return postgres.Open(ctx, c.DatabaseURL, postgres.Options{})
	}
	return nil, fmt.Errorf("DATABASE_URL %q: unsupported scheme (use sqlite:///path, postgres://host/db or memory:)", c.RedactedDatabaseURL())
}
