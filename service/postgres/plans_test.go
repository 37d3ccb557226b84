package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/service"
)

// TestAppendPlansItsStatementsOnce: Append's statements use their generic plans from
// their first call on a connection. Left to choose, PostgreSQL plans a statement whose
// arguments are arrays anew at every call (the custom plan, costed for the arrays' real
// lengths, looks cheaper than the generic one), which costs every round a planning of
// each statement for a plan that finds the same rows by the same keys.
func TestAppendPlansItsStatementsOnce(t *testing.T) {
	ctx := t.Context()
	// One connection: every round's statements are prepared on it, and its own view of
	// them (pg_prepared_statements) counts their plans.
	s, err := Open(ctx, testsvc.NewDatabase(t), Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	const rounds, sessions = 8, 3
	for r := range rounds {
		var batches []*service.Batch
		for i := range sessions {
			id := fmt.Sprintf("s%d", i)
			b := &service.Batch{SessionID: id}
			if r == 0 {
				b.Create = &service.TalkSession{ID: id, UserID: "u1", Title: "talk",
					Settings: service.Settings{Agent: "demo"}, CreatedAt: at, UpdatedAt: at}
			}
			seq := int64(r + 1)
			mid := fmt.Sprintf("m%d-%d", i, r)
			b.Events = []*service.Event{{Seq: seq, Type: service.EventMessageAdded, At: at.Add(time.Duration(r) * time.Second),
				Message: &service.Message{ID: mid, SessionID: id, Seq: seq, Role: service.RoleUser, Kind: service.KindText,
					Content: "hello", Status: service.MessageComplete, CreatedAt: at}}}
			batches = append(batches, b)
		}
		for i, err := range s.Append(ctx, batches) {
			if err != nil {
				t.Fatalf("round %d, batch %d: %v", r, i, err)
			}
		}
	}

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for name, q := range map[string]string{
		"the session locks":          qLockSessions,
		"the sessions' states":       qSessionStates,
		"the rows' owners":           qForeignRows,
		"the events' insert":         qInsertEvents,
		"the messages' upsert":       qUpsertMessages,
		"the sessions' rows' update": qChangeSessions,
	} {
		var generic, custom int64
		err := conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, q).
			Scan(&generic, &custom)
		if err != nil {
			t.Fatalf("%s: not found among the connection's prepared statements: %v", name, err)
		}
		if custom != 0 || generic < rounds-1 {
			t.Errorf("%s: %d custom plans and %d generic ones in %d rounds; want none custom", name, custom, generic, rounds)
		}
	}
}
