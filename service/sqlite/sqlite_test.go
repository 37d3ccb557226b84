package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/sqlite"
	"github.com/talkgraph/talkgraph/service/storetest"
)

// mustOpen opens a Store at path and closes it when the test ends.
func mustOpen(t testing.TB, path string, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// tempPath is a database path in a directory that does not exist yet.
func tempPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "data", "talk.db")
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) service.Store {
		return mustOpen(t, tempPath(t), sqlite.Options{})
	})
}

// unavailable checks that err is EUNAVAILABLE with a message that says why, and still
// carries the driver's error for the log.
func unavailable(t *testing.T, what string, err error, why string) {
	t.Helper()
	if got, want := service.ErrorCode(err), service.EUNAVAILABLE; got != want {
		t.Fatalf("%s: error %v, code %q; want %q", what, err, got, want)
	}
	if got := service.ErrorMessage(err); !strings.Contains(got, why) {
		t.Errorf("%s: message %q, want it to say %q", what, got, why)
	}
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.UTC)

func newSession(id string) *service.TalkSession {
	return &service.TalkSession{ID: id, UserID: "u1", Title: "talk", Settings: service.Settings{Agent: "demo"},
		CreatedAt: t0, UpdatedAt: t0}
}

// chunkBatch appends one chunk event at seq to a session's log.
func chunkBatch(sessionID string, seq int64, delta string) *service.Batch {
	return &service.Batch{SessionID: sessionID, Events: []*service.Event{
		{Seq: seq, Type: service.EventMessageChunk, At: t0, Key: "m1", MessageID: "m1", Delta: delta}}}
}

// appendOne appends one batch.
func appendOne(s service.Store, b *service.Batch) error {
	return s.Append(context.Background(), []*service.Batch{b})[0]
}

func create(s service.Store, id string) error {
	return appendOne(s, &service.Batch{SessionID: id, Create: newSession(id)})
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	msg := &service.Message{ID: "m1", SessionID: "s1", Seq: 1, Role: service.RoleUser, Kind: service.KindText,
		Content: "hello", Status: service.MessageComplete, CreatedAt: t0}
	if err := appendOne(s, &service.Batch{SessionID: "s1", Create: newSession("s1"),
		Events: []*service.Event{{Seq: 1, Type: service.EventMessageAdded, At: t0, Message: msg}},
		Idempotency: &service.IdempotencyRecord{UserID: "u1", Key: "k", SessionID: "s1", MessageID: "m1",
			RunID: "r1", CreatedAt: t0},
	}); err != nil {
		t.Fatal(err)
	}
	for i, d := range []string{"a", "b"} {
		if err := appendOne(s, chunkBatch("s1", int64(2+i), d)); err != nil {
			t.Fatal(err)
		}
	}
	secret, err := s.Secret(ctx, "jwt", func() ([]byte, error) { return []byte("s3cret"), nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path, sqlite.Options{})
	ss, err := s.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ss.LastSeq, int64(3); got != want {
		t.Errorf("LastSeq after reopening = %d, want %d", got, want)
	}
	events, err := s.Events(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(events), 3; got != want {
		t.Errorf("%d events after reopening, want %d", got, want)
	}
	m, err := s.Message(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Content, "hello"; got != want {
		t.Errorf("message content after reopening = %q, want %q", got, want)
	}
	if got, want := m.Seq, int64(1); got != want {
		t.Errorf("message Seq after reopening = %d, want %d", got, want)
	}
	if _, err := s.Idempotency(ctx, "u1", "k"); err != nil {
		t.Errorf("Idempotency after reopening: %v", err)
	}
	again, err := s.Secret(ctx, "jwt", func() ([]byte, error) {
		t.Error("Secret generated a new value for a stored one")
		return []byte("other"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, secret) {
		t.Errorf("Secret after reopening = %q, want %q", again, secret)
	}
	if err := appendOne(s, chunkBatch("s1", 4, "c")); err != nil {
		t.Errorf("the log after reopening does not go on at 4: %v", err)
	}
}

func TestOpenOddPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a b?c#d%20e", "talk.db")
	s := mustOpen(t, path, sqlite.Options{})
	if err := create(s, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the database is not where it was asked to be: %v", err)
	}
}

func TestSecret(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, tempPath(t), sqlite.Options{})
	boom := errors.New("no entropy")
	if _, err := s.Secret(ctx, "a", func() ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("Secret with a failing generator = %v, want %v", err, boom)
	}
	a, err := s.Secret(ctx, "a", func() ([]byte, error) { return []byte{0, 1, 2}, nil })
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Secret(ctx, "b", func() ([]byte, error) { return []byte{3}, nil })
	if err != nil {
		t.Fatal(err)
	}
	a2, err := s.Secret(ctx, "a", func() ([]byte, error) { return []byte{9}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a, []byte{0, 1, 2}; !bytes.Equal(got, want) {
		t.Errorf("Secret(a) = %v, want %v", got, want)
	}
	if got, want := a2, a; !bytes.Equal(got, want) {
		t.Errorf("Secret(a) again = %v, want %v", got, want)
	}
	if got, want := b, []byte{3}; !bytes.Equal(got, want) {
		t.Errorf("Secret(b) = %v, want %v", got, want)
	}
}

func TestOpenFailsWhenReadOnly(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	s := mustOpen(t, path, sqlite.Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	readOnly(t, filepath.Dir(path))
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err == nil {
		t.Cleanup(func() { s.Close() })
		err = s.Ping(ctx)
	}
	unavailable(t, "Open and Ping of a read-only file", err, "read-only")
}

// readOnly makes every file in dir read-only until the test ends. File permissions stop
// everyone but root; for root (as CI runs) the files are made immutable instead, which
// stops root too. Where that cannot be done the test is skipped, or fails under CI=true.
func readOnly(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		for _, e := range entries {
			if err := os.Chmod(filepath.Join(dir, e.Name()), 0o400); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			for _, e := range entries {
				os.Chmod(filepath.Join(dir, e.Name()), 0o600)
			}
		})
		return
	}
	for _, e := range entries {
		file := filepath.Join(dir, e.Name())
		if err := setImmutable(file, true); err != nil {
			msg := fmt.Sprintf("as root, only an immutable file is read-only, and %s cannot be made immutable: %v", file, err)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		t.Cleanup(func() {
			if err := setImmutable(file, false); err != nil {
				t.Errorf("%s stays immutable (chattr -i it): %v", file, err)
			}
		})
	}
}

func TestPingFailsWhenFileRemoved(t *testing.T) {
	path := tempPath(t)
	s := mustOpen(t, path, sqlite.Options{})
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	unavailable(t, "Ping after the file was removed", s.Ping(t.Context()), "removed")
}

func TestFull(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, tempPath(t), sqlite.Options{MaxBytes: 512 << 10})
	if err := create(s, "s1"); err != nil {
		t.Fatal(err)
	}
	big := &service.Message{ID: "m1", SessionID: "s1", Seq: 1, Content: strings.Repeat("x", 1<<20)}
	err := appendOne(s, &service.Batch{SessionID: "s1",
		Events: []*service.Event{{Seq: 1, Type: service.EventMessageAdded, At: t0, Message: big}}})
	unavailable(t, "Append beyond MaxBytes", err, "storage is full")
	if !sqlite.IsDriverError(err) {
		t.Errorf("error %v does not wrap the driver's error", err)
	}
	if _, err := s.Message(ctx, "m1"); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("Message after a failed Apply: %v, want ENOTFOUND", err)
	}
	if err := appendOne(s, chunkBatch("s1", 1, "fits")); err != nil {
		t.Errorf("a small Append after a failed one, at the same Seq: %v", err)
	}
}

func TestClosed(t *testing.T) {
	ctx := t.Context()
	s, err := sqlite.Open(ctx, tempPath(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	unavailable(t, "Ping after Close", s.Ping(ctx), "closed")
	unavailable(t, "Append after Close", appendOne(s, chunkBatch("s1", 1, "x")), "closed")
	_, err = s.Session(ctx, "s1")
	unavailable(t, "Session after Close", err, "closed")
}

func BenchmarkAppend(b *testing.B) {
	for _, full := range []bool{false, true} {
		for _, n := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("fullsync=%v/sessions=%d", full, n), func(b *testing.B) {
				storetest.BenchmarkAppend(b, mustOpen(b, tempPath(b), sqlite.Options{FullSync: full}), n)
			})
		}
	}
}

func BenchmarkTurns(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			storetest.BenchmarkTurns(b, mustOpen(b, tempPath(b), sqlite.Options{}), n)
		})
	}
}

