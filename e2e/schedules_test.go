package e2e

// Schedules through the whole server: the API, a fire on the real clock, and catch-up
// after a server was killed with SIGKILL.

import (
	"slices"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// scheduleFields are the fields the tests read of a schedule.
const scheduleFields = `id content sessionId title cron at timezone overlap catchUp endAt maxFires enabled disabledReason
	nextFireAt upcoming(count: 3) fires(first: 100) { edges { cursor node { id scheduledAt firedAt outcome reason sessionId run { id status } } } }`

type firesPage struct {
	Edges []struct {
		Cursor string
		Node   struct {
			ID, ScheduledAt, Outcome string
			FiredAt, Reason          *string
			SessionID                *string
			Run                      *struct{ ID, Status string }
		}
	}
}

type scheduleRead struct {
	ID, Content, Timezone, Overlap, CatchUp string
	SessionID, Title, Cron, At, EndAt       *string
	MaxFires                                *int
	Enabled                                 bool
	DisabledReason, NextFireAt              *string
	Upcoming                                []string
	Fires                                   firesPage
}

func schedulesOf(c *tgtest.Client) []scheduleRead {
	c.T.Helper()
	var out struct{ Schedules []scheduleRead }
	c.Must(`{ schedules { `+scheduleFields+` } }`, nil, &out)
	return out.Schedules
}

func scheduleByID(c *tgtest.Client, id string) scheduleRead {
	c.T.Helper()
	for _, sc := range schedulesOf(c) {
		if sc.ID == id {
			return sc
		}
	}
	c.T.Fatalf("schedule %s not listed", id)
	return scheduleRead{}
}

// outcomesOf says a schedule's fires, oldest first, as "OUTCOME reason".
func outcomesOf(sc scheduleRead) []string {
	var out []string
	for _, e := range sc.Fires.Edges {
		s := e.Node.Outcome
		if e.Node.Reason != nil {
			s += " " + *e.Node.Reason
		}
		out = append(out, s)
	}
	slices.Reverse(out)
	return out
}

func TestSchedulesAPI(t *testing.T) {
	a := startApp(t, "sqlite", nil)
	c := guest(t, a)
	sid := c.CreateSession(nil)
	var created struct{ CreateSchedule scheduleRead }
	c.Must(`mutation($s: ID!) { createSchedule(input: {content: "the weekly report", sessionId: $s, cron: "0 9 * * MON",
		timezone: "Europe/Paris", overlap: ENQUEUE, catchUp: ALL, maxFires: 10}) { `+scheduleFields+` } }`, map[string]any{"s": sid}, &created)
	sc := created.CreateSchedule
	if sc.Cron == nil || *sc.Cron != "0 9 * * MON" || sc.Timezone != "Europe/Paris" || sc.Overlap != "ENQUEUE" || sc.CatchUp != "ALL" ||
		!sc.Enabled || sc.NextFireAt == nil || len(sc.Upcoming) != 3 || sc.Upcoming[0] != *sc.NextFireAt || sc.At != nil {
		t.Fatalf("the schedule made: %+v", sc)
	}
	for _, u := range sc.Upcoming {
		at, err := time.Parse(time.RFC3339Nano, u)
		if err != nil {
			t.Fatal(err)
		}
		if local := at.In(mustZone(t, "Europe/Paris")); local.Weekday() != time.Monday || local.Hour() != 9 || local.Minute() != 0 {
			t.Errorf("an upcoming fire at %v in Paris, want Monday 9:00", local)
		}
	}

	// Run now: a fire at once, counted, into the session.
	var now struct {
		RunScheduleNow struct {
			ID, Outcome string
			SessionID   *string
			Run         *struct{ ID string }
		}
	}
	c.Must(`mutation($id: ID!) { runScheduleNow(id: $id) { id outcome sessionId run { id } } }`, map[string]any{"id": sc.ID}, &now)
	if f := now.RunScheduleNow; f.Outcome != "STARTED" || f.SessionID == nil || *f.SessionID != sid || f.Run == nil {
		t.Fatalf("runScheduleNow: %+v", f)
	}
	if got := outcomesOf(scheduleByID(c, sc.ID)); !slices.Equal(got, []string{"STARTED"}) {
		t.Errorf("its fires: %q", got)
	}

	// Paused, it will not fire; a one-off replaces the cron.
	var updated struct{ UpdateSchedule scheduleRead }
	c.Must(`mutation($id: ID!) { updateSchedule(input: {id: $id, enabled: false}) { `+scheduleFields+` } }`, map[string]any{"id": sc.ID}, &updated)
	if u := updated.UpdateSchedule; u.Enabled || u.NextFireAt != nil || len(u.Upcoming) != 0 {
		t.Errorf("paused: %+v", u)
	}
	soon := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)
	c.Must(`mutation($id: ID!, $at: Time!) { updateSchedule(input: {id: $id, at: $at, enabled: true}) { `+scheduleFields+` } }`,
		map[string]any{"id": sc.ID, "at": soon}, &updated)
	if u := updated.UpdateSchedule; u.Cron != nil || u.At == nil || u.NextFireAt == nil || *u.NextFireAt != *u.At {
		t.Fatalf("a one-off instead: %+v", u)
	}
	// It fires on its own once the instant comes: as the user's message in the session.
	var fired scheduleRead
	eventually(t, tgtest.Wait, "the one-off's fire", func() bool {
		fired = scheduleByID(c, sc.ID)
		return len(fired.Fires.Edges) == 2
	})
	if got := outcomesOf(fired); !slices.Equal(got, []string{"STARTED", "STARTED"}) || fired.NextFireAt != nil {
		t.Errorf("after the one-off: fires %q, next %v", got, fired.NextFireAt)
	}
	var page struct {
		Schedules []struct{ Fires firesPage }
	}
	c.Must(`query($a: String) { schedules { fires(first: 1, after: $a) { edges { cursor node { id } } } } }`,
		map[string]any{"a": fired.Fires.Edges[0].Cursor}, &page)
	if e := page.Schedules[0].Fires.Edges; len(e) != 1 || e[0].Node.ID != fired.Fires.Edges[1].Node.ID {
		t.Errorf("the page after the newest fire: %+v", e)
	}
	if n := userMessages(c, sid); n != 2 {
		t.Errorf("%d messages of the user's in the session, want 2", n)
	}

	// Another user's schedule is not found; bad input is refused.
	other := guest(t, a)
	for _, doc := range []string{`mutation($id: ID!) { runScheduleNow(id: $id) { id } }`, `mutation($id: ID!) { deleteSchedule(id: $id) }`,
		`mutation($id: ID!) { updateSchedule(input: {id: $id, enabled: false}) { id } }`} {
		if r := other.Do(doc, map[string]any{"id": sc.ID}); r.Code() != "NOT_FOUND" {
			t.Errorf("another user's %s: %s", doc, r.Code())
		}
	}
	for _, in := range []string{`{content: "x", cron: "0 9 * *"}`, `{content: "x", cron: "0 9 * * *", timezone: "Nowhere/Else"}`,
		`{content: "x"}`, `{content: "x", at: "2001-01-01T00:00:00Z"}`} {
		if r := c.Do(`mutation { createSchedule(input: `+in+`) { id } }`, nil); r.Code() != "BAD_USER_INPUT" {
			t.Errorf("createSchedule(%s): %s %+v, want BAD_USER_INPUT", in, r.Code(), r.Errors)
		}
	}
	var deleted struct{ DeleteSchedule bool }
	c.Must(`mutation($id: ID!) { deleteSchedule(id: $id) }`, map[string]any{"id": sc.ID}, &deleted)
	if !deleted.DeleteSchedule || len(schedulesOf(c)) != 0 {
		t.Errorf("deleted: %v, %d left", deleted.DeleteSchedule, len(schedulesOf(c)))
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestScheduleCatchUpAfterSIGKILL kills a server with schedules of each catch-up policy,
// keeps it down across two of their instants, and starts it again: each policy does with
// the instants missed what it says. It takes two minutes: the instants are a cron's, a
// minute apart, on the real clock.
func TestScheduleCatchUpAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a process and waits across two minutes")
	}
	dir, port := t.TempDir(), freePort(t)
	env := []string{"SCHEDULE_GRACE=1s"}
	srv := startChild(t, dir, port, env...)
	c := tgtest.Guest(t, srv.URL)
	ids := map[string]string{}
	for _, policy := range []string{"SKIP", "LATEST", "ALL"} {
		sid := c.CreateSession(nil)
		var out struct{ CreateSchedule struct{ ID string } }
		c.Must(`mutation($s: ID!, $p: ScheduleCatchUp!) { createSchedule(input: {content: "tick", sessionId: $s,
			cron: "* * * * *", overlap: ENQUEUE, catchUp: $p}) { id } }`, map[string]any{"s": sid, "p": policy}, &out)
		ids[policy] = out.CreateSchedule.ID
	}
	srv.kill()
	killed := time.Now()
	// Down across two instants, and past the grace of the second.
	back := killed.Truncate(time.Minute).Add(2*time.Minute + 2*time.Second)
	time.Sleep(time.Until(back)) // the downtime itself, not a wait for an event
	srv = startChild(t, dir, port, env...)
	c = c.On(srv.URL)
	want := map[string][]string{
		"SKIP":   {"SKIPPED missed", "SKIPPED missed"},
		"LATEST": {"SKIPPED missed", "STARTED"},
		"ALL":    {"STARTED", "STARTED"},
	}
	for policy, id := range ids {
		// The fires of the instants it missed: after the kill, before the restart.
		var missed []string
		eventually(t, tgtest.Wait, policy+"'s catch-up", func() bool {
			sc := scheduleByID(c, id)
			missed = missed[:0]
			for i := len(sc.Fires.Edges) - 1; i >= 0; i-- {
				e := sc.Fires.Edges[i]
				at, _ := time.Parse(time.RFC3339Nano, e.Node.ScheduledAt)
				if at.After(killed) && !at.After(back) {
					s := e.Node.Outcome
					if e.Node.Reason != nil {
						s += " " + *e.Node.Reason
					}
					missed = append(missed, s)
				}
			}
			return len(missed) >= 2
		})
		if !slices.Equal(missed, want[policy]) {
			t.Errorf("%s after the downtime: %q, want %q", policy, missed, want[policy])
		}
	}
}
