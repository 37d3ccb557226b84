package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/talkgraph/talkgraph/service"
)

// Append implements service.Store: every batch of the call in one transaction, in two
// round trips to the server whatever the number of sessions.
//
// The first round trip begins the transaction, takes the admission lock of each user
// that admits a run (advisory locks, in a fixed order), locks the rows of the call's
// sessions (SELECT … FOR UPDATE in ID order: replicas writing the same sessions wait for
// each other and never deadlock), and then reads, in statements that see everything
// committed before the locks were granted: each session's last Seq (max(seq) of its log),
// the idempotency keys already used, the admitting users' RUNNING runs, and any row the
// batches write that belongs to another session. From that, Append decides in Go, batch
// by batch in the call's order, which batches the stored state refuses (a missing session,
// a log that does not end where the events begin, a used key, an admission over the
// limit, a row of another session); those write nothing and fail alone.
//
// The second round trip sends every write of the accepted batches as one pipeline of
// multi-row statements (one per table and kind of write, fed with arrays) and COMMIT. A
// session written twice in one call is written in two rounds of those statements, in
// order, in the same pipeline.
//
// Should a statement fail all the same (another transaction inserted a conflicting row
// since the reads, a deadlock), the transaction is rolled back and tried again. Should it
// fail for one batch's data, the transaction is tried again writing batch by batch, to
// find that batch, which fails alone while the others are written again without it. A
// failure of the storage itself fails every batch with EUNAVAILABLE. When the connection
// is lost during COMMIT the outcome is unknown: the batches fail with EUNAVAILABLE but may
// have been written, which the service finds out from the log (ECONFLICT on its next
// write).
func (s *Store) Append(ctx context.Context, batches []*service.Batch) []error {
	errs := make([]error, len(batches))
	if err := s.check(); err != nil {
		return fill(errs, err)
	}
	preps := make([]*prep, len(batches))
	todo := make([]int, 0, len(batches))
	for i, b := range batches {
		p, err := prepare(b)
		if err != nil {
			errs[i] = err
			continue
		}
		if b.Empty() {
			continue
		}
		preps[i] = p
		todo = append(todo, i)
	}
	retries, isolate := 0, false
	for len(todo) > 0 {
		if err := ctx.Err(); err != nil {
			for _, i := range todo {
				errs[i] = err
			}
			break
		}
		for _, i := range todo {
			errs[i] = nil
		}
		bad, err := s.appendTx(ctx, preps, todo, errs, isolate)
		switch {
		case err == nil && bad < 0:
			return errs
		case err == nil:
			// Batch bad failed for its data, and was rolled back with the others.
			todo = slices.DeleteFunc(todo, func(i int) bool { return i == bad })
			continue
		case retryable(err) && retries < maxRetries:
			retries++
			continue
		case dataError(err) && !isolate:
			isolate = true
			continue
		}
		err = fail("append", err)
		for _, i := range todo {
			errs[i] = err
		}
		break
	}
	return errs
}

// maxRetries bounds how often Append tries a transaction again after a race.
const maxRetries = 3

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// retryable reports whether err may well not happen again: a race with another
// transaction, or a connection that broke (a server restarted, a backend terminated)
// before any write was sent.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", "23505", "TG001": // serialization, deadlock, unique violation, talkgraph_all_written
			return true
		}
	}
	var re *readError
	return errors.As(err, &re) && brokenConn(err)
}

// readError is a failure before any write of a transaction was sent: trying again cannot
// write anything twice.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// dataError reports whether err is a statement refusing some batch's data, rather than
// the storage failing.
func dataError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code[:2] {
	case "21", "22", "23", "TG": // cardinality, data exception, integrity constraint, ours
		return true
	}
	return false
}

// prep is a batch checked and encoded, once per Append call.
type prep struct {
	b       *service.Batch
	ch      service.Changes
	events  []eventRow
	create  string   // the settings of b.Create, as JSON
	update  string   // the settings of ch.Session, as JSON
	usage   []string // the usage of each of ch.Runs, as JSON ("" for none)
	choices []string // the choices of each of ch.Questions, as JSON ("" for nil)
}

// prepare checks b on its face (Batch.Check, and what PostgreSQL cannot store) and encodes
// it; the error is EINVALID.
func prepare(b *service.Batch) (*prep, error) {
	ch, err := b.Derive()
	if err != nil {
		return nil, service.Errorf(service.EINVALID, "%v", err)
	}
	p := &prep{b: b, ch: ch}
	if err := p.encode(); err != nil {
		return nil, service.Errorf(service.EINVALID, "batch for session %s: %v", b.SessionID, err)
	}
	return p, nil
}

