package service

import (
	"context"
	"time"
)

// This file is what a schedule is, what a store keeps of it and its fires, and how a user
// creates, changes, deletes and reads schedules; cron.go says when one is due, firing.go
// fires it. Each change goes in through the one door (exec) like any other: a schedule
// belongs to no session's log, so its operations are done where they are asked (local).

// ScheduleOverlap is what a fire does to a session whose agent is still working: SKIP
// records the fire SKIPPED (the message is refused, as REJECT does), ENQUEUE and
// INTERRUPT are those busy policies.
type ScheduleOverlap string

const (
	OverlapSkip      ScheduleOverlap = "SKIP"
	OverlapEnqueue   ScheduleOverlap = "ENQUEUE"
	OverlapInterrupt ScheduleOverlap = "INTERRUPT"
)

// ScheduleCatchUp is what becomes of the fires a schedule missed while no process ran:
// SKIP records them SKIPPED, LATEST fires the latest once and skips the others, ALL fires
// each (at most Config.ScheduleMaxCatchUp, the latest).
type ScheduleCatchUp string

const (
	CatchUpSkip   ScheduleCatchUp = "SKIP"
	CatchUpLatest ScheduleCatchUp = "LATEST"
	CatchUpAll    ScheduleCatchUp = "ALL"
)

// FireOutcome is how a fire ended; "" while it is being sent.
type FireOutcome string

const (
	FireStarted FireOutcome = "STARTED"
	FireSkipped FireOutcome = "SKIPPED"
	FireFailed  FireOutcome = "FAILED"
)

// Why a fire was skipped (ScheduleFire.Reason).
const (
	FireMissed = "missed" // it was due while no process ran, and catch-up skipped it
	FireDST    = "dst"    // its local time did not happen that day
	FireBusy   = "busy"   // the session's agent was working (overlap SKIP)
)

// Schedule sends a message of a user's on its own time: to a session of theirs, or to a
// new session per fire.
type Schedule struct {
	ID     string
	UserID string
	// Guest records that the user had signed in as a guest: the sessions it creates are
	// a guest's.
	Guest   bool
	Content string
	// SessionID is the session each fire sends Content to; "" for a new session per
	// fire, with Title and Settings.
	SessionID string
	Title     string
	Settings  *SettingsInput
	// Cron (read on the clock of Timezone) or At (one fire) says when it fires.
	Cron     string
	At       *time.Time
	Timezone string
	Overlap  ScheduleOverlap
	CatchUp  ScheduleCatchUp
	// EndAt and MaxFires end it: no fire after EndAt, none after MaxFires fires.
	EndAt    *time.Time
	MaxFires *int
	Enabled  bool
	// DisabledReason says why the server disabled it (its session was deleted, a fire
	// failed for a reason that will not pass).
	DisabledReason string
	CreatedAt      time.Time
	UpdatedAt      time.Time

	// Fires counts the fires that count toward MaxFires: those sent or tried, not those
	// skipped as missed or for daylight saving.
	Fires int
	// Checked is the moment up to which its instants were dealt with (fired or
	// skipped): the next look begins after it.
	Checked time.Time
	// NextAt is when it is due next; nil when it will not fire again (or is disabled).
	NextAt *time.Time
	// Version grows with every write, which a store makes only over the version it was
	// read at: two processes cannot both claim the same fires.
	Version int64
}

// ScheduleFire is one instant of a schedule, fired or skipped.
type ScheduleFire struct {
	ID         string
	ScheduleID string
	UserID     string
	// Slot tells the fire from every other of its schedule: its ScheduledAt, or for a
	// local time that did not happen, that local time.
	Slot        string
	ScheduledAt time.Time
	// Attempt is when it was last taken to be sent: a fire whose process died before its
	// outcome was recorded is sent again (its message keyed by the fire, so once).
	Attempt   time.Time
	FiredAt   *time.Time
	Outcome   FireOutcome
	Reason    string
	SessionID string
	RunID     string
}

// FirePosition is a place in a schedule's fires, newest first.
type FirePosition struct {
	ScheduledAt time.Time
	ID          string
}

