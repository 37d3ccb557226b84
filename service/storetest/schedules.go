package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// scheduleTests check ScheduleStore.
var scheduleTests = []struct {
	name string
	fn   func(t *testing.T, s service.Store)
}{
	{"Schedule/round-trips every field; ENOTFOUND when missing", testScheduleRoundTrip},
	{"CreateSchedule/ERATELIMIT once the user keeps max", testScheduleMax},
	{"UpdateSchedule/over its stored version only", testScheduleUpdate},
	{"DeleteSchedule/with its fires; ENOTFOUND when missing", testScheduleDelete},
	{"UserSchedules/a user's, oldest first", testUserSchedules},
	{"DueSchedules/enabled ones due by now, by NextAt then ID, up to a limit", testDueSchedules},
	{"ClaimFires/all or nothing: not over a moved version, not a slot taken", testClaimFires},
	{"ClaimFires/of concurrent claims of one version, one holds", testClaimConcurrent},
	{"FinishFire/records the outcome, and disables when told", testFinishFire},
	{"Fires/those with an outcome, newest first, after a position", testFires},
	{"PendingFires/without an outcome, oldest attempt first; RetakeFire once", testPendingFires},
}

func newSchedule(id, user string, at time.Duration) *service.Schedule {
	next := t0.Add(at)
	return &service.Schedule{ID: id, UserID: user, Content: "good morning ✓", Cron: "0 9 * * *", Timezone: "Europe/Paris",
		Overlap: service.OverlapEnqueue, CatchUp: service.CatchUpAll, Enabled: true, CreatedAt: t0.Add(at), UpdatedAt: t0.Add(at),
		Checked: t0, NextAt: &next, Version: 1}
}

func createSchedule(t *testing.T, s service.Store, sc *service.Schedule) {
	t.Helper()
	if err := s.CreateSchedule(t.Context(), sc, 100); err != nil {
		t.Fatal(err)
	}
}

func utcSchedule(sc *service.Schedule) *service.Schedule {
	c := *sc
	c.CreatedAt, c.UpdatedAt, c.Checked = sc.CreatedAt.UTC(), sc.UpdatedAt.UTC(), sc.Checked.UTC()
	for _, p := range []**time.Time{&c.At, &c.EndAt, &c.NextAt} {
		if *p != nil {
			*p = ptr((**p).UTC())
		}
	}
	return &c
}

func newFire(id, schedule string, at time.Duration) *service.ScheduleFire {
	return &service.ScheduleFire{ID: id, ScheduleID: schedule, UserID: "u1", Slot: t0.Add(at).UTC().Format(time.RFC3339Nano),
		ScheduledAt: t0.Add(at), Attempt: t0.Add(at)}
}

// skipped gives f an outcome, as a claim records the instants it skips.
func skipped(f *service.ScheduleFire) *service.ScheduleFire {
	f.Outcome, f.Reason = service.FireSkipped, service.FireMissed
	return f
}

func utcFire(f *service.ScheduleFire) *service.ScheduleFire {
	c := *f
	c.ScheduledAt, c.Attempt = f.ScheduledAt.UTC(), f.Attempt.UTC()
	if f.FiredAt != nil {
		c.FiredAt = ptr(f.FiredAt.UTC())
	}
	return &c
}

func testScheduleRoundTrip(t *testing.T, s service.Store) {
	full := newSchedule("a", "u1", 0)
	full.Guest, full.SessionID, full.Title = true, "s1", "morning ✓"
	full.Settings = &service.SettingsInput{Agent: ptr("demo"), Temperature: ptr(0.5), TokenBudget: ptr((1000)),
		ToolPolicies: map[string]service.ToolPolicy{"echo": service.PolicyAsk}}
	full.EndAt, full.MaxFires, full.DisabledReason, full.Fires = ptr(at(time.Hour)), ptr(7), "why", 3
	one := newSchedule("b", "u1", time.Second)
	one.Cron, one.At, one.NextAt, one.Enabled = "", ptr(at(time.Minute)), nil, false
	for _, sc := range []*service.Schedule{full, one} {
		createSchedule(t, s, sc)
		got, err := s.Schedule(t.Context(), sc.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, "schedule "+sc.ID, got, utcSchedule(sc))
	}
	_, err := s.Schedule(t.Context(), "missing")
	wantCode(t, "a missing schedule", err, service.ENOTFOUND)
}

