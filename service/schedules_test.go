package service_test

import (
	"cmp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// clock is a fake clock for the service: it shows what the test sets.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// clocked is a setup whose service reads the time from c and never looks for due
// schedules by itself: the test ticks (TickSchedules).
func clocked(c *clock, change func(*service.Config)) setup {
	return setup{config: func(cfg *service.Config) {
		cfg.Clock = c.Now
		cfg.ScheduleTick = time.Hour
		if change != nil {
			change(cfg)
		}
	}}
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func createSchedule(t *testing.T, svc *service.Service, in service.ScheduleInput) *service.Schedule {
	t.Helper()
	sc, err := svc.CreateSchedule(alice, in)
	if err != nil {
		t.Fatalf("CreateSchedule: %v", err)
	}
	return sc
}

// fires returns a schedule's fires, oldest first.
func fires(t *testing.T, svc *service.Service, sc *service.Schedule) []*service.ScheduleFire {
	t.Helper()
	n := 100
	page, _, err := svc.ScheduleFires(alice, sc, &n, "")
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(page)-1; i < j; i, j = i+1, j-1 {
		page[i], page[j] = page[j], page[i]
	}
	return page
}

// outcomes says each fire as "outcome reason@scheduledAt in loc".
func outcomes(fs []*service.ScheduleFire, loc *time.Location) []string {
	sorted := slices.Clone(fs)
	slices.SortStableFunc(sorted, func(a, b *service.ScheduleFire) int {
		return cmp.Or(a.ScheduledAt.Compare(b.ScheduledAt), cmp.Compare(a.Outcome, b.Outcome))
	})
	out := []string{}
	for _, f := range sorted {
		s := string(f.Outcome)
		if f.Reason != "" {
			s += " " + f.Reason
		}
		out = append(out, s+"@"+f.ScheduledAt.In(loc).Format("01-02 15:04 MST"))
	}
	return out
}

func wantList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s:\ngot  %q\nwant %q", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s:\ngot  %q\nwant %q", what, got, want)
		}
	}
}

func TestScheduleOneOffFiresOnceAsTheUsersMessage(t *testing.T) {
	c := &clock{now: time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)}
	svc := start(t, clocked(c, nil))
	sess := newSession(t, svc, alice, "", "")
	at := c.Now().Add(time.Hour)
	sc := createSchedule(t, svc, service.ScheduleInput{Content: ptr("the morning summary"), SessionID: &sess.ID, At: &at})
	if next := svc.NextFireAt(sc); next == nil || !next.Equal(at) {
		t.Fatalf("nextFireAt %v, want %v", next, at)
	}
	svc.TickSchedules(alice)
	if got := fires(t, svc, sc); len(got) != 0 {
		t.Fatalf("fires before the instant: %v", outcomes(got, time.UTC))
	}
	c.set(at.Add(time.Second))
	svc.TickSchedules(alice)
	svc.TickSchedules(alice) // a second look at the same instant fires nothing more
	got := fires(t, svc, sc)
	wantList(t, "the fires", outcomes(got, time.UTC), []string{"STARTED@05-04 10:00 UTC"})
	f := got[0]
	if f.SessionID != sess.ID || f.RunID == "" || f.FiredAt == nil {
		t.Errorf("the fire: %+v, want its session, run and time", f)
	}
	run := getRun(t, svc, alice, f.RunID)
	if run.SessionID != sess.ID || run.UserID != "alice" {
		t.Errorf("the fire's run: %+v", run)
	}
	user := 0
	for _, m := range history(t, svc, alice, sess.ID) {
		if m.Role == service.RoleUser {
			user++
			if m.Content != "the morning summary" {
				t.Errorf("the message sent: %q", m.Content)
			}
		}
	}
	if user != 1 {
		t.Errorf("%d messages of the user's, want 1", user)
	}
	scs, _ := svc.Schedules(alice)
	if len(scs) != 1 || svc.NextFireAt(scs[0]) != nil || scs[0].Fires != 1 {
		t.Errorf("after its one fire: %+v, want no next fire", scs[0])
	}
}

