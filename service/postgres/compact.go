package postgres

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/talkgraph/talkgraph/service"
)

// Compact implements service.Store. The streams the service prepared (see
// service.Compaction) are folded together in one transaction and one round trip
// (foldPrepared), each run only where the log still holds it whole; the others, and those
// with a run found not whole, are folded from what is read, each stream in a transaction of
// its own that locks its session, so that it never races an Append or another replica's
// Compact of the session.
func (s *Store) Compact(ctx context.Context, cs []service.Compaction) error {
	if err := s.check(); err != nil {
		return err
	}
	rest, err := s.foldPrepared(ctx, cs)
	if err != nil {
		return err
	}
	for _, c := range rest {
		if err := s.compact(ctx, c.SessionID, c.Key, c.FromSeq); err != nil && service.ErrorCode(err) != service.ENOTFOUND {
			return err
		}
	}
	return nil
}

// foldPrepared writes the prepared foldings of cs in one transaction that locks their
// sessions (in the order Append locks them: neither waits for the other in a cycle), and
// returns the compactions left to fold from what is read: those not prepared, and those
// with a run the log no longer holds whole.
//
// A run is whole when each Seq from its first (its CoalescedFrom) to its last is still in
// the log. The service prepared the folding from the events it held, which are the log's
// at those Seqs (a replica holds only what was made durable, in order), and nothing but a
// folding removes or rewrites an event: a run whose Seqs are all there holds the events the
// service folded, and its events are consecutive in the log, so the range holds nothing
// else. One statement checks every run and, where whole, drops its events but the last and
// rewrites that one; the check reads the log as it was before the statement's writes.
func (s *Store) foldPrepared(ctx context.Context, cs []service.Compaction) ([]service.Compaction, error) {
	var rest []service.Compaction
	var idx []int32
	var sessions []string
	var first, last, offsets []int64
	var deltas [][]byte
	var keys []int32
	for i, c := range cs {
		if !c.PreparedInRange() {
			rest = append(rest, c)
			continue
		}
		for _, e := range c.Folded {
			idx, sessions = append(idx, int32(i)), append(sessions, c.SessionID)
			first, last, offsets = append(first, e.CoalescedFrom), append(last, e.Seq), append(offsets, int64(e.Offset))
			deltas = append(deltas, dbText(e.Delta))
		}
		if len(c.Folded) > 0 {
			keys = append(keys, sessionLockKey(c.SessionID))
		}
	}
	if len(idx) == 0 {
		return rest, nil
	}
	slices.Sort(keys)
	again := map[int32]bool{}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(qPlanSettings)
		b.Queue(qLockSessions, slices.Compact(keys))
		b.Queue(qFoldWhole, idx, sessions, first, last, pgtype.FlatArray[[]byte](deltas), offsets).Query(func(rows pgx.Rows) error {
			var i int32
			_, err := pgx.ForEachRow(rows, []any{&i}, func() error {
				again[i] = true
				return nil
			})
			return err
		})
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, fail("compact", err)
	}
	for i := range cs {
		if again[int32(i)] {
			rest = append(rest, cs[i])
		}
	}
	return rest, nil
}

// compact folds one stream; ENOTFOUND when its session does not exist.
func (s *Store) compact(ctx context.Context, sessionID, key string, fromSeq int64) error {
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, qLockSessions, []int32{sessionLockKey(sessionID)}); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, qSessionExists, sessionID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return service.Errorf(service.ENOTFOUND, "session %s not found", sessionID)
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
