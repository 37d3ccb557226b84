package model

// This file holds the models gqlgen binds that read more from the service as a field is
// asked for (Viewer, Schedule, ScheduleFire): each field of theirs that is not one of the
// service's is a method, which gqlgen calls only when a query selects it.

import (
	"context"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// Viewer is the user a request is made by.
type Viewer struct {
	ID  string
	Svc *service.Service
}

// budget reads the viewer's budget once per field asked.
func (v *Viewer) budget(ctx context.Context) (*service.UserBudget, error) {
	return v.Svc.ViewerBudget(ctx)
}

// Usage is what the viewer's runs spent in the current period.
func (v *Viewer) Usage(ctx context.Context) (*service.Usage, error) {
	b, err := v.budget(ctx)
	if err != nil {
		return nil, err
	}
	return &b.Usage, nil
}

// TokenBudget is the viewer's cap per period; nil for none.
func (v *Viewer) TokenBudget(ctx context.Context) (*int, error) {
	b, err := v.budget(ctx)
	if err != nil || b.Limit == nil {
		return nil, err
	}
	n := int(min(*b.Limit, 1<<31-1))
	return &n, nil
}

// BudgetResetsAt is when the viewer's period turns; nil without a cap.
func (v *Viewer) BudgetResetsAt(ctx context.Context) (*time.Time, error) {
	b, err := v.budget(ctx)
	if err != nil {
		return nil, err
	}
	return b.ResetsAt, nil
}

// Schedule is a schedule of the viewer's.
type Schedule struct {
	*service.Schedule
	Svc *service.Service
}

// NewSchedules wraps schedules.
func NewSchedules(svc *service.Service, scs []*service.Schedule) []*Schedule {
	out := make([]*Schedule, len(scs))
	for i, sc := range scs {
		out[i] = &Schedule{sc, svc}
	}
	return out
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// SessionID is the session each fire sends to; nil for a new session per fire.
func (s *Schedule) SessionID() *string { return optional(s.Schedule.SessionID) }

// Title is the title of the sessions it makes.
func (s *Schedule) Title() *string { return optional(s.Schedule.Title) }

// Cron is its cron; nil for a one-off.
func (s *Schedule) Cron() *string { return optional(s.Schedule.Cron) }

// DisabledReason says why the server disabled it.
func (s *Schedule) DisabledReason() *string { return optional(s.Schedule.DisabledReason) }

// NextFireAt is when it fires next.
func (s *Schedule) NextFireAt() *time.Time { return s.Svc.NextFireAt(s.Schedule) }

// Upcoming is when it fires next, count times at most.
func (s *Schedule) Upcoming(count *int) ([]*time.Time, error) {
	n := 5
	if count != nil {
		n = *count
	}
	ts, err := s.Svc.Upcoming(s.Schedule, n)
	out := make([]*time.Time, len(ts))
	for i := range ts {
		out[i] = &ts[i]
	}
	return out, err
}

// Fires is a page of its fires, newest first.
func (s *Schedule) Fires(ctx context.Context, first *int, after *string) (*ScheduleFireConnection, error) {
	cursor := ""
	if after != nil {
		cursor = *after
	}
	page, hasNext, err := s.Svc.ScheduleFires(ctx, s.Schedule, first, cursor)
	if err != nil {
		return nil, err
	}
	conn := &ScheduleFireConnection{Edges: []*ScheduleFireEdge{}, PageInfo: &PageInfo{HasNextPage: hasNext, HasPreviousPage: cursor != ""}}
	for _, f := range page {
		conn.Edges = append(conn.Edges, &ScheduleFireEdge{Cursor: service.EncodeFireCursor(f), Node: &ScheduleFire{f, s.Svc}})
	}
	if n := len(conn.Edges); n > 0 {
		conn.PageInfo.StartCursor, conn.PageInfo.EndCursor = &conn.Edges[0].Cursor, &conn.Edges[n-1].Cursor
	}
	return conn, nil
}

// ScheduleFire is one fire of a schedule.
type ScheduleFire struct {
	*service.ScheduleFire
	Svc *service.Service
}

// Reason says why it was skipped or failed.
func (f *ScheduleFire) Reason() *string { return optional(f.ScheduleFire.Reason) }

// SessionID is the session its message went to.
func (f *ScheduleFire) SessionID() *string { return optional(f.ScheduleFire.SessionID) }

// Run is the run its message started; nil when none, or when it is gone with its session.
func (f *ScheduleFire) Run(ctx context.Context) (*service.Run, error) {
	if f.RunID == "" {
		return nil, nil
	}
	r, err := f.Svc.Run(ctx, f.RunID)
	if service.ErrorCode(err) == service.ENOTFOUND {
		return nil, nil
	}
	return r, err
}
