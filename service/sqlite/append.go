package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

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
	w := &txWriter{s: s, ctx: ctx, tx: tx, prepared: map[string]*sql.Stmt{}, last: map[string]int64{}, viewerLast: map[string]int64{}}
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
		if l := b.ShareLink; l != nil {
			if err := w.putShareLink(l); err != nil {
				return w.failed(i, batches, errs, err)
			}
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
	if err := w.spends(accepted, batches); err != nil {
		return -1, err
	}
	if err := w.tell(accepted, batches, chs); err != nil {
		return -1, err
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
	for u, last := range w.viewerLast {
		s.viewerLast[u] = last
	}
	if len(s.viewerLast) > maxKnownSessions {
		clear(s.viewerLast)
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
