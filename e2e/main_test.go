package e2e

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// stores are the stores the contract tests run against.
var stores = []string{"memory", "sqlite"}

// testApp is a real server on a random local port.
type testApp struct {
	*app.App
	URL string
}

// startApp starts the whole server (store, service, HTTP) on 127.0.0.1 with a temporary
// data directory, on store ("memory", "sqlite" or "postgres"); change adjusts the
// configuration. It is closed when the test ends.
func startApp(t testing.TB, store string, change func(*app.Config)) *testApp {
	t.Helper()
	return serveApp(t, appConfig(t, store, change))
}

// appConfig is the configuration startApp serves.
func appConfig(t testing.TB, store string, change func(*app.Config)) app.Config {
	t.Helper()
	env := map[string]string{"DATA_DIR": t.TempDir(), "DEMO_CHUNK_DELAY": "0s", "FLUSH_INTERVAL": "5ms", "RATE_LIMIT": "1000", "RATE_BURST": "1000",
		// Every test client comes from 127.0.0.1: lift the per-address limits (abuse_test.go
		// and crowding_test.go set their own).
		"ANON_RATE_LIMIT": "1000", "ANON_RATE_BURST": "1000", "GUEST_SIGNIN_RATE": "60000", "GUEST_SIGNIN_BURST": "1000",
		"MAX_SOCKETS_PER_ADDRESS": "100000", "MAX_SUBSCRIPTIONS_PER_ADDRESS": "100000", "MAX_BODY_READS_PER_ADDRESS": "100000",
		"SHARED_READS_PER_SECOND": "1000", "SHARED_READS_BURST": "1000"}
	cfg, err := app.LoadConfig(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	switch store {
	case "memory":
		cfg.DatabaseURL = "memory:"
	case "sqlite":
		cfg.DatabaseURL = "sqlite://" + filepath.Join(cfg.DataDir, "test.db")
	case "postgres": // a database of its own on the machine's server; skipped without one
		cfg.DatabaseURL = testsvc.NewDatabase(t)
	}
	if change != nil {
		change(&cfg)
	}
	return cfg
}

func serveApp(t testing.TB, cfg app.Config) *testApp {
	t.Helper()
	var logOut io.Writer = io.Discard
	if os.Getenv("TALKGRAPH_TEST_LOG") != "" {
		logOut = os.Stderr
	}
	return serveAppLog(t, cfg, logOut)
}

// serveAppLog is serveApp with the server's log going to logOut.
func serveAppLog(t testing.TB, cfg app.Config, logOut io.Writer) *testApp {
	t.Helper()
	app, err := app.Open(context.Background(), cfg, logOut)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		app.Close(ctx)
	})
	return &testApp{App: app, URL: "http://" + ln.Addr().String()}
}

// allStores are the stores, PostgreSQL included (skipped without one, failed under CI).
var allStores = []string{"memory", "sqlite", "postgres"}

// eachStore runs a contract test against every store.
func eachStore(t *testing.T, test func(t *testing.T, store string)) {
	for _, s := range stores {
		t.Run(s, func(t *testing.T) {
			test(t, s)
		})
	}
}

func guest(t testing.TB, a *testApp) *tgtest.Client { return tgtest.Guest(t, a.URL) }

// watchedSession starts a server on store, signs in a guest, creates a session and
// subscribes to it over graphql-transport-ws from its current cursor.
func watchedSession(t *testing.T, store string) (*testApp, *tgtest.Client, string, *tgtest.Socket, *tgtest.Events) {
	t.Helper()
	a := startApp(t, store, nil)
	c := guest(t, a)
	sid := c.CreateSession(nil)
	ws := c.Connect("graphql-transport-ws")
	_, evs := ws.Stream(sid, c.Cursor(sid))
	return a, c, sid, ws, evs
}

// userMessages counts the user's messages in a session's history.
func userMessages(c *tgtest.Client, sid string) int {
	n := 0
	for _, m := range c.Messages(sid) {
		if m.Role == "USER" {
			n++
		}
	}
	return n
}
