package postgres_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/postgres"
)

// proxy forwards TCP connections to PostgreSQL, and can be stopped and started again on
// the same address, to play a server that goes away and comes back.
type proxy struct {
	t      *testing.T
	addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, addr: "127.0.0.1:0", target: target}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *proxy) start() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

// stop closes the listener and every connection.
func (p *proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestUnreachable points a Store at PostgreSQL through a proxy, stops the proxy (the
// server is gone: its connections break, new ones are refused), and starts it again.
func TestUnreachable(t *testing.T) {
	ctx := t.Context()
	url := newSchema(t, newDatabase(t))
	u := mustParse(t, url)
	p := startProxy(t, u.Host)
	u.Host = p.addr
	s := mustOpen(t, u.String(), postgres.Options{ConnectTimeout: time.Second})
	must(t, create(s, "s1"))
	must(t, appendOne(s, chunkBatch("s1", 1, "a")))

	p.stop()
	start := time.Now()
	unavailable(t, "Append while the server is gone", appendOne(s, chunkBatch("s1", 2, "b")), "unreachable")
	unavailable(t, "Ping while the server is gone", s.Ping(ctx), "unreachable")
	_, err := s.Session(ctx, "s1")
	unavailable(t, "Session while the server is gone", err, "unreachable")
	_, err = s.FirstSeen(ctx, []byte("id"), time.Now().Add(time.Minute))
	unavailable(t, "FirstSeen while the server is gone", err, "unreachable")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("failing took %v", d)
	}

	p.start()
	if err := appendOne(s, chunkBatch("s1", 2, "b")); err != nil {
		t.Fatalf("Append once the server is back: %v", err)
	}
	must(t, s.Ping(ctx))
	if first, err := s.FirstSeen(ctx, []byte("id"), time.Now().Add(time.Minute)); err != nil || !first {
		t.Errorf("FirstSeen once the server is back = %v, %v; want true (it recorded nothing while gone)", first, err)
	}
	if got := lastSeq(t, s, "s1"); got != 2 {
		t.Errorf("LastSeq = %d, want 2", got)
	}
}

// TestBackendsTerminated terminates the Store's connections on the server, as a restart
// of PostgreSQL does: the pool replaces them, and the next Append works.
func TestBackendsTerminated(t *testing.T) {
	url := withParam(t, newSchema(t, newDatabase(t)), "application_name", "talkgraph_terminated")
	s := mustOpen(t, url, postgres.Options{})
	must(t, create(s, "s1"))
	conn := admin(t)
	for i := range 3 {
		must(t, appendOne(s, chunkBatch("s1", int64(i+1), "x")))
		var n int
		must(t, conn.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = 'talkgraph_terminated'`).Scan(&n))
		if n == 0 {
			t.Fatal("no connection of the Store found to terminate")
		}
	}
	if err := appendOne(s, chunkBatch("s1", 4, "x")); err != nil {
		t.Fatalf("Append after the connections were terminated: %v", err)
	}
	must(t, s.Ping(t.Context()))
}

// TestReadOnly makes the database read-only: Ping and Append fail with EUNAVAILABLE
// saying so, and work again once it can be written.
func TestReadOnly(t *testing.T) {
	ctx := t.Context()
	db := newDatabase(t)
	url := withParam(t, newSchema(t, db), "application_name", "talkgraph_readonly")
	s := mustOpen(t, url, postgres.Options{})
	must(t, create(s, "s1"))
	conn := admin(t)
	name := strings.TrimPrefix(mustParse(t, db).Path, "/")
	setReadOnly := func(on bool) {
		must(t, execSQL(conn, fmt.Sprintf("ALTER DATABASE %s SET default_transaction_read_only = %v", name, on)))
		// The setting applies to new connections.
		must(t, execSQL(conn, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'talkgraph_readonly'`))
	}
	setReadOnly(true)
	var err error
	for range 3 { // the first use of a terminated connection may fail otherwise
		if err = s.Ping(ctx); service.ErrorCode(err) == service.EUNAVAILABLE && strings.Contains(service.ErrorMessage(err), "read-only") {
			break
		}
	}
	unavailable(t, "Ping of a read-only database", err, "read-only")
	unavailable(t, "Append to a read-only database", appendOne(s, chunkBatch("s1", 1, "x")), "read-only")
	if _, err := s.Session(ctx, "s1"); err != nil {
		t.Errorf("Session of a read-only database: %v (reads go on)", err)
	}
	setReadOnly(false)
	for range 3 {
		if err = s.Ping(ctx); err == nil {
			break
		}
	}
	must(t, err)
	must(t, appendOne(s, chunkBatch("s1", 1, "x")))
}
