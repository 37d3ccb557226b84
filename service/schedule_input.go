package service

import (
	"context"
	"time"
)

// This file is what createSchedule and updateSchedule check and store: a schedule's
// fields as a user gives them, and where it is due next.

// walker gives a schedule's slots in order (see slots).
type walker interface{ next() (slot, bool) }

// oneSlot is the slot of a schedule that fires once, At.
type oneSlot struct {
	at   time.Time
	done bool
}

func (o *oneSlot) next() (slot, bool) {
	if o.done {
		return slot{}, false
	}
	o.done = true
	return slotAt(o.at), true
}

// walkOf returns sc's slots after the moment after.
func walkOf(sc *Schedule, after time.Time) (walker, error) {
	if sc.At != nil {
		return &oneSlot{at: *sc.At, done: !sc.At.After(after)}, nil
	}
	spec, err := parseCron(sc.Cron)
	if err != nil {
		return nil, err
	}
	loc, err := loadZone(sc.Timezone)
	if err != nil {
		return nil, err
	}
	return newSlots(spec, loc, after), nil
}

// nextAt returns sc's NextAt once its slots up to its Checked are dealt with: when its
// next slot is due, or nil when it will not fire again (disabled, ended, all its fires
// made).
func nextAt(sc *Schedule) *time.Time {
	if !sc.Enabled || (sc.MaxFires != nil && sc.Fires >= *sc.MaxFires) {
		return nil
	}
	w, err := walkOf(sc, sc.Checked)
	if err != nil {
		return nil
	}
	sl, ok := w.next()
	if !ok || (sc.EndAt != nil && sl.at.After(*sc.EndAt)) {
		return nil
	}
	return &sl.at
}

// ownSchedule returns schedule id when it is user u's; ENOTFOUND otherwise.
func (s *core) ownSchedule(ctx context.Context, u, id string) (*Schedule, error) {
	sc, err := s.store.Schedule(ctx, id)
	if ErrorCode(err) == ENOTFOUND || (err == nil && sc.UserID != u) {
		return nil, Errorf(ENOTFOUND, "schedule not found")
	}
	return sc, err
}

// createSchedule is CreateSchedule for user u.
func (s *core) createSchedule(ctx context.Context, u string, guest bool, in ScheduleInput) (*Schedule, error) {
	now := s.now()
	sc := &Schedule{ID: newID(), UserID: u, Guest: guest, Timezone: "UTC", Overlap: OverlapSkip, CatchUp: CatchUpLatest,
		Enabled: true, CreatedAt: now, UpdatedAt: now, Checked: now, Version: 1}
	if in.Content == nil {
		return nil, Errorf(EINVALID, "a schedule needs a content: the message each fire sends")
	}
	if (in.Cron == nil) == (in.At == nil) {
		return nil, Errorf(EINVALID, "give a schedule exactly one of cron and at")
	}
	if err := s.applySchedule(ctx, sc, in, now); err != nil {
		return nil, err
	}
	sc.NextAt = nextAt(sc)
	if err := s.store.CreateSchedule(ctx, sc, s.cfg.MaxSchedulesPerUser); err != nil {
		return nil, err
	}
	return sc, nil
}

