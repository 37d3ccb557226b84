package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
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

// TestReplicasAppendAtOnce has two replicas append to the same sessions at once, each
// call writing every session in a random order: each batch is written whole or refused
// with ECONFLICT, no call deadlocks, and every log has every Seq once.
func TestReplicasAppendAtOnce(t *testing.T) {
	url := newSchema(t, newDatabase(t))
	a, b := mustOpen(t, url, postgres.Options{}), mustOpen(t, url, postgres.Options{})
	const sessions, rounds = 20, 30
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%02d", i)
		must(t, create(a, ids[i]))
	}
	var written atomic.Int64
	var wg sync.WaitGroup
	for _, s := range []*postgres.Store{a, b} {
		wg.Go(func() {
			for range rounds {
				var batches []*service.Batch
				for _, j := range rand.Perm(sessions) {
					ss, err := s.Session(context.Background(), ids[j])
					if err != nil {
						t.Error(err)
						return
					}
					batches = append(batches, chunkBatch(ids[j], ss.LastSeq+1, "x"))
				}
				for i, err := range s.Append(context.Background(), batches) {
					switch service.ErrorCode(err) {
					case "":
						written.Add(1)
					case service.ECONFLICT:
					default:
						t.Errorf("batch %d: %v", i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	total := int64(0)
	for _, id := range ids {
		evs, err := a.Events(t.Context(), id, 0, 0)
		must(t, err)
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("session %s: event %d has Seq %d", id, i, e.Seq)
			}
		}
		total += int64(len(evs))
	}
	if total != written.Load() {
		t.Errorf("%d events in the logs, %d batches written", total, written.Load())
	}
	if total < sessions*rounds/2 {
		t.Errorf("only %d of %d batches written", total, 2*sessions*rounds)
	}
}

// TestAdmissionAcrossReplicas has two replicas admit runs of one user at once, with a
// limit of one: exactly one of them wins each time.
func TestAdmissionAcrossReplicas(t *testing.T) {
	url := newSchema(t, newDatabase(t))
	a, b := mustOpen(t, url, postgres.Options{}), mustOpen(t, url, postgres.Options{})
	for _, id := range []string{"sa", "sb"} {
		must(t, create(a, id))
	}
	seq := map[string]int64{}
	for round := range 10 {
		var wg sync.WaitGroup
		errs := map[string]error{}
		var mu sync.Mutex
		for _, x := range []struct {
			s       *postgres.Store
			session string
		}{{a, "sa"}, {b, "sb"}} {
			run := fmt.Sprintf("r%d-%s", round, x.session)
			r := &service.Run{ID: run, SessionID: x.session, UserID: "u1", Status: service.RunRunning, Agent: "demo", CreatedAt: t0}
			batch := &service.Batch{SessionID: x.session, Admit: &service.Admission{UserID: "u1", RunID: run, Limit: 1},
				Events: []*service.Event{{Seq: seq[x.session] + 1, Type: service.EventRunStatusChanged, At: t0, Run: r}}}
			wg.Go(func() {
				err := appendOne(x.s, batch)
				mu.Lock()
				errs[x.session] = err
				mu.Unlock()
			})
		}
		wg.Wait()
		won := 0
		for session, err := range errs {
			switch service.ErrorCode(err) {
			case "":
				won++
				seq[session]++
			case service.ERATELIMIT:
			default:
				t.Fatalf("round %d, %s: %v", round, session, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d admissions won, want 1 (%v)", round, won, errs)
		}
		// The winner's run ends, freeing the user's place.
		for session := range errs {
			if errs[session] == nil {
				run := fmt.Sprintf("r%d-%s", round, session)
				r := &service.Run{ID: run, SessionID: session, UserID: "u1", Status: service.RunCompleted, Agent: "demo", CreatedAt: t0}
				must(t, appendOne(a, &service.Batch{SessionID: session,
					Events: []*service.Event{{Seq: seq[session] + 1, Type: service.EventRunStatusChanged, At: t0, Run: r}}}))
				seq[session]++
			}
		}
	}
}

// TestOneCallManyWrites checks the cases that one call's statements must order: a
// session written twice, deleted and created again, and rows claimed by two sessions.
func TestOneCallManyWrites(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, newSchema(t, newDatabase(t)), postgres.Options{})
	must(t, create(s, "gone"))
	must(t, appendOne(s, chunkBatch("gone", 1, "old")))
	msg := func(id, session string, seq int64, content string) *service.Event {
		return &service.Event{Seq: seq, Type: service.EventMessageAdded, At: t0, Message: &service.Message{ID: id,
			SessionID: session, Seq: seq, Role: service.RoleAssistant, Kind: service.KindText, Content: content,
			Status: service.MessageComplete, CreatedAt: t0}}
	}
	batches := []*service.Batch{
		{SessionID: "s1", Create: newSession("s1"), Events: []*service.Event{msg("m1", "s1", 1, "first")}},
		{SessionID: "s1", Events: []*service.Event{msg("m1", "s1", 2, "second"), msg("m2", "s1", 3, "x")}},
		{SessionID: "s2", Create: newSession("s2"), Events: []*service.Event{msg("m2", "s2", 1, "not mine")}},
		{SessionID: "gone", Delete: true},
		{SessionID: "gone", Create: newSession("gone"), Events: []*service.Event{msg("g1", "gone", 1, "new")}},
		{SessionID: "s1", Events: []*service.Event{{Seq: 9, Type: service.EventMessageChunk, At: t0, Key: "m1"}}},
	}
	errs := s.Append(ctx, batches)
	for _, i := range []int{0, 1, 3, 4} {
		if errs[i] != nil {
			t.Errorf("batch %d: %v", i, errs[i])
		}
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "belongs to another session") {
		t.Errorf("batch 2, with a row of session s1: %v, want it refused", errs[2])
	}
	wantCode(t, "batch 5, with a gap", errs[5], service.ECONFLICT)
	if m, err := s.Message(ctx, "m1"); err != nil || m.Content != "second" || m.Seq != 2 {
		t.Errorf("m1 = %+v, %v; want the second snapshot", m, err)
	}
	if m, err := s.Message(ctx, "m2"); err != nil || m.SessionID != "s1" {
		t.Errorf("m2 = %+v, %v; want s1's", m, err)
	}
	if _, err := s.Session(ctx, "s2"); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("the refused batch created s2: %v", err)
	}
	if got := lastSeq(t, s, "s1"); got != 3 {
		t.Errorf("s1's LastSeq = %d, want 3", got)
	}
	evs, err := s.Events(ctx, "gone", 0, 0)
	must(t, err)
	if len(evs) != 1 || evs[0].Message == nil || evs[0].Message.Content != "new" {
		t.Errorf("the recreated session's log = %+v, want its one new event", evs)
	}

	// A row of another session that is already stored fails its batch alone too.
	errs = s.Append(ctx, []*service.Batch{
		{SessionID: "gone", Events: []*service.Event{msg("m1", "gone", 2, "steal")}},
		chunkBatch("s1", 4, "ok"),
	})
	if errs[0] == nil || errs[1] != nil {
		t.Errorf("errors %v, want the first batch refused and the second written", errs)
	}
	if got := lastSeq(t, s, "gone"); got != 1 {
		t.Errorf("the refused batch moved the log to %d", got)
	}
}

// addedMessage is a MessageAdded event of a new assistant message.
func addedMessage(id, session string, seq int64, content string) *service.Event {
	return &service.Event{Seq: seq, Type: service.EventMessageAdded, At: t0, Message: &service.Message{ID: id,
		SessionID: session, Seq: seq, Role: service.RoleAssistant, Kind: service.KindText, Content: content,
		Status: service.MessageComplete, CreatedAt: t0}}
}

// TestBatchFailingInTheDatabaseFailsAlone makes the database refuse one batch's row
// (a CHECK constraint the test adds): Append cannot tell which batch of its multi-row
// statements failed, writes them again one by one to find it, and writes the others.
func TestBatchFailingInTheDatabaseFailsAlone(t *testing.T) {
	ctx := t.Context()
	url := newSchema(t, newDatabase(t))
	s := mustOpen(t, url, postgres.Options{})
	for _, id := range []string{"s1", "s2", "s3"} {
		must(t, create(s, id))
	}
	conn, err := pgx.Connect(ctx, url)
	must(t, err)
	defer conn.Close(context.Background())
	must(t, execSQL(conn, `ALTER TABLE messages ADD CONSTRAINT no_poison CHECK (content <> 'poison'::bytea)`))
	errs := s.Append(ctx, []*service.Batch{
		{SessionID: "s1", Events: []*service.Event{addedMessage("m1", "s1", 1, "fine")}},
		{SessionID: "s2", Events: []*service.Event{addedMessage("m2", "s2", 1, "poison")}},
		{SessionID: "s3", Events: []*service.Event{addedMessage("m3", "s3", 1, "fine")}},
	})
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("good batches: %v, %v", errs[0], errs[2])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "no_poison") {
		t.Errorf("the poisoned batch: %v, want the constraint's error", errs[1])
	}
	for id, want := range map[string]int64{"s1": 1, "s2": 0, "s3": 1} {
		if got := lastSeq(t, s, id); got != want {
			t.Errorf("%s: LastSeq %d, want %d", id, got, want)
		}
	}
}

// TestRowClaimedMeanwhile has another transaction insert a row of another session with
// the ID a batch writes, after Append read the state and before it writes: the upsert
// leaves the row alone, talkgraph_all_written fails the transaction, and Append, trying
// again, finds the row and refuses that batch alone.
func TestRowClaimedMeanwhile(t *testing.T) {
	ctx := t.Context()
	url := withParam(t, newSchema(t, newDatabase(t)), "application_name", "talkgraph_claimed")
	s := mustOpen(t, url, postgres.Options{})
	for _, id := range []string{"s1", "s2", "s3"} {
		must(t, create(s, id))
	}
	other, err := pgx.Connect(ctx, url)
	must(t, err)
	defer other.Close(context.Background())
	tx, err := other.Begin(ctx)
	must(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(ctx, `INSERT INTO messages (id, session_id, seq, role, kind, content, status, run_id, question_id, created_at, error)
		VALUES ('m1', 's2', 1, 'ASSISTANT', 'TEXT', 'x', 'COMPLETE', '', '', 0, '')`)
	must(t, err)

	done := make(chan []error)
	go func() {
		done <- s.Append(context.Background(), []*service.Batch{
			{SessionID: "s1", Events: []*service.Event{addedMessage("m1", "s1", 1, "mine?")}},
			{SessionID: "s3", Events: []*service.Event{addedMessage("m3", "s3", 1, "fine")}},
		})
	}()
	// Wait for the upsert to wait for the uncommitted row, then commit it.
	watch := admin(t)
	waiting := false
	for deadline := time.Now().Add(10 * time.Second); !waiting && time.Now().Before(deadline); {
		must(t, watch.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE application_name = 'talkgraph_claimed' AND wait_event_type = 'Lock'`).Scan(&waiting))
		time.Sleep(10 * time.Millisecond)
	}
	if !waiting {
		t.Fatal("Append never waited for the other transaction's row")
	}
	must(t, tx.Commit(ctx))
	errs := <-done
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "belongs to another session") {
		t.Errorf("the batch with a row of s2: %v, want it refused", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("the good batch: %v", errs[1])
	}
	if m, err := s.Message(ctx, "m1"); err != nil || m.SessionID != "s2" || m.Content != "x" {
		t.Errorf("m1 = %+v, %v; want s2's row untouched", m, err)
	}
	if got := lastSeq(t, s, "s1"); got != 0 {
		t.Errorf("the refused batch moved s1's log to %d", got)
	}
}

// TestText checks what PostgreSQL's text could not keep: free text with NUL characters
// round-trips; an identifier with one is refused alone with EINVALID.
func TestText(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, newSchema(t, newDatabase(t)), postgres.Options{})
	sess := newSession("s1")
	sess.Title = "a\x00b ✓"
	content := "nul \x00 here, ünïcode ✓, and an empty answer next"
	empty := ""
	m := &service.Message{ID: "m1", SessionID: "s1", Seq: 1, Content: content, Role: service.RoleAssistant,
		Kind: service.KindText, Status: service.MessageComplete, CreatedAt: t0}
	q := &service.Question{ID: "q1", RunID: "r1", SessionID: "s1", Prompt: "?\x00", Answer: &empty, AskedAt: t0, AnsweredAt: &t0}
	must(t, appendOne(s, &service.Batch{SessionID: "s1", Create: sess, Events: []*service.Event{
		{Seq: 1, Type: service.EventMessageAdded, At: t0, Message: m},
		{Seq: 2, Type: service.EventMessageChunk, At: t0, Key: "m1", MessageID: "m1", Delta: "\x00"},
		{Seq: 3, Type: service.EventQuestionAnswered, At: t0, Question: q},
	}}))
	got, err := s.Session(ctx, "s1")
	must(t, err)
	if got.Title != sess.Title {
		t.Errorf("title = %q, want %q", got.Title, sess.Title)
	}
	gm, err := s.Message(ctx, "m1")
	must(t, err)
	if gm.Content != content {
		t.Errorf("content = %q, want %q", gm.Content, content)
	}
	gq, err := s.Question(ctx, "q1")
	must(t, err)
	if gq.Prompt != q.Prompt || gq.Answer == nil || *gq.Answer != "" || gq.Choices != nil {
		t.Errorf("question = %+v, want prompt %q, an empty answer and no choices", gq, q.Prompt)
	}
	evs, err := s.Events(ctx, "s1", 1, 1)
	must(t, err)
	if len(evs) != 1 || evs[0].Delta != "\x00" {
		t.Errorf("chunk = %+v, want a NUL delta", evs)
	}

	errs := s.Append(ctx, []*service.Batch{chunkBatch("s\x00", 1, "x"), chunkBatch("s1", 4, "x")})
	wantCode(t, "a session ID with NUL", errs[0], service.EINVALID)
	if errs[1] != nil {
		t.Errorf("the good batch beside it: %v", errs[1])
	}
	if _, err := s.Session(ctx, "s\x00"); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("Session with a NUL ID: %v, want ENOTFOUND", err)
	}
	if qs, err := s.Questions(ctx, []string{"q1", "\xff"}); err != nil || len(qs) != 1 {
		t.Errorf("Questions with an invalid ID: %v, %v", qs, err)
	}
}

// TestTimes checks the ends of the time range: the zero time round-trips, and a time
// beyond what int64 nanoseconds hold is refused with EINVALID.
func TestTimes(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, newSchema(t, newDatabase(t)), postgres.Options{})
	sess := newSession("s1")
	sess.CreatedAt = time.Time{}
	must(t, appendOne(s, &service.Batch{SessionID: "s1", Create: sess}))
	got, err := s.Session(ctx, "s1")
	must(t, err)
	if !got.CreatedAt.IsZero() || got.UpdatedAt != t0 {
		t.Errorf("times = %v, %v; want zero and %v", got.CreatedAt, got.UpdatedAt, t0)
	}
	far := newSession("s2")
	far.UpdatedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	wantCode(t, "a time in the year 3000", appendOne(s, &service.Batch{SessionID: "s2", Create: far}), service.EINVALID)
	// As a bound it is fine.
	if ss, err := s.Sessions(ctx, "u1", &service.SessionPosition{UpdatedAt: far.UpdatedAt, ID: "z"}, 0); err != nil || len(ss) != 1 {
		t.Errorf("Sessions after the year 3000: %v, %v", ss, err)
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