// BenchmarkCompact folds replies of 200 chunks that ended together: reading their events
// back, with the default CompactHold and in one transaction (hold=1h), to show what
// committing in slices costs; and prepared, with the folding the service made.
func BenchmarkCompact(b *testing.B) {
	for _, c := range []struct {
		name     string
		hold     time.Duration
		prepared bool
	}{{"read/hold=5ms", sqlite.DefaultCompactHold, false}, {"read/hold=1h", time.Hour, false}, {"prepared/hold=5ms", sqlite.DefaultCompactHold, true}} {
		for _, n := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/sessions=%d", c.name, n), func(b *testing.B) {
				storetest.BenchmarkCompact(b, mustOpen(b, tempPath(b), sqlite.Options{CompactHold: c.hold}), n, 200, c.prepared)
			})
		}
	}
}

// BenchmarkOpen100kMessages measures Open (and Close) of a database that holds 100,000
// messages, with their MessageAdded events, in 100 sessions.
func BenchmarkOpen100kMessages(b *testing.B) {
	ctx := b.Context()
	path := tempPath(b)
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const sessions, perSession, perBatch = 100, 1000, 500
	for i := range sessions {
		id := fmt.Sprintf("s%03d", i)
		if err := create(s, id); err != nil {
			b.Fatal(err)
		}
		for j := 0; j < perSession; j += perBatch {
			batch := &service.Batch{SessionID: id}
			for k := j; k < j+perBatch; k++ {
				m := &service.Message{ID: fmt.Sprintf("%s-m%04d", id, k), SessionID: id, Seq: int64(k + 1), Role: service.RoleUser,
					Kind: service.KindText, Content: "a message of a modest length, as people write them",
					Status: service.MessageComplete, CreatedAt: t0}
				batch.Events = append(batch.Events, &service.Event{Seq: int64(k + 1), Type: service.EventMessageAdded, At: t0, Message: m})
			}
			if err := appendOne(s, batch); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s, err := sqlite.Open(ctx, path, sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if fi, err := os.Stat(path); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
	}
}

// The database holds users' conversations and the token signing secret: its files are
// for their owner only, even in a directory anyone can read, and an existing file that
// anyone could read is tightened.
func TestFilesAreTheOwnersOnly(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "talk.db")
	s := mustOpen(t, path, sqlite.Options{})
	if err := create(s, "s1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", path + ".lock"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %o, want no access for group or others", filepath.Base(p), perm)
		}
	}
	old := filepath.Join(t.TempDir(), "old.db")
	if err := os.WriteFile(old, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, old, sqlite.Options{})
	if fi, err := os.Stat(old); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("an existing database left readable by others: %v %v", fi.Mode(), err)
	}
}
