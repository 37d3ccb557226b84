package service

import (
	"context"
	"sync"
	"time"

	"github.com/talkgraph/talkgraph/internal/shrink"
)

// sessionState is the service's in-memory side of one session: the lock that serialises
// its writes, the durable end of its log with the latest events (which live subscribers
// read), its subscribers, and its runs. It exists while the session has subscribers, runs
// or operations in flight, and is dropped when it has none.
type sessionState struct {
	id     string
	userID string

	mu   sync.Mutex
	idle *sync.Cond // signalled when a write of the session ends (writing turns false)
	refs int        // subscribers + runs + operations in flight; guarded by Service.statesMu

	deleted bool
	// agentDone is the done channel of the session's latest run (see activeRun.done).
	agentDone chan struct{}
	// lastSeq is the Seq of the last durable event, and lastOff the Off of the cursor after
	// it. synced is false until lastSeq was read from the store under the lock.
	lastSeq int64
	lastOff int
	synced  bool
	// tail holds the latest durable events in Seq order, with no gap; tail[0].Seq ==
	// tailStart.
	tail      []*Event
	tailStart int64
	subs      []*Subscription

	// writing is set while a write of the session is in flight (a command's, or the
	// writer's flush of streamed text); commands wait for it to end before they number
	// their events.
	writing bool
	// dirty is set while the writer has the session on its list of text to flush.
	dirty bool
	// lastFlush is when streamed text was last taken for writing; flushAt, when set, is
	// when the writer takes it next (FlushInterval after lastFlush, or a pause after a
	// failed write): the session waits on the writer's list until then.
	lastFlush time.Time
	flushAt   time.Time
	// failingSince is when writes of streamed text began to fail (zero while they work).
	failingSince time.Time

	active *activeRun // the run that owns the session (running, waiting or starting)
	queue  []*Run     // QUEUED runs behind it (busy policy ENQUEUE), oldest first

	// sess is the session's row as last read or written here, nil when unknown.
	sess *TalkSession
	// With replicas: following stops receiving other replicas' events for the session (set
	// while it has subscribers here).
	following func()
	// reconciling is set while the state is checked against the store, after a write
	// found that the log moved on without this replica (see Service.reconcile).
	reconciling bool
}

// acquireState returns the state of a session, creating it on first use, and holds a
// reference until releaseState.
func (s *Service) acquireState(sess *TalkSession) *sessionState {
	s.statesMu.Lock()
	defer s.statesMu.Unlock()
	st := s.states[sess.ID]
	if st == nil {
		cp := *sess
		st = &sessionState{id: sess.ID, userID: sess.UserID, lastSeq: sess.LastSeq, tailStart: sess.LastSeq + 1, sess: &cp}
		st.idle = sync.NewCond(&st.mu)
		s.states[sess.ID] = st
		s.statesPeak = max(s.statesPeak, len(s.states))
	}
	st.refs++
	return st
}

// shrinkStates makes the map of session states anew once most of the states it held have
// gone: a crowd of subscribers that came and left would otherwise leave its room behind.
func (s *Service) shrinkStates() {
	s.statesMu.Lock()
	defer s.statesMu.Unlock()
	s.states, s.statesPeak = shrink.Map(s.states, s.statesPeak)
}

// holdState takes one more reference on a state the caller already holds.
func (s *Service) holdState(st *sessionState) {
	s.statesMu.Lock()
	st.refs++
	s.statesMu.Unlock()
}

func (s *Service) releaseState(st *sessionState) {
	s.statesMu.Lock()
	defer s.statesMu.Unlock()
	st.refs--
	if st.refs == 0 && s.states[st.id] == st {
		delete(s.states, st.id)
		if st.following != nil {
			st.following()
			st.following = nil
		}
	}
}

// session returns the caller's session; ENOTFOUND when missing or another user's, EINVALID
// for a malformed ID.
func (s *Service) session(ctx context.Context, id string) (*TalkSession, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID("session ID", id); err != nil {
		return nil, err
	}
	sess, err := s.store.Session(ctx, id)
	if ErrorCode(err) == ENOTFOUND || (err == nil && sess.UserID != u) {
		return nil, Errorf(ENOTFOUND, "session not found")
	}
	if err == nil {
		s.annotate(ctx, id, "")
	}
	return sess, err
}