func testScheduleMax(t *testing.T, s service.Store) {
	for i := range 3 {
		if err := s.CreateSchedule(t.Context(), newSchedule(fmt.Sprint(i), "u1", 0), 3); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, "a fourth schedule of three at most", s.CreateSchedule(t.Context(), newSchedule("x", "u1", 0), 3), service.ERATELIMIT)
	if _, err := s.Schedule(t.Context(), "x"); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("the schedule refused was stored: %v", err)
	}
	if err := s.CreateSchedule(t.Context(), newSchedule("y", "u2", 0), 3); err != nil {
		t.Errorf("another user's first: %v", err)
	}
}

func testScheduleUpdate(t *testing.T, s service.Store) {
	sc := newSchedule("a", "u1", 0)
	createSchedule(t, s, sc)
	changed := *sc
	changed.Content, changed.Version = "changed", 2
	if err := s.UpdateSchedule(t.Context(), &changed, 1); err != nil {
		t.Fatal(err)
	}
	stale := *sc
	stale.Content, stale.Version = "stale", 2
	wantCode(t, "an update over version 1, now 2", s.UpdateSchedule(t.Context(), &stale, 1), service.ECONFLICT)
	got, _ := s.Schedule(t.Context(), "a")
	wantEqual(t, "the schedule", got, utcSchedule(&changed))
	missing := *sc
	missing.ID = "missing"
	wantCode(t, "an update of a missing schedule", s.UpdateSchedule(t.Context(), &missing, 1), service.ENOTFOUND)
}

