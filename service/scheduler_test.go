package service

import (
	"context"
	"testing"
	"time"
)

// admitted collects the order in which tickets get their slot.
func admitOrder(t *testing.T, s *scheduler, users []string) []string {
	t.Helper()
	order := make(chan string, len(users))
	ctx := context.Background()
	for _, u := range users {
		u := u
		ready := make(chan struct{})
		go func() {
			close(ready)
			if err := s.acquire(ctx, u, false); err != nil {
				t.Error(err)
				return
			}
			order <- u
		}()
		<-ready
		// Queue in a known order: wait until this ticket is waiting or admitted.
		deadline := time.Now().Add(5 * time.Second)
		for {
			busy, waiting := s.stats()
			if busy+waiting >= 1 && countQueued(s, u) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("ticket never queued")
			}
			time.Sleep(time.Millisecond)
		}
	}
	var got []string
	for range users {
		select {
		case u := <-order:
			got = append(got, u)
			s.release(u)
		case <-time.After(5 * time.Second):
			t.Fatalf("only %v admitted", got)
		}
	}
	return got
}

// countQueued reports whether u has a ticket waiting or a slot.
func countQueued(s *scheduler, u string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.users[u]
	return q != nil && (len(q.waiting) > 0 || q.active > 0)
}

func TestSchedulerTakesUsersInTurn(t *testing.T) {
	s := newScheduler(1, 1)
	// Block the only slot, then queue a burst from alice and one run from bob.
	if err := s.acquire(context.Background(), "carol", false); err != nil {
		t.Fatal(err)
	}
	done := make(chan []string)
	go func() { done <- admitOrder(t, s, []string{"alice", "alice", "alice", "bob"}) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, waiting := s.stats(); waiting == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("tickets not queued")
		}
		time.Sleep(time.Millisecond)
	}
	s.release("carol")
	got := <-done
	// Bob's one run goes second, not after alice's whole burst.
	if want := []string{"alice", "bob", "alice", "alice"}; !equal(got, want) {
		t.Errorf("admission order %v, want %v", got, want)
	}
}

func TestSchedulerLimitsSlotsAndRunsPerUser(t *testing.T) {
	s := newScheduler(3, 2)
	ctx := context.Background()
	for _, u := range []string{"alice", "alice"} {
		if err := s.acquire(ctx, u, false); err != nil {
			t.Fatal(err)
		}
	}
	// Alice is at her limit: her third run waits although a slot is free.
	third := make(chan struct{})
	go func() { _ = s.acquire(ctx, "alice", false); close(third) }()
	waitWaiting(t, s, 1)
	if err := s.acquire(ctx, "bob", false); err != nil { // the free slot goes to bob
		t.Fatal(err)
	}
	select {
	case <-third:
		t.Fatal("alice got a third slot")
	default:
	}
	if busy, waiting := s.stats(); busy != 3 || waiting != 1 {
		t.Fatalf("busy %d waiting %d", busy, waiting)
	}
	s.release("alice")
	select {
	case <-third:
	case <-time.After(5 * time.Second):
		t.Fatal("alice's waiting run not admitted after she released a slot")
	}
	// A run whose context ends while waiting leaves the line.
	ctx2, cancel := context.WithCancel(ctx)
	errc := make(chan error)
	go func() { errc <- s.acquire(ctx2, "dave", false) }()
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled acquire succeeded")
	}
	if _, waiting := s.stats(); waiting != 0 {
		t.Errorf("%d tickets still waiting", waiting)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func waitWaiting(t *testing.T, s *scheduler, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, waiting := s.stats(); waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %d waiting", n)
		}
		time.Sleep(time.Millisecond)
	}
}
