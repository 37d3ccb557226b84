package postgres

import (
	"context"
	"errors"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

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
	return getAll(ctx, s, "sessions", scanSession, qSessionsAft, userID, dbBound(after.UpdatedAt), after.ID, sqlLimit(limit))
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
		ms, err := getAll(ctx, s, "messages", scanMessage, qMessagesLast, sessionID, after, before, int64(page.Last))
		slices.Reverse(ms)
		return ms, err
	}
	return getAll(ctx, s, "messages", scanMessage, qMessagesFirst, sessionID, after, before, sqlLimit(page.First))
}

// Message implements service.Store.
func (s *Store) Message(ctx context.Context, id string) (*service.Message, error) {
	return getOne(ctx, s, "message", id, qMessage, scanMessage, id)
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
	if !storable([]any{sessionID}) {
		return 0, nil
	}
	err := s.pool.QueryRow(ctx, qCountMessages, sessionID).Scan(&n)
	if brokenConn(err) && ctx.Err() == nil { // once: the pool replaces the connection
		err = s.pool.QueryRow(ctx, qCountMessages, sessionID).Scan(&n)
	}
	if err != nil {
		return 0, fail("counting messages", err)
	}
	return n, nil
}

// SessionRuns implements service.Store.
func (s *Store) SessionRuns(ctx context.Context, sessionID string, statuses ...service.RunStatus) ([]*service.Run, error) {
	list := make([]string, len(statuses))
	for i, st := range statuses {
		list[i] = string(st)
	}
	return getAll(ctx, s, "runs of a session", scanRun, qSessionRuns, sessionID, list)
}

// Run implements service.Store.
func (s *Store) Run(ctx context.Context, id string) (*service.Run, error) {
	return getOne(ctx, s, "run", id, qRun, scanRun, id)
}

// RunsByStatus implements service.Store.
func (s *Store) RunsByStatus(ctx context.Context, statuses ...service.RunStatus) ([]*service.Run, error) {
	list := make([]string, len(statuses))
	for i, st := range statuses {
		list[i] = string(st)
	}
	return getAll(ctx, s, "runs by status", scanRun, qRunsByStatus, list)
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
		return []*service.Question{}, s.check()
	}
	return getAll(ctx, s, "questions", scanQuestion, qQuestions, validIDs(ids))
}

// ToolCalls implements service.Store.
func (s *Store) ToolCalls(ctx context.Context, messageIDs []string) ([]*service.ToolCall, error) {
	if len(messageIDs) == 0 {
		return []*service.ToolCall{}, s.check()
	}
	return getAll(ctx, s, "tool calls", scanToolCall, qToolCalls, validIDs(messageIDs))
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
	if !storable([]any{userID}) {
		return 0, 0, nil
	}
	err := s.pool.QueryRow(ctx, qFootprint, userID).Scan(&n, &bytes)
	if brokenConn(err) && ctx.Err() == nil { // once: the pool replaces the connection
		err = s.pool.QueryRow(ctx, qFootprint, userID).Scan(&n, &bytes)
	}
	if err != nil {
		return 0, 0, fail("footprint", err)
	}
	return n, bytes, nil
}

// Idempotency implements service.Store.
func (s *Store) Idempotency(ctx context.Context, userID, key string) (*service.IdempotencyRecord, error) {
	return getOne(ctx, s, "idempotency record", key, qIdempotency, scanIdempotency, userID, key)
}

// validIDs leaves out the IDs that no row can have (NUL, invalid UTF-8), which PostgreSQL
// would refuse as query arguments.
func validIDs(ids []string) []string {
	var v validator
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool {
		v.err = nil
		v.ids(id)
		return v.err != nil
	})
}

// storable reports whether every argument that is a string can be a query argument.
func storable(args []any) bool {
	var v validator
	for _, a := range args {
		if s, ok := a.(string); ok {
			v.ids(s)
		}
	}
	return v.err == nil
}

// getOne reads one row; ENOTFOUND when there is none.
func getOne[T any](ctx context.Context, s *Store, what, id, query string, scan func(scanner) (*T, error), args ...any) (*T, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if !storable(args) {
		return nil, service.Errorf(service.ENOTFOUND, "%s %s not found", what, id)
	}
	v, err := scan(s.pool.QueryRow(ctx, query, args...))
	if brokenConn(err) && ctx.Err() == nil { // once: the pool replaces the connection
		v, err = scan(s.pool.QueryRow(ctx, query, args...))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, service.Errorf(service.ENOTFOUND, "%s %s not found", what, id)
	}
	if err != nil {
		return nil, fail(what, err)
	}
	return v, nil
}

// getAll reads every row of a query; an empty slice when there is none.
func getAll[T any](ctx context.Context, s *Store, what string, scan func(scanner) (*T, error), query string, args ...any) ([]*T, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if !storable(args) {
		return []*T{}, nil
	}
	out, err := queryAll(ctx, s, scan, query, args)
	if brokenConn(err) && ctx.Err() == nil { // once: the pool replaces the connection
		out, err = queryAll(ctx, s, scan, query, args)
	}
	if err != nil {
		return nil, fail(what, err)
	}
	return out, nil
}

func queryAll[T any](ctx context.Context, s *Store, scan func(scanner) (*T, error), query string, args []any) ([]*T, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
