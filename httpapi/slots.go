package httpapi

import (
	"sync"

	"github.com/talkgraph/talkgraph/internal/shrink"
)

// slots counts what each key (a user, a client address) holds open at once, up to max. A
// key is forgotten as soon as it holds nothing, so the map is only as large as what is
// open, which the server's own caps bound.
type slots struct {
	max  int
	mu   sync.Mutex
	held map[string]int
	peak int // the most keys the map has held since it was made (see shrink.Map)
}

func newSlots(max int) *slots { return &slots{max: max, held: map[string]int{}} }

// take takes one of key's slots; false when key holds max already.
func (s *slots) take(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.held[key]
	if n >= s.max {
		return false
	}
	s.held[key] = n + 1
	s.peak = max(s.peak, len(s.held))
	return true
}

// release gives back one of key's slots.
func (s *slots) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.held[key]; n > 1 {
		s.held[key] = n - 1
		return
	}
	delete(s.held, key)
	s.held, s.peak = shrink.Map(s.held, s.peak) // once most of a crowd has gone
}

// full reports whether key holds max slots, without taking one.
func (s *slots) full(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[key] >= s.max
}
