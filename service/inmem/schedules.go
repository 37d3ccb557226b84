package inmem

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

type slotKey struct{ schedule, slot string }

func cloneSchedule(sc *service.Schedule) *service.Schedule {
	c := *sc
	if sc.Settings != nil {
		set := *sc.Settings
		set.Agent, set.Model, set.SystemPrompt = clonePtr(set.Agent), clonePtr(set.Model), clonePtr(set.SystemPrompt)
		set.Temperature, set.BusyPolicy, set.TokenBudget = clonePtr(set.Temperature), clonePtr(set.BusyPolicy), clonePtr(set.TokenBudget)
		if set.ToolPolicies != nil {
			set.ToolPolicies = cloneMap(set.ToolPolicies)
		}
		c.Settings = &set
	}
	c.At, c.EndAt, c.NextAt = cloneTimePtr(sc.At), cloneTimePtr(sc.EndAt), cloneTimePtr(sc.NextAt)
	c.MaxFires = clonePtr(sc.MaxFires)
	c.CreatedAt, c.UpdatedAt, c.Checked = cloneTime(sc.CreatedAt), cloneTime(sc.UpdatedAt), cloneTime(sc.Checked)
	return &c
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func cloneFire(f *service.ScheduleFire) *service.ScheduleFire {
	c := *f
	c.ScheduledAt, c.Attempt, c.FiredAt = cloneTime(f.ScheduledAt), cloneTime(f.Attempt), cloneTimePtr(f.FiredAt)
	return &c
}

// lock takes the write lock, unless the store is closed.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed()
	}
	return nil
}

// CreateSchedule implements service.ScheduleStore.
func (s *Store) CreateSchedule(ctx context.Context, sc *service.Schedule, max int) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.schedules {
		if o.UserID == sc.UserID {
			n++
		}
	}
	if n >= max {
		return service.Errorf(service.ERATELIMIT, "you have %d schedules, the most this server keeps for one user: delete some first", n)
	}
	if _, ok := s.schedules[sc.ID]; ok {
		return service.Errorf(service.ECONFLICT, "schedule %s exists", sc.ID)
	}
	s.schedules[sc.ID] = cloneSchedule(sc)
	return nil
}

// versioned returns schedule id when its stored version is prev; s.mu must be held.
func (s *Store) versioned(id string, prev int64) (*service.Schedule, error) {
	old := s.schedules[id]
	if old == nil {
		return nil, service.Errorf(service.ENOTFOUND, "schedule not found")
	}
	if old.Version != prev {
		return nil, service.Errorf(service.ECONFLICT, "the schedule changed meanwhile")
	}
	return old, nil
}

// UpdateSchedule implements service.ScheduleStore.
func (s *Store) UpdateSchedule(ctx context.Context, sc *service.Schedule, prev int64) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, err := s.versioned(sc.ID, prev); err != nil {
		return err
	}
	s.schedules[sc.ID] = cloneSchedule(sc)
	return nil
}

// DeleteSchedule implements service.ScheduleStore.
func (s *Store) DeleteSchedule(ctx context.Context, id string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.schedules[id] == nil {
		return service.Errorf(service.ENOTFOUND, "schedule not found")
	}
	delete(s.schedules, id)
	for fid, f := range s.fires {
		if f.ScheduleID == id {
			delete(s.fires, fid)
			delete(s.slots, slotKey{id, f.Slot})
		}
	}
	return nil
}

// Schedule implements service.ScheduleStore.
func (s *Store) Schedule(ctx context.Context, id string) (*service.Schedule, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	sc := s.schedules[id]
	if sc == nil {
		return nil, service.Errorf(service.ENOTFOUND, "schedule not found")
	}
	return cloneSchedule(sc), nil
}

