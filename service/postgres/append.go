package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/talkgraph/talkgraph/service"
)

// Append implements service.Store: every batch of the call in one transaction, in two
// round trips to the server whatever the number of sessions.
//
// The first round trip begins the transaction, takes the admission lock of each user
// that admits a run and the write lock of each of the call's sessions (advisory locks,
// each kind in a fixed order: replicas writing the same sessions wait for each other and
// never deadlock), and then reads, in statements that see everything
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

	// What this store knew of the call's sessions stands only if the transaction commits.
	ids := make([]string, 0, len(todo))
	for _, i := range todo {
		ids = append(ids, preps[i].b.SessionID)
	}
	st, err := readState(ctx, conn, preps, todo, s.tails.take(ids))
	if err != nil {
		return -1, &readError{err}
	}
	rounds := st.decide(preps, todo, errs)
	if len(rounds) == 0 {
		return -1, nil // everything was refused: the deferred ROLLBACK ends the transaction
	}
	ep, known := st.epochs(preps, rounds)
	if !isolate {
		wb := &pgx.Batch{}
		for _, round := range rounds {
			queueWrites(wb, preps, round, ep)
		}
		ep.queue(wb)
		wb.Queue(qCommit)
		err := s.commitOutcome(ctx, st.txid, sendAll(ctx, conn, wb))
		if err == nil {
			s.tails.set(known)
		}
		return -1, err
	}
	for _, round := range rounds {
		for _, i := range round {
			wb := &pgx.Batch{}
			queueWrites(wb, preps, []int{i}, ep)
			if err := sendAll(ctx, conn, wb); err != nil {
				if !dataError(err) {
					return -1, err
				}
				errs[i] = fmt.Errorf("postgres: append to session %s: %w", preps[i].b.SessionID, err)
				return i, nil
			}
		}
	}
	wb := &pgx.Batch{}
	ep.queue(wb)
	wb.Queue(qCommit)
	if err := s.commitOutcome(ctx, st.txid, sendAll(ctx, conn, wb)); err != nil {
		return -1, err
	}
	s.tails.set(known)
	return -1, nil
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

// queueWrites queues the writes of the batches idxs, which write each session at most
// once, as one multi-row statement per table and kind of write. Rows are sorted by key,
// so that concurrent transactions that do meet on a row take its lock in the same order.
func queueWrites(wb *pgx.Batch, preps []*prep, idxs []int, ep *epochs) {
	var (
		deletes []string
		creates sessionRows
		events  eventRows
		idem    []*service.IdempotencyRecord
		changes sessionChanges
		msgs    []*service.Message
		runs    []runWithUsage
		qs      []questionWithChoices
		calls   []*service.ToolCall
		ended   [2][]string // (run, session) pairs
		swSess  []string    // (session, message, on) triples
		swMsg   []string
		swOn    []bool
		told    tellings
	)
	for _, i := range idxs {
		p := preps[i]
		b, id, ch := p.b, p.b.SessionID, &p.ch
		told.add(p)
		if b.Delete {
			deletes = append(deletes, id)
			continue
		}
		if b.Create != nil {
			creates.add(b.Create, p.create, b.Create.Size()+ch.Bytes, ep.created[id])
			changes.add(p, 0)
		} else {
			changes.add(p, ch.Bytes)
		}
		for j := range p.events {
			events.add(id, &p.events[j])
		}
		if b.Idempotency != nil {
			idem = append(idem, b.Idempotency)
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
		wb.Queue(qDeleteEvents, deletes)
		wb.Queue(qDeleteSessions, deletes)
		wb.Queue(qDeleteThreads, deletes)
		wb.Queue(qDeleteSessionHolds, deletes)
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
	if len(changes.id) > 0 {
		wb.Queue(qChangeSessions, changes.args()...)
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
	queueShareLinks(wb, preps, idxs)
	if len(ended[0]) > 0 {
		wb.Queue(qWithdrawQuestions, ended[0], ended[1])
	}
	queueSpends(wb, preps, idxs)
	told.queue(wb)
}

type runWithUsage struct {
	r     *service.Run
	usage string
}

type questionWithChoices struct {
	q       *service.Question
	choices string
}
