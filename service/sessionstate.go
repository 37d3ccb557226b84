package service

import (
	"context"
	"sync"
	"time"
)

// sessionState is the service's in-memory side of one session: the lock that serialises
// its writes, its log as this process holds it, its runs, and a copy of its row. It exists
// while the session has subscribers, runs or operations in flight, and is dropped when it
// has none. Every field but refs is guarded by mu.
type sessionState struct {
	c      *core
	id     string
	userID string

	mu   sync.Mutex
	refs int // subscribers + runs + operations in flight; guarded by the registry's lock

	// log is the session's log: its durable end, tail, readers and write gate.
	log sessionLog

	// agentDone is the done channel of the session's latest run (see activeRun.done).
	agentDone chan struct{}
	active    *activeRun // the run that owns the session (running, waiting or starting)
	queue     []*Run     // QUEUED runs behind it (busy policy ENQUEUE), oldest first

	// sess is the session's row as last read or written here, nil when unknown.
	sess *TalkSession

	// Kept by the replicas (see replicas.go): following stops receiving other replicas'
	// events for the session (set while it has subscribers here); reconciling is set
	// while the state is checked against the store, after a write found that the log
	// moved on without this replica.
	following   func()
	reconciling bool
}

var _ textSource = (*sessionState)(nil)

// acquireState returns the state of a session, creating it on first use, and holds a
// reference until releaseState.
func (c *core) acquireState(sess *TalkSession) *sessionState {
	return c.states.acquire(sess.ID, func() *sessionState { return c.newState(sess, false) })
}

// acquireRead is acquireState for sess read from the store after mark m was taken
// (registry.mark). When the row read is as current as this process can know it (see
// registry.acquireRead), the state is made synced with the store at the row's LastSeq
// (current), and its first command does not read the row again. (A write another replica
// made since the read is found as it would be after a second read: the store refuses the
// next write's Seq, and the command is done again on the state read anew.)
func (c *core) acquireRead(sess *TalkSession, m uint32) (st *sessionState, current bool) {
	st = c.states.acquireRead(sess.ID, m, func(synced bool) *sessionState {
		current = synced
		return c.newState(sess, synced)
	})
	return st, current
}

// newState makes the state of sess, synced with the store when sess is known current.
func (c *core) newState(sess *TalkSession, synced bool) *sessionState {
	cp := *sess
	st := &sessionState{c: c, id: sess.ID, userID: sess.UserID, sess: &cp}
	st.log = newSessionLog(sess.ID, sess.LastSeq, &st.mu, c.cfg.TailEvents)
	st.log.synced = synced
	return st
}

// holdState takes one more reference on a state the caller already holds.
func (c *core) holdState(st *sessionState) { c.states.hold(st) }

// releaseState gives back a reference; the last one ends the state's following.
func (c *core) releaseState(st *sessionState) {
	if c.states.release(st) {
		c.peers.unfollow(st) // nobody else holds st now
	}
}

// liveStates returns the states held now.
func (c *core) liveStates() []*sessionState { return c.states.live() }

// session returns the caller's session; ENOTFOUND when missing or another user's, EINVALID
// for a malformed ID.
func (s *core) session(ctx context.Context, id string) (*TalkSession, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	return s.ownSession(ctx, u, id)
}