// ScheduleStore is the part of a Store that keeps schedules and their fires. A fire is
// unique by its schedule and its Slot: that is what makes every instant fire once,
// however many processes look.
type ScheduleStore interface {
	// CreateSchedule stores s, unless its user keeps max schedules already: ERATELIMIT
	// then, storing nothing.
	CreateSchedule(ctx context.Context, s *Schedule, max int) error
	// UpdateSchedule stores s in place of the schedule s.ID whose stored Version is prev;
	// ECONFLICT, storing nothing, when it is not (another process changed it), ENOTFOUND
	// when it is missing.
	UpdateSchedule(ctx context.Context, s *Schedule, prev int64) error
	// DeleteSchedule deletes a schedule with its fires; ENOTFOUND when missing.
	DeleteSchedule(ctx context.Context, id string) error
	// Schedule returns one schedule; ENOTFOUND when missing.
	Schedule(ctx context.Context, id string) (*Schedule, error)
	// UserSchedules returns a user's schedules, oldest first (CreatedAt, then ID).
	UserSchedules(ctx context.Context, userID string) ([]*Schedule, error)
	// DueSchedules returns up to limit enabled schedules whose NextAt is at or before
	// now, by NextAt then ID.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]*Schedule, error)
	// ClaimFires stores s as UpdateSchedule does, with fires, all or nothing: it answers
	// false, storing nothing, when s's stored Version is not prev or a fire's slot is
	// stored already: another process claimed them first. ENOTFOUND when s is missing.
	ClaimFires(ctx context.Context, s *Schedule, prev int64, fires []*ScheduleFire) (bool, error)
	// FinishFire records how a fire ended (its FiredAt, Outcome, Reason, SessionID,
	// RunID). A disable reason other than "" disables its schedule with that reason, its
	// NextAt cleared and its Version moved on. hook, when not nil, is the webhook event
	// that tells of the fire: a delivery of it to each enabled webhook of its user that
	// takes its type is made in the same write. ENOTFOUND when the fire is missing.
	FinishFire(ctx context.Context, f *ScheduleFire, disable string, hook *HookEvent) error
	// Fires returns up to limit fires of a schedule that have an outcome (a fire being
	// sent has none yet), newest first (ScheduledAt, then ID, descending), strictly after
	// the given position when before is not nil.
	Fires(ctx context.Context, scheduleID string, before *FirePosition, limit int) ([]*ScheduleFire, error)
	// PendingFires returns up to limit fires without an outcome whose Attempt is before
	// before, oldest Attempt first.
	PendingFires(ctx context.Context, before time.Time, limit int) ([]*ScheduleFire, error)
	// RetakeFire moves a pending fire's Attempt from prev to at, and reports whether it
	// did: false when it is not stored so (another process took it, or it ended).
	RetakeFire(ctx context.Context, id string, prev, at time.Time) (bool, error)
}

// ScheduleInput is what createSchedule sets and updateSchedule changes: a nil field is
// left as it is (on creation: its default).
type ScheduleInput struct {
	Content   *string          `json:"content,omitempty"`
	SessionID *string          `json:"sessionId,omitempty"`
	Title     *string          `json:"title,omitempty"`
	Settings  *SettingsInput   `json:"settings,omitempty"`
	Cron      *string          `json:"cron,omitempty"`
	At        *time.Time       `json:"at,omitempty"`
	Timezone  *string          `json:"timezone,omitempty"`
	Overlap   *ScheduleOverlap `json:"overlap,omitempty"`
	CatchUp   *ScheduleCatchUp `json:"catchUp,omitempty"`
	EndAt     *time.Time       `json:"endAt,omitempty"`
	MaxFires  *int             `json:"maxFires,omitempty"`
	Enabled   *bool            `json:"enabled,omitempty"`
}

// ScheduleArgs are the arguments of the schedules' operations: the schedule (but for
// createSchedule) and what changes (createSchedule, updateSchedule).
type ScheduleArgs struct {
	ID    string        `json:"id,omitempty"`
	Input ScheduleInput `json:"input"`
}

func init() {
	checkScheduleID := func(_ *core, args any) error { return checkID("schedule ID", args.(*ScheduleArgs).ID) }
	addOperation("createSchedule", &operation{
		args:  func() any { return new(ScheduleArgs) },
		local: true,
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			sc, err := s.createSchedule(ctx, cmd.UserID, cmd.Guest, cmd.Args.(*ScheduleArgs).Input)
			return &Reply{Schedule: sc}, err
		},
	})
	addOperation("updateSchedule", &operation{
		args:  func() any { return new(ScheduleArgs) },
		local: true,
		check: checkScheduleID,
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			a := cmd.Args.(*ScheduleArgs)
			sc, err := s.updateSchedule(ctx, cmd.UserID, a.ID, a.Input)
			return &Reply{Schedule: sc}, err
		},
	})
	addOperation("deleteSchedule", &operation{
		args:  func() any { return new(ScheduleArgs) },
		local: true,
		check: checkScheduleID,
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			sc, err := s.ownSchedule(ctx, cmd.UserID, cmd.Args.(*ScheduleArgs).ID)
			if err != nil {
				return nil, err
			}
			return nil, s.store.DeleteSchedule(ctx, sc.ID)
		},
	})
	addOperation("runScheduleNow", &operation{
		args:  func() any { return new(ScheduleArgs) },
		local: true,
		check: checkScheduleID,
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			f, err := s.runScheduleNow(ctx, cmd.UserID, cmd.Args.(*ScheduleArgs).ID)
			return &Reply{Fire: f}, err
		},
	})
}

// CreateSchedule makes a schedule of the caller's. EINVALID for a cron that does not
// parse, fires more often than Config.ScheduleMinInterval or never, an unknown time
// zone, both or neither of a cron and an instant, an instant or an end not in the future,
// a bad content, title or setting; ENOTFOUND for a session that is missing or not the
// caller's; ERATELIMIT when the caller keeps Config.MaxSchedulesPerUser schedules.
func (s *Service) CreateSchedule(ctx context.Context, in ScheduleInput) (*Schedule, error) {
	r, err := s.exec(ctx, &Command{Op: "createSchedule", Args: &ScheduleArgs{Input: in}})
	if err != nil {
		return nil, err
	}
	return r.Schedule, nil
}