// updateSchedule is UpdateSchedule for user u. A fire claimed meanwhile moves the
// schedule on: the change is made again over it.
func (s *core) updateSchedule(ctx context.Context, u, id string, in ScheduleInput) (*Schedule, error) {
	for attempt := 1; ; attempt++ {
		old, err := s.ownSchedule(ctx, u, id)
		if err != nil {
			return nil, err
		}
		now := s.now()
		sc := *old
		if in.Cron != nil {
			sc.At = nil
		}
		if in.At != nil {
			sc.Cron = ""
		}
		if in.Cron != nil && in.At != nil {
			return nil, Errorf(EINVALID, "give a schedule exactly one of cron and at")
		}
		if err := s.applySchedule(ctx, &sc, in, now); err != nil {
			return nil, err
		}
		when := in.Cron != nil || in.At != nil || in.Timezone != nil
		if when || (sc.Enabled && !old.Enabled) {
			sc.Checked = now // from now on: what it missed while paused or before is not caught up
		}
		if sc.Enabled {
			sc.DisabledReason = ""
		}
		sc.UpdatedAt, sc.Version = now, old.Version+1
		sc.NextAt = nextAt(&sc)
		err = s.store.UpdateSchedule(ctx, &sc, old.Version)
		if ErrorCode(err) == ECONFLICT && attempt < routeAttempts {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &sc, nil
	}
}

// maxFiresLimit bounds MaxFires, maxYearsAhead At and EndAt.
const (
	maxFiresLimit = 1_000_000
	maxYearsAhead = 100
)

// applySchedule checks in and sets what it gives on sc, at now.
func (s *core) applySchedule(ctx context.Context, sc *Schedule, in ScheduleInput, now time.Time) error {
	if in.Content != nil {
		if err := s.checkText("content", *in.Content); err != nil {
			return err
		}
		sc.Content = *in.Content
	}
	if in.SessionID != nil {
		if _, err := s.ownSession(ctx, sc.UserID, *in.SessionID); err != nil {
			return err
		}
		sc.SessionID = *in.SessionID
	}
	if in.Title != nil {
		title := trimTitle(*in.Title)
		if err := s.checkTitle(title); err != nil {
			return err
		}
		sc.Title = title
	}
	if in.Settings != nil {
		scratch := Settings{Agent: "demo", BusyPolicy: BusyInterrupt}
		if err := s.applySettings(&scratch, *in.Settings); err != nil {
			return err
		}
		set := *in.Settings
		sc.Settings = &set
	}
	if in.Timezone != nil {
		if _, err := loadZone(*in.Timezone); err != nil {
			return err
		}
		sc.Timezone = *in.Timezone
		if sc.Timezone == "" {
			sc.Timezone = "UTC"
		}
	}
	if in.Overlap != nil {
		switch o := *in.Overlap; o {
		case OverlapSkip, OverlapEnqueue, OverlapInterrupt:
			sc.Overlap = o
		default:
			return Errorf(EINVALID, "unknown overlap %q", truncate(string(o), 20))
		}
	}
	if in.CatchUp != nil {
		switch c := *in.CatchUp; c {
		case CatchUpSkip, CatchUpLatest, CatchUpAll:
			sc.CatchUp = c
		default:
			return Errorf(EINVALID, "unknown catch-up %q", truncate(string(c), 20))
		}
	}
	if in.EndAt != nil {
		if !in.EndAt.After(now) {
			return Errorf(EINVALID, "endAt is not in the future")
		}
		if in.EndAt.After(now.AddDate(maxYearsAhead, 0, 0)) {
			return Errorf(EINVALID, "endAt is more than %d years ahead", maxYearsAhead)
		}
		end := in.EndAt.UTC()
		sc.EndAt = &end
	}
	if in.MaxFires != nil {
		if n := *in.MaxFires; n < 1 || n > maxFiresLimit {
			return Errorf(EINVALID, "maxFires must be from 1 to %d", maxFiresLimit)
		}
		n := *in.MaxFires
		sc.MaxFires = &n
	}
	if in.Enabled != nil {
		sc.Enabled = *in.Enabled
	}
	if in.At != nil {
		if !in.At.After(now) {
			return Errorf(EINVALID, "at is not in the future")
		}
		if in.At.After(now.AddDate(maxYearsAhead, 0, 0)) {
			return Errorf(EINVALID, "at is more than %d years ahead", maxYearsAhead)
		}
		at := in.At.UTC()
		sc.At = &at
	}
	if in.Cron != nil {
		sc.Cron = *in.Cron
	}
	if sc.At == nil {
		return s.checkCron(sc.Cron, sc.Timezone, now)
	}
	return nil
}

// checkCron refuses a cron that does not parse, never fires, or fires more often than
// Config.ScheduleMinInterval in zone.
func (s *core) checkCron(spec, zone string, now time.Time) error {
	parsed, err := parseCron(spec)
	if err != nil {
		return err
	}
	loc, err := loadZone(zone)
	if err != nil {
		return err
	}
	if _, ok := newSlots(parsed, loc, now).next(); !ok {
		return Errorf(EINVALID, "the cron %q never fires", truncate(spec, 40))
	}
	if limit := s.cfg.ScheduleMinInterval; limit > time.Minute {
		if gap := minGap(parsed, loc, limit); gap < limit {
			return Errorf(EINVALID, "the cron %q fires %s apart at times; this server allows at least %s between fires",
				truncate(spec, 40), gap, limit)
		}
	}
	return nil
}
