package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// txWriter writes batches inside one transaction with the store's prepared statements.
type txWriter struct {
	s        *Store
	ctx      context.Context
	tx       *sql.Tx
	prepared map[string]*sql.Stmt
	// last is the end of each session's log as this transaction leaves it (-1: deleted);
	// viewerLast the Seq of users' last viewer events.
	last       map[string]int64
	viewerLast map[string]int64
}

func (w *txWriter) stmt(query string) *sql.Stmt {
	st := w.prepared[query]
	if st == nil {
		prep := w.s.stmts[query]
		if prep == nil { // a multi-row insert of a size not used before
			var err error
			if prep, err = w.s.w.PrepareContext(w.ctx, query); err != nil {
				return nil
			}
			w.s.stmts[query] = prep
		}
		st = w.tx.StmtContext(w.ctx, prep)
		w.prepared[query] = st
	}
	return st
}

func (w *txWriter) exec(query string, args ...any) (int64, error) {
	st := w.stmt(query)
	if st == nil {
		return 0, fmt.Errorf("sqlite: cannot prepare %q", query)
	}
	res, err := st.ExecContext(w.ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// lastSeq returns the end of a session's log (-1 when the session does not exist), as the
// transaction sees it.
func (w *txWriter) lastSeq(id string) (int64, error) {
	if last, ok := w.last[id]; ok {
		return last, nil
	}
	if last, ok := w.s.last[id]; ok {
		return last, nil
	}
	var last int64
	err := w.tx.QueryRowContext(w.ctx, qSessionLast, id).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, nil
	}
	return last, err
}

// check finds whether the stored state refuses b (refused), writing nothing then; when it
// does not, b's idempotency key is taken and the end of its session's log moves past b.
func (w *txWriter) check(b *service.Batch) (refused, err error) {
	id := b.SessionID
	last, err := w.lastSeq(id)
	if err != nil {
		return nil, err
	}
	switch {
	case b.Create != nil && last >= 0:
		return service.Errorf(service.ECONFLICT, "session %s already exists", id), nil
	case b.Create == nil && last < 0:
		return service.Errorf(service.ENOTFOUND, "session %s not found", id), nil
	case b.Delete:
		w.last[id] = -1
		return nil, nil
	}
	last = max(last, 0)
	if len(b.Events) > 0 && b.PrevSeq() != last {
		return fmt.Errorf("sqlite: events beginning at %d do not follow the session's log, which ends at %d: %w",
			b.Events[0].Seq, last, service.ErrNotNext), nil
	}
	if a := b.Admit; a != nil {
		var running int
		if err := w.tx.QueryRowContext(w.ctx, qRunningOfUser, a.UserID, a.RunID).Scan(&running); err != nil {
			return nil, err
		}
		if running >= a.Limit {
			return service.Errorf(service.ERATELIMIT, "the user has %d runs running, at most %d", running, a.Limit), nil
		}
	}
	if r := b.Idempotency; r != nil {
		// The key is taken by inserting it, the batch's first write and the last check:
		// no row means that it was used already.
		n, err := w.exec(qInsertIdempotency, idempotencyArgs(r)...)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return service.Errorf(service.ECONFLICT, "idempotency key %q was already used", r.Key), nil
		}
	}
	if n := len(b.Events); n > 0 {
		last = b.Events[n-1].Seq
	}
	w.last[id] = last
	return nil, nil
}

// create writes b's creation or deletion of its session.
func (w *txWriter) create(b *service.Batch) error {
	switch {
	case b.Delete:
		for _, q := range []string{qDeleteSession, qDeleteMessages, qDeleteRuns, qDeleteQuestions, qDeleteToolCalls, qDeleteEvents,
			qDeleteIdempotency, qDeleteShareLinks, qDeleteThreads, qDeleteSessionUsage, qDeleteSessionHolds} {
			if _, err := w.exec(q, b.SessionID); err != nil {
				return err
			}
		}
	case b.Create != nil:
		args, err := sessionArgs(b.Create)
		if err != nil {
			return err
		}
		_, err = w.exec(qInsertSession, args...)
		return err
	}
	return nil
}

// insertEvents inserts rows of event columns with as few statements as it can: SQLite
// runs one multi-row insert of many events for little more than the price of one.
func (w *txWriter) insertEvents(rows [][]any) error {
	return w.multiRow(rows, qInsertEvents, func(n, inserted int) error {
		if inserted != n {
			return fmt.Errorf("sqlite: %d of %d events were already stored", n-inserted, n)
		}
		return nil
	})
}

