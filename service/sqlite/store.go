package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/talkgraph/talkgraph/service"
)

// Apply implements service.Store, in one BEGIN IMMEDIATE transaction on the writer
// connection.
func (s *Store) Apply(ctx context.Context, b *service.Batch) error {
	if b == nil || b.Empty() {
		return nil
	}
	if err := s.check(); err != nil {
		return err
	}
	if err := b.Check(); err != nil {
		return err
	}
	// Encode what does not depend on the stored state before taking the write lock.
	var sessionRow []any
	if b.Session != nil {
		var err error
		if sessionRow, err = sessionArgs(b.Session); err != nil {
			return fmt.Errorf("sqlite: apply: %w", err)
		}
	}
	questionRows := make([][]any, len(b.Questions))
	for i, q := range b.Questions {
		var err error
		if questionRows[i], err = questionArgs(q); err != nil {
			return fmt.Errorf("sqlite: apply: %w", err)
		}
	}
	rewriteRows := make([][]any, len(b.Rewrite))
	for i, e := range b.Rewrite {
		c := *e
		c.SessionID = b.SessionID
		var err error
		if rewriteRows[i], err = eventArgs(&c); err != nil {
			return fmt.Errorf("sqlite: apply: %w", err)
		}
	}

	req := &applyReq{ctx: ctx, b: b, sessionRow: sessionRow, questionRows: questionRows, rewriteRows: rewriteRows, done: make(chan struct{})}
	s.submit(req)
	if req.err != nil {
		return req.err
	}
	res := req.res

	// Tell the caller what was assigned.
	for i, e := range b.Events {
		e.SessionID = b.SessionID
		e.Seq = res.eventSeqs[i]
		if e.Type == service.EventMessageAdded && e.Message != nil && e.Message.Seq == 0 {
			e.Message.Seq = e.Seq
		}
	}
	for i, m := range b.Messages {
		m.Seq = res.messageSeqs[i]
	}
	if b.Session != nil {
		b.Session.LastSeq = res.lastSeq
	}
	return nil
}

// applyReq is one Apply waiting for its turn on the writer connection.
type applyReq struct {
	ctx                       context.Context
	b                         *service.Batch
	sessionRow                []any
	questionRows, rewriteRows [][]any

	res  *applied
	err  error
	done chan struct{}
}

// maxGroup is the most batches one transaction commits.
const maxGroup = 128

// submit applies r, committing it together with the batches that other goroutines apply at
// the same moment (group commit): the first to arrive leads, writing every waiting batch in
// one transaction, each inside its own savepoint so that one failing batch writes nothing
// and fails alone. Sessions streaming at once thus share commits instead of queueing for
// one each.
func (s *Store) submit(r *applyReq) {
	s.gmu.Lock()
	s.pending = append(s.pending, r)
	if s.leading {
		s.gmu.Unlock()
		<-r.done
		return
	}
	s.leading = true
	for len(s.pending) > 0 {
		n := min(len(s.pending), maxGroup)
		group := append([]*applyReq(nil), s.pending[:n]...)
		s.pending = append(s.pending[:0], s.pending[n:]...)
		s.gmu.Unlock()
		s.applyGroup(group)
		s.gmu.Lock()
	}
	s.leading = false
	s.gmu.Unlock()
	<-r.done
}

// applyGroup writes the batches of group in one transaction and tells each its outcome.
func (s *Store) applyGroup(group []*applyReq) {
	defer func() {
		for _, r := range group {
			close(r.done)
		}
	}()
	// The transaction outlives any one caller's context: a caller that gives up does not
	// take the others' writes with it.
	ctx := context.Background()
	failAll := func(err error) {
		for _, r := range group {
			if r.err == nil {
				r.err, r.res = s.fail("apply", err), nil
			}
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		failAll(err)
		return
	}
	defer tx.Rollback()
	alone := len(group) == 1
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		if !alone {
			if _, err := tx.ExecContext(ctx, "SAVEPOINT batch"); err != nil {
				failAll(err)
				return
			}
		}
		r.res, r.err = s.applyTx(ctx, tx, r.b, r.sessionRow, r.questionRows, r.rewriteRows)
		switch {
		case r.err != nil && alone:
			r.err = s.fail("apply", r.err)
			return
		case r.err != nil:
			r.err = s.fail("apply", r.err)
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO batch; RELEASE batch"); err != nil {
				failAll(err)
				return
			}
		case !alone:
			if _, err := tx.ExecContext(ctx, "RELEASE batch"); err != nil {
				failAll(err)
				return
			}
		}
	}
	if err := tx.Commit(); err != nil {
		failAll(err)
	}
}

// applied is what Apply assigned.
type applied struct {
	lastSeq     int64
	eventSeqs   []int64
	messageSeqs []int64
}

