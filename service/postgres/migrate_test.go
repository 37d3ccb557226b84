package postgres

import (
	"context"
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/service"
)

// TestOldHistoriesAreLines: a database written before the conversation was a tree (the
// schema of migration 2) opens with each session's history as one branch, each message's
// parent the message before it.
func TestOldHistoriesAreLines(t *testing.T) {
	ctx := context.Background()
	url := testsvc.NewDatabase(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO sessions (id, user_id, title, settings, created_at, updated_at) VALUES
			('s1', 'u', 't', '{"agent":"demo","busyPolicy":"INTERRUPT"}', 1, 1),
			('s2', 'u', 't', '{"agent":"demo","busyPolicy":"INTERRUPT"}', 1, 1)`,
		`INSERT INTO messages (id, session_id, seq, role, kind, content, status, run_id, question_id, created_at, error) VALUES
			('m1', 's1', 1, 'USER', 'TEXT', 'hi', 'COMPLETE', 'r1', '', 1, ''),
			('m2', 's1', 4, 'ASSISTANT', 'TEXT', 'hello', 'COMPLETE', 'r1', '', 1, ''),
			('x1', 's2', 2, 'USER', 'TEXT', 'other', 'COMPLETE', 'r2', '', 1, ''),
			('m3', 's1', 9, 'USER', 'TEXT', 'again', 'COMPLETE', 'r3', '', 1, '')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s, err := Open(ctx, url, Options{})
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
}
