package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// CreateSchedule implements service.ScheduleStore.
func (s *Store) CreateSchedule(ctx context.Context, sc *service.Schedule, max int) error {
	args, err := scheduleArgs(sc)
	if err != nil {
		return err
	}
	return s.writeTx(ctx, "create schedule", func(tx *sql.Tx) error {
		res, err := tx.Exec(qInsertSchedule, append(args, sc.UserID, max)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		var have int
		if err := tx.QueryRow(qCountSchedules, sc.UserID).Scan(&have); err != nil {
			return err
		}
		return service.Errorf(service.ERATELIMIT, "you have %d schedules, the most this server keeps for one user: delete some first", have)
	})
}

// UpdateSchedule implements service.ScheduleStore.
func (s *Store) UpdateSchedule(ctx context.Context, sc *service.Schedule, prev int64) error {
	args, err := scheduleArgs(sc)
	if err != nil {
		return err
	}
	return s.writeTx(ctx, "update schedule", func(tx *sql.Tx) error {
		ok, err := updateSchedule(tx, sc.ID, args, prev)
		if err == nil && !ok {
			return service.Errorf(service.ECONFLICT, "the schedule changed meanwhile")
		}
		return err
	})
}

// updateSchedule writes a schedule's row over version prev; false when it is not stored
// so, ENOTFOUND when it is missing.
func updateSchedule(tx *sql.Tx, id string, args []any, prev int64) (bool, error) {
	res, err := tx.Exec(qUpdateSchedule, append(args, id, prev)...)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return n == 1, err
	}
	var v int64
	if err := tx.QueryRow(qScheduleVersion, id).Scan(&v); errors.Is(err, sql.ErrNoRows) {
		return false, service.Errorf(service.ENOTFOUND, "schedule not found")
	} else if err != nil {
		return false, err
	}
	return false, nil
}

// DeleteSchedule implements service.ScheduleStore.
func (s *Store) DeleteSchedule(ctx context.Context, id string) error {
	return s.writeTx(ctx, "delete schedule", func(tx *sql.Tx) error {
		res, err := tx.Exec(qDeleteSchedule, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return service.Errorf(service.ENOTFOUND, "schedule not found")
		}
		_, err = tx.Exec(qDeleteFires, id)
		return err
	})
}

// Schedule implements service.ScheduleStore.
func (s *Store) Schedule(ctx context.Context, id string) (*service.Schedule, error) {
	return getOne(ctx, s, "schedule", id, qSchedule, scanSchedule, id)
}

// UserSchedules implements service.ScheduleStore.
func (s *Store) UserSchedules(ctx context.Context, userID string) ([]*service.Schedule, error) {
	return getAll(ctx, s, "schedules", scanSchedule, qUserSchedules, userID)
}

// DueSchedules implements service.ScheduleStore.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*service.Schedule, error) {
	return getAll(ctx, s, "due schedules", scanSchedule, qDueSchedules, dbTime(now), sqlLimit(limit))
}

// ClaimFires implements service.ScheduleStore.
func (s *Store) ClaimFires(ctx context.Context, sc *service.Schedule, prev int64, fires []*service.ScheduleFire) (bool, error) {
	args, err := scheduleArgs(sc)
	if err != nil {
		return false, err
	}
	claimed := false
	err = s.writeTx(ctx, "claim fires", func(tx *sql.Tx) error {
		ok, err := updateSchedule(tx, sc.ID, args, prev)
		if err != nil || !ok {
			return err
		}
		for _, f := range fires {
			res, err := tx.Exec(qInsertFire, fireArgs(f)...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return errClaimed // a slot taken: another claim holds it
			}
		}
		claimed = true
		return nil
	})
	if errors.Is(err, errClaimed) {
		return false, nil
	}
	return claimed, err
}

var errClaimed = service.Errorf(service.ECONFLICT, "claimed already")

// FinishFire implements service.ScheduleStore.
func (s *Store) FinishFire(ctx context.Context, f *service.ScheduleFire, disable string, hook *service.HookEvent) error {
	return s.writeTx(ctx, "finish fire", func(tx *sql.Tx) error {
		var schedule string
		err := tx.QueryRow(qFinishFire, dbNullTime(f.FiredAt), string(f.Outcome), f.Reason, f.SessionID, f.RunID, f.ID).Scan(&schedule)
		if errors.Is(err, sql.ErrNoRows) {
			return service.Errorf(service.ENOTFOUND, "fire not found")
		}
		if err != nil {
			return err
		}
		if disable != "" {
			if _, err := tx.Exec(qDisableSchedule, disable, schedule); err != nil {
				return err
			}
		}
		if hook == nil {
			return nil
		}
		w := &txWriter{s: s, ctx: ctx, tx: tx, prepared: map[string]*sql.Stmt{}}
		return w.insertDeliveries([]*service.HookEvent{hook})
	})
}

// Fires implements service.ScheduleStore.
func (s *Store) Fires(ctx context.Context, scheduleID string, before *service.FirePosition, limit int) ([]*service.ScheduleFire, error) {
	if before == nil {
		return getAll(ctx, s, "fires", scanFire, qFires, scheduleID, sqlLimit(limit))
	}
	return getAll(ctx, s, "fires", scanFire, qFiresBefore, scheduleID, dbTime(before.ScheduledAt), before.ID, sqlLimit(limit))
}

// PendingFires implements service.ScheduleStore.
func (s *Store) PendingFires(ctx context.Context, before time.Time, limit int) ([]*service.ScheduleFire, error) {
	return getAll(ctx, s, "pending fires", scanFire, qPendingFires, dbTime(before), sqlLimit(limit))
}

// RetakeFire implements service.ScheduleStore.
func (s *Store) RetakeFire(ctx context.Context, id string, prev, at time.Time) (bool, error) {
	taken := false
	err := s.writeTx(ctx, "retake fire", func(tx *sql.Tx) error {
		res, err := tx.Exec(qRetakeFire, dbTime(at), id, dbTime(prev))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		taken = n == 1
		return err
	})
	return taken, err
}
