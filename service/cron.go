package service

import (
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // the zone database, for a machine without one

	cron "github.com/netresearch/go-cron"
)

// This file is when a schedule fires: its cron read on the clock of its time zone, the
// instants that makes, and what daylight saving does to them. The cron is parsed by
// netresearch/go-cron (the maintained fork of robfig/cron: robfig's parser panics on some
// inputs a user may type, and is no longer kept), with POSIX cron's meaning of a day
// given both as a day of the month and of the week (either matches). Neither library
// does what daylight saving asks here (robfig skips a local time that does not exist,
// silently; the fork fires it at the end of the gap; both fire a repeated local time
// twice), so the library only walks the wall clock, read as UTC where no hour is skipped
// or repeated, and this file says when each time on that wall clock happens in the zone:
// never (the clock jumps over it: a slot recorded SKIPPED, reason dst), once, or twice
// (the first time only).

// cronParser reads five fields or a descriptor (@hourly, @daily, …).
var cronParser = cron.MustNewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor | cron.DowOrDom)

// descriptors are the @ forms a cron may take.
var descriptors = []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}

// maxCronLength bounds a cron's text.
const maxCronLength = 200

// parseCron reads spec as a wall clock: its Next walks times of day as if in UTC.
func parseCron(spec string) (*cron.SpecSchedule, error) {
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "":
		return nil, Errorf(EINVALID, "the cron is empty")
	case len(spec) > maxCronLength:
		return nil, Errorf(EINVALID, "the cron is too long: at most %d bytes", maxCronLength)
	case strings.HasPrefix(spec, "@") && !slices.Contains(descriptors, strings.ToLower(spec)):
		return nil, Errorf(EINVALID, "the cron %q is not one of %s", truncate(spec, 40), strings.Join(descriptors, ", "))
	case strings.Contains(spec, "="):
		return nil, Errorf(EINVALID, "the cron names no time zone: give it as timezone")
	}
	if !strings.HasPrefix(spec, "@") && len(strings.Fields(spec)) != 5 {
		return nil, Errorf(EINVALID, "the cron needs five fields (minute hour day-of-month month day-of-week), not %d", len(strings.Fields(spec)))
	}
	sched, err := cronParser.Parse(strings.ToLower(spec))
	if err != nil {
		return nil, Errorf(EINVALID, "the cron does not parse: %s", truncate(err.Error(), 120))
	}
	ss, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return nil, Errorf(EINVALID, "the cron %q is not a calendar schedule", truncate(spec, 40))
	}
	cp := *ss
	cp.Location = time.UTC
	return &cp, nil
}

// loadZone returns the IANA time zone name ("" is UTC).
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if len(name) > 100 || name == "Local" || strings.ContainsAny(name, " \\") {
		return nil, Errorf(EINVALID, "unknown time zone %q", truncate(name, 40))
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, Errorf(EINVALID, "unknown time zone %q", truncate(name, 40))
	}
	return loc, nil
}

// wallOf returns the time t shows on a clock in its own location, as a UTC time.
func wallOf(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, t.Nanosecond(), time.UTC)
}

// happens returns when the wall time w (see wallOf) happens in loc: the first of two
// moments where the clock goes back over it; ok is false where the clock jumps over it.
func happens(w time.Time, loc *time.Location) (at time.Time, ok bool) {
	guess := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	// No zone changes its offset twice within a day: the offsets around w are all it
	// can have.
	for _, probe := range []time.Time{guess.Add(-12 * time.Hour), guess, guess.Add(12 * time.Hour)} {
		_, off := probe.Zone()
		c := w.Add(-time.Duration(off) * time.Second)
		if wallOf(c.In(loc)).Equal(w) && (!ok || c.Before(at)) {
			at, ok = c, true
		}
	}
	return at.UTC(), ok
}

// jumpOver returns the moment the clock of loc jumped over the wall time w, which it
// never showed: the end of the gap.
func jumpOver(w time.Time, loc *time.Location) time.Time {
	before := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc).Add(-12 * time.Hour)
	_, off := before.Zone()
	t := w.Add(-time.Duration(off) * time.Second).In(loc) // w on the clock before the jump
	start, _ := t.ZoneBounds()
	if start.IsZero() || start.After(t) {
		return t.UTC()
	}
	return start.UTC()
}

