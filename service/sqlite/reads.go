package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"slices"

	"github.com/talkgraph/talkgraph/service"
)

// Session implements service.Store.
func (s *Store) Session(ctx context.Context, id string) (*service.TalkSession, error) {
	return getOne(ctx, s, "session", id, qSession, scanSession, id)
}

// Sessions implements service.Store.
func (s *Store) Sessions(ctx context.Context, userID string, after *service.SessionPosition, limit int) ([]*service.TalkSession, error) {
	if after == nil {
		return getAll(ctx, s, "sessions", scanSession, qSessions, userID, sqlLimit(limit))
	}
	return getAll(ctx, s, "sessions", scanSession, qSessionsAft, userID, dbTime(after.UpdatedAt), after.ID, sqlLimit(limit))
}

// Messages implements service.Store.
func (s *Store) Messages(ctx context.Context, sessionID string, page service.MessagePage) ([]*service.Message, error) {
	after, before := int64(math.MinInt64), int64(math.MaxInt64)
	if page.After > 0 {
		after = page.After
	}
	if page.Before > 0 {
		before = page.Before
	}
	if page.Last > 0 {
		ms, err := getAll(ctx, s, "messages", scanMessage, qMessagesLast, sessionID, after, before, page.Last)
		slices.Reverse(ms)
		return ms, err
	}
	return getAll(ctx, s, "messages", scanMessage, qMessagesFirst, sessionID, after, before, sqlLimit(page.First))
}

// Message implements service.Store.
func (s *Store) Message(ctx context.Context, id string) (*service.Message, error) {
	return getOne(ctx, s, "message", id, qMessage, scanMessage, id)
}

// Run implements service.Store.
func (s *Store) Run(ctx context.Context, id string) (*service.Run, error) {
	return getOne(ctx, s, "run", id, qRun, scanRun, id)
}

// RunsByStatus implements service.Store.
func (s *Store) RunsByStatus(ctx context.Context, statuses ...service.RunStatus) ([]*service.Run, error) {
	list, err := json.Marshal(append([]service.RunStatus{}, statuses...))
	if err != nil {
		return nil, err
	}
	return getAll(ctx, s, "runs by status", scanRun, qRunsByStatus, string(list))
}

// Children implements service.Store.
func (s *Store) Children(ctx context.Context, sessionID, parentID string, limit int) ([]*service.Message, error) {
	return getAll(ctx, s, "children", scanMessage, qChildren, sessionID, parentID, sqlLimit(limit))
}

// CountMessages implements service.Store.
func (s *Store) CountMessages(ctx context.Context, sessionID string) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var n int
	if err := s.stmt(qCountMessages).QueryRowContext(context.WithoutCancel(ctx), sessionID).Scan(&n); err != nil {
		return 0, s.fail("counting messages", err)
	}
	return n, nil
}

// SessionRuns implements service.Store.
func (s *Store) SessionRuns(ctx context.Context, sessionID string, statuses ...service.RunStatus) ([]*service.Run, error) {
	list, err := json.Marshal(append([]service.RunStatus{}, statuses...))
	if err != nil {
		return nil, err
	}
	return getAll(ctx, s, "runs of a session", scanRun, qSessionRuns, sessionID, string(list))
}

// Question implements service.Store.
func (s *Store) Question(ctx context.Context, id string) (*service.Question, error) {
	return getOne(ctx, s, "question", id, qQuestion, scanQuestion, id)
}

// ToolCall implements service.Store.
func (s *Store) ToolCall(ctx context.Context, id string) (*service.ToolCall, error) {
	return getOne(ctx, s, "tool call", id, qToolCall, scanToolCall, id)
}

// Questions implements service.Store.
func (s *Store) Questions(ctx context.Context, ids []string) ([]*service.Question, error) {
	if len(ids) == 0 {
		return []*service.Question{}, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	return getAll(ctx, s, "questions", scanQuestion, qQuestions, string(list))
}

// ToolCalls implements service.Store.
func (s *Store) ToolCalls(ctx context.Context, messageIDs []string) ([]*service.ToolCall, error) {
	if len(messageIDs) == 0 {
		return []*service.ToolCall{}, nil
	}
	list, err := json.Marshal(messageIDs)
	if err != nil {
		return nil, err
	}
	return getAll(ctx, s, "tool calls", scanToolCall, qToolCalls, string(list))
}

// Events implements service.Store.
func (s *Store) Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]*service.Event, error) {
	return getAll(ctx, s, "events", scanEvent, qEvents, sessionID, afterSeq, sqlLimit(limit))
}

// Footprint implements service.Store.
func (s *Store) Footprint(ctx context.Context, userID string) (int, int64, error) {
	if err := s.check(); err != nil {
		return 0, 0, err
	}
	var n int
	var bytes int64
	if err := s.stmt(qFootprint).QueryRowContext(context.WithoutCancel(ctx), userID).Scan(&n, &bytes); err != nil {
		return 0, 0, s.fail("footprint", err)
	}
	return n, bytes, nil
}

// Idempotency implements service.Store.
func (s *Store) Idempotency(ctx context.Context, userID, key string) (*service.IdempotencyRecord, error) {
	return getOne(ctx, s, "idempotency record", key, qIdempotency, scanIdempotency, userID, key)
}

// sqlLimit turns "0 or less means no limit" into SQLite's LIMIT -1.
func sqlLimit(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// stmt returns the read query prepared on the read pool.
func (s *Store) stmt(query string) *sql.Stmt {
	st := s.reads[query]
	if st == nil {
		panic("sqlite: query not prepared: " + query) // a bug: every read is listed in reads
	}
	return st
}

// getOne reads one row from the read pool; ENOTFOUND when there is none.
func getOne[T any](ctx context.Context, s *Store, what, id, query string, scan func(scanner) (*T, error), args ...any) (*T, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	// Reads are short: they run to the end rather than pay, per query, for watching the
	// caller's context (the driver starts a goroutine to interrupt on cancellation).
	v, err := scan(s.stmt(query).QueryRowContext(context.WithoutCancel(ctx), args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, service.Errorf(service.ENOTFOUND, "%s %s not found", what, id)
	}
	if err != nil {
		return nil, s.fail(what, err)
	}
	return v, nil
}

// getAll reads every row of a query from the read pool; an empty slice when there is none.
func getAll[T any](ctx context.Context, s *Store, what string, scan func(scanner) (*T, error), query string, args ...any) ([]*T, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.stmt(query).QueryContext(context.WithoutCancel(ctx), args...) // see getOne
	if err != nil {
		return nil, s.fail(what, err)
	}
	defer rows.Close()
	out := []*T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, s.fail(what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(what, err)
	}
	return out, nil
}
