// Package inmem is a service.Store that keeps everything in memory: for tests, and for
// running the server without durable state. Nothing survives the process.
//
// It keeps the contract of service.Store like the durable stores (the storetest suite
// checks both): every batch is checked against the stored state before any of it is
// written, and rows are copied in and out, so a caller never shares memory with the stored
// data.
package inmem

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/talkgraph/talkgraph/service"
)

// Store is an in-memory service.Store. The zero value is not usable: call New.
type Store struct {
	mu        sync.RWMutex
	closed    bool
	sessions  map[string]*sessionData
	messages  map[string]*service.Message
	runs      map[string]*service.Run
	questions map[string]*service.Question
	toolCalls map[string]*service.ToolCall
	idem      map[idemKey]*service.IdempotencyRecord
	// shares are the share links by ID, shareByHash their IDs by hash.
	shares      map[string]*service.ShareLink
	shareByHash map[string]string
	threads     map[threadKey]string   // AG-UI threads: the session each is bound to
	bindings    map[string][]threadKey // the threads bound to each session, for its deletion

	usage     map[string]service.Usage     // by session
	userUsage map[userPeriod]service.Usage // by user and period
	holds     map[string]*service.Reservation

	schedules map[string]*service.Schedule
	fires     map[string]*service.ScheduleFire
	slots     map[slotKey]string // fire IDs by schedule and slot

	u users
}

type threadKey struct{ userID, threadID string }

// sessionData is a session with the IDs of everything that belongs to it, so that Delete
// can find it all.
type sessionData struct {
	session   *service.TalkSession
	messages  map[string]struct{}
	onBranch  map[string]bool // the messages on the current branch
	runs      map[string]struct{}
	questions map[string]struct{}
	toolCalls map[string]struct{}
	idem      map[idemKey]struct{}
	shares    map[string]struct{}
	events    []*service.Event // ascending Seq
	bytes     int64            // the session's weight against its user's quota
}

type idemKey struct{ userID, key string }

var _ service.Store = (*Store)(nil)
var _ service.SoleWriter = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	s := &Store{
		sessions:  make(map[string]*sessionData),
		messages:  make(map[string]*service.Message),
		runs:      make(map[string]*service.Run),
		questions: make(map[string]*service.Question),
		toolCalls: make(map[string]*service.ToolCall),
		idem:      make(map[idemKey]*service.IdempotencyRecord),

		shares:      make(map[string]*service.ShareLink),
		shareByHash: make(map[string]string),
		threads:     make(map[threadKey]string),
		bindings:    make(map[string][]threadKey),
		usage:       make(map[string]service.Usage),
		userUsage:   make(map[userPeriod]service.Usage),
		holds:       make(map[string]*service.Reservation),
		schedules:   make(map[string]*service.Schedule),
		fires:       make(map[string]*service.ScheduleFire),
		slots:       make(map[slotKey]string),
	}
	s.u.init()
	return s
}

func errClosed() error { return service.Errorf(service.EUNAVAILABLE, "storage is closed") }

// lastSeq is the Seq of the session's last event, 0 before any.
func (sd *sessionData) lastSeq() int64 {
	if n := len(sd.events); n > 0 {
		return sd.events[n-1].Seq
	}
	return 0
}

// findEvent returns the index of the event with seq in events, or where it would go.
func findEvent(events []*service.Event, seq int64) (int, bool) {
	return slices.BinarySearchFunc(events, seq, func(e *service.Event, seq int64) int {
		return cmp.Compare(e.Seq, seq)
	})
}

// rlock takes the read lock, unless the store is closed.
func (s *Store) rlock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return errClosed()
	}
	return nil
}

// SoleWriter implements service.SoleWriter: the store lives in this process's memory.
func (s *Store) SoleWriter() bool { return true }

// Ping implements service.Store: it fails only once the store is closed.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rlock(ctx); err != nil {
		return err
	}
	s.mu.RUnlock()
	return nil
}

// Close implements service.Store. Afterwards every method returns EUNAVAILABLE.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