func (s *Store) applyTx(ctx context.Context, tx *sql.Tx, b *service.Batch, sessionRow []any, questionRows, rewriteRows [][]any) (*applied, error) {
	exec := func(q string, args ...any) (sql.Result, error) { return tx.ExecContext(ctx, q, args...) }
	// upsert runs an upsert whose WHERE refuses to move a row to another session.
	upsert := func(what, id, q string, args ...any) error {
		res, err := exec(q, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("%s %s belongs to another session than %s", what, id, b.SessionID)
		}
		return nil
	}

	// One statement both finds the session and moves its LastSeq past the new events; a
	// refused batch rolls it back with the rest.
	n := int64(len(b.Events))
	var lastSeq int64
	err := tx.QueryRowContext(ctx, qBumpLastSeq, n, b.SessionID).Scan(&lastSeq)
	exists := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	if exists {
		lastSeq -= n
	}
	if !exists && (b.Session == nil || b.Delete) {
		return nil, service.Errorf(service.ENOTFOUND, "session %s not found", b.SessionID)
	}
	if b.Delete {
		_, err := exec(qDeleteSession, b.SessionID)
		return &applied{}, err
	}
	next := lastSeq
	for _, e := range b.Events {
		next++
		if e.Seq != 0 && e.Seq != next {
			return nil, service.Errorf(service.ECONFLICT, "event sequence number %d does not follow the session's last, %d", e.Seq, next-1)
		}
	}
	for _, e := range b.Rewrite {
		if e.Seq > lastSeq {
			return nil, fmt.Errorf("rewrite of event %d beyond the session's last %d", e.Seq, lastSeq)
		}
	}

	if sessionRow != nil {
		// last_seq is only written when the row is created.
		if _, err := exec(qUpsertSession, append(sessionRow, n)...); err != nil {
			return nil, err
		}
	}
	if r := b.Idempotency; r != nil {
		res, err := exec(qInsertIdempotency, idempotencyArgs(r)...)
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, err
		} else if n == 0 {
			return nil, service.Errorf(service.ECONFLICT, "idempotency key %q was already used", r.Key)
		}
	}
	for _, seq := range b.DropEvents {
		if _, err := exec(qDropEvent, b.SessionID, seq); err != nil {
			return nil, err
		}
	}
	for _, args := range rewriteRows {
		if _, err := exec(qRewriteEvent, args...); err != nil {
			return nil, err
		}
	}

	out := &applied{eventSeqs: make([]int64, len(b.Events)), messageSeqs: make([]int64, len(b.Messages))}
	addedSeq := make(map[string]int64)
	for i, e := range b.Events {
		lastSeq++
		out.eventSeqs[i] = lastSeq
		c := *e
		c.SessionID, c.Seq = b.SessionID, lastSeq
		if c.Type == service.EventMessageAdded && c.Message != nil {
			addedSeq[c.Message.ID] = lastSeq
			if c.Message.Seq == 0 {
				m := *c.Message
				m.Seq = lastSeq
				c.Message = &m
			}
		}
		args, err := eventArgs(&c)
		if err != nil {
			return nil, err
		}
		if _, err := exec(qInsertEvent, args...); err != nil {
			return nil, err
		}
	}
	out.lastSeq = lastSeq

	for i, m := range b.Messages {
		args := messageArgs(m)
		if m.Seq == 0 {
			if seq, ok := addedSeq[m.ID]; ok {
				args[2] = seq
			}
		}
		err := tx.QueryRowContext(ctx, qUpsertMessage, args...).Scan(&out.messageSeqs[i])
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("message %s belongs to another session than %s", m.ID, b.SessionID)
		}
		if err != nil {
			return nil, err
		}
	}
	for _, r := range b.Runs {
		if err := upsert("run", r.ID, qUpsertRun, runArgs(r)...); err != nil {
			return nil, err
		}
	}
	for i, q := range b.Questions {
		if err := upsert("question", q.ID, qUpsertQuestion, questionRows[i]...); err != nil {
			return nil, err
		}
	}
	for _, tc := range b.ToolCalls {
		if err := upsert("tool call", tc.ID, qUpsertToolCall, toolCallArgs(tc)...); err != nil {
			return nil, err
		}
	}
	for _, ap := range b.OutputAppends {
		if _, err := exec(qAppendOutput, ap.Text, ap.ID, b.SessionID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

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

// Messages implements service.Store. After and Before bound the page when set, whichever
// of First and Last is used.
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

// RunsByStatus implements service.Store. Runs created at the same time are ordered by ID.
func (s *Store) RunsByStatus(ctx context.Context, statuses ...service.RunStatus) ([]*service.Run, error) {
	list, err := json.Marshal(append([]service.RunStatus{}, statuses...))
	if err != nil {
		return nil, err
	}
	return getAll(ctx, s, "runs by status", scanRun, qRunsByStatus, string(list))
}

// Question implements service.Store.
func (s *Store) Question(ctx context.Context, id string) (*service.Question, error) {
	return getOne(ctx, s, "question", id, qQuestion, scanQuestion, id)
}

// ToolCalls implements service.Store. Tool calls started at the same time are ordered by
// ID.
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

// getOne reads one row from the read pool; ENOTFOUND when there is none.
func getOne[T any](ctx context.Context, s *Store, what, id, query string, scan func(scanner) (*T, error), args ...any) (*T, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	v, err := scan(s.r.QueryRowContext(ctx, query, args...))
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
	rows, err := s.r.QueryContext(ctx, query, args...)
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