// UpdateSchedule changes the fields in gives of a schedule of the caller's, checked as
// CreateSchedule checks them. A new cron or instant replaces the other; a change of when
// it fires, or enabling it, looks for fires from now on (none missed meanwhile is caught
// up). ENOTFOUND when it is missing or another user's.
func (s *Service) UpdateSchedule(ctx context.Context, id string, in ScheduleInput) (*Schedule, error) {
	r, err := s.exec(ctx, &Command{Op: "updateSchedule", Args: &ScheduleArgs{ID: id, Input: in}})
	if err != nil {
		return nil, err
	}
	return r.Schedule, nil
}

// DeleteSchedule deletes a schedule of the caller's with its fires; ENOTFOUND when it is
// missing or another user's.
func (s *Service) DeleteSchedule(ctx context.Context, id string) error {
	_, err := s.exec(ctx, &Command{Op: "deleteSchedule", Args: &ScheduleArgs{ID: id}})
	return err
}

// RunScheduleNow fires a schedule of the caller's at once, enabled or not, and answers
// the fire as it ended: like any fire, its scheduledAt now. It counts toward MaxFires,
// and a pending At still fires. ENOTFOUND when it is missing or another user's.
func (s *Service) RunScheduleNow(ctx context.Context, id string) (*ScheduleFire, error) {
	r, err := s.exec(ctx, &Command{Op: "runScheduleNow", Args: &ScheduleArgs{ID: id}})
	if err != nil {
		return nil, err
	}
	return r.Fire, nil
}

// Schedules returns the caller's schedules, oldest first.
func (s *Service) Schedules(ctx context.Context) ([]*Schedule, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	return s.store.UserSchedules(ctx, u)
}

// ScheduleFires returns a page of a schedule's fires, newest first, after the fire
// cursor after (when not empty). EINVALID for a bad cursor or a negative first.
func (s *Service) ScheduleFires(ctx context.Context, sc *Schedule, first *int, after string) (page []*ScheduleFire, hasNext bool, err error) {
	n, err := s.pageSize(first)
	if err != nil {
		return nil, false, err
	}
	var pos *FirePosition
	if after != "" {
		if pos, err = DecodeFireCursor(after); err != nil {
			return nil, false, err
		}
	}
	page, err = s.store.Fires(ctx, sc.ID, pos, n+1)
	if err != nil {
		return nil, false, err
	}
	if len(page) > n {
		page, hasNext = page[:n], true
	}
	return page, hasNext, nil
}

// maxUpcoming bounds Upcoming's count.
const maxUpcoming = 100

// Upcoming returns up to count of the next instants sc will fire at (at most 100), in
// order: none for a disabled schedule; a local time that does not happen is left out,
// one that happens twice is listed once. EINVALID for a negative count.
func (s *Service) Upcoming(sc *Schedule, count int) ([]time.Time, error) {
	if count < 0 {
		return nil, Errorf(EINVALID, "count must not be negative")
	}
	return s.upcoming(sc, min(count, maxUpcoming), s.now()), nil
}

// CronPreview returns up to count (at most 100) of the next instants cron fires at in
// zone, as a schedule of it would (see Upcoming), checked as CreateSchedule checks a cron.
func (s *Service) CronPreview(ctx context.Context, cron, zone string, count int) ([]time.Time, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	if count < 0 {
		return nil, Errorf(EINVALID, "count must not be negative")
	}
	now := s.now()
	if err := s.checkCron(cron, zone, now); err != nil {
		return nil, err
	}
	sc := &Schedule{UserID: u, Cron: cron, Timezone: zone, Enabled: true, Checked: now}
	sc.NextAt = nextAt(sc)
	return s.upcoming(sc, min(count, maxUpcoming), now), nil
}

// NextFireAt returns when sc fires next; nil when it will not fire again.
func (s *Service) NextFireAt(sc *Schedule) *time.Time {
	if next := s.upcoming(sc, 1, s.now()); len(next) == 1 {
		return &next[0]
	}
	return nil
}

// upcoming is Upcoming at now.
func (s *core) upcoming(sc *Schedule, count int, now time.Time) []time.Time {
	if !sc.Enabled || sc.NextAt == nil || count == 0 {
		return []time.Time{}
	}
	from := now
	if sc.Checked.After(from) {
		from = sc.Checked
	}
	left := -1
	if sc.MaxFires != nil {
		left = max(*sc.MaxFires-sc.Fires, 0)
	}
	out := []time.Time{}
	w, err := walkOf(sc, from)
	if err != nil {
		return out
	}
	for len(out) < count && left != 0 {
		sl, ok := w.next()
		if !ok || (sc.EndAt != nil && sl.at.After(*sc.EndAt)) {
			break
		}
		if !sl.dst {
			out = append(out, sl.at)
			left--
		}
	}
	return out
}
