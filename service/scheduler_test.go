package service

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// admitOrder queues one ticket for each of users, in that order, then gives back each
// slot as soon as it is given, and returns the order in which the tickets got their
// slot. It runs on a goroutine of its own: what goes wrong comes back as its error, never
// as a failure of the test from that goroutine.
func admitOrder(s *scheduler, users []string) ([]string, error) {
	order := make(chan string, len(users))
	errc := make(chan error, len(users))
	for _, u := range users {
		before := tickets(s, u)
		go func() {
			if err := s.acquire(context.Background(), u, false); err != nil {
				errc <- fmt.Errorf("acquire for %s: %w", u, err)
				return
			}
			order <- u
		}()
		// Queue in a known order: wait until this ticket is waiting or admitted.
		if !within(5*time.Second, func() bool { return tickets(s, u) > before }) {
			return nil, fmt.Errorf("%s's ticket never queued", u)
		}
	}
	var got []string
	deadline := time.After(5 * time.Second)
	for range users {
		select {
		case u := <-order:
			got = append(got, u)
			s.release(u)
		case err := <-errc:
			return got, err
		case <-deadline:
			return got, fmt.Errorf("only %v admitted", got)
		}
	}
	return got, nil
}

// tickets counts u's tickets, waiting or holding a slot.
func tickets(s *scheduler, u string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.users[u]
	if q == nil {
		return 0
	}
	return len(q.waiting) + q.active
}

// within polls cond until it holds (true) or d has passed (false). The scheduler sends no
// event when a ticket joins the line: its state is all there is to look at.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func TestSchedulerTakesUsersInTurn(t *testing.T) {
	s := newScheduler(1, 1)
	// Block the only slot, then queue a burst from alice and one run from bob.
	if err := s.acquire(context.Background(), "carol", false); err != nil {
		t.Fatal(err)
	}
	type result struct {
		order []string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		order, err := admitOrder(s, []string{"alice", "alice", "alice", "bob"})
		done <- result{order, err}
	}()
	var early *result
	queued := within(10*time.Second, func() bool { // longer than admitOrder waits: its error comes first
		select {
		case r := <-done:
			early = &r
			return true
		default:
		}
		_, waiting := s.stats()
		return waiting == 4
	})
	switch {
	case early != nil:
		t.Fatalf("admitOrder ended before every ticket queued: %v, %v", early.order, early.err)
	case !queued:
		t.Fatal("tickets not queued")
	}
	s.release("carol")
	var got result
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("admitOrder did not return")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	// Bob's one run goes second, not after alice's whole burst.
	if want := []string{"alice", "bob", "alice", "alice"}; !equal(got.order, want) {
		t.Errorf("admission order %v, want %v", got.order, want)
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
	third := make(chan error, 1)
	go func() { third <- s.acquire(ctx, "alice", false) }()
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
	case err := <-third:
		if err != nil {
			t.Fatalf("alice's waiting run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("alice's waiting run not admitted after she released a slot")
	}
	// A run whose context ends while waiting leaves the line.
	ctx2, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- s.acquire(ctx2, "dave", false) }()
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("cancelled acquire succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled acquire did not return")
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
	if !within(5*time.Second, func() bool { _, waiting := s.stats(); return waiting == n }) {
		t.Fatalf("never %d waiting", n)
	}
}