// ownSession returns session id when it is user u's; ENOTFOUND when missing or another
// user's, EINVALID for a malformed ID.
func (s *core) ownSession(ctx context.Context, u, id string) (*TalkSession, error) {
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
func (s *core) lockSession(ctx context.Context, id string) (*TalkSession, *sessionState, func(), error) {
	if sess, st, unlock := s.lockLive(ctx, id); st != nil {
		return sess, st, unlock, nil
	}
	m, held := s.states.mark(id)
	// Where the store is across the network, and unless the session's state is held
	// already, the current branch's last message is read meanwhile, on its own goroutine:
	// a state made from the row needs it before its first write, and each read is a round
	// trip. (On a store in this process, readyLocked reads it when it is needed.)
	var leaf *later[string]
	if !held && !s.sole {
		leaf = readLater(true, func() (string, error) { return s.storedLeaf(ctx, id) })
	}
	sess, err := s.session(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	st, current := s.acquireRead(sess, m)
	st.mu.Lock()
	unlock := func() { st.mu.Unlock(); s.releaseState(st) }
	if current && leaf != nil && !st.log.leafKnown {
		// Read after the mark, like the row: nothing this process wrote since is missing
		// from it (every write of the state's loads the leaf first, so none was made).
		if l, err := leaf.wait(); err == nil {
			st.log.learnLeaf(l)
		}
	}
	if err := st.readyLocked(ctx); err != nil {
		unlock()
		return nil, nil, nil, err
	}
	return sess, st, unlock, nil
}

// lockLive is lockSession for a session of the caller's whose state is in memory and
// current (a subscriber, a run or another command holds it): the session is then known
// without reading the store. It returns a nil state when it cannot tell; lockSession then
// reads the store, as it does for every other session (another user's included, so an
// answer takes as long whoever's the session is). Only a SoleWriter store lets the
// service know its states are current: otherwise another process may have changed the
// session.
func (s *core) lockLive(ctx context.Context, id string) (*TalkSession, *sessionState, func()) {
	if !s.sole {
		return nil, nil, nil
	}
	u, err := user(ctx)
	if err != nil || checkID("session ID", id) != nil {
		return nil, nil, nil
	}
	st := s.states.holdIf(id, u)
	if st == nil {
		return nil, nil, nil
	}
	st.mu.Lock()
	unlock := func() { st.mu.Unlock(); s.releaseState(st) }
	if st.readyLocked(ctx) != nil || st.sess == nil {
		unlock()
		return nil, nil, nil
	}
	sess := *st.sess
	sess.LastSeq = st.log.end.Seq
	s.annotate(ctx, id, "")
	return &sess, st, unlock
}

// readyLocked waits until no write of st is out and brings st's log up to date with the
// store (see sessionLog: synced). ENOTFOUND once the session is deleted.
func (st *sessionState) readyLocked(ctx context.Context) error {
	s := st.c
	st.log.waitIdle()
	if st.log.deleted {
		return Errorf(ENOTFOUND, "session not found")
	}
	if st.log.synced {
		return st.loadLeafLocked(ctx)
	}
	// A state is created from a session read before it; an older state of the session may
	// have written more in between. The log continues from what is stored.
	sess, err := s.store.Session(ctx, st.id)
	if ErrorCode(err) == ENOTFOUND {
		return Errorf(ENOTFOUND, "session not found")
	} else if err != nil {
		return err
	}
	end := st.log.end
	if sess.LastSeq != end.Seq {
		if end, err = s.storedEnd(ctx, st.id, sess.LastSeq); err != nil {
			return err
		}
	}
	st.setRowLocked(sess)
	st.log.syncedAt(end)
	return st.loadLeafLocked(ctx)
}

// storedEnd returns the position after the session's last stored event, whose Seq is
// lastSeq.
func (s *core) storedEnd(ctx context.Context, sessionID string, lastSeq int64) (Cursor, error) {
	end := Cursor{Seq: lastSeq}
	if lastSeq == 0 {
		return end, nil
	}
	last, err := s.store.Events(ctx, sessionID, lastSeq-1, 1)
	if err != nil {
		return end, err
	}
	if len(last) == 1 && last[0].Seq == lastSeq {
		end.Off = CursorOf(last[0]).Off
	}
	return end, nil
}

// beginLocked starts a write to st's log (see sessionLog.begin); st.mu must be held, and stays
// held until the write is committed.
func (st *sessionState) beginLocked() *txn { return st.log.begin(st) }

// loadLeafLocked reads the current branch's last message from the store, unless st's
// log knows it.
func (st *sessionState) loadLeafLocked(ctx context.Context) error {
	s := st.c
	if st.log.leafKnown {
		return nil
	}
	if st.log.end.Seq == 0 && st.log.synced { // an empty log: no message, no branch
		st.log.learnLeaf("")
		return nil
	}
	leaf, err := s.storedLeaf(ctx, st.id)
	if err != nil {
		return err
	}
	st.log.learnLeaf(leaf)
	return nil
}

// storedLeaf reads the current branch's last message of a session from the store ("" for
// none).
func (s *core) storedLeaf(ctx context.Context, sessionID string) (string, error) {
	last, err := s.store.Messages(ctx, sessionID, MessagePage{Last: 1})
	if err != nil || len(last) == 0 {
		return "", err
	}
	return last[0].ID, nil
}

// noteDurableLocked updates what the service keeps beside the log for events that became
// durable, written here (ch their changes) or by another process (ch nil): its copy of
// the session's row, which changes as a store's does (Changes.ApplySession), and the
// count of streamed chunks.
func (st *sessionState) noteDurableLocked(evs []*Event, ch *Changes) {
	s := st.c
	rows := false
	for _, ev := range evs {
		if ev.Type.Chunky() {
			s.stats.chunks.Add(1)
		} else {
			rows = true
		}
	}
	if !rows || st.sess == nil {
		return
	}
	if ch == nil {
		c := Derive(evs)
		ch = &c
	}
	if snap, touch := ch.SessionRow(); snap != nil || !touch.IsZero() || ch.Unread != nil {
		cp := *st.sess
		ch.ApplySession(&cp)
		cp.LastSeq = st.log.end.Seq
		st.setRowLocked(&cp)
	}
}

// setRowLocked replaces the copy of the session's row this process keeps (nil: it is not
// known, and is read from the store when needed). The copy is never changed in place:
// readers hold on to the one they read.
func (st *sessionState) setRowLocked(sess *TalkSession) {
	if sess != nil {
		cp := *sess
		sess = &cp
	}
	st.sess = sess
}

// take implements textSource: the streamed text of the session's run, as a write of its
// log that the writer's round makes (see sessionLog.takeOut).
func (st *sessionState) take(at time.Time) (*Batch, bool) {
	if !st.mu.TryLock() {
		return nil, true
	}
	defer st.mu.Unlock()
	if !st.log.due(at) {
		return nil, false
	}
	if st.log.writing { // taken already this round: the next takes the rest
		st.log.relist(st.c.writer, st)
		return nil, false
	}
	t := st.takeTextLocked()
	if t == nil {
		return nil, false
	}
	return st.log.takeOut(t), false
}

// written implements textSource. A failed write puts the text back to be written in a
// later round; when writes keep failing for longer than WriteRetry the agent is stopped
// and its run fails.
func (st *sessionState) written(err error) {
	s := st.c
	st.mu.Lock()
	defer st.mu.Unlock()
	t, err := st.log.written(err)
	t.settled(err)
	if err == nil {
		return
	}
	failing := time.Since(st.log.flush.failingSince)
	s.log.Warn("writing streamed text failed; it is kept and written again", "session", st.id, "for", failing, "err", err)
	if ar := st.active; ar != nil && !ar.sealed && failing > s.cfg.WriteRetry && ar.writeErr == nil {
		ar.writeErr = Errorf(EUNAVAILABLE, "the reply could not be saved: %s", ErrorMessage(err))
		ar.cancel() // execute records the failure once the storage takes it
	}
	st.log.flushAt(s.writer, st, time.Now().Add(min(max(failing/4, 20*time.Millisecond), time.Second)))
}

// flushSoonLocked has the writer take st's streamed text at once, or once FlushInterval
// has passed since its last flush.
func (st *sessionState) flushSoonLocked() {
	s := st.c
	st.log.flushSoon(s.writer, st, s.cfg.FlushInterval)
}