func TestRunScheduleNowFiresAtOnceAndCounts(t *testing.T) {
	c := &clock{now: time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)}
	svc := start(t, clocked(c, nil))
	at := c.Now().Add(time.Hour)
	sc := createSchedule(t, svc, service.ScheduleInput{Content: ptr("hello"), At: &at, MaxFires: ptr(2), Title: ptr("Now")})
	f, err := svc.RunScheduleNow(alice, sc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if f.Outcome != service.FireStarted || !f.ScheduledAt.Equal(c.Now()) || f.SessionID == "" || f.RunID == "" {
		t.Fatalf("the fire: %+v, want STARTED now in a new session", f)
	}
	v := view(t, svc, alice, f.SessionID)
	if v.Title != "Now" || v.UserID != "alice" {
		t.Errorf("the session it made: %q of %s", v.Title, v.UserID)
	}
	// The pending instant still fires, and with it the schedule has made its two fires.
	c.set(at)
	svc.TickSchedules(alice)
	wantList(t, "the fires", outcomes(fires(t, svc, sc), time.UTC), []string{"STARTED@05-04 09:00 UTC", "STARTED@05-04 10:00 UTC"})
	_, err = svc.RunScheduleNow(bob, sc.ID)
	wantCode(t, "another user's schedule", err, service.ENOTFOUND)
}

// live has the clock run from c's time to to in steps of a minute, looking for due
// schedules at each, as a server that runs all along does.
func live(t *testing.T, svc *service.Service, c *clock, to time.Time) {
	t.Helper()
	for now := c.Now(); !now.After(to); now = now.Add(time.Minute) {
		c.set(now)
		svc.TickSchedules(alice)
	}
}

func TestScheduleDaylightSaving(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	c := &clock{now: time.Date(2024, 3, 9, 12, 0, 0, 0, ny)}
	svc := start(t, clocked(c, nil))
	sess := newSession(t, svc, alice, "", service.BusyEnqueue)
	tz := "America/New_York"
	in := func(cron string) service.ScheduleInput {
		return service.ScheduleInput{Content: ptr("tick"), SessionID: &sess.ID, Cron: &cron, Timezone: &tz, Overlap: ptr(service.OverlapEnqueue)}
	}

	// Spring forward: 2:00 EST is 3:00 EDT; 2:00 to 2:59 do not happen.
	gap := createSchedule(t, svc, in("30 2 * * *"))
	halves := createSchedule(t, svc, in("*/30 1-3 * * *"))
	up, err := svc.Upcoming(gap, 2)
	if err != nil {
		t.Fatal(err)
	}
	wantList(t, "upcoming of 30 2 over the gap", times(up, ny), []string{"03-11 02:30 EDT", "03-12 02:30 EDT"})
	live(t, svc, c, time.Date(2024, 3, 10, 4, 0, 0, 0, ny))
	wantList(t, "30 2 over the gap", outcomes(fires(t, svc, gap), ny), []string{"SKIPPED dst@03-10 03:00 EDT"})
	wantList(t, "*/30 1-3 over the gap", outcomes(fires(t, svc, halves), ny), []string{
		"STARTED@03-10 01:00 EST", "STARTED@03-10 01:30 EST",
		"SKIPPED dst@03-10 03:00 EDT", "SKIPPED dst@03-10 03:00 EDT", "STARTED@03-10 03:00 EDT",
		"STARTED@03-10 03:30 EDT"})
	if got := fires(t, svc, halves); got[2].Slot == got[3].Slot {
		t.Errorf("the two local times of the gap share a slot: %q", got[2].Slot)
	}

	// Fall back: 2:00 EDT is 1:00 EST; 1:00 to 1:59 happen twice, and fire once.
	c.set(time.Date(2024, 11, 2, 12, 0, 0, 0, ny))
	repeat := createSchedule(t, svc, in("30 1 * * *"))
	halves2 := createSchedule(t, svc, in("*/30 1-2 * * *"))
	up, _ = svc.Upcoming(repeat, 2)
	wantList(t, "upcoming of 30 1 over the repeat", times(up, ny), []string{"11-03 01:30 EDT", "11-04 01:30 EST"})
	live(t, svc, c, time.Date(2024, 11, 3, 3, 0, 0, 0, ny))
	wantList(t, "30 1 over the repeat", outcomes(fires(t, svc, repeat), ny), []string{"STARTED@11-03 01:30 EDT"})
	wantList(t, "*/30 1-2 over the repeat", outcomes(fires(t, svc, halves2), ny), []string{
		"STARTED@11-03 01:00 EDT", "STARTED@11-03 01:30 EDT", "STARTED@11-03 02:00 EST", "STARTED@11-03 02:30 EST"})
}