// encode checks what the batch writes to identifier columns (text, which cannot hold NUL
// or invalid UTF-8) and time columns (int64 nanoseconds), and encodes its JSON.
func (p *prep) encode() error {
	b, ch := p.b, &p.ch
	var v validator
	v.ids(b.SessionID)
	if c := b.Create; c != nil {
		v.ids(c.UserID)
		v.times(c.CreatedAt, c.UpdatedAt)
		p.create = v.json(c.Settings)
	}
	p.events = make([]eventRow, 0, len(b.Events))
	for _, e := range b.Events {
		v.ids(string(e.Type), e.Key, e.MessageID)
		v.times(e.At)
		r, err := encodeEvent(e)
		if err != nil {
			return fmt.Errorf("event %d: %w", e.Seq, err)
		}
		p.events = append(p.events, r)
	}
	if r := b.Idempotency; r != nil {
		v.ids(r.UserID, r.Key, r.MessageID, r.RunID)
		v.times(r.CreatedAt)
	}
	if a := b.Admit; a != nil {
		v.ids(a.UserID, a.RunID)
	}
	if s := ch.Session; s != nil {
		v.times(s.UpdatedAt)
		p.update = v.json(s.Settings)
	}
	v.times(ch.Activity)
	for _, m := range ch.Messages {
		v.ids(m.ID, string(m.Role), string(m.Kind), string(m.Status), m.RunID, m.QuestionID)
		v.times(m.CreatedAt)
	}
	for _, r := range ch.Runs {
		v.ids(r.ID, r.UserID, string(r.Status), r.Agent, r.Owner)
		v.times(r.CreatedAt)
		v.nullTimes(r.StartedAt, r.FinishedAt)
		usage := ""
		if r.Usage != nil {
			usage = v.json(r.Usage)
		}
		p.usage = append(p.usage, usage)
	}
	for _, q := range ch.Questions {
		v.ids(q.ID, q.RunID, q.WithdrawnReason, q.ToolCallID)
		v.times(q.AskedAt)
		v.nullTimes(q.AnsweredAt, q.ExpiresAt)
		choices := ""
		if q.Choices != nil {
			choices = v.json(q.Choices)
		}
		p.choices = append(p.choices, choices)
	}
	for _, tc := range ch.ToolCalls {
		v.ids(tc.ID, tc.RunID, tc.MessageID, string(tc.Status))
		v.times(tc.StartedAt)
		v.nullTimes(tc.FinishedAt)
		if a := tc.Approval; a != nil {
			v.times(a.ExpiresAt)
			v.nullTimes(a.DecidedAt)
		}
	}
	return v.err
}

// validator collects the first reason a batch cannot be stored.
type validator struct{ err error }

func (v *validator) ids(ids ...string) {
	for _, id := range ids {
		if v.err == nil && (strings.IndexByte(id, 0) >= 0 || !utf8.ValidString(id)) {
			v.err = fmt.Errorf("identifier %q has a NUL character or is not UTF-8", id)
		}
	}
}

func (v *validator) times(ts ...time.Time) {
	for _, t := range ts {
		if v.err == nil && !timeFits(t) {
			v.err = fmt.Errorf("time %v is outside the years %d to %d", t, minTime.Year(), maxTime.Year())
		}
	}
}

func (v *validator) nullTimes(ts ...*time.Time) {
	for _, t := range ts {
		if t != nil {
			v.times(*t)
		}
	}
}

func (v *validator) json(x any) string {
	b, err := json.Marshal(x)
	if err != nil && v.err == nil {
		v.err = err
	}
	return string(b)
}

// rowError is a batch's row that the stored state refuses (it belongs to another session).
type rowError struct{ what, id, session string }

func (e *rowError) Error() string {
	return fmt.Sprintf("%s %s belongs to another session than %s", e.what, e.id, e.session)
}

