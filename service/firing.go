package service

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// This file fires schedules. Clocks decide when to look; the store decides what happens.
// Every process looks, every Config.ScheduleTick, for the schedules that are due
// (Store.DueSchedules), and plans each one's fires from the instants since the last it
// dealt with (Schedule.Checked): those on time fire, those missed while no process ran
// follow its catch-up policy, local times that did not happen are skipped. The plan is
// claimed in the store over the version the schedule was read at, with a fire row per
// instant unique by (schedule, slot) (ClaimFires): of several replicas looking at once,
// of a restart, of a clock that jumped back, only one claim holds. Then each fire sends
// its message through the one door (exec) on the schedule's owner's behalf, like a message
// of theirs: quotas and budgets apply, the overlap policy is the message's busy policy, and
// the fire's ID is its idempotency key, so that a fire sent again after its process died
// (PendingFires) makes one message.

// tickBatch is how many due schedules a look reads at once.
const tickBatch = 100

// fireSenders bounds the fires one process sends at once.
const fireSenders = 8

// pendingAfter is how long a fire may wait for its outcome before another look sends it
// again (its process died, or its storage failed meanwhile).
const pendingAfter = 30 * time.Second

// maxSkipsRecorded bounds the skipped fires one look records for a schedule: after a long
// outage, the latest. catchUpWindow bounds how far back a look walks a schedule's
// instants: a minute's cron makes some 10,000 in a week, a few milliseconds' walk.
const (
	maxSkipsRecorded = 100
	catchUpWindow    = 7 * 24 * time.Hour
)

// fireLoop looks for due schedules every ScheduleTick until the service closes.
func (s *Service) fireLoop() {
	defer close(s.firerDone)
	t := time.NewTicker(s.cfg.ScheduleTick)
	defer t.Stop()
	var lastPending time.Time
	for {
		select {
		case <-s.firerQuit:
			return
		case <-t.C:
		}
		ctx := context.Background()
		now := s.now()
		s.tick(ctx, now)
		if now.Sub(lastPending) >= pendingAfter/2 {
			s.retryPending(ctx, now)
			lastPending = now
		}
	}
}

// tick fires every schedule due at now.
func (s *Service) tick(ctx context.Context, now time.Time) {
	sem := make(chan struct{}, fireSenders)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		due, err := s.store.DueSchedules(ctx, now, tickBatch)
		if err != nil {
			s.log.Warn("reading the schedules that are due", "err", err)
			return
		}
		// Replicas look at the same schedules: in another order each, they claim
		// different ones first.
		rand.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
		claimed := 0
		for _, sc := range due {
			next, send, err := s.claim(ctx, sc, now)
			if err != nil {
				s.log.Warn("claiming a schedule's fires", "schedule", sc.ID, "err", err)
				continue
			}
			if next == nil {
				continue // another process claimed them
			}
			claimed++
			for _, f := range send {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					s.sendFire(ctx, next, f)
				}()
			}
		}
		if len(due) < tickBatch || claimed == 0 {
			return
		}
	}
}

// claim plans sc's fires due at now and claims them; it returns the schedule as claimed
// and the fires to send, or nil when another process claimed them first.
func (s *Service) claim(ctx context.Context, sc *Schedule, now time.Time) (*Schedule, []*ScheduleFire, error) {
	next, fires, send := s.plan(sc, now)
	ok, err := s.store.ClaimFires(ctx, next, sc.Version, fires)
	if err != nil || !ok {
		return nil, nil, err
	}
	return next, send, nil
}

