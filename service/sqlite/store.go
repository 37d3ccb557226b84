package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// Append implements service.Store: every batch of the call in one BEGIN IMMEDIATE
// transaction on the writer connection, with statements prepared once. The service calls it
// once per round of its writer with every session's pending writes, so a busy server makes
// few, large commits.
//
// A batch that is refused for the stored state (a log that does not end where its events
// begin, a missing session, a used idempotency key) is found out by its first statement,
// before it writes anything, and is left out without disturbing the others. Any other
// failure of a batch rolls the transaction back, and the rest are written again without it.
func (s *Store) Append(ctx context.Context, batches []*service.Batch) []error {
	errs := make([]error, len(batches))
	if err := s.check(); err != nil {
		return fill(errs, err)
	}
	todo := make([]int, 0, len(batches))
	chs := make([]service.Changes, len(batches))
	for i, b := range batches {
		ch, err := b.Derive()
		if err != nil {
			errs[i] = service.Errorf(service.EINVALID, "%v", err)
			continue
		}
		chs[i] = ch
		todo = append(todo, i)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for len(todo) > 0 {
		if err := ctx.Err(); err != nil {
			for _, i := range todo {
				errs[i] = err
			}
			break
		}
		bad, err := s.appendTx(todo, batches, chs, errs)
		if err != nil { // the storage failed: every batch fails
			err = s.fail("append", err)
			for _, i := range todo {
				errs[i] = err
			}
			break
		}
		if bad < 0 {
			break
		}
		// Batch bad failed halfway; the transaction was rolled back: write the others again.
		todo = slices.DeleteFunc(todo, func(i int) bool { return i == bad })
		for _, i := range todo {
			errs[i] = nil
		}
	}
	return errs
}

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// appendTx writes the batches todo in one transaction. It returns the index of a batch
// that failed halfway (its error set in errs, the transaction rolled back), or -1 when the
// transaction committed; err when the storage itself failed.
//
// Every batch is checked first, against the stored state as the transaction sees it (with
// the end of each session's log known from earlier appends: this store is its file's only
// writer), then the accepted batches are written: all their events in a few multi-row
// inserts, then the rows the events change.
func (s *Store) appendTx(todo []int, batches []*service.Batch, chs []service.Changes, errs []error) (bad int, err error) {
	ctx := context.Background() // one caller's context must not cut the others' writes short
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return -1, err
	}
	defer tx.Rollback()
	w := &txWriter{s: s, ctx: ctx, tx: tx, prepared: map[string]*sql.Stmt{}, last: map[string]int64{}}
	accepted := make([]int, 0, len(todo))
	for _, i := range todo {
		refused, err := w.check(batches[i])
		switch {
		case err != nil:
			return -1, err
		case refused != nil:
			errs[i] = refused
		default:
			accepted = append(accepted, i)
		}
	}
	var events [][]any
	for _, i := range accepted {
		b := batches[i]
		if err := w.create(b); err != nil {
			return w.failed(i, batches, errs, err)
		}
		for _, e := range b.Events {
			args, err := eventArgs(e, b.SessionID)
			if err != nil {
				return w.failed(i, batches, errs, err)
			}
			events = append(events, args)
		}
	}
	if err := w.insertEvents(events); err != nil {
		return -1, err // the checks rule out conflicts: anything else is the storage's
	}
	if bad, err := w.changes(accepted, batches, chs, errs); bad >= 0 || err != nil {
		return bad, err
	}
	if err := tx.Commit(); err != nil {
		return -1, err
	}
	for id, last := range w.last {
		if last < 0 {
			delete(s.last, id)
		} else {
			s.last[id] = last
		}
	}
	if len(s.last) > maxKnownSessions {
		clear(s.last) // read again as needed
	}
	return -1, nil
}

// maxKnownSessions bounds how many sessions' log ends the store keeps in memory.
const maxKnownSessions = 100000

// failed sorts out a batch's failure halfway through the transaction: the storage's own
// failure fails every batch (err); any other is batch i's alone (bad).
func (w *txWriter) failed(i int, batches []*service.Batch, errs []error, err error) (bad int, _ error) {
	if isStorageError(err) {
		return -1, err
	}
	errs[i] = fmt.Errorf("sqlite: append to session %s: %w", batches[i].SessionID, err)
	return i, nil
}

// isStorageError reports whether err is the storage failing (full, locked, read-only, I/O)
// rather than one batch's mistake.
func isStorageError(err error) bool {
	if errors.As(err, new(*rowError)) || errors.As(err, new(*service.Error)) {
		return false
	}
	code, ok := driverCode(err)
	if !ok {
		return true // driver or connection trouble
	}
	return code != codeConstraint
}

