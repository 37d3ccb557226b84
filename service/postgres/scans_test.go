package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/postgres"
)

// TestTurnWritesNeverReadATableWhole: the writes of a turn (Append's rounds: the sessions'
// states and their rows' update, the idempotency keys' check, the admission's count of
// a user's running runs, the rows' owners; and Compact folding the finished replies) find
// their rows by key, in a database with no statistics yet (as a new one is, or one that
// grew since autovacuum last looked) and tables of a few thousand rows, where PostgreSQL's
// default costs make reading a table whole look cheaper than a few dozen probes. Each
// table's whole reads are counted by PostgreSQL itself (pg_stat_user_tables.seq_scan).
func TestTurnWritesNeverReadATableWhole(t *testing.T) {
	ctx := t.Context()
	db := newDatabase(t)
	// What the migrations read whole, adding constraints to their new tables, is counted
	// on a schema of its own that is migrated and nothing more.
	migrations := func() map[string]int64 {
		dbURL := newSchema(t, db)
		must(t, mustOpen(t, dbURL, postgres.Options{}).Close())
		return tableReads(t, dbURL, "goose_db_version", -1)
	}()
	dbURL := newSchema(t, db)

	const sessions, chunks = 1000, 20
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%04d", i)
	}
	// turn writes session i's turn n: the user's message (with its idempotency key), its
	// run admitted as RUNNING, chunks of the reply, the run's end; and its folding.
	seq := make([]int64, sessions)
	turn := func(s *postgres.Store, from, to, n int) {
		t.Helper()
		var msgs, runs, text, ends []*service.Batch
		var folds []service.Compaction
		for i := from; i < to; i++ {
			id, user := ids[i], "u"+ids[i]
			mid, rid := fmt.Sprintf("m%s-%d", id, n), fmt.Sprintf("r%s-%d", id, n)
			at := t0.Add(time.Duration(n) * time.Minute)
			next := func() int64 { seq[i]++; return seq[i] }
			b := &service.Batch{SessionID: id, Idempotency: &service.IdempotencyRecord{UserID: user, Key: "k" + mid,
				SessionID: id, MessageID: mid, RunID: rid, CreatedAt: at},
				Events: []*service.Event{{Seq: next(), Type: service.EventMessageAdded, At: at,
					Message: &service.Message{ID: mid, SessionID: id, Seq: seq[i], Role: service.RoleUser,
						Kind: service.KindText, Content: "hello", Status: service.MessageComplete, CreatedAt: at}}}}
			if n == 0 {
				b.Create = &service.TalkSession{ID: id, UserID: user, Title: "talk",
					Settings: service.Settings{Agent: "demo"}, CreatedAt: at, UpdatedAt: at}
			}
			msgs = append(msgs, b)
			r := &service.Run{ID: rid, SessionID: id, UserID: user, Status: service.RunRunning, Agent: "demo", CreatedAt: at}
			runs = append(runs, &service.Batch{SessionID: id, Admit: &service.Admission{UserID: user, RunID: rid, Limit: 4},
				Events: []*service.Event{{Seq: next(), Type: service.EventRunStatusChanged, At: at, Run: r}}})
			key := "reply-" + mid
			first := seq[i] + 1
			evs := make([]*service.Event, chunks)
			for j := range evs {
				evs[j] = &service.Event{Seq: next(), Type: service.EventMessageChunk, At: at, Key: key,
					MessageID: key, Delta: "word ", Offset: 5 * j}
			}
			text = append(text, &service.Batch{SessionID: id, Events: evs})
			done := *r
			done.Status = service.RunCompleted
			ends = append(ends, &service.Batch{SessionID: id,
				Events: []*service.Event{{Seq: next(), Type: service.EventRunStatusChanged, At: at, Run: &done}}})
			folds = append(folds, service.Compaction{SessionID: id, Key: key, FromSeq: first, Prepared: true,
				Folded: []*service.Event{{Seq: first + chunks - 1, Type: service.EventMessageChunk, At: at, Key: key,
					MessageID: key, Delta: strings.Repeat("word ", chunks), CoalescedFrom: first}}})
		}
		for _, round := range [][]*service.Batch{msgs, runs, text, ends} {
			for i, err := range s.Append(ctx, round) {
				if err != nil {
					t.Fatalf("turn %d: append to %s: %v", n, round[i].SessionID, err)
				}
			}
		}
		must(t, s.Compact(ctx, folds))
	}

	// One connection from the new database on, as a server's first: it plans each
	// statement at its first call, on empty tables, and keeps the plan. Three turns of
	// every session, written by rounds of a hundred sessions (as a server's rounds hold
	// them under load), leave tables of a thousand rows and more with no statistics (the
	// test's server may run no autovacuum, and it would not have looked yet).
	s := mustOpen(t, dbURL, postgres.Options{MaxConns: 1})
	for n := range 3 {
		for from := 0; from < sessions; from += 100 {
			turn(s, from, from+100, n)
		}
	}
	must(t, s.Close())
	after := tableReads(t, dbURL, "events", int64(sessions*3*(chunks+3)))

	for _, table := range []string{"sessions", "events", "idempotency", "runs", "messages"} {
		if d := after[table] - migrations[table]; d != 0 {
			t.Errorf("the turns' writes read table %s whole %d times; want every row found by its key", table, d)
		}
	}
	// The admission counts a user's running runs through runs_by_user; runs_by_status would
	// walk the running runs of every user.
	if d := after["runs_by_status"] - migrations["runs_by_status"]; d != 0 {
		t.Errorf("the turns' writes went through the runs by status %d times; want each user's runs found by the user", d)
	}
}

// tableReads returns the count of whole reads (seq_scan) of each table of the schema of
// dbURL, and of the scans of each index (idx_scan) by its name, once PostgreSQL's
// statistics count the rows inserted into table (inserted; -1: as many as it holds): a
// connection's counts reach them when it closes, a moment after the client let it go.
func tableReads(t *testing.T, dbURL, table string, inserted int64) map[string]int64 {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if inserted < 0 {
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&inserted); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int64
		if err := conn.QueryRow(t.Context(), `SELECT n_tup_ins FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2`,
			schema, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == inserted {
			break
		}
		if n > inserted || time.Now().After(deadline) {
			t.Fatalf("the statistics count %d rows inserted into %s, want %d", n, table, inserted)
		}
		// The next query reads the statistics anew.
		if _, err := conn.Exec(t.Context(), `SELECT pg_stat_clear_snapshot()`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows, err := conn.Query(t.Context(), `SELECT relname, seq_scan FROM pg_stat_user_tables WHERE schemaname = $1
		UNION ALL SELECT indexrelname, idx_scan FROM pg_stat_user_indexes WHERE schemaname = $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	reads := map[string]int64{}
	var name string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error { reads[name] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return reads
}
