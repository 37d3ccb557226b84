package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/postgres"
	"github.com/talkgraph/talkgraph/service/sqlite"
	"github.com/talkgraph/talkgraph/service/storetest"
)

// These tests need a real PostgreSQL (see testsvc): each test function has a database of
// its own, and a schema per Store in it. Without a server they are skipped, except under
// CI=true, where they fail.

func admin(t testing.TB) *pgx.Conn    { return testsvc.Admin(t) }
func newDatabase(t testing.TB) string { return testsvc.NewDatabase(t) }

var schemaCounter atomic.Int64

// newSchema creates an empty schema in the database at dbURL and returns a URL whose
// connections use it.
func newSchema(t testing.TB, dbURL string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	name := fmt.Sprintf("s%d", schemaCounter.Add(1))
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	return withParam(t, dbURL, "search_path", name)
}

func withParam(t testing.TB, raw, key, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// mustOpen opens a Store and closes it when the test ends.
func mustOpen(t testing.TB, url string, opts postgres.Options) *postgres.Store {
	t.Helper()
	if opts.MaxConns == 0 {
		opts.MaxConns = 4
	}
	s, err := postgres.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestStore(t *testing.T) {
	db := newDatabase(t)
	storetest.Run(t, func(t *testing.T) service.Store {
		return mustOpen(t, newSchema(t, db), postgres.Options{})
	})
}

func TestCoordinator(t *testing.T) {
	db := newDatabase(t)
	storetest.RunCoordinator(t, func(t *testing.T) service.Store {
		return mustOpen(t, newSchema(t, db), postgres.Options{})
	})
}

// unavailable checks that err is EUNAVAILABLE with a message that says why.
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

func appendOne(s service.Store, b *service.Batch) error {
	return s.Append(context.Background(), []*service.Batch{b})[0]
}

func create(s service.Store, id string) error {
	return appendOne(s, &service.Batch{SessionID: id, Create: newSession(id)})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := service.ErrorCode(err); got != code {
		t.Errorf("%s: error %v, code %q; want %q", what, err, got, code)
	}
}

func lastSeq(t *testing.T, s service.Store, id string) int64 {
	t.Helper()
	ss, err := s.Session(t.Context(), id)
	if err != nil {
		t.Fatalf("Session(%s): %v", id, err)
	}
	return ss.LastSeq
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := t.Context()
	url := newSchema(t, newDatabase(t))
	s, err := postgres.Open(ctx, url, postgres.Options{})
	must(t, err)
	msg := &service.Message{ID: "m1", SessionID: "s1", Seq: 1, Role: service.RoleUser, Kind: service.KindText,
		Content: "hello", Status: service.MessageComplete, CreatedAt: t0}
	must(t, appendOne(s, &service.Batch{SessionID: "s1", Create: newSession("s1"),
		Events: []*service.Event{{Seq: 1, Type: service.EventMessageAdded, At: t0, Message: msg}},
		Idempotency: &service.IdempotencyRecord{UserID: "u1", Key: "k", SessionID: "s1", MessageID: "m1",
			RunID: "r1", CreatedAt: t0},
	}))
	for i, d := range []string{"a", "b"} {
		must(t, appendOne(s, chunkBatch("s1", int64(2+i), d)))
	}
	secret, err := s.Secret(ctx, "jwt", func() ([]byte, error) { return []byte("s3cret"), nil })
	must(t, err)
	_, err = s.Heartbeat(ctx, "r1", t0, t0.Add(time.Hour))
	must(t, err)
	must(t, s.Close())

	s = mustOpen(t, url, postgres.Options{})
	if got, want := lastSeq(t, s, "s1"), int64(3); got != want {
		t.Errorf("LastSeq after reopening = %d, want %d", got, want)
	}
	events, err := s.Events(ctx, "s1", 0, 0)
	must(t, err)
	if got, want := len(events), 3; got != want {
		t.Errorf("%d events after reopening, want %d", got, want)
	}
	m, err := s.Message(ctx, "m1")
	must(t, err)
	if m.Content != "hello" || m.Seq != 1 || !m.CreatedAt.Equal(t0) {
		t.Errorf("message after reopening = %+v", m)
	}
	if _, err := s.Idempotency(ctx, "u1", "k"); err != nil {
		t.Errorf("Idempotency after reopening: %v", err)
	}
	again, err := s.Secret(ctx, "jwt", func() ([]byte, error) {
		t.Error("Secret generated a new value for a stored one")
		return []byte("other"), nil
	})
	must(t, err)
	if !bytes.Equal(again, secret) {
		t.Errorf("Secret after reopening = %q, want %q", again, secret)
	}
	live, err := s.Heartbeat(ctx, "r2", t0, t0.Add(time.Hour))
	must(t, err)
	if strings.Join(live, ",") != "r1,r2" {
		t.Errorf("live replicas after reopening = %v, want r1 and r2", live)
	}
	if err := appendOne(s, chunkBatch("s1", 4, "c")); err != nil {
		t.Errorf("the log after reopening does not go on at 4: %v", err)
	}
}

func TestSecret(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, newSchema(t, newDatabase(t)), postgres.Options{})
	boom := errors.New("no entropy")
	if _, err := s.Secret(ctx, "a", func() ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("Secret with a failing generator = %v, want %v", err, boom)
	}
	a, err := s.Secret(ctx, "a", func() ([]byte, error) { return []byte{0, 1, 2}, nil })
	must(t, err)
	b, err := s.Secret(ctx, "b", func() ([]byte, error) { return []byte{3}, nil })
	must(t, err)
	a2, err := s.Secret(ctx, "a", func() ([]byte, error) { return []byte{9}, nil })
	must(t, err)
	if !bytes.Equal(a, []byte{0, 1, 2}) || !bytes.Equal(a2, a) || !bytes.Equal(b, []byte{3}) {
		t.Errorf("Secret(a), Secret(b), Secret(a) = %v, %v, %v; want [0 1 2], [3], [0 1 2]", a, b, a2)
	}
}

// TestReplicasStartAtOnce opens several Stores on one new schema at once, as replicas
// starting together do: the migrations must not collide, and every replica must end up
// with the same signing secret.
func TestReplicasStartAtOnce(t *testing.T) {
	const replicas = 4
	url := newSchema(t, newDatabase(t))
	stores := make([]*postgres.Store, replicas)
	secrets := make([][]byte, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 2})
			if err != nil {
				errs[i] = err
				return
			}
			stores[i] = s
			secrets[i], errs[i] = s.Secret(context.Background(), "auth", func() ([]byte, error) {
				return fmt.Appendf(nil, "secret of replica %d", i), nil
			})
		})
	}
	wg.Wait()
	for i, s := range stores {
		if s != nil {
			t.Cleanup(func() { s.Close() })
		}
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
	}
	for i := range secrets {
		if !bytes.Equal(secrets[i], secrets[0]) {
			t.Errorf("replica %d has secret %q, replica 0 %q", i, secrets[i], secrets[0])
		}
	}
	// And they share the data.
	must(t, create(stores[0], "s1"))
	must(t, appendOne(stores[1], chunkBatch("s1", 1, "x")))
	if got := lastSeq(t, stores[replicas-1], "s1"); got != 1 {
		t.Errorf("LastSeq seen by another replica = %d, want 1", got)
	}
}

