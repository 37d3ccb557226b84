package sqlite

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/talkgraph/talkgraph/service"
)

// TestOldHistoriesAreLines: a database written before the conversation was a tree (the
// schema of migration 3) opens with each session's history as one branch, each message's
// parent the message before it, and goes on from there.
func TestOldHistoriesAreLines(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := connect(path, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	const when = "2026-01-02T03:04:05.000000000Z"
	for _, q := range []string{
		`INSERT INTO sessions (id, user_id, title, settings, created_at, updated_at, bytes) VALUES
			('s1', 'u', 't', '{"agent":"demo","busyPolicy":"INTERRUPT"}', '` + when + `', '` + when + `', 0),
			('s2', 'u', 't', '{"agent":"demo","busyPolicy":"INTERRUPT"}', '` + when + `', '` + when + `', 0)`,
		`INSERT INTO messages (id, session_id, seq, role, kind, content, status, run_id, question_id, created_at, error) VALUES
			('m1', 's1', 1, 'USER', 'TEXT', 'hi', 'COMPLETE', 'r1', '', '` + when + `', ''),
			('m2', 's1', 4, 'ASSISTANT', 'TEXT', 'hello', 'COMPLETE', 'r1', '', '` + when + `', ''),
			('x1', 's2', 2, 'USER', 'TEXT', 'other', 'COMPLETE', 'r2', '', '` + when + `', ''),
			('m3', 's1', 9, 'USER', 'TEXT', 'again', 'COMPLETE', 'r3', '', '` + when + `', '')`,
		`INSERT INTO events (session_id, seq, type, at, key, message_id, delta, delta_offset, coalesced_from) VALUES
			('s1', 9, 'MessageAdded', '` + when + `', '', '', '', 0, 0)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ms, err := s.Messages(ctx, "s1", service.MessagePage{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.ID+"<"+m.ParentID)
	}
	if want := []string{"m1<", "m2<m1", "m3<m2"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("the old history reads %v, want %v", got, want)
	}
	if x, err := s.Message(ctx, "x1"); err != nil || x.ParentID != "" || x.OffBranch {
		t.Fatalf("the other session's message: %+v %v", x, err)
	}
	// It goes on: a new reply joins the branch after the last message.
	reply := &service.Message{ID: "m4", SessionID: "s1", Role: service.RoleAssistant, Kind: service.KindText,
		Status: service.MessageComplete, ParentID: "m3", Seq: 10, CreatedAt: ms[0].CreatedAt}
	errs := s.Append(ctx, []*service.Batch{{SessionID: "s1", Events: []*service.Event{{SessionID: "s1", Seq: 10,
		Type: service.EventMessageAdded, At: ms[0].CreatedAt, Message: reply}}}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if ms, _ = s.Messages(ctx, "s1", service.MessagePage{Last: 1}); len(ms) != 1 || ms[0].ID != "m4" {
		t.Fatalf("after a new reply the branch ends with %+v", ms)
	}
}