func TestScheduleCatchUpAfterDowntime(t *testing.T) {
	c := &clock{now: time.Date(2026, 5, 4, 10, 0, 30, 0, time.UTC)}
	svc := start(t, clocked(c, func(cfg *service.Config) { cfg.ScheduleMaxCatchUp = 3 }))
	sess := newSession(t, svc, alice, "", service.BusyEnqueue)
	hourly := "0 * * * *"
	of := func(policy service.ScheduleCatchUp) *service.Schedule {
		return createSchedule(t, svc, service.ScheduleInput{Content: ptr("tick"), SessionID: &sess.ID, Cron: &hourly,
			Overlap: ptr(service.OverlapEnqueue), CatchUp: &policy})
	}
	skip, latest, all := of(service.CatchUpSkip), of(service.CatchUpLatest), of(service.CatchUpAll)
	// Nothing looks from 10:00:30 to 15:10: 11:00 to 15:00 were missed.
	c.set(time.Date(2026, 5, 4, 15, 10, 0, 0, time.UTC))
	svc.TickSchedules(alice)
	missed := "SKIPPED missed@05-04 "
	wantList(t, "SKIP", outcomes(fires(t, svc, skip), time.UTC), []string{
		missed + "11:00 UTC", missed + "12:00 UTC", missed + "13:00 UTC", missed + "14:00 UTC", missed + "15:00 UTC"})
	wantList(t, "LATEST", outcomes(fires(t, svc, latest), time.UTC), []string{
		missed + "11:00 UTC", missed + "12:00 UTC", missed + "13:00 UTC", missed + "14:00 UTC", "STARTED@05-04 15:00 UTC"})
	wantList(t, "ALL, three at most", outcomes(fires(t, svc, all), time.UTC), []string{
		missed + "11:00 UTC", missed + "12:00 UTC", "STARTED@05-04 13:00 UTC", "STARTED@05-04 14:00 UTC", "STARTED@05-04 15:00 UTC"})
	// The next instant is on time again.
	live(t, svc, c, time.Date(2026, 5, 4, 16, 0, 30, 0, time.UTC))
	for _, sc := range []*service.Schedule{skip, latest, all} {
		got := fires(t, svc, sc)
		if last := outcomes(got[len(got)-1:], time.UTC)[0]; last != "STARTED@05-04 16:00 UTC" {
			t.Errorf("%s after the downtime: %s, want STARTED at 16:00", sc.CatchUp, last)
		}
	}
}

