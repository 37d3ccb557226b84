package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/postgres"
)

// TestEachRoundWritesASessionRowOnce: PostgreSQL keeps a new version of a row for every
// statement that updates it. A session is inserted whole (with its epoch), and a round
// writes its row once however much the round changes of it (here its activity time and
// its weight, then its unread flag), each change as the store reads it back.
func TestEachRoundWritesASessionRowOnce(t *testing.T) {
	url := newSchema(t, newDatabase(t))
	s := mustOpen(t, url, postgres.Options{})
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// The single row of a fresh table: each version takes the next item of page 0 (no
	// pruning on a page this empty), so the item of the current one counts the versions.
	versions := func() int {
		t.Helper()
		var ctid string
		if err := conn.QueryRow(t.Context(), `SELECT ctid::text FROM sessions WHERE id = 's1'`).Scan(&ctid); err != nil {
			t.Fatal(err)
		}
		var page, item int
		if _, err := fmt.Sscanf(ctid, "(%d,%d)", &page, &item); err != nil || page != 0 {
			t.Fatalf("ctid %q: %v", ctid, err)
		}
		return item
	}

	must(t, create(s, "s1"))
	if n := versions(); n != 1 {
		t.Fatalf("creating a session wrote %d versions of its row; want 1", n)
	}

	at := t0.Add(time.Minute)
	user := addedMessage("m1", "s1", 1, "hello there")
	user.At, user.Message.Role = at, service.RoleUser
	must(t, appendOne(s, &service.Batch{SessionID: "s1", Events: []*service.Event{user}}))
	if n := versions(); n != 2 {
		t.Fatalf("a round that moves the session's time and weight wrote %d versions in all; want 2", n)
	}
	sess, err := s.Session(t.Context(), "s1")
	must(t, err)
	if !sess.UpdatedAt.Equal(at) || sess.Unread {
		t.Fatalf("after the user's message: updated %v, unread %v; want %v, false", sess.UpdatedAt, sess.Unread, at)
	}
	var bytes int64
	if err := conn.QueryRow(t.Context(), `SELECT bytes FROM sessions WHERE id = 's1'`).Scan(&bytes); err != nil {
		t.Fatal(err)
	}
	if want := newSession("s1").Size() + int64(len("hello there")); bytes != want {
		t.Fatalf("the session weighs %d bytes; want %d", bytes, want)
	}

	reply := addedMessage("m2", "s1", 2, "hi")
	reply.Type = service.EventMessageCompleted
	must(t, appendOne(s, &service.Batch{SessionID: "s1", Events: []*service.Event{reply}}))
	if n := versions(); n != 3 {
		t.Fatalf("a round that sets the unread flag wrote %d versions in all; want 3", n)
	}
	sess, err = s.Session(t.Context(), "s1")
	must(t, err)
	if !sess.Unread || !sess.UpdatedAt.Equal(at) {
		t.Fatalf("after the reply: unread %v, updated %v; want true, %v", sess.Unread, sess.UpdatedAt, at)
	}
}