func testScheduleDelete(t *testing.T, s service.Store) {
	sc := newSchedule("a", "u1", 0)
	createSchedule(t, s, sc)
	next := *sc
	next.Version = 2
	if ok, err := s.ClaimFires(t.Context(), &next, 1, []*service.ScheduleFire{skipped(newFire("f1", "a", 0))}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := s.DeleteSchedule(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if fires, _ := s.Fires(t.Context(), "a", nil, 0); len(fires) != 0 {
		t.Errorf("fires of a deleted schedule: %s", dump(fires))
	}
	wantCode(t, "finishing a fire of a deleted schedule", s.FinishFire(t.Context(), newFire("f1", "a", 0), "", nil), service.ENOTFOUND)
	wantCode(t, "deleting it again", s.DeleteSchedule(t.Context(), "a"), service.ENOTFOUND)
}

func testUserSchedules(t *testing.T, s service.Store) {
	createSchedule(t, s, newSchedule("b", "u1", time.Second))
	createSchedule(t, s, newSchedule("c", "u1", 0))
	createSchedule(t, s, newSchedule("a", "u1", time.Second))
	createSchedule(t, s, newSchedule("d", "u2", 0))
	got, err := s.UserSchedules(t.Context(), "u1")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "u1's schedules", idsOf(got, func(sc *service.Schedule) string { return sc.ID }), []string{"c", "a", "b"})
	none, _ := s.UserSchedules(t.Context(), "nobody")
	wantEqual(t, "nobody's", len(none), 0)
}

func testDueSchedules(t *testing.T, s service.Store) {
	createSchedule(t, s, newSchedule("late", "u1", 2*time.Second))
	createSchedule(t, s, newSchedule("b", "u1", time.Second))
	createSchedule(t, s, newSchedule("a", "u1", time.Second))
	createSchedule(t, s, newSchedule("future", "u1", time.Hour))
	off := newSchedule("off", "u1", 0)
	off.Enabled = false
	createSchedule(t, s, off)
	done := newSchedule("done", "u1", 0)
	done.NextAt = nil
	createSchedule(t, s, done)
	due, err := s.DueSchedules(t.Context(), at(2*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(l []*service.Schedule) []string {
		return idsOf(l, func(sc *service.Schedule) string { return sc.ID })
	}
	wantEqual(t, "due at t0+2s", ids(due), []string{"a", "b", "late"})
	due, _ = s.DueSchedules(t.Context(), at(2*time.Second), 2)
	wantEqual(t, "due at t0+2s, two at most", ids(due), []string{"a", "b"})
}

func testClaimFires(t *testing.T, s service.Store) {
	sc := newSchedule("a", "u1", 0)
	createSchedule(t, s, sc)
	next := *sc
	next.Version, next.Fires = 2, 1
	ok, err := s.ClaimFires(t.Context(), &next, 1, []*service.ScheduleFire{skipped(newFire("f1", "a", 0)), skipped(newFire("f2", "a", time.Minute))})
	if err != nil || !ok {
		t.Fatalf("the first claim: %v, %v", ok, err)
	}
	again := next
	again.Version = 3
	ok, err = s.ClaimFires(t.Context(), &again, 1, []*service.ScheduleFire{newFire("f3", "a", 2*time.Minute)})
	if err != nil || ok {
		t.Errorf("a claim over version 1, now 2: %v, %v; want false", ok, err)
	}
	ok, err = s.ClaimFires(t.Context(), &again, 2, []*service.ScheduleFire{newFire("f4", "a", 3*time.Minute), newFire("f5", "a", time.Minute)})
	if err != nil || ok {
		t.Errorf("a claim of a slot taken: %v, %v; want false", ok, err)
	}
	got, _ := s.Schedule(t.Context(), "a")
	wantEqual(t, "the schedule after the claims refused", got, utcSchedule(&next))
	fires, _ := s.Fires(t.Context(), "a", nil, 0)
	wantEqual(t, "its fires", idsOf(fires, func(f *service.ScheduleFire) string { return f.ID }), []string{"f2", "f1"})
	wantEqual(t, "a fire", fires[1], utcFire(skipped(newFire("f1", "a", 0))))
	missing := next
	missing.ID = "missing"
	_, err = s.ClaimFires(t.Context(), &missing, 1, nil)
	wantCode(t, "a claim on a missing schedule", err, service.ENOTFOUND)
}

func testClaimConcurrent(t *testing.T, s service.Store) {
	createSchedule(t, s, newSchedule("a", "u1", 0))
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := newSchedule("a", "u1", 0)
			next.Version = 2
			ok, err := s.ClaimFires(t.Context(), next, 1, []*service.ScheduleFire{skipped(newFire(fmt.Sprint("f", i), "a", 0))})
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d of %d concurrent claims held; want 1", won, n)
	}
	if fires, _ := s.Fires(t.Context(), "a", nil, 0); len(fires) != 1 {
		t.Errorf("%d fires stored; want 1", len(fires))
	}
}

func testFinishFire(t *testing.T, s service.Store) {
	sc := newSchedule("a", "u1", 0)
	createSchedule(t, s, sc)
	next := *sc
	next.Version = 2
	f1, f2 := newFire("f1", "a", 0), newFire("f2", "a", time.Minute)
	if ok, err := s.ClaimFires(t.Context(), &next, 1, []*service.ScheduleFire{f1, f2}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	f1.FiredAt, f1.Outcome, f1.SessionID, f1.RunID = ptr(at(time.Second)), service.FireStarted, "s1", "r1"
	mustCreateWebhook(t, s, webhook("w1", "u1", t0, "schedule.fired"))
	mustCreateWebhook(t, s, webhook("w2", "u1", t0, "run.completed"))
	mustCreateWebhook(t, s, webhook("w3", "u2", t0, "schedule.fired"))
	if err := s.FinishFire(t.Context(), f1, "", fireHook("f1")); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Schedule(t.Context(), "a")
	if !got.Enabled || got.Version != 2 {
		t.Errorf("a fire finished without disabling: the schedule %s", dump(got))
	}
	f2.FiredAt, f2.Outcome, f2.Reason = ptr(at(2*time.Second)), service.FireFailed, "the session was deleted"
	if err := s.FinishFire(t.Context(), f2, "the session was deleted", nil); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Schedule(t.Context(), "a")
	if got.Enabled || got.DisabledReason != "the session was deleted" || got.NextAt != nil || got.Version != 3 {
		t.Errorf("a fire that disables: the schedule %s; want disabled with its reason, no NextAt, version 3", dump(got))
	}
	fires, _ := s.Fires(t.Context(), "a", nil, 0)
	wantEqual(t, "the fires", fires, []*service.ScheduleFire{utcFire(f2), utcFire(f1)})
	// f1's webhook event went to u1's webhook that takes schedule.fired, and nowhere else;
	// f2 told nothing, and a fire not found makes no delivery.
	ds := deliveriesOf(t, s, "w1")
	if len(ds) != 1 || ds[0].EventID != "evt-f1" || ds[0].Type != "schedule.fired" || ds[0].Payload != `{"fire":"f1"}` ||
		ds[0].UserID != "u1" || ds[0].Status != service.DeliveryPending {
		t.Errorf("w1's deliveries: %s; want the one of f1's event, pending", dump(ds))
	}
	if n, m := len(deliveriesOf(t, s, "w2")), len(deliveriesOf(t, s, "w3")); n+m != 0 {
		t.Errorf("a webhook of another type has %d deliveries, another user's %d; want none", n, m)
	}
	wantCode(t, "finishing a missing fire", s.FinishFire(t.Context(), newFire("missing", "a", 0), "", fireHook("missing")), service.ENOTFOUND)
	if ds := deliveriesOf(t, s, "w1"); len(ds) != 1 {
		t.Errorf("after a fire not found, w1 has %d deliveries; want 1", len(ds))
	}
}

// fireHook is a schedule.fired webhook event of u1's, telling of fire id.
func fireHook(id string) *service.HookEvent {
	return &service.HookEvent{ID: "evt-" + id, UserID: "u1", Type: "schedule.fired", At: at(time.Second), Body: `{"fire":"` + id + `"}`}
}

func testFires(t *testing.T, s service.Store) {
	sc := newSchedule("a", "u1", 0)
	createSchedule(t, s, sc)
	next := *sc
	next.Version = 2
	fires := []*service.ScheduleFire{skipped(newFire("f1", "a", 0)), skipped(newFire("f3", "a", time.Minute)),
		skipped(newFire("f2", "a", time.Minute)), newFire("pending", "a", 2*time.Minute)}
	fires[2].Slot = "dst:2026-03-29T02:30"
	if ok, err := s.ClaimFires(t.Context(), &next, 1, fires); err != nil || !ok {
		t.Fatal(ok, err)
	}
	ids := func(l []*service.ScheduleFire) []string {
		return idsOf(l, func(f *service.ScheduleFire) string { return f.ID })
	}
	all, _ := s.Fires(t.Context(), "a", nil, 0)
	wantEqual(t, "those with an outcome, newest first, then by ID descending", ids(all), []string{"f3", "f2", "f1"})
	page, _ := s.Fires(t.Context(), "a", &service.FirePosition{ScheduledAt: at(time.Minute), ID: "f3"}, 1)
	wantEqual(t, "one after f3", ids(page), []string{"f2"})
}

func testPendingFires(t *testing.T, s service.Store) {
	sc := newSchedule("a", "u1", 0)
	createSchedule(t, s, sc)
	next := *sc
	next.Version = 2
	f1, f2, f3 := newFire("f1", "a", time.Second), newFire("f2", "a", 0), newFire("f3", "a", time.Hour)
	done := newFire("done", "a", -time.Hour)
	done.Outcome, done.Reason = service.FireSkipped, service.FireMissed
	if ok, err := s.ClaimFires(t.Context(), &next, 1, []*service.ScheduleFire{f1, f2, f3, done}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	pending, err := s.PendingFires(t.Context(), at(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "pending before t0+1m", idsOf(pending, func(f *service.ScheduleFire) string { return f.ID }), []string{"f2", "f1"})
	if ok, err := s.RetakeFire(t.Context(), "f2", f2.Attempt, at(2*time.Minute)); err != nil || !ok {
		t.Errorf("retaking f2: %v, %v", ok, err)
	}
	if ok, _ := s.RetakeFire(t.Context(), "f2", f2.Attempt, at(3*time.Minute)); ok {
		t.Error("f2 retaken twice from the same attempt")
	}
	if ok, _ := s.RetakeFire(t.Context(), "done", done.Attempt, at(3*time.Minute)); ok {
		t.Error("a fire with an outcome was retaken")
	}
	pending, _ = s.PendingFires(t.Context(), at(time.Minute), 1)
	wantEqual(t, "pending before t0+1m, one at most", idsOf(pending, func(f *service.ScheduleFire) string { return f.ID }), []string{"f1"})
}