// rowError is a batch's row that the stored state refuses (it belongs to another session).
type rowError struct{ what, id, session string }

func (e *rowError) Error() string {
	return fmt.Sprintf("%s %s belongs to another session than %s", e.what, e.id, e.session)
}

// txWriter writes batches inside one transaction with the store's prepared statements.
type txWriter struct {
	s        *Store
	ctx      context.Context
	tx       *sql.Tx
	prepared map[string]*sql.Stmt
	// last is the end of each session's log as this transaction leaves it (-1: deleted).
	last map[string]int64
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
		for _, q := range []string{qDeleteSession, qDeleteMessages, qDeleteRuns, qDeleteQuestions, qDeleteToolCalls, qDeleteEvents, qDeleteIdempotency} {
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

// Compact implements service.Store. A stream the service prepared is written as it was
// folded once each of its runs is found whole (runsWhole); any other is folded from what
// is read, only what folding needs, on the read connections. It then writes the streams'
// folding in transactions of CompactHold at most: each commits what it folded and lets the
// writer's rounds in before the next, so that the streams still going wait for one slice
// of a large compaction, not for all of it. Each stream is folded in one transaction,
// dropping its folded runs with one statement each: a run's events are consecutive in the
// log, so the range of Seqs from its first to its last holds nothing else. A session
// deleted in between loses its rows anyway, and Append only adds events after the folded
// ones.
func (s *Store) Compact(ctx context.Context, cs []service.Compaction) error {
	if err := s.check(); err != nil {
		return err
	}
	var todo []folding
	for _, c := range cs {
		folded := c.Folded
		whole, err := s.runsWhole(ctx, c)
		if err != nil {
			return err
		}
		if !whole {
			evs, err := getAll(ctx, s, "events", scanChunk, qChunks, c.SessionID, c.FromSeq)
			if err != nil {
				return err
			}
			folded, _ = service.Coalesce(evs, c.Key)
		}
		if len(folded) > 0 {
			todo = append(todo, folding{c, folded})
		}
	}
	for len(todo) > 0 {
		n, err := s.foldSome(ctx, todo)
		if err != nil {
			return err
		}
		todo = todo[n:]
		if s.compactSliced != nil {
			s.compactSliced(n, len(todo))
		}
		if len(todo) > 0 {
			// The writer may be waiting for the connection: let it take it first, rather
			// than take it straight back (a sync.Mutex lets a running goroutine barge in).
			runtime.Gosched()
		}
	}
	return nil
}

// runsWhole reports whether c's prepared folding can be written as it is: the file holds
// every Seq of each folded run (one count on the log's key per run, where reading the
// events back costs a row lookup each). This store is the only one the service writes, so
// a run whose Seqs are all there holds the events the service folded; one that lost some
// (a session deleted, folded before) is folded from what is read.
func (s *Store) runsWhole(ctx context.Context, c service.Compaction) (bool, error) {
	if !c.Prepared {
		return false, nil
	}
	if err := s.check(); err != nil {
		return false, err
	}
	for _, e := range c.Folded {
		first := e.CoalescedFrom
		if first < c.FromSeq || first >= e.Seq {
			return false, nil
		}
		var n int64
		err := s.stmt(qCountEvents).QueryRowContext(context.WithoutCancel(ctx), c.SessionID, first, e.Seq).Scan(&n)
		if err != nil {
			return false, s.fail("events", err)
		}
		if n != e.Seq-first+1 {
			return false, nil
		}
	}
	return true, nil
}

// folding is one stream's chunk events as Compact folds them.
type folding struct {
	c      service.Compaction
	folded []*service.Event
}

// foldSome writes the folding of todo's first streams in one transaction, as many as it
// can in s.hold (at least one), and answers how many.
func (s *Store) foldSome(ctx context.Context, todo []folding) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	start := time.Now()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.fail("compact", err)
	}
	defer tx.Rollback()
	w := &txWriter{s: s, ctx: ctx, tx: tx, prepared: map[string]*sql.Stmt{}}
	n := 0
	for n < len(todo) && (n == 0 || time.Since(start) < s.hold) {
		f := todo[n]
		for _, e := range f.folded {
			// CoalescedFrom is where this run begins (or began, when folded before).
			from := e.CoalescedFrom
			if _, err := w.exec(qDropEvents, f.c.SessionID, max(from, f.c.FromSeq), e.Seq); err != nil {
				return 0, s.fail("compact", err)
			}
			if _, err := w.exec(qRewriteEvent, f.c.SessionID, e.Seq, e.Delta, e.Offset, e.CoalescedFrom); err != nil {
				return 0, s.fail("compact", err)
			}
		}
		n++
	}
	if err := tx.Commit(); err != nil {
		return 0, s.fail("compact", err)
	}
	return n, nil
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
