package service_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// benchSchedules stores n schedules of one user each, all next due at due, through the
// store (createSchedule would check each cron: that is not what is measured).
func benchSchedules(b *testing.B, store service.Store, n int, due, checked time.Time) {
	b.Helper()
	ctx := context.Background()
	for i := range n {
		next := due
		sc := &service.Schedule{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), UserID: fmt.Sprintf("user-%d", i),
			Content: "the morning summary", Cron: "* * * * *", Timezone: "Europe/Paris", Overlap: service.OverlapSkip,
			CatchUp: service.CatchUpLatest, Enabled: true, CreatedAt: checked, UpdatedAt: checked, Checked: checked,
			NextAt: &next, Version: 1}
		if err := store.CreateSchedule(ctx, sc, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func benchService(b *testing.B, store service.Store, clock func() time.Time) *service.Service {
	b.Helper()
	agents := &service.Agents{}
	agents.Register("demo", "", service.RunnerFunc(func(context.Context, service.RunRequest, service.Output) error { return nil }))
	cfg := service.DefaultConfig()
	cfg.Clock, cfg.ScheduleTick = clock, time.Hour // the benchmark looks, not the service's loop
	svc, err := service.New(context.Background(), store, agents, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(svc.Close)
	return svc
}

// BenchmarkScheduleLook is one look for due schedules (TickSchedules: the due ones, then
// the fires left pending) among 10,000 schedules stored, none due: what every process pays
// every ScheduleTick.
func BenchmarkScheduleLook(b *testing.B) {
	for _, kind := range []string{"memory", "sqlite"} {
		b.Run("store="+kind, func(b *testing.B) {
			store, _ := openStore(b, kind)
			defer store.Close()
			now := time.Date(2026, 5, 4, 9, 0, 30, 0, time.UTC)
			benchSchedules(b, store, 10000, now.Add(time.Hour), now)
			svc := benchService(b, store, func() time.Time { return now })
			b.ResetTimer()
			for range b.N {
				svc.TickSchedules(context.Background())
			}
		})
	}
}

// BenchmarkScheduleAllDue is the look that finds 10,000 schedules due at once (each a
// user's, each firing into a new session of its own): it plans, claims and sends every
// fire, through the one door, and records its outcome. One op is the whole look; its
// time over 10,000 is a fire's cost. The agent returns at once.
func BenchmarkScheduleAllDue(b *testing.B) {
	for _, kind := range []string{"memory", "sqlite"} {
		b.Run("store="+kind, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				store, _ := openStore(b, kind)
				now := time.Date(2026, 5, 4, 9, 0, 30, 0, time.UTC)
				benchSchedules(b, store, 10000, now.Add(-30*time.Second), now.Add(-time.Minute))
				svc := benchService(b, store, func() time.Time { return now })
				b.StartTimer()
				svc.TickSchedules(context.Background())
				b.StopTimer()
				if due, _ := store.DueSchedules(context.Background(), now, 0); len(due) != 0 {
					b.Fatalf("%d schedules still due after the look", len(due))
				}
				svc.Close()
				store.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000/1000, "µs/fire")
		})
	}
}
