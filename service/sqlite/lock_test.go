package sqlite_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service/sqlite"
)

// holdWriteLock makes another connection, as another process would, take the database's
// write lock until the test ends or release is called.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open(sqlite.DriverName, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
				t.Errorf("ROLLBACK: %v", err)
			}
			conn.Close()
		}
	}
	t.Cleanup(release)
	return release
}

func TestPingFailsWhileLocked(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	s := mustOpen(t, path, sqlite.Options{BusyTimeout: 50 * time.Millisecond})
	if err := create(s, "s1"); err != nil {
		t.Fatal(err)
	}
	release := holdWriteLock(t, path)

	unavailable(t, "Ping while another process writes", s.Ping(ctx), "locked by another process")
	err := appendOne(s, chunkBatch("s1", 1, "x"))
	unavailable(t, "Append while another process writes", err, "locked by another process")
	if _, err := s.Session(ctx, "s1"); err != nil {
		t.Errorf("Session while another process writes: %v (reads should go on)", err)
	}

	release()
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after the lock is released: %v", err)
	}
	if err := appendOne(s, chunkBatch("s1", 1, "x")); err != nil {
		t.Errorf("Append after the lock is released: %v", err)
	}
}

func TestSecondStoreFailsFast(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	first := mustOpen(t, path, sqlite.Options{})
	const timeout = 2 * time.Second
	start := time.Now()
	second, err := sqlite.Open(ctx, path, sqlite.Options{BusyTimeout: timeout})
	if err == nil {
		second.Close()
		t.Fatal("Open of a file another Store has open succeeded, want EUNAVAILABLE")
	}
	if elapsed := time.Since(start); elapsed >= timeout {
		t.Errorf("Open took %v, want less than the busy timeout %v", elapsed, timeout)
	}
	unavailable(t, "second Open", err, "in use by another process")

	// Once the first is closed, the file is free.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, path, sqlite.Options{})
}

func TestOpenWhileLockedGivesUp(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	s := mustOpen(t, path, sqlite.Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	holdWriteLock(t, path)
	const timeout = 100 * time.Millisecond
	start := time.Now()
	s, err := sqlite.Open(ctx, path, sqlite.Options{BusyTimeout: timeout})
	if err == nil {
		s.Close()
	}
	unavailable(t, "Open while another process writes", err, "locked by another process")
	if elapsed := time.Since(start); elapsed > timeout+5*time.Second {
		t.Errorf("Open took %v with a busy timeout of %v", elapsed, timeout)
	}
}