// appendTx writes the batches todo in one transaction. It sets errs for the batches the
// stored state refuses (which write nothing), and returns the index of a batch that failed
// for its data (only when isolate: batch by batch), with its error in errs and the
// transaction rolled back, or -1 when the transaction committed; err when it failed
// otherwise.
func (s *Store) appendTx(ctx context.Context, preps []*prep, todo []int, errs []error, isolate bool) (bad int, err error) {
	// One caller's context must not cut the others' writes short; the server's statement
	// timeout and this deadline bound the transaction.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*s.opts.StatementTimeout+s.opts.ConnectTimeout)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return -1, &readError{err}
	}
	defer conn.Release()
	defer func() {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			// Failed or abandoned: roll back, or the pool drops the connection.
			_, _ = conn.Exec(ctx, qRollback)
		}
	}()

	st, err := readState(ctx, conn, preps, todo)
	if err != nil {
		return -1, &readError{err}
	}
	rounds := st.decide(preps, todo, errs)
	if len(rounds) == 0 {
		return -1, nil // everything was refused: the deferred ROLLBACK ends the transaction
	}
	if !isolate {
		wb := &pgx.Batch{}
		for _, round := range rounds {
			queueWrites(wb, preps, round)
		}
		wb.Queue(qCommit)
		return -1, s.commitOutcome(ctx, st.txid, sendAll(ctx, conn, wb))
	}
	for _, round := range rounds {
		for _, i := range round {
			wb := &pgx.Batch{}
			queueWrites(wb, preps, []int{i})
			if err := sendAll(ctx, conn, wb); err != nil {
				if !dataError(err) {
					return -1, err
				}
				errs[i] = fmt.Errorf("postgres: append to session %s: %w", preps[i].b.SessionID, err)
				return i, nil
			}
		}
	}
	_, err = conn.Exec(ctx, qCommit)
	return -1, s.commitOutcome(ctx, st.txid, err)
}

// commitOutcome returns what became of transaction txid, whose last round trip (its
// writes and COMMIT) ended with err. When the connection broke during that round trip
// (a terminated backend, a restarting server, a network cut) the transaction may have
// committed or not, and trying it again could write its batches twice: the server is
// asked, on another connection, until it can tell (within ctx). nil: it committed; a
// readError: it did not, and may be tried again.
func (s *Store) commitOutcome(ctx context.Context, txid int64, err error) error {
	if err == nil || !brokenConn(err) || txid == 0 {
		return err
	}
	pause := 20 * time.Millisecond
	for {
		var status *string
		qerr := s.pool.QueryRow(ctx, qTxStatus, txid).Scan(&status)
		switch {
		case qerr == nil && status != nil && *status == "committed":
			return nil
		case qerr == nil && status != nil && *status == "aborted":
			return &readError{err}
		case qerr == nil && status == nil:
			return fmt.Errorf("the outcome of a commit is unknown (transaction %d is too old): %w", txid, err)
		case qerr != nil && !brokenConn(qerr):
			return fmt.Errorf("the outcome of a commit is unknown (%v): %w", qerr, err)
		}
		// In progress (its backend is still ending it), or the server cannot be reached:
		// ask again.
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("the outcome of a commit is unknown (%v): %w", ctx.Err(), err)
		}
		pause = min(2*pause, time.Second)
	}
}

// sendAll sends the statements of b in one round trip, and returns the first error.
func sendAll(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch) error {
	br := conn.SendBatch(ctx, b)
	for range b.Len() {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
	}
	return br.Close()
}

// state is what the stored state says about a call's batches, as read under its locks,
// and as the accepted batches change it.
type state struct {
	exists  map[string]bool              // sessions, by ID
	last    map[string]int64             // their last Seq
	used    map[[2]string]bool           // idempotency (user, key) pairs taken
	running map[string]map[string]string // admitting user → RUNNING run → its session
	owner   map[[2]string]string         // (table, row ID) → the session that has it
	txid    int64                        // the transaction's ID
}

