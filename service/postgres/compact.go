package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
)

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
