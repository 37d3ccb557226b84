package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// forgetSeenEvery is how often a Store deletes the IDs in bus_seen whose time has passed.
// The table holds no more than the commands of that long and of the time they are kept.
const forgetSeenEvery = time.Minute

// FirstSeen implements service.ReplayGuard with one row of bus_seen per ID, inserted
// unless there: the one insert that makes the row reports true, in whichever replica.
// At most every forgetSeenEvery, the same round trip deletes the rows whose time has
// passed. A statement that never reached the server is sent once more; one whose
// outcome is unknown is not (it may have made the row), and fails with EUNAVAILABLE.
func (s *Store) FirstSeen(ctx context.Context, id []byte, until time.Time) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	first, err := s.firstSeen(ctx, id, until)
	if err != nil && pgconn.SafeToRetry(err) && ctx.Err() == nil { // once: the pool replaces the connection
		first, err = s.firstSeen(ctx, id, until)
	}
	return first, fail("first seen", err)
}

func (s *Store) firstSeen(ctx context.Context, id []byte, until time.Time) (bool, error) {
	b := &pgx.Batch{}
	var first bool
	b.Queue(qFirstSeen, id, dbBound(until)).Exec(func(tag pgconn.CommandTag) error {
		first = tag.RowsAffected() == 1
		return nil
	})
	now := time.Now()
	if last := s.forgotSeen.Load(); now.UnixNano()-last >= int64(forgetSeenEvery) && s.forgotSeen.CompareAndSwap(last, now.UnixNano()) {
		b.Queue(qForgetSeen, dbBound(now))
	}
	err := s.pool.SendBatch(ctx, b).Close()
	return first, err
}
