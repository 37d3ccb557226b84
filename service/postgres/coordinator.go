package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/talkgraph/talkgraph/service"
)

// Heartbeat implements service.Coordinator: the replica's row in replicas takes the new
// times, and the replicas whose time has not run out at now are returned, in one round
// trip. A replica is alive at now while now is before its until.
func (s *Store) Heartbeat(ctx context.Context, id string, now, until time.Time) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.Queue(qHeartbeat, id, dbBound(now), dbBound(until))
	live := []string{}
	b.Queue(qLive, dbBound(now)).Query(func(rows pgx.Rows) error {
		var r string
		_, err := pgx.ForEachRow(rows, []any{&r}, func() error {
			live = append(live, r)
			return nil
		})
		return err
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fail("heartbeat", err)
	}
	return live, nil
}

// Leave implements service.Coordinator: the replica's row goes.
func (s *Store) Leave(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, qLeave, id)
	return fail("leave", err)
}

// ClaimRuns implements service.Coordinator with one UPDATE of the orphaned runs, which
// it locks with FOR UPDATE SKIP LOCKED: of two replicas claiming at once, each takes the
// runs the other has not locked, and a run that an Append holds at that moment is left
// for the next claim.
func (s *Store) ClaimRuns(ctx context.Context, id string, now time.Time) ([]*service.Run, error) {
	runs, err := getAll(ctx, s, "claim runs", scanRun, qClaimRuns, id, dbBound(now))
	if err != nil {
		return nil, err
	}
	sortRuns(runs)
	return runs, nil
}

// ActiveRun implements service.Coordinator.
func (s *Store) ActiveRun(ctx context.Context, sessionID string) (*service.Run, error) {
	r, err := getOne(ctx, s, "active run of session", sessionID, qActiveRun, scanRun, sessionID)
	if service.ErrorCode(err) == service.ENOTFOUND {
		return nil, service.Errorf(service.ENOTFOUND, "session %s has no active run", sessionID)
	}
	return r, err
}

// sortRuns orders runs oldest first (CreatedAt, then ID).
func sortRuns(runs []*service.Run) {
	slices.SortFunc(runs, func(a, b *service.Run) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