// UserSchedules implements service.ScheduleStore.
func (s *Store) UserSchedules(ctx context.Context, userID string) ([]*service.Schedule, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	out := []*service.Schedule{}
	for _, sc := range s.schedules {
		if sc.UserID == userID {
			out = append(out, cloneSchedule(sc))
		}
	}
	slices.SortFunc(out, func(a, b *service.Schedule) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// DueSchedules implements service.ScheduleStore.
func (s *Store) DueSchedules(ctx context.Context, now time.Time, limit int) ([]*service.Schedule, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	out := []*service.Schedule{}
	for _, sc := range s.schedules {
		if sc.Enabled && sc.NextAt != nil && !sc.NextAt.After(now) {
			out = append(out, cloneSchedule(sc))
		}
	}
	slices.SortFunc(out, func(a, b *service.Schedule) int {
		return cmp.Or(a.NextAt.Compare(*b.NextAt), cmp.Compare(a.ID, b.ID))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// ClaimFires implements service.ScheduleStore.
func (s *Store) ClaimFires(ctx context.Context, sc *service.Schedule, prev int64, fires []*service.ScheduleFire) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	_, err := s.versioned(sc.ID, prev)
	switch {
	case service.ErrorCode(err) == service.ECONFLICT:
		return false, nil
	case err != nil:
		return false, err
	}
	for _, f := range fires {
		if _, taken := s.slots[slotKey{sc.ID, f.Slot}]; taken {
			return false, nil
		}
	}
	s.schedules[sc.ID] = cloneSchedule(sc)
	for _, f := range fires {
		s.fires[f.ID] = cloneFire(f)
		s.slots[slotKey{sc.ID, f.Slot}] = f.ID
	}
	return true, nil
}

// FinishFire implements service.ScheduleStore.
func (s *Store) FinishFire(ctx context.Context, f *service.ScheduleFire, disable string, hook *service.HookEvent) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	old := s.fires[f.ID]
	if old == nil {
		return service.Errorf(service.ENOTFOUND, "fire not found")
	}
	old.FiredAt, old.Outcome, old.Reason, old.SessionID, old.RunID = cloneTimePtr(f.FiredAt), f.Outcome, f.Reason, f.SessionID, f.RunID
	if sc := s.schedules[old.ScheduleID]; sc != nil && disable != "" {
		sc.Enabled, sc.DisabledReason, sc.NextAt = false, disable, nil
		sc.Version++
	}
	if hook != nil {
		s.deliver(hook)
	}
	return nil
}

// Fires implements service.ScheduleStore.
func (s *Store) Fires(ctx context.Context, scheduleID string, before *service.FirePosition, limit int) ([]*service.ScheduleFire, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	newest := func(a, b *service.ScheduleFire) int {
		return cmp.Or(b.ScheduledAt.Compare(a.ScheduledAt), cmp.Compare(b.ID, a.ID))
	}
	out := []*service.ScheduleFire{}
	for _, f := range s.fires {
		if f.ScheduleID != scheduleID || f.Outcome == "" {
			continue
		}
		if before != nil && newest(f, &service.ScheduleFire{ScheduledAt: before.ScheduledAt, ID: before.ID}) <= 0 {
			continue
		}
		out = append(out, cloneFire(f))
	}
	slices.SortFunc(out, newest)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// PendingFires implements service.ScheduleStore.
func (s *Store) PendingFires(ctx context.Context, before time.Time, limit int) ([]*service.ScheduleFire, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	out := []*service.ScheduleFire{}
	for _, f := range s.fires {
		if f.Outcome == "" && f.Attempt.Before(before) {
			out = append(out, cloneFire(f))
		}
	}
	slices.SortFunc(out, func(a, b *service.ScheduleFire) int {
		return cmp.Or(a.Attempt.Compare(b.Attempt), cmp.Compare(a.ID, b.ID))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// RetakeFire implements service.ScheduleStore.
func (s *Store) RetakeFire(ctx context.Context, id string, prev, at time.Time) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	f := s.fires[id]
	if f == nil || f.Outcome != "" || !f.Attempt.Equal(prev) {
		return false, nil
	}
	f.Attempt = cloneTime(at)
	return true, nil
}
