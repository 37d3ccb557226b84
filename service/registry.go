package service

import (
	"hash/fnv"
	"sync"

	"github.com/talkgraph/talkgraph/internal/shrink"
)

// registry holds the sessions this process has in memory (sessionState), each for as long
// as something holds a reference to it: a subscriber, a run, an operation in flight. It
// is the only code that changes the map and the references, under its own lock, which is
// never taken while a session's lock is wanted (see the lock order in ARCHITECTURE.md).
type registry struct {
	mu   sync.Mutex
	byID map[string]*sessionState
	// peak is the most states the map has held since it was made (see shrink.Map).
	peak int
	// drops counts the states dropped, by a hash of their session's ID (see mark).
	drops [dropBuckets]uint32
}

// dropBuckets is how many counters of dropped states the registry keeps: one per session
// would be exact, a few thousand shared ones make a session read behind a dropped state
// of another session rare.
const dropBuckets = 4096

// bucket returns the counter of id's dropped states (FNV-1a of the ID picks it).
func (r *registry) bucket(id string) *uint32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return &r.drops[h.Sum32()%dropBuckets]
}

// mark returns a mark to take before reading session id from the store, for acquireRead,
// and whether the session's state is held now.
func (r *registry) mark(id string) (m uint32, held bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.bucket(id), r.byID[id] != nil
}

// acquire returns the state of session id, made with make on first use, and holds a
// reference until release.
func (r *registry) acquire(id string, make func() *sessionState) *sessionState {
	return r.acquireRead(id, 0, func(bool) *sessionState { return make() })
}

// acquireRead is acquire for a session whose row was read from the store after mark m
// was taken. make is told whether the row is as current as this process can know it: the
// state is made here and no state of the session was dropped since m, so that every write
// this process made to the session was stored before the read (a write holds its state
// until it is stored).
func (r *registry) acquireRead(id string, m uint32, make func(current bool) *sessionState) *sessionState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.byID[id]
	if st == nil {
		st = make(*r.bucket(id) == m)
		r.byID[id] = st
		r.peak = max(r.peak, len(r.byID))
	}
	st.refs++
	return st
}

// holdIf takes a reference on the state of session id when it is in memory and userID's;
// nil otherwise.
func (r *registry) holdIf(id, userID string) *sessionState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.byID[id]
	if st == nil || st.userID != userID {
		return nil
	}
	st.refs++
	return st
}

// get returns the state of session id when it is in memory, without a reference.
func (r *registry) get(id string) *sessionState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// hold takes one more reference on a state the caller already holds.
func (r *registry) hold(st *sessionState) {
	r.mu.Lock()
	st.refs++
	r.mu.Unlock()
}

// release gives back a reference; gone reports that it was the last, and st is no longer
// in the registry (nobody holds it now).
func (r *registry) release(st *sessionState) (gone bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st.refs--
	if st.refs == 0 && r.byID[st.id] == st {
		delete(r.byID, st.id)
		*r.bucket(st.id)++
		return true
	}
	return false
}

// live returns the states held now.
func (r *registry) live() []*sessionState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*sessionState, 0, len(r.byID))
	for _, st := range r.byID {
		out = append(out, st)
	}
	return out
}

// shrink makes the map anew once most of the states it held have gone: a crowd of
// subscribers that came and left would otherwise leave its room behind.
func (r *registry) shrink() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID, r.peak = shrink.Map(r.byID, r.peak)
}