// readState begins the transaction, takes the locks and reads the state of the batches
// todo, in one round trip.
func readState(ctx context.Context, conn *pgxpool.Conn, preps []*prep, todo []int) (*state, error) {
	st := &state{exists: map[string]bool{}, last: map[string]int64{}, used: map[[2]string]bool{},
		running: map[string]map[string]string{}, owner: map[[2]string]string{}}
	var sessions, keyUsers, keys []string
	var lockKeys []int32
	var rows [8][]string // (ID, session) arrays of messages, runs, questions, tool calls
	anyRows := false
	for _, i := range todo {
		p := preps[i]
		b := p.b
		sessions = append(sessions, b.SessionID)
		if r := b.Idempotency; r != nil {
			keyUsers, keys = append(keyUsers, r.UserID), append(keys, r.Key)
		}
		if a := b.Admit; a != nil && st.running[a.UserID] == nil {
			st.running[a.UserID] = map[string]string{}
			lockKeys = append(lockKeys, userLockKey(a.UserID))
		}
		add := func(t int, id string) {
			rows[2*t], rows[2*t+1] = append(rows[2*t], id), append(rows[2*t+1], b.SessionID)
			anyRows = true
		}
		for _, m := range p.ch.Messages {
			add(0, m.ID)
		}
		for _, r := range p.ch.Runs {
			add(1, r.ID)
		}
		for _, q := range p.ch.Questions {
			add(2, q.ID)
		}
		for _, tc := range p.ch.ToolCalls {
			add(3, tc.ID)
		}
	}
	slices.Sort(sessions)
	sessions = slices.Compact(sessions)
	slices.Sort(lockKeys)
	lockKeys = slices.Compact(lockKeys)
	users := make([]string, 0, len(st.running))
	for u := range st.running {
		users = append(users, u)
	}

	b := &pgx.Batch{}
	b.Queue(qBegin)
	// The transaction's ID, to learn whether it committed should the connection break
	// while its COMMIT is under way (see commitOutcome).
	b.Queue(qTxID).QueryRow(func(row pgx.Row) error { return row.Scan(&st.txid) })
	if len(lockKeys) > 0 {
		b.Queue(qLockAdmissions, lockKeys)
	}
	b.Queue(qLockSessions, sessions)
	b.Queue(qSessionStates, sessions).Query(func(rows pgx.Rows) error {
		var id string
		var last int64
		_, err := pgx.ForEachRow(rows, []any{&id, &last}, func() error {
			st.exists[id], st.last[id] = true, last
			return nil
		})
		return err
	})
	if len(keys) > 0 {
		b.Queue(qUsedKeys, keyUsers, keys).Query(func(rows pgx.Rows) error {
			var user, key string
			_, err := pgx.ForEachRow(rows, []any{&user, &key}, func() error {
				st.used[[2]string{user, key}] = true
				return nil
			})
			return err
		})
	}
	if len(users) > 0 {
		b.Queue(qRunningRuns, users).Query(func(rows pgx.Rows) error {
			var user, run, session string
			_, err := pgx.ForEachRow(rows, []any{&user, &run, &session}, func() error {
				st.running[user][run] = session
				return nil
			})
			return err
		})
	}
	if anyRows {
		args := make([]any, len(rows))
		for i, r := range rows {
			args[i] = r
		}
		b.Queue(qForeignRows, args...).Query(func(rows pgx.Rows) error {
			var table, id, session string
			_, err := pgx.ForEachRow(rows, []any{&table, &id, &session}, func() error {
				st.owner[[2]string{table, id}] = session
				return nil
			})
			return err
		})
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return st, nil
}

// userLockKey is the key of a user's admission lock.
func userLockKey(userID string) int32 {
	h := fnv.New32a()
	h.Write([]byte(userID))
	return int32(h.Sum32())
}

// decide goes through the batches todo in order, as if each were written in turn: it sets
// errs for those the state refuses, and returns the others in rounds, each round writing
// each session at most once (the first write of every session, then the second, …).
func (st *state) decide(preps []*prep, todo []int, errs []error) (rounds [][]int) {
	times := map[string]int{} // batches of each session accepted so far
	for _, i := range todo {
		p := preps[i]
		b, id := p.b, p.b.SessionID
		if err := st.refuses(p); err != nil {
			errs[i] = err
			continue
		}
		// Accepted: the state moves on as the batch says.
		switch {
		case b.Delete:
			st.exists[id], st.last[id] = false, 0
			for _, runs := range st.running {
				maps.DeleteFunc(runs, func(_, session string) bool { return session == id })
			}
		case b.Create != nil:
			st.exists[id], st.last[id] = true, 0
		}
		if n := len(b.Events); n > 0 {
			st.last[id] = b.Events[n-1].Seq
		}
		if r := b.Idempotency; r != nil {
			st.used[[2]string{r.UserID, r.Key}] = true
		}
		p.eachRow(func(table, rowID string) { st.owner[[2]string{table, rowID}] = id })
		for _, r := range p.ch.Runs {
			for _, runs := range st.running {
				delete(runs, r.ID)
			}
			if runs := st.running[r.UserID]; runs != nil && r.Status == service.RunRunning {
				runs[r.ID] = id
			}
		}
		n := times[id]
		times[id]++
		if n == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[n] = append(rounds[n], i)
	}
	return rounds
}

// refuses returns why the state refuses p's batch, in the order the SQLite store finds
// out: the session's existence for a creation or deletion, the idempotency key, the
// admission, the log, the rows of other sessions.
func (st *state) refuses(p *prep) error {
	b, id := p.b, p.b.SessionID
	if b.Delete {
		if !st.exists[id] {
			return service.Errorf(service.ENOTFOUND, "session %s not found", id)
		}
		return nil
	}
	if b.Create != nil && st.exists[id] {
		return service.Errorf(service.ECONFLICT, "session %s already exists", id)
	}
	if r := b.Idempotency; r != nil && st.used[[2]string{r.UserID, r.Key}] {
		return service.Errorf(service.ECONFLICT, "idempotency key %q was already used", r.Key)
	}
	if a := b.Admit; a != nil {
		running := 0
		for run := range st.running[a.UserID] {
			if run != a.RunID {
				running++
			}
		}
		if running >= a.Limit {
			return service.Errorf(service.ERATELIMIT, "the user has %d runs running, at most %d", running, a.Limit)
		}
	}
	if len(b.Events) > 0 {
		last := st.last[id]
		switch {
		case b.Create != nil:
			last = 0
		case !st.exists[id]:
			return service.Errorf(service.ENOTFOUND, "session %s not found", id)
		}
		if b.Events[0].Seq != last+1 {
			return fmt.Errorf("events beginning at %d do not follow the session's log ending at %d: %w", b.Events[0].Seq, last, service.ErrNotNext)
		}
	}
	var err error
	p.eachRow(func(table, rowID string) {
		if owner, ok := st.owner[[2]string{table, rowID}]; ok && owner != id && err == nil {
			err = fmt.Errorf("postgres: append to session %s: %w", id, &rowError{table, rowID, id})
		}
	})
	return err
}

// eachRow calls f with the table and ID of each row the batch writes.
func (p *prep) eachRow(f func(table, id string)) {
	for _, m := range p.ch.Messages {
		f("message", m.ID)
	}
	for _, r := range p.ch.Runs {
		f("run", r.ID)
	}
	for _, q := range p.ch.Questions {
		f("question", q.ID)
	}
	for _, tc := range p.ch.ToolCalls {
		f("tool call", tc.ID)
	}
}

// queueWrites queues the writes of the batches idxs, which write each session at most
// once, as one multi-row statement per table and kind of write. Rows are sorted by key,
// so that concurrent transactions that do meet on a row take its lock in the same order.
func queueWrites(wb *pgx.Batch, preps []*prep, idxs []int) {
	var (
		deletes  []string
		creates  sessionRows
		events   eventRows
		idem     []*service.IdempotencyRecord
		updates  sessionUpdates
		touchIDs []string
		touchAt  []int64
		growIDs  []string
		growBy   []int64
		msgs     []*service.Message
		runs     []runWithUsage
		qs       []questionWithChoices
		calls    []*service.ToolCall
		ended    [2][]string // (run, session) pairs
		swSess   []string    // (session, message, on) triples
		swMsg    []string
		swOn     []bool
	)
	for _, i := range idxs {
		p := preps[i]
		b, id, ch := p.b, p.b.SessionID, &p.ch
		if b.Delete {
			deletes = append(deletes, id)
			continue
		}
		if b.Create != nil {
			creates.add(b.Create, p.create, b.Create.Size()+ch.Bytes)
		} else if ch.Bytes != 0 {
			growIDs, growBy = append(growIDs, id), append(growBy, ch.Bytes)
		}
		for j := range p.events {
			events.add(id, &p.events[j])
		}
		if b.Idempotency != nil {
			idem = append(idem, b.Idempotency)
		}
		if snap, touch := ch.SessionRow(); snap != nil {
			updates.add(id, snap, p.update)
		} else if !touch.IsZero() {
			touchIDs, touchAt = append(touchIDs, id), append(touchAt, dbTime(touch))
		}
		msgs = append(msgs, ch.Messages...)
		for j, r := range ch.Runs {
			runs = append(runs, runWithUsage{r, p.usage[j]})
		}
		for j, q := range ch.Questions {
			qs = append(qs, questionWithChoices{q, p.choices[j]})
		}
		calls = append(calls, ch.ToolCalls...)
		for _, run := range ch.EndedRuns {
			ended[0], ended[1] = append(ended[0], run), append(ended[1], id)
		}
		// The round's switches in one statement: a round writes each session once, and a
		// batch's switches name each message once.
		ch.Switches.Each(func(mid string, on bool) {
			swSess, swMsg, swOn = append(swSess, id), append(swMsg, mid), append(swOn, on)
		})
	}
	if len(deletes) > 0 {
		wb.Queue(qDeleteSessions, deletes)
	}
	if len(creates.id) > 0 {
		wb.Queue(qInsertSessions, creates.args()...)
	}
	if len(events.seq) > 0 {
		wb.Queue(qInsertEvents, events.args()...)
	}
	if len(idem) > 0 {
		slices.SortFunc(idem, func(a, b *service.IdempotencyRecord) int {
			return cmp.Or(strings.Compare(a.UserID, b.UserID), strings.Compare(a.Key, b.Key))
		})
		var rows idempotencyRows
		for _, r := range idem {
			rows.add(r)
		}
		wb.Queue(qInsertIdempotency, rows.args()...)
	}
	if len(updates.id) > 0 {
		wb.Queue(qUpdateSessions, updates.args()...)
	}
	if len(touchIDs) > 0 {
		wb.Queue(qTouchSessions, touchIDs, touchAt)
	}
	if len(growIDs) > 0 {
		wb.Queue(qGrowSessions, growIDs, growBy)
	}
	if len(msgs) > 0 {
		slices.SortFunc(msgs, func(a, b *service.Message) int { return strings.Compare(a.ID, b.ID) })
		var rows messageRows
		for _, m := range msgs {
			rows.add(m)
		}
		wb.Queue(qUpsertMessages, rows.args()...)
	}
	if len(runs) > 0 {
		slices.SortFunc(runs, func(a, b runWithUsage) int { return strings.Compare(a.r.ID, b.r.ID) })
		var rows runRows
		for _, r := range runs {
			rows.add(r.r, r.usage)
		}
		wb.Queue(qUpsertRuns, rows.args()...)
	}
	if len(qs) > 0 {
		slices.SortFunc(qs, func(a, b questionWithChoices) int { return strings.Compare(a.q.ID, b.q.ID) })
		var rows questionRows
		for _, q := range qs {
			rows.add(q.q, q.choices)
		}
		wb.Queue(qUpsertQuestions, rows.args()...)
	}
	if len(calls) > 0 {
		slices.SortFunc(calls, func(a, b *service.ToolCall) int { return strings.Compare(a.ID, b.ID) })
		var rows toolCallRows
		for _, tc := range calls {
			rows.add(tc)
		}
		wb.Queue(qUpsertToolCalls, rows.args()...)
	}
	if len(swSess) > 0 {
		wb.Queue(qSwitchBranch, swSess, swMsg, swOn)
	}
	if len(ended[0]) > 0 {
		wb.Queue(qWithdrawQuestions, ended[0], ended[1])
	}
}

type runWithUsage struct {
	r     *service.Run
	usage string
}

type questionWithChoices struct {
	q       *service.Question
	choices string
}

// Compact implements service.Store: each stream in a transaction of its own that locks
// its session's row, so that it never races an Append or another replica's Compact of the
// session (one transaction locking many rows could deadlock with an Append locking some
// of them in another order).
func (s *Store) Compact(ctx context.Context, cs []service.Compaction) error {
	if err := s.check(); err != nil {
		return err
	}
	for _, c := range cs {
		if err := s.compact(ctx, c.SessionID, c.Key, c.FromSeq); err != nil && service.ErrorCode(err) != service.ENOTFOUND {
			return err
		}
	}
	return nil
}

// compact folds one stream; ENOTFOUND when its session does not exist.
func (s *Store) compact(ctx context.Context, sessionID, key string, fromSeq int64) error {
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, qLockSession, sessionID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return service.Errorf(service.ENOTFOUND, "session %s not found", sessionID)
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, qEvents, sessionID, fromSeq-1, nil)
		if err != nil {
			return err
		}
		evs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*service.Event, error) { return scanEvent(row) })
		if err != nil {
			return err
		}
		folded, drop := service.Coalesce(evs, key)
		if len(folded) == 0 {
			return nil
		}
		b := &pgx.Batch{}
		b.Queue(qRewriteEvents, rewriteArgs(sessionID, folded)...)
		b.Queue(qDropEvents, sessionID, drop)
		return tx.SendBatch(ctx, b).Close()
	})
	return fail("compact", err)
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