// slot is one instant a schedule is due: at is its scheduledAt, key tells it from every
// other of the schedule (a fire is claimed once per key). A slot with dst set is a local
// time that did not happen that day: at is when the clock jumped over it.
type slot struct {
	at  time.Time
	key string
	dst bool
	// wall is the slot's time on the schedule's clock.
	wall time.Time
}

func slotAt(t time.Time) slot {
	return slot{at: t.UTC(), key: t.UTC().Format(time.RFC3339Nano)}
}

// slots walks a cron's slots in order, after a moment.
type slots struct {
	spec  *cron.SpecSchedule
	loc   *time.Location
	after time.Time // the slots are strictly after it
	wall  time.Time // the wall time of the last slot walked
	steps int
}

// maxSteps bounds a walk: the wall times a cron can match in ten years of minutes.
const maxSteps = 10 * 366 * 24 * 60

func newSlots(spec *cron.SpecSchedule, loc *time.Location, after time.Time) *slots {
	return &slots{spec: spec, loc: loc, after: after, wall: wallOf(after.In(loc))}
}

// next returns the next slot, or false when there is none (the cron cannot fire again).
func (it *slots) next() (slot, bool) {
	for it.steps < maxSteps {
		it.steps++
		w := it.spec.Next(it.wall)
		if w.IsZero() {
			return slot{}, false
		}
		it.wall = w
		at, ok := happens(w, it.loc)
		if !ok {
			jump := jumpOver(w, it.loc)
			if !jump.After(it.after) {
				continue
			}
			return slot{at: jump, key: "dst:" + w.Format("2006-01-02T15:04"), dst: true, wall: w}, true
		}
		if !at.After(it.after) {
			continue // the clock went back over it: it happened once already
		}
		s := slotAt(at)
		s.wall = w
		return s, true
	}
	return slot{}, false
}

// minGap returns the least time two fires of spec can be apart in loc, measured up to
// limit (a gap of limit or more is reported as limit).
func minGap(spec *cron.SpecSchedule, loc *time.Location, limit time.Duration) time.Duration {
	// On the wall clock: between two times of one day, and from the last of a day to the
	// first of the next, when two days in a row can both fire.
	var times []int
	for h := range 24 {
		for m := range 60 {
			if spec.Hour&(1<<uint(h)) != 0 && spec.Minute&(1<<uint(m)) != 0 {
				times = append(times, h*60+m)
			}
		}
	}
	gap := limit
	for i := 1; i < len(times); i++ {
		gap = min(gap, time.Duration(times[i]-times[i-1])*time.Minute)
	}
	if gap < limit {
		return gap
	}
	if len(times) > 0 && gap > time.Duration(24*60-times[len(times)-1]+times[0])*time.Minute {
		day := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		fires := func(d time.Time) bool {
			n := spec.Next(d.Add(-time.Second))
			return !n.IsZero() && n.Before(d.AddDate(0, 0, 1))
		}
		for range 4*366 + 1 { // every day of the week in every month, and a 29th of February
			if fires(day) && fires(day.AddDate(0, 0, 1)) {
				gap = min(gap, time.Duration(24*60-times[len(times)-1]+times[0])*time.Minute)
				break
			}
			day = day.AddDate(0, 0, 1)
		}
	}
	// In the zone, a jump forward brings times on both sides of it closer: walk the fires
	// around each change of offset of the next two years.
	t := time.Now().In(loc)
	for range 8 {
		if gap < limit {
			return gap
		}
		_, end := t.ZoneBounds()
		if end.IsZero() {
			break
		}
		it := newSlots(spec, loc, end.Add(-26*time.Hour))
		var prev time.Time
		for s, ok := it.next(); ok && s.at.Before(end.Add(26*time.Hour)); s, ok = it.next() {
			if s.dst {
				continue
			}
			if !prev.IsZero() {
				gap = min(gap, s.at.Sub(prev))
			}
			prev = s.at
		}
		t = end
	}
	return gap
}