func TestClosed(t *testing.T) {
	ctx := t.Context()
	s, err := postgres.Open(ctx, newSchema(t, newDatabase(t)), postgres.Options{})
	must(t, err)
	must(t, s.Close())
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	unavailable(t, "Ping after Close", s.Ping(ctx), "closed")
	unavailable(t, "Append after Close", appendOne(s, chunkBatch("s1", 1, "x")), "closed")
	_, err = s.Session(ctx, "s1")
	unavailable(t, "Session after Close", err, "closed")
	_, err = s.Heartbeat(ctx, "r", t0, t0)
	unavailable(t, "Heartbeat after Close", err, "closed")
	_, err = s.FirstSeen(ctx, []byte("id"), t0)
	unavailable(t, "FirstSeen after Close", err, "closed")
}

func TestOpenBadURL(t *testing.T) {
	_, err := postgres.Open(t.Context(), "postgres://user:hunter2@[::1/db", postgres.Options{})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open of a bad URL: %v, want an error without the password", err)
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	u, err := url.Parse(raw)
	must(t, err)
	return u
}

func execSQL(conn *pgx.Conn, sql string) error {
	_, err := conn.Exec(context.Background(), sql)
	return err
}

// BenchmarkAppend measures streaming (storetest.BenchmarkAppend), next to SQLite's in the
// same run for comparison.
func BenchmarkAppend(b *testing.B) {
	b.Run("postgres", func(b *testing.B) {
		db := newDatabase(b)
		for _, n := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
				storetest.BenchmarkAppend(b, mustOpen(b, newSchema(b, db), postgres.Options{}), n)
			})
		}
	})
	b.Run("sqlite", func(b *testing.B) {
		for _, n := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
				s, err := sqlite.Open(context.Background(), b.TempDir()+"/talk.db", sqlite.Options{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
				storetest.BenchmarkAppend(b, s, n)
			})
		}
	})
}
