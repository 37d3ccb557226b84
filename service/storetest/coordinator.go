package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// RunCoordinator checks the contract of service.Coordinator, for Stores shared by
// several replicas. open must return a new, empty Store for each subtest.
func RunCoordinator(t *testing.T, open func(t *testing.T) service.Store) {
	coord := func(t *testing.T) (service.Store, service.Coordinator) {
		s := open(t)
		c, ok := s.(service.Coordinator)
		if !ok {
			t.Fatalf("%T does not implement service.Coordinator", s)
		}
		return s, c
	}
	t.Run("Heartbeat/returns the replicas alive now", func(t *testing.T) {
		_, c := coord(t)
		ctx := t.Context()
		if _, err := c.Heartbeat(ctx, "a", t0, t0.Add(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Heartbeat(ctx, "b", t0, t0.Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		live, err := c.Heartbeat(ctx, "c", t0.Add(7*time.Second), t0.Add(17*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, "alive at t0+7s", sorted(live), []string{"a", "c"})
	})
	t.Run("Leave/ends a replica's life at once", func(t *testing.T) {
		_, c := coord(t)
		ctx := t.Context()
		_, _ = c.Heartbeat(ctx, "a", t0, t0.Add(time.Hour))
		if err := c.Leave(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		live, _ := c.Heartbeat(ctx, "b", t0, t0.Add(time.Hour))
		wantEqual(t, "alive after a left", sorted(live), []string{"b"})
	})
	t.Run("ClaimRuns/takes the active runs of replicas that are not alive", func(t *testing.T) {
		s, c := coord(t)
		ctx := t.Context()
		_, _ = c.Heartbeat(ctx, "alive", t0, t0.Add(time.Hour))
		_, _ = c.Heartbeat(ctx, "dead", t0, t0.Add(time.Second))
		l := create(t, s, newSession("s1", "u1", t0))
		owned := func(id string, st service.RunStatus, owner string, at time.Duration) *service.Run {
			r := newRun(id, "s1", st, t0.Add(at))
			r.Owner = owner
			return r
		}
		l.append(runChanged(owned("q", service.RunQueued, "dead", 3*time.Second)),
			runChanged(owned("r", service.RunRunning, "dead", 1*time.Second)),
			runChanged(owned("w", service.RunWaitingForInput, "dead", 2*time.Second)),
			runChanged(owned("done", service.RunCompleted, "dead", 0)),
			runChanged(owned("mine", service.RunRunning, "alive", 0)),
			runChanged(owned("nobody", service.RunQueued, "", 4*time.Second)))
		got, err := c.ClaimRuns(ctx, "alive", t0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, "claimed runs, oldest first", idsOf(got, func(r *service.Run) string { return r.ID }), []string{"r", "w", "q", "nobody"})
		for _, r := range got {
			if r.Owner != "alive" {
				t.Errorf("claimed run %s has owner %q", r.ID, r.Owner)
			}
			if stored, _ := s.Run(ctx, r.ID); stored == nil || stored.Owner != "alive" {
				t.Errorf("stored run %s has owner %+v", r.ID, stored)
			}
		}
		if again, _ := c.ClaimRuns(ctx, "alive", t0.Add(time.Minute)); len(again) != 0 {
			t.Errorf("claiming again took %d runs", len(again))
		}
	})
	t.Run("ClaimRuns/two replicas never both get a run", func(t *testing.T) {
		s, c := coord(t)
		ctx := context.Background()
		for _, id := range []string{"a", "b"} {
			_, _ = c.Heartbeat(ctx, id, t0, t0.Add(time.Hour))
		}
		l := create(t, s, newSession("s1", "u1", t0))
		for i := range 20 {
			r := newRun(string(rune('A'+i)), "s1", service.RunQueued, t0.Add(time.Duration(i)*time.Second))
			r.Owner = "gone"
			l.append(runChanged(r))
		}
		var mu sync.Mutex
		claimed := map[string]int{}
		var wg sync.WaitGroup
		for _, id := range []string{"a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runs, err := c.ClaimRuns(ctx, id, t0.Add(time.Minute))
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				for _, r := range runs {
					claimed[r.ID]++
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(claimed) != 20 {
			t.Errorf("%d runs claimed, want 20", len(claimed))
		}
		for id, n := range claimed {
			if n != 1 {
				t.Errorf("run %s claimed %d times", id, n)
			}
		}
	})
	t.Run("ActiveRun/the oldest active run, ENOTFOUND when none", func(t *testing.T) {
		s, c := coord(t)
		ctx := t.Context()
		l := create(t, s, newSession("s1", "u1", t0))
		_, err := c.ActiveRun(ctx, "s1")
		wantCode(t, "no runs", err, service.ENOTFOUND)
		l.append(runChanged(newRun("old", "s1", service.RunCompleted, t0)),
			runChanged(newRun("b", "s1", service.RunQueued, t0.Add(2*time.Second))),
			runChanged(newRun("a", "s1", service.RunWaitingForInput, t0.Add(time.Second))))
		got, err := c.ActiveRun(ctx, "s1")
		if err != nil || got.ID != "a" {
			t.Errorf("ActiveRun = %+v, %v; want run a", got, err)
		}
	})
}

func sorted(ss []string) []string {
	out := append([]string{}, ss...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