// plan returns what sc becomes once its instants up to now are dealt with, the fires
// that records (sent or skipped), and those of them to send.
func (s *core) plan(sc *Schedule, now time.Time) (next *Schedule, fires, send []*ScheduleFire) {
	cp := *sc
	next = &cp
	next.Version++
	next.Checked = now
	var onTime, missed, dst []slot
	from := sc.Checked
	if oldest := now.Add(-catchUpWindow); from.Before(oldest) {
		from = oldest // what is older than the window is neither fired nor recorded
	}
	if w, err := walkOf(sc, from); err == nil {
		for {
			sl, ok := w.next()
			if !ok || sl.at.After(now) || (sc.EndAt != nil && sl.at.After(*sc.EndAt)) {
				break
			}
			switch {
			case sl.dst:
				dst = append(dst, sl)
			case sl.at.Before(now.Add(-s.cfg.ScheduleGrace)):
				missed = append(missed, sl)
			default:
				onTime = append(onTime, sl)
			}
		}
	}
	var fire []slot
	skip := map[string]string{}
	keep := 0 // the missed instants that catch-up fires: the latest keep
	switch sc.CatchUp {
	case CatchUpLatest:
		keep = 1
	case CatchUpAll:
		keep = s.cfg.ScheduleMaxCatchUp
	}
	keep = min(keep, len(missed))
	for _, sl := range missed[:len(missed)-keep] {
		skip[sl.key] = FireMissed
	}
	fire = append(fire, missed[len(missed)-keep:]...)
	fire = append(fire, onTime...)
	if sc.MaxFires != nil {
		fire = fire[:min(len(fire), max(*sc.MaxFires-sc.Fires, 0))]
	}
	next.Fires += len(fire)
	for _, sl := range dst {
		skip[sl.key] = FireDST
	}
	skipped := slices.Concat(missed[:len(missed)-keep], dst)
	slices.SortFunc(skipped, func(a, b slot) int { return a.at.Compare(b.at) })
	if len(skipped) > maxSkipsRecorded {
		skipped = skipped[len(skipped)-maxSkipsRecorded:]
	}
	for _, sl := range skipped {
		fires = append(fires, &ScheduleFire{ID: newID(), ScheduleID: sc.ID, UserID: sc.UserID, Slot: sl.key,
			ScheduledAt: sl.at, Attempt: now, Outcome: FireSkipped, Reason: skip[sl.key]})
	}
	for _, sl := range fire {
		f := &ScheduleFire{ID: newID(), ScheduleID: sc.ID, UserID: sc.UserID, Slot: sl.key, ScheduledAt: sl.at, Attempt: now}
		fires = append(fires, f)
		send = append(send, f)
	}
	next.NextAt = nextAt(next)
	return next, fires, send
}

// runScheduleNow is RunScheduleNow for user u.
func (s *Service) runScheduleNow(ctx context.Context, u, id string) (*ScheduleFire, error) {
	for attempt := 1; ; attempt++ {
		sc, err := s.ownSchedule(ctx, u, id)
		if err != nil {
			return nil, err
		}
		now := s.now()
		f := &ScheduleFire{ID: newID(), ScheduleID: sc.ID, UserID: u, Slot: "now:" + now.Format(time.RFC3339Nano),
			ScheduledAt: now, Attempt: now}
		next := *sc
		next.Version++
		next.Fires++
		next.NextAt = nextAt(&next)
		ok, err := s.store.ClaimFires(ctx, &next, sc.Version, []*ScheduleFire{f})
		switch {
		case err != nil:
			return nil, err
		case !ok && attempt < routeAttempts:
			continue // a look claimed its fires meanwhile
		case !ok:
			return nil, Errorf(ECONFLICT, "the schedule is busy firing; try again")
		}
		if !s.sendFire(ctx, &next, f) {
			// Asked now, answered now: it is not sent again later behind the user's back.
			f.Outcome, f.Reason = FireFailed, "the server could not send the message; try again"
			fired := s.now()
			f.FiredAt = &fired
			if err := s.store.FinishFire(context.WithoutCancel(ctx), f, "", fireHook(&next, f)); err != nil {
				return nil, err
			}
		}
		return f, nil
	}
}