func TestScheduleRefusesBadInput(t *testing.T) {
	c := &clock{now: time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)}
	svc := start(t, clocked(c, func(cfg *service.Config) {
		cfg.ScheduleMinInterval = 5 * time.Minute
		cfg.MaxSchedulesPerUser = 2
	}))
	sess := newSession(t, svc, alice, "", "")
	past, soon := c.Now().Add(-time.Minute), c.Now().Add(time.Minute)
	cron := func(s string) *string { return &s }
	for _, tc := range []struct {
		what string
		in   service.ScheduleInput
		code string
	}{
		{"a cron that does not parse", service.ScheduleInput{Cron: cron("61 * * * *")}, service.EINVALID},
		{"six fields", service.ScheduleInput{Cron: cron("0 0 9 * * *")}, service.EINVALID},
		{"@every", service.ScheduleInput{Cron: cron("@every 1h")}, service.EINVALID},
		{"a zone in the cron", service.ScheduleInput{Cron: cron("CRON_TZ=UTC 0 9 * * *")}, service.EINVALID},
		{"a cron that never fires", service.ScheduleInput{Cron: cron("0 0 30 2 *")}, service.EINVALID},
		{"a cron four minutes apart, five at least", service.ScheduleInput{Cron: cron("*/4 * * * *")}, service.EINVALID},
		{"two fires a minute apart", service.ScheduleInput{Cron: cron("0,1 9 * * *")}, service.EINVALID},
		{"an unknown zone", service.ScheduleInput{Cron: cron("0 9 * * *"), Timezone: ptr("Mars/Olympus")}, service.EINVALID},
		{"both cron and at", service.ScheduleInput{Cron: cron("0 9 * * *"), At: &soon}, service.EINVALID},
		{"neither cron nor at", service.ScheduleInput{}, service.EINVALID},
		{"an at in the past", service.ScheduleInput{At: &past}, service.EINVALID},
		{"an end in the past", service.ScheduleInput{At: &soon, EndAt: &past}, service.EINVALID},
		{"no fires", service.ScheduleInput{At: &soon, MaxFires: ptr(0)}, service.EINVALID},
		{"an unknown overlap", service.ScheduleInput{At: &soon, Overlap: ptr(service.ScheduleOverlap("SOMETIMES"))}, service.EINVALID},
		{"an unknown agent", service.ScheduleInput{At: &soon, Settings: &service.SettingsInput{Agent: ptr("nobody")}}, service.EINVALID},
		{"another user's session", service.ScheduleInput{At: &soon, SessionID: ptr(newSession(t, svc, bob, "", "").ID)}, service.ENOTFOUND},
	} {
		if tc.in.Content == nil {
			tc.in.Content = ptr("hello")
		}
		_, err := svc.CreateSchedule(alice, tc.in)
		wantCode(t, tc.what, err, tc.code)
	}
	_, err := svc.CreateSchedule(alice, service.ScheduleInput{Cron: cron("*/5 * * * *"), Content: ptr("x"), SessionID: &sess.ID})
	if err != nil {
		t.Errorf("every five minutes, five at least: %v", err)
	}
	_, err = svc.CreateSchedule(alice, service.ScheduleInput{Cron: cron("@daily"), Content: ptr("x"), Timezone: ptr("Europe/Paris")})
	if err != nil {
		t.Errorf("@daily in Paris: %v", err)
	}
	_, err = svc.CreateSchedule(alice, service.ScheduleInput{At: &soon, Content: ptr("x")})
	wantCode(t, "a third schedule of two at most", err, service.ERATELIMIT)
	if scs, _ := svc.Schedules(alice); len(scs) != 2 {
		t.Errorf("%d schedules stored, want 2", len(scs))
	}
}

func TestScheduleOfADeletedSessionIsDisabled(t *testing.T) {
	c := &clock{now: time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)}
	svc := start(t, clocked(c, nil))
	sess := newSession(t, svc, alice, "", "")
	cron := "0 * * * *"
	sc := createSchedule(t, svc, service.ScheduleInput{Content: ptr("x"), SessionID: &sess.ID, Cron: &cron})
	if err := svc.DeleteTalkSession(alice, sess.ID); err != nil {
		t.Fatal(err)
	}
	live(t, svc, c, time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC))
	wantList(t, "its fires", outcomes(fires(t, svc, sc), time.UTC), []string{"FAILED the session was deleted@05-04 10:00 UTC"})
	scs, _ := svc.Schedules(alice)
	if scs[0].Enabled || scs[0].DisabledReason != "the session was deleted" || svc.NextFireAt(scs[0]) != nil {
		t.Errorf("the schedule: %+v, want disabled, saying why", scs[0])
	}
	// Enabled again, it fires from now on: into a session that is gone, and is disabled again.
	if _, err := svc.UpdateSchedule(alice, sc.ID, service.ScheduleInput{Enabled: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	if scs, _ := svc.Schedules(alice); !scs[0].Enabled || scs[0].DisabledReason != "" {
		t.Errorf("enabled again: %+v", scs[0])
	}
}

func TestScheduleOverlapSkipRecordsABusySession(t *testing.T) {
	c := &clock{now: time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)}
	p := newPuppet()
	svc := start(t, setup{agents: map[string]service.Runner{"puppet": p}, config: clocked(c, nil).config})
	sess := newSession(t, svc, alice, "puppet", "")
	send(t, svc, alice, sess.ID, "busy")
	tn := p.next(t)
	at := c.Now().Add(time.Minute)
	sc := createSchedule(t, svc, service.ScheduleInput{Content: ptr("x"), SessionID: &sess.ID, At: &at})
	c.set(at)
	svc.TickSchedules(alice)
	wantList(t, "a fire while the agent works", outcomes(fires(t, svc, sc), time.UTC), []string{"SKIPPED busy@05-04 09:01 UTC"})
	tn.finish(nil)
}

func times(ts []time.Time, loc *time.Location) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.In(loc).Format("01-02 15:04 MST"))
	}
	return out
}
