// Package testsvc gives tests the services that replicas share: a PostgreSQL database of
// their own on the machine's server, the machine's NATS server, and NATS servers that a
// test owns (embedded, on a port of its choosing, which it can stop and start again).
//
// A test that needs the machine's PostgreSQL or NATS and cannot reach it is skipped with a
// message that says how to start them, except under CI=true, where it fails: CI starts
// them (scripts/services.sh), so a missing service there is a broken run, not a skip.
package testsvc

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsserver "github.com/nats-io/nats-server/v2/server"
)

// PostgresEnv names the variable holding an administrator's URL of the PostgreSQL server
// tests use; by default the local server, user postgres without a password.
const PostgresEnv = "TALKGRAPH_TEST_POSTGRES"

const defaultPostgres = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// NATSEnv names the variable holding the URL of the NATS server tests use; by default the
// local server.
const NATSEnv = "TALKGRAPH_TEST_NATS"

const defaultNATS = "nats://127.0.0.1:4222"

// Unavailable skips the test because a service it needs is missing, or fails it under
// CI=true.
func Unavailable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// AdminURL is the URL tests connect to PostgreSQL with as an administrator.
func AdminURL() string {
	if u := os.Getenv(PostgresEnv); u != "" {
		return u
	}
	return defaultPostgres
}

// Admin connects to the administrator's database, or skips (fails under CI) the test. The
// connection is closed when the test ends.
func Admin(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		Unavailable(t, fmt.Sprintf("PostgreSQL is not reachable at %s: %v\n"+
			"Start it (bash scripts/services.sh; Debian: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start; to install one: "+
			"apt-get install postgresql, with trust auth for 127.0.0.1 in pg_hba.conf; or "+
			"docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:15), "+
			"or set %s to an administrator's URL", Redact(AdminURL()), err, PostgresEnv))
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Redact drops the password from a URL, for messages.
func Redact(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "(unparsable URL)"
}

var dbCounter atomic.Int64

// NewDatabase creates a database for the test and returns its URL; it is dropped when the
// test ends (its connections are ended first).
func NewDatabase(t testing.TB) string {
	t.Helper()
	conn := Admin(t)
	name := fmt.Sprintf("talkgraph_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, dbCounter.Add(1))
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := conn.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// DatabaseName returns the database a URL names.
func DatabaseName(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path[1:]
}

// NATS returns the URL of the machine's NATS server, or skips (fails under CI) the test
// when nothing answers there.
func NATS(t testing.TB) string {
	t.Helper()
	raw := os.Getenv(NATSEnv)
	if raw == "" {
		raw = defaultNATS
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", NATSEnv, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		Unavailable(t, fmt.Sprintf("NATS is not reachable at %s: %v\n"+
			"Start it (bash scripts/services.sh; to install it: apt-get install nats-server), or set %s to its URL",
			Redact(raw), err, NATSEnv))
	}
	conn.Close()
	return raw
}

// NATSServer is a NATS server a test owns, embedded in the test process, on a port that
// stays its own across Stop and Start.
type NATSServer struct {
	t    testing.TB
	Port int
	URL  string

	change func(*natsserver.Options)

	mu  sync.Mutex
	srv *natsserver.Server
}

// StartNATS starts an embedded NATS server on a free local port; it is shut down when the
// test ends.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	return StartNATSWith(t, nil)
}

// StartNATSWith is StartNATS with the server's options changed by change (its security,
// say); URL keeps the nats:// scheme.
func StartNATSWith(t testing.TB, change func(*natsserver.Options)) *NATSServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	n := &NATSServer{t: t, Port: port, URL: "nats://127.0.0.1:" + strconv.Itoa(port), change: change}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// Start starts the server (again) on its port, and waits until it takes connections.
func (n *NATSServer) Start() {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		return
	}
	opts := &natsserver.Options{Host: "127.0.0.1", Port: n.Port, NoLog: true, NoSigs: true, MaxControlLine: 4096}
	if n.change != nil {
		n.change(opts)
	}
	var srv *natsserver.Server
	var err error
	// The port was just freed (by a listener here, or by the server's last life): binding
	// it again may take a few tries.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if srv, err = natsserver.NewServer(opts); err != nil {
			n.t.Fatalf("nats server: %v", err)
		}
		go srv.Start()
		if srv.ReadyForConnections(5 * time.Second) {
			break
		}
		srv.Shutdown()
		if time.Now().After(deadline) {
			n.t.Fatalf("nats server on port %d not ready", n.Port)
		}
	}
	n.srv = srv
}

// Stop shuts the server down, closing every client's connection.
func (n *NATSServer) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv == nil {
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	n.srv = nil
}

// Clients returns how many clients are connected now.
func (n *NATSServer) Clients() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv == nil {
		return 0
	}
	return n.srv.NumClients()
}