// multiRow writes rows (each a row's arguments) in multi-row statements of the sizes of
// rowBatchSizes, query(n) being the statement for n rows; after each, check is told how
// many rows it was given and how many it changed.
func (w *txWriter) multiRow(rows [][]any, query func(n int) string, check func(n, changed int) error) error {
	for len(rows) > 0 {
		n := 1
		for _, size := range rowBatchSizes {
			if len(rows) >= size {
				n = size
				break
			}
		}
		args := make([]any, 0, n*len(rows[0]))
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		changed, err := w.exec(query(n), args...)
		if err != nil {
			return err
		}
		if err := check(n, int(changed)); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// sessionChange is what a round does to one session's row: what it grew by, the last
// SessionUpdated snapshot, and the latest activity after it.
type sessionChange struct {
	id       string
	bytes    int64
	snapshot *service.TalkSession
	activity time.Time
}

// upserts are the rows of one table that a round writes, with the batch each comes from.
type upserts struct {
	what    string // for errors: "message", "run", …
	query   func(n int) string
	owner   string // reads the session a row belongs to
	rows    [][]any
	ids     []string
	batches []int
}

func (u *upserts) add(batch int, id string, args []any) {
	u.rows, u.ids, u.batches = append(u.rows, args), append(u.ids, id), append(u.batches, batch)
}

// changes writes the rows the events of the accepted batches imply, with as few
// statements as it can: one update per session, and multi-row upserts of the messages,
// runs, questions and tool calls of every batch at once, in the batches' order (so a row
// written by two batches ends as the later one left it). It returns the index of a batch
// whose rows the stored state refuses (a row of another session), its error in errs, or
// -1; err when the storage failed.
func (w *txWriter) changes(accepted []int, batches []*service.Batch, chs []service.Changes, errs []error) (bad int, err error) {
	var sessions []*sessionChange
	bySession := map[string]*sessionChange{}
	messages := &upserts{what: "message", query: qUpsertMessages, owner: qMessageSession}
	runs := &upserts{what: "run", query: qUpsertRuns, owner: qRunSession}
	questions := &upserts{what: "question", query: qUpsertQuestions, owner: qQuestionSession}
	toolCalls := &upserts{what: "tool call", query: qUpsertToolCalls, owner: qToolCallSession}
	type withdrawal struct{ run, session string }
	var withdrawals []withdrawal
	type switching struct {
		session string
		on      bool
		ids     []string
	}
	var switches []switching
	for _, i := range accepted {
		b := batches[i]
		if len(b.Events) == 0 {
			continue
		}
		ch := &chs[i]
		sc := bySession[b.SessionID]
		if sc == nil {
			sc = &sessionChange{id: b.SessionID}
			bySession[b.SessionID] = sc
			sessions = append(sessions, sc)
		}
		sc.bytes += ch.Bytes
		if snap, touch := ch.SessionRow(); snap != nil {
			sc.snapshot, sc.activity = snap, time.Time{}
		} else if touch.After(sc.activity) {
			sc.activity = touch
		}
		for _, m := range ch.Messages {
			messages.add(i, m.ID, messageArgs(m))
		}
		for _, r := range ch.Runs {
			runs.add(i, r.ID, runArgs(r))
		}
		for _, q := range ch.Questions {
			args, err := questionArgs(q)
			if err != nil {
				return w.failed(i, batches, errs, err)
			}
			questions.add(i, q.ID, args)
		}
		for _, tc := range ch.ToolCalls {
			args, err := toolCallArgs(tc)
			if err != nil {
				return w.failed(i, batches, errs, err)
			}
			toolCalls.add(i, tc.ID, args)
		}
		for _, run := range ch.EndedRuns {
			withdrawals = append(withdrawals, withdrawal{run, b.SessionID})
		}
		if ids := ch.Switches.Off; len(ids) > 0 {
			switches = append(switches, switching{b.SessionID, false, ids})
		}
		if ids := ch.Switches.On; len(ids) > 0 {
			switches = append(switches, switching{b.SessionID, true, ids})
		}
	}
	for _, sc := range sessions {
		if err := w.updateSession(sc); err != nil {
			return -1, err
		}
	}
	for _, u := range []*upserts{messages, runs, questions, toolCalls} {
		if len(u.rows) == 0 {
			continue
		}
		short := false
		err := w.multiRow(u.rows, u.query, func(n, changed int) error {
			short = short || changed < n
			return nil
		})
		if err != nil {
			return -1, err
		}
		if short {
			return w.refusedRow(u, batches, errs)
		}
	}
	// Branches switch once every message is written, batch after batch, one statement
	// for the messages of a batch that leave and one for those that join.
	for _, sw := range switches {
		list, err := json.Marshal(sw.ids)
		if err != nil {
			return -1, err
		}
		if _, err := w.exec(qSwitchBranch, sw.on, sw.session, string(list)); err != nil {
			return -1, err
		}
	}
	// Questions are withdrawn after every question is written (a run ends after it asked),
	// one statement per ended run, as Changes.Withdraws says.
	for _, wd := range withdrawals {
		if _, err := w.exec(qWithdrawQuestions, wd.run, wd.session); err != nil {
			return -1, err
		}
	}
	return -1, nil
}

// updateSession writes a round's change to a session's row in one statement.
func (w *txWriter) updateSession(sc *sessionChange) error {
	if s := sc.snapshot; s != nil {
		settings, err := json.Marshal(s.Settings)
		if err != nil {
			return err
		}
		activity := s.UpdatedAt
		if sc.activity.After(activity) {
			activity = sc.activity
		}
		_, err = w.exec(qUpdateSession, sc.bytes, s.Title, string(settings), dbTime(s.UpdatedAt), dbTime(activity), sc.id)
		return err
	}
	if sc.bytes == 0 && sc.activity.IsZero() {
		return nil
	}
	activity := "" // max(updated_at, '') leaves it as it is
	if !sc.activity.IsZero() {
		activity = dbTime(sc.activity)
	}
	_, err := w.exec(qGrowSession, sc.bytes, activity, sc.id)
	return err
}

// refusedRow finds, after a multi-row upsert of u changed fewer rows than it was given,
// the first row that belongs to another session than its batch's, and fails that batch.
func (w *txWriter) refusedRow(u *upserts, batches []*service.Batch, errs []error) (bad int, err error) {
	for k, id := range u.ids {
		var owner string
		if err := w.tx.QueryRowContext(w.ctx, u.owner, id).Scan(&owner); err != nil {
			return -1, err
		}
		if i := u.batches[k]; owner != batches[i].SessionID {
			return w.failed(i, batches, errs, &rowError{u.what, id, batches[i].SessionID})
		}
	}
	return -1, fmt.Errorf("sqlite: an upsert of %ss changed fewer rows than it was given, none of another session", u.what)
}
