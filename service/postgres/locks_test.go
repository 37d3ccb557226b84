package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/postgres"
)

// TestDeletedSessionLeavesNoEvents: no foreign key ties the log to its session (migration
// 9); the deletion removes the session's events in the same write, so nothing of its log
// stays, and a session made again under its ID begins an empty log.
func TestDeletedSessionLeavesNoEvents(t *testing.T) {
	url := newSchema(t, newDatabase(t))
	s := mustOpen(t, url, postgres.Options{})
	must(t, create(s, "s1"))
	must(t, create(s, "s2"))
	for seq := int64(1); seq <= 3; seq++ {
		must(t, appendOne(s, chunkBatch("s1", seq, "word ")))
		must(t, appendOne(s, chunkBatch("s2", seq, "word ")))
	}
	must(t, appendOne(s, &service.Batch{SessionID: "s1", Delete: true}))

	conn, err := pgx.Connect(t.Context(), url)
	must(t, err)
	defer conn.Close(t.Context())
	var left, other int
	must(t, conn.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE session_id = 's1'), count(*) FILTER (WHERE session_id = 's2') FROM events`).Scan(&left, &other))
	if left != 0 || other != 3 {
		t.Fatalf("after deleting s1: %d of its events stored, %d of s2's; want 0 and 3", left, other)
	}
	must(t, create(s, "s1"))
	if got := lastSeq(t, s, "s1"); got != 0 {
		t.Fatalf("s1 made again begins at %d; want an empty log", got)
	}
	must(t, appendOne(s, chunkBatch("s1", 1, "anew")))
	wantCode(t, "appending to a session that does not exist", appendOne(s, chunkBatch("missing", 1, "x")), service.ENOTFOUND)
}

// TestStoresNeverTrustAnEndAnotherWrote: a store knows where the logs it wrote end, but
// only while the session's epoch is the one it left. Here another store (a second
// replica) deletes the session and makes it again under the same ID with a shorter log;
// the first store's next append, one past the end it knew, is refused, and the log holds
// no gap; an append at the log's real end goes through.
func TestStoresNeverTrustAnEndAnotherWrote(t *testing.T) {
	url := newSchema(t, newDatabase(t))
	a := mustOpen(t, url, postgres.Options{})
	b := mustOpen(t, url, postgres.Options{})
	must(t, create(a, "s1"))
	for seq := int64(1); seq <= 3; seq++ {
		must(t, appendOne(a, chunkBatch("s1", seq, "a ")))
	}
	must(t, appendOne(b, &service.Batch{SessionID: "s1", Delete: true}))
	must(t, create(b, "s1"))
	must(t, appendOne(b, chunkBatch("s1", 1, "b ")))

	wantCode(t, "the first store appending where its old log ended", appendOne(a, chunkBatch("s1", 4, "a ")), service.ECONFLICT)
	if got := lastSeq(t, a, "s1"); got != 1 {
		t.Fatalf("the log ends at %d; want 1, as the second store left it", got)
	}
	must(t, appendOne(a, chunkBatch("s1", 2, "a ")))
	must(t, appendOne(b, chunkBatch("s1", 3, "b ")))
	must(t, appendOne(a, chunkBatch("s1", 4, "a ")))
	if got := lastSeq(t, b, "s1"); got != 4 {
		t.Fatalf("after turns of both stores the log ends at %d; want 4", got)
	}
}