// lockSession loads the caller's session and locks its state, current with the stored
// log and with no write in flight; the returned func unlocks and releases it.
func (s *Service) lockSession(ctx context.Context, id string) (*TalkSession, *sessionState, func(), error) {
	if sess, st, unlock := s.lockLive(ctx, id); st != nil {
		return sess, st, unlock, nil
	}
	sess, err := s.session(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	st := s.acquireState(sess)
	st.mu.Lock()
	unlock := func() { st.mu.Unlock(); s.releaseState(st) }
	if err := s.readyLocked(ctx, st); err != nil {
		unlock()
		return nil, nil, nil, err
	}
	return sess, st, unlock, nil
}

// lockLive is lockSession for a session of the caller's whose state is in memory and
// current (a subscriber, a run or another command holds it): the session is then known
// without reading the store. It returns a nil state when it cannot tell; lockSession then
// reads the store, as it does for every other session (another user's included, so an
// answer takes as long whoever's the session is). Only a server without replicas knows its
// states are current: with replicas another one may have changed the session.
func (s *Service) lockLive(ctx context.Context, id string) (*TalkSession, *sessionState, func()) {
	if s.coord != nil {
		return nil, nil, nil
	}
	u, err := user(ctx)
	if err != nil || checkID("session ID", id) != nil {
		return nil, nil, nil
	}
	s.statesMu.Lock()
	st := s.states[id]
	if st == nil || st.userID != u {
		s.statesMu.Unlock()
		return nil, nil, nil
	}
	st.refs++
	s.statesMu.Unlock()
	st.mu.Lock()
	unlock := func() { st.mu.Unlock(); s.releaseState(st) }
	if s.readyLocked(ctx, st) != nil || st.sess == nil {
		unlock()
		return nil, nil, nil
	}
	sess := *st.sess
	sess.LastSeq = st.lastSeq
	s.annotate(ctx, id, "")
	return &sess, st, unlock
}

// readyLocked waits until no write of st is in flight and brings st up to date with the
// stored log. ENOTFOUND once the session is deleted.
func (s *Service) readyLocked(ctx context.Context, st *sessionState) error {
	s.waitWriteLocked(st)
	if st.deleted {
		return Errorf(ENOTFOUND, "session not found")
	}
	if st.synced {
		return nil
	}
	// A state is created from a session read before it; an older state of the session may
	// have written more in between. The log continues from what is stored.
	sess, err := s.store.Session(ctx, st.id)
	if ErrorCode(err) == ENOTFOUND {
		return Errorf(ENOTFOUND, "session not found")
	} else if err != nil {
		return err
	}
	cp := *sess
	st.sess = &cp
	if sess.LastSeq != st.lastSeq {
		last, err := s.store.Events(ctx, st.id, sess.LastSeq-1, 1)
		if err != nil {
			return err
		}
		st.lastSeq, st.lastOff = sess.LastSeq, 0
		if len(last) == 1 {
			st.lastOff = CursorOf(last[0]).Off
		}
		st.tail, st.tailStart = nil, sess.LastSeq+1
	}
	st.synced = true
	return nil
}

// waitWriteLocked waits until no write of st is in flight.
func (s *Service) waitWriteLocked(st *sessionState) {
	for st.writing {
		st.idle.Wait()
	}
}

// appendLocked makes durable events visible: the end of the log moves past them, the
// tail keeps them, and subscribers are woken.
func (s *Service) appendLocked(st *sessionState, evs []*Event) {
	if len(evs) == 0 {
		return
	}
	st.lastSeq = evs[len(evs)-1].Seq
	st.lastOff = CursorOf(evs[len(evs)-1]).Off
	st.tail = append(st.tail, evs...)
	if len(st.tail) >= 2*s.cfg.TailEvents {
		// Keep the newest TailEvents; readers that fall behind read from the store. Trimming
		// only at twice the size keeps appends amortised O(1).
		st.tail = append(make([]*Event, 0, 2*s.cfg.TailEvents), st.tail[len(st.tail)-s.cfg.TailEvents:]...)
	}
	st.tailStart = st.tail[0].Seq
	var activity time.Time
	updated := false
	for _, ev := range evs {
		switch {
		case ev.Type.Chunky():
			s.stats.chunks.Add(1)
		case ev.Type == EventSessionUpdated && ev.Session != nil:
			cp := *ev.Session
			cp.LastSeq = st.lastSeq
			st.sess = &cp
			updated = true
		case ev.Type == EventMessageAdded && ev.Message != nil && ev.Message.Role == RoleUser:
			activity = ev.At
		}
	}
	if !updated && !activity.IsZero() && st.sess != nil {
		// As the stores do (see Changes.Activity): a user's message moves UpdatedAt.
		cp := *st.sess
		cp.UpdatedAt = activity
		st.sess = &cp
	}
	st.wakeLocked()
}

// wakeLocked tells every subscriber of st that there may be something to read.
func (st *sessionState) wakeLocked() {
	for _, sub := range st.subs {
		sub.notify()
	}
}