// retryPending sends again the fires whose process left them without an outcome.
func (s *Service) retryPending(ctx context.Context, now time.Time) {
	fires, err := s.store.PendingFires(ctx, now.Add(-pendingAfter), tickBatch)
	if err != nil {
		s.log.Warn("reading the fires left pending", "err", err)
		return
	}
	for _, f := range fires {
		if ok, err := s.store.RetakeFire(ctx, f.ID, f.Attempt, now); err != nil || !ok {
			continue
		}
		f.Attempt = now
		sc, err := s.store.Schedule(ctx, f.ScheduleID)
		if err != nil {
			continue // deleted meanwhile: its fires went with it
		}
		s.sendFire(ctx, sc, f)
	}
}

// fireSessions names the sessions fires create: each fire's is derived from its ID, so
// that a fire sent again finds the session its first attempt created.
var fireSessions = uuid.MustParse("8b0f1c9e-5b7a-4d0e-9a53-3f1d2f6c7a10")

// sendFire sends f's message on behalf of sc's user, through exec, and records how it
// ended; a schedule whose fires cannot pass (its session was deleted, its content or
// settings are no longer allowed) is disabled. It reports false when the storage could
// not take it: f is left pending, to be sent again.
func (s *Service) sendFire(ctx context.Context, sc *Schedule, f *ScheduleFire) bool {
	uctx := WithUser(context.WithoutCancel(ctx), sc.UserID)
	if sc.Guest {
		uctx = WithGuest(uctx)
	}
	sessionID := sc.SessionID
	var err error
	if sessionID == "" {
		sessionID = uuid.NewSHA1(fireSessions, []byte(f.ID)).String()
		set := SettingsInput{}
		if sc.Settings != nil {
			set = *sc.Settings
		}
		_, err = s.exec(uctx, &Command{Op: "createTalkSession", Args: &CreateSessionArgs{ID: sessionID, Title: sc.Title, Settings: set}})
		if ErrorCode(err) == ECONFLICT {
			err = nil // its first attempt created it
		}
	}
	var r *Reply
	if err == nil {
		policy := BusyPolicy(sc.Overlap)
		if sc.Overlap == OverlapSkip {
			policy = BusyReject
		}
		r, err = s.exec(uctx, &Command{Op: "addMessage", SessionID: sessionID,
			Args: &AddMessageArgs{Content: sc.Content, Key: "schedule-fire:" + f.ID, Policy: policy}})
	}
	disable := ""
	switch code := ErrorCode(err); {
	case err == nil:
		f.Outcome, f.SessionID, f.RunID = FireStarted, sessionID, r.Run.ID
	case code == EUNAVAILABLE:
		s.log.Warn("a schedule's fire could not be sent; it is sent again later", "schedule", sc.ID, "fire", f.ID, "err", err)
		return false
	case code == ECONFLICT && sc.Overlap == OverlapSkip:
		f.Outcome, f.Reason, f.SessionID = FireSkipped, FireBusy, sessionID
	case code == ENOTFOUND:
		f.Outcome, f.Reason = FireFailed, "the session was deleted"
		disable = f.Reason
	case code == EINVALID:
		f.Outcome, f.Reason = FireFailed, ErrorMessage(err)
		disable = f.Reason
	default:
		f.Outcome, f.Reason = FireFailed, ErrorMessage(err)
	}
	now := s.now()
	f.FiredAt = &now
	if err := s.store.FinishFire(context.WithoutCancel(ctx), f, disable, fireHook(sc, f)); err != nil {
		s.log.Warn("recording a schedule's fire; it is sent again later", "schedule", sc.ID, "fire", f.ID, "err", err)
		return false
	}
	return true
}

// TickSchedules looks once, at the service's clock, for the schedules that are due and
// fires them, as the process does every ScheduleTick: for tests with a clock of their
// own (Config.Clock).
func (s *Service) TickSchedules(ctx context.Context) {
	now := s.now()
	s.tick(ctx, now)
	s.retryPending(ctx, now)
}
