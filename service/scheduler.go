package service

import (
	"context"
	"sync"
)

// scheduler admits runs onto a bounded number of slots, at most perUser at once for one
// user, taking users in turn so that one user's burst cannot starve another. A run holds a
// slot while its agent works and gives it back while it waits for an answer.
type scheduler struct {
	mu      sync.Mutex
	slots   int
	perUser int
	busy    int
	users   map[string]*userQueue
	turn    []string // users with waiting tickets, in round-robin order
	closed  bool
}

type userQueue struct {
	active  int
	waiting []*ticket
}

type ticket struct {
	user  string
	ready chan struct{} // closed when admitted
}

func newScheduler(slots, perUser int) *scheduler {
	return &scheduler{slots: max(slots, 1), perUser: max(perUser, 1), users: make(map[string]*userQueue)}
}

// acquire blocks until user is admitted to a slot, or ctx ends (returning its error). With
// front set the ticket goes before the user's other waiting runs: a run resuming after an
// answer should not queue behind runs that have not started.
func (s *scheduler) acquire(ctx context.Context, user string, front bool) error {
	t := &ticket{user: user, ready: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Errorf(EUNAVAILABLE, "the server is shutting down")
	}
	q := s.users[user]
	if q == nil {
		q = &userQueue{}
		s.users[user] = q
	}
	if len(q.waiting) == 0 {
		s.turn = append(s.turn, user)
	}
	if front {
		q.waiting = append([]*ticket{t}, q.waiting...)
	} else {
		q.waiting = append(q.waiting, t)
	}
	s.dispatchLocked()
	s.mu.Unlock()

	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-t.ready: // admitted meanwhile: hand the slot back
			s.releaseLocked(user)
		default:
			s.removeLocked(t)
		}
		return ctx.Err()
	}
}

// tryAcquire admits user to a slot at once when one is free and nobody waits for one;
// false otherwise (then acquire waits in line).
func (s *scheduler) tryAcquire(user string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.busy >= s.slots || len(s.turn) > 0 {
		return false
	}
	q := s.users[user]
	if q == nil {
		q = &userQueue{}
		s.users[user] = q
	}
	if q.active >= s.perUser {
		if q.active == 0 && len(q.waiting) == 0 {
			delete(s.users, user)
		}
		return false
	}
	q.active++
	s.busy++
	return true
}

// release gives back a slot that acquire granted.
func (s *scheduler) release(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(user)
}

func (s *scheduler) releaseLocked(user string) {
	s.busy--
	if q := s.users[user]; q != nil {
		q.active--
		if q.active == 0 && len(q.waiting) == 0 {
			delete(s.users, user)
		}
	}
	s.dispatchLocked()
}

func (s *scheduler) removeLocked(t *ticket) {
	q := s.users[t.user]
	if q == nil {
		return
	}
	for i, w := range q.waiting {
		if w == t {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			break
		}
	}
	if len(q.waiting) == 0 {
		s.dropTurnLocked(t.user)
		if q.active == 0 {
			delete(s.users, t.user)
		}
	}
}

func (s *scheduler) dropTurnLocked(user string) {
	for i, u := range s.turn {
		if u == user {
			s.turn = append(s.turn[:i], s.turn[i+1:]...)
			return
		}
	}
}

// dispatchLocked admits waiting tickets while slots are free, taking users in turn.
func (s *scheduler) dispatchLocked() {
	for s.busy < s.slots && len(s.turn) > 0 {
		admitted := false
		for i := 0; i < len(s.turn); i++ {
			user := s.turn[i]
			q := s.users[user]
			if q.active >= s.perUser {
				continue
			}
			t := q.waiting[0]
			q.waiting = q.waiting[1:]
			q.active++
			s.busy++
			close(t.ready)
			// The user goes to the back of the line; drop them if nothing else waits.
			s.turn = append(s.turn[:i], s.turn[i+1:]...)
			if len(q.waiting) > 0 {
				s.turn = append(s.turn, user)
			}
			admitted = true
			break
		}
		if !admitted {
			return // every waiting user is at their limit
		}
	}
}

// stats returns the number of busy slots and of runs waiting for one.
func (s *scheduler) stats() (busy, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.users {
		waiting += len(q.waiting)
	}
	return s.busy, waiting
}

// close makes later acquires fail; runs already waiting wait for their contexts.
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}
