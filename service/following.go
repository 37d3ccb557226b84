package service

import (
	"context"
	"time"
)

// This file is how a replica keeps up with the sessions other replicas write: it publishes
// its own events, follows those of the sessions its clients read, and reads the log again
// when it missed some or lost track (reconcile).

// published tells the replicas following st's session about events just made durable.
func (r *replicas) published(st *sessionState, evs []*Event) {
	r.cluster.Publish(st.id, evs)
}

// toldViewer tells the replicas following userID's viewer log that it grew.
func (r *replicas) toldViewer(userID string) { r.cluster.PublishViewer(userID) }

// followViewer calls wake whenever another replica tells userID something, and once the
// broker knows this replica follows (what another published just before never comes).
func (r *replicas) followViewer(userID string, wake func()) func() {
	s := r.s
	stop, err := r.cluster.FollowViewer(userID, wake)
	if err != nil {
		s.log.Warn("cannot follow a viewer on the broker; other replicas' events reach this one late", "err", err)
		return func() {}
	}
	go func() {
		if r.cluster.Flush() == nil {
			wake()
		}
	}()
	return stop
}

// follow makes st receive the events other replicas write to its session, while it has
// subscribers here; st.mu must be held.
func (r *replicas) follow(st *sessionState) {
	s := r.s
	if st.following != nil {
		return
	}
	stop, err := r.cluster.Follow(st.id, func(evs []*Event) { r.remote(st, evs) })
	if err != nil {
		s.log.Warn("cannot follow a session on the broker; its subscribers see other replicas' events late", "session", st.id, "err", err)
		return
	}
	st.following = stop
	// Events another replica published before the broker knew this replica follows the
	// session never come: once it knows, the log's end is read again.
	s.holdState(st)
	go func() {
		defer s.releaseState(st)
		if err := r.cluster.Flush(); err == nil {
			r.resyncState(context.Background(), st)
		}
	}()
}

func (r *replicas) unfollow(st *sessionState) {
	if st.following != nil {
		st.following()
		st.following = nil
	}
}

// remote takes events another replica wrote to st's session: those that follow the log
// as this replica knows it join it; after a gap the log is read again from the store.
func (r *replicas) remote(st *sessionState, evs []*Event) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.log.deleted {
		return
	}
	if evs == nil { // the session was deleted
		st.log.markDeleted()
		return
	}
	if len(evs) == 0 {
		return
	}
	last := evs[len(evs)-1]
	if last.Seq <= st.log.end.Seq {
		return // seen already (this replica's own, or a duplicate)
	}
	if evs[0].Seq > st.log.end.Seq+1 {
		// A gap: readers fetch what is missing from the store.
		st.log.resetEnd(CursorOf(last))
		st.setRowLocked(nil)
		return
	}
	i := 0
	for i < len(evs) && evs[i].Seq <= st.log.end.Seq {
		i++
	}
	st.log.append(evs[i:])
	st.noteDurableLocked(evs[i:], nil)
}

// resync brings every followed session up to date with the store, after the broker was
// out of reach and published events may have been missed.
func (r *replicas) resync() {
	if r.cluster.Flush() != nil {
		return // out of reach again: the next reconnection resyncs
	}
	ctx := context.Background()
	for _, st := range r.s.liveStates() {
		r.resyncState(ctx, st)
	}
	r.s.viewers.wakeAll()
}

// resyncState moves st's end of the log to the store's, when the store's is further
// (events other replicas wrote were missed), so that its subscribers read them there.
func (r *replicas) resyncState(ctx context.Context, st *sessionState) {
	s := r.s
	sess, err := s.store.Session(ctx, st.id)
	if err != nil && ErrorCode(err) != ENOTFOUND {
		return
	}
	var end Cursor
	if err == nil {
		if end, err = s.storedEnd(ctx, st.id, sess.LastSeq); err != nil {
			return
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.log.waitIdle()
	switch {
	case st.log.deleted:
	case sess == nil: // ENOTFOUND
		st.log.markDeleted()
	case sess.LastSeq > st.log.end.Seq && (st.active != nil || len(st.queue) > 0):
		// This replica runs the session's agent, and yet the log moved on: see whether
		// its run is still its own.
		r.lostTrack(st)
	case sess.LastSeq > st.log.end.Seq:
		st.log.resetEnd(end)
		st.setRowLocked(nil)
	}
}

// lostTrack reconciles st once a write of it found that the log moved on without this
// replica (ErrNotNext) while it has a run here; st.mu must be held.
func (r *replicas) lostTrack(st *sessionState) {
	if st.reconciling || (st.active == nil && len(st.queue) == 0) {
		return
	}
	st.reconciling = true
	r.s.holdState(st)
	go r.reconcile(st)
}

// reconcile is reconcileLocked on a goroutine of its own; it releases st's reference when
// done.
func (r *replicas) reconcile(st *sessionState) {
	defer r.s.releaseState(st)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st.mu.Lock()
	defer st.mu.Unlock()
	defer func() { st.reconciling = false }()
	r.reconcileLocked(ctx, st)
}

// reconcileLocked brings st back in line with the store: its log is read again, and the
// runs this replica has for it are checked against their rows. A run that is no longer
// this replica's (a survivor took it over while this replica could not renew its lease)
// stops here without a write; the others go on.
func (r *replicas) reconcileLocked(ctx context.Context, st *sessionState) error {
	s := r.s
	st.log.lostSync()
	if err := st.readyLocked(ctx); err != nil {
		return err
	}
	lost := func(run *Run) bool {
		stored, err := s.store.Run(ctx, run.ID)
		return err == nil && (stored.Owner != r.me || stored.Status.Final())
	}
	st.keepQueuedLocked(func(run *Run) bool { return !lost(run) })
	if ar := st.active; ar != nil && !ar.sealed && lost(ar.run) {
		s.log.Warn("another replica took this run over; it stops here", "run", ar.run.ID, "session", st.id, "replica", r.me)
		st.dropActiveLocked()
		st.startNextLocked()
	}
	return nil
}

// elsewhere completes a view of a session whose agent may run on another replica: its
// active run and pending question, from the store.
func (r *replicas) elsewhere(ctx context.Context, v *SessionView) {
	s := r.s
	run, err := r.coord.ActiveRun(ctx, v.ID)
	if err != nil {
		return // none, or unknown now: the view shows the session idle
	}
	v.ActiveRun, v.Status = run, SessionRunning
	if run.Status != RunWaitingForInput {
		return
	}
	v.Status = SessionWaitingForInput
	msgs, calls, err := s.runWork(ctx, v.ID, run.ID)
	if err != nil {
		return
	}
	qs, _ := s.runQuestions(ctx, msgs)
	v.PendingQuestions, v.PendingApprovals = pendingOf(qs), awaitingOf(calls)
	if len(v.PendingQuestions) > 0 {
		v.PendingQuestion = v.PendingQuestions[0]
	}
}
