package service

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// replicas is the peers of a replica among several that share a store with a Coordinator
// (PostgreSQL) and reach each other through a Cluster (NATS). Everything that only
// replicas do is here, in the order of a replica's life:
//
//   - start: join (take back the runs of this replica's earlier life, take over those of
//     replicas that are gone), then keep the lease (heartbeat, claim);
//   - route commands to the replica that runs the session's agent, and handle the ones
//     sent here;
//   - publish and follow sessions' events;
//   - reconcile a session whose log moved on without this replica;
//   - leave.
//
// A run belongs to the replica that runs it (Run.Owner). Only that replica writes the
// session's log while the run is active, so the log's continuity (ErrNotNext) catches two
// replicas writing one session at once, and the loser looks again.
type replicas struct {
	s       *core
	exec    func(ctx context.Context, cmd *Command) *Reply // the service's door, for commands sent here
	me      string
	coord   Coordinator
	cluster Cluster // lone{} without a broker: then no other replica may run beside this one
	unserve func()  // stops answering the commands sent to this replica

	live       atomic.Value // []string: the replicas alive at the last heartbeat
	claimMu    sync.Mutex
	leaseMu    sync.Mutex
	leaseUntil time.Time // when this replica's lease runs out, as of its last heartbeat
	claimNow   chan struct{}
	leasesDone chan struct{}
	takeovers  atomic.Int64
}

var _ peers = (*replicas)(nil)

func newReplicas(s *core, exec func(context.Context, *Command) *Reply, coord Coordinator, cfg Config) *replicas {
	r := &replicas{s: s, exec: exec, me: cfg.ReplicaID, coord: coord, cluster: cfg.Cluster, unserve: func() {},
		claimNow: make(chan struct{}, 1), leasesDone: make(chan struct{})}
	if r.cluster == nil {
		r.cluster = lone{}
	}
	if r.me == "" {
		r.me = newID()
	}
	return r
}

// lone is the Cluster of a replica without a broker (NATS_URL unset): it reaches no other
// replica and none reaches it, so it must be the only replica alive on its store (join
// refuses to start beside another). Nothing is published, nothing followed, and a
// command for a run another replica owns cannot be sent (ErrNoServer: that replica is
// gone, and its runs are claimed here).
type lone struct{}

var errLone = Errorf(EUNAVAILABLE, "this replica has no broker to reach others through")

func (lone) Publish(string, []*Event) {}
func (lone) Follow(string, func([]*Event)) (func(), error) {
	return func() {}, nil
}
func (lone) Serve(string, func(context.Context, *Command) *Reply) (func(), error) {
	return func() {}, nil
}
func (lone) Send(context.Context, string, *Command) (*Reply, error) { return nil, ErrNoServer }
func (lone) Announce(string)                                        {}
func (lone) OnLeft(func(string))                                    {}
func (lone) OnReconnect(func())                                     {}
func (lone) Ready() error                                           { return nil }
func (lone) Flush() error                                           { return errLone } // no events come from others to wait for

func (r *replicas) id() string { return r.me }

// start serves this replica's commands, joins the others and keeps its lease until the
// service closes.
func (r *replicas) start(ctx context.Context) error {
	// Commands come addressed to this replica for as long as it runs, so that no
	// subscription comes and goes with each run.
	stop, err := r.cluster.Serve(r.me, r.handle)
	if err != nil {
		return err
	}
	r.unserve = stop
	if err := r.join(ctx); err != nil {
		r.unserve()
		return err
	}
	go r.leases()
	return nil
}

// join makes this replica one of those sharing the store: it refuses to start beside a
// live replica when there is no Cluster to reach it, takes back the runs of its own
// earlier life (a replica restarted under the same ID), takes over those of replicas that
// are gone, and starts to heartbeat.
func (r *replicas) join(ctx context.Context) error {
	s := r.s
	now := time.Now()
	live, err := r.coord.Heartbeat(ctx, r.me, now, now.Add(s.cfg.RunLease))
	if err != nil {
		return err
	}
	r.live.Store(live)
	r.leaseMu.Lock()
	r.leaseUntil = now.Add(s.cfg.RunLease)
	r.leaseMu.Unlock()
	if _, alone := r.cluster.(lone); alone {
		for _, id := range live {
			if id != r.me {
				_ = r.coord.Leave(ctx, r.me)
				return Errorf(EUNAVAILABLE, "another replica (%s) uses this database: set NATS_URL on every replica so that they can reach each other, or stop it", id)
			}
		}
	}
	r.cluster.OnLeft(r.onLeft)
	r.cluster.OnReconnect(func() { go r.resync() })
	// This replica is alive now, so no other claims its runs: those of its earlier life
	// (its ID kept across a restart) are brought back here.
	runs, err := s.store.RunsByStatus(ctx, RunRunning, RunQueued, RunWaitingForInput)
	if err != nil {
		return err
	}
	for _, run := range runs {
		if run.Owner != r.me {
			continue
		}
		s.log.Info("took back a run of this replica's earlier life", "run", run.ID, "session", run.SessionID, "status", string(run.Status), "replica", r.me)
		if err := s.recoverRun(ctx, run); err != nil {
			return err
		}
	}
	r.claim(ctx)
	return nil
}

// leases keeps this replica alive in the store, until the service closes: a heartbeat
// every third of the lease, each followed by a claim of the runs of replicas that are not
// alive. Claims run apart (claimer), so that a slow takeover never delays a heartbeat.
func (r *replicas) leases() {
	defer close(r.leasesDone)
	claimerDone := make(chan struct{})
	go r.claimer(claimerDone)
	defer func() { <-claimerDone }()
	t := time.NewTicker(r.s.cfg.RunLease / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.heartbeat(context.Background())
			r.claimSoon()
		case <-r.s.closing:
			return
		}
	}
}

// claimer claims runs whenever claimSoon asks, until the service closes.
func (r *replicas) claimer(done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-r.claimNow:
			r.claim(context.Background())
		case <-r.s.closing:
			return
		}
	}
}

// claimSoon asks the claimer to claim orphaned runs.
func (r *replicas) claimSoon() {
	select {
	case r.claimNow <- struct{}{}:
	default:
	}
}

// heartbeat tells the store this replica lives for another lease, and learns who else
// does. When its lease had lapsed meanwhile (the store was out of reach for that long),
// survivors may have taken its runs over: each is checked, and dropped here if so.
func (r *replicas) heartbeat(ctx context.Context) error {
	s := r.s
	now := time.Now()
	live, err := r.coord.Heartbeat(ctx, r.me, now, now.Add(s.cfg.RunLease))
	if err != nil {
		s.log.Warn("heartbeat failed; runs here may be taken over if it keeps failing", "err", err)
		return err
	}
	r.live.Store(live)
	r.leaseMu.Lock()
	lapsed := !r.leaseUntil.IsZero() && time.Now().After(r.leaseUntil)
	r.leaseUntil = now.Add(s.cfg.RunLease)
	r.leaseMu.Unlock()
	if lapsed {
		s.log.Warn("this replica's lease lapsed (the store was out of reach); checking whether its runs were taken over")
		for _, st := range s.liveStates() {
			st.mu.Lock()
			mine := st.active != nil || len(st.queue) > 0
			st.mu.Unlock()
			if mine {
				s.holdState(st)
				go r.reconcile(st)
			}
		}
	}
	return nil
}

// claim takes over the active runs of replicas that are no longer alive: a run that was
// RUNNING ends INTERRUPTED with its partial reply kept (it is never run again behind the
// user's back), a QUEUED one starts here, one WAITING_FOR_INPUT waits here for its answer.
func (r *replicas) claim(ctx context.Context) {
	s := r.s
	if s.closed.Load() {
		return
	}
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	runs, err := r.coord.ClaimRuns(ctx, r.me, time.Now())
	if err != nil {
		s.log.Warn("taking over runs of replicas that are gone", "err", err)
		return
	}
	for _, run := range runs {
		r.takeovers.Add(1)
		s.log.Info("took over a run", "run", run.ID, "session", run.SessionID, "status", string(run.Status), "replica", r.me)
		if err := s.recoverRun(ctx, run); err != nil {
			s.log.Error("recovering a run taken over", "run", run.ID, "session", run.SessionID, "err", err)
		}
	}
}

// onLeft is called when another replica announces that it leaves: its runs are taken
// over now rather than when its lease lapses.
func (r *replicas) onLeft(id string) {
	if id == r.me {
		return
	}
	r.claimSoon()
}

// alive reports whether replica id was alive at the last heartbeat.
func (r *replicas) alive(id string) bool {
	live, _ := r.live.Load().([]string)
	return id != "" && slices.Contains(live, id)
}

// route does cmd where the session's agent runs: here (local) when this replica runs it or
// nobody does, else on the replica that runs it. A local write that finds the log moved
// on (another replica wrote first) is tried again on the state read anew, and a replica
// that no longer answers for its runs has them taken over first.
func (r *replicas) route(ctx context.Context, cmd *Command, local func(ctx context.Context) (*Reply, error)) (*Reply, error) {
	// Without the broker this replica can neither reach the replica running the
	// session's agent nor be reached by others for the run it would start.
	if err := r.cluster.Ready(); err != nil {
		return nil, err
	}
	var err error
	var rep *Reply
	for attempt := 0; attempt < routeAttempts; attempt++ {
		var owner string
		owner, err = r.ownerOf(ctx, cmd.SessionID)
		if err != nil {
			return nil, err
		}
		if owner == "" || owner == r.me {
			rep, err = local(ctx)
			if isNotNext(err) {
				continue
			}
			return rep, err
		}
		rep, err = r.cluster.Send(ctx, owner, cmd)
		if err == nil {
			err = rep.err()
		}
		if err == ErrNoServer {
			// Its owner does not serve the session: it died or is handing over. Take its
			// runs over if its lease has lapsed, then look again.
			r.claim(ctx)
			if pauseOrStop(ctx, nil, time.Duration(attempt+1)*50*time.Millisecond) != nil {
				return nil, ctx.Err()
			}
			continue
		}
		return rep, err
	}
	return rep, err
}

// ownerOf returns the replica running sessionID's agent: this one when it has the run in
// memory, the stored owner of its active run otherwise, "" when it has none or its owner
// is not alive (the run is then claimed here).
func (r *replicas) ownerOf(ctx context.Context, sessionID string) (string, error) {
	if r.serves(sessionID) {
		return r.me, nil
	}
	run, err := r.coord.ActiveRun(ctx, sessionID)
	if ErrorCode(err) == ENOTFOUND {
		return "", nil
	} else if err != nil {
		return "", err
	}
	if run.Owner == r.me || r.alive(run.Owner) {
		return run.Owner, nil
	}
	// Its owner was not alive at this replica's last heartbeat: it may be gone, or have
	// started since. The store decides: runs whose owner's lease lapsed are claimed here,
	// and the run's owner is read again.
	r.claim(ctx)
	run, err = r.coord.ActiveRun(ctx, sessionID)
	if ErrorCode(err) == ENOTFOUND {
		return "", nil
	} else if err != nil {
		return "", err
	}
	return run.Owner, nil
}

// serves reports whether this replica answers commands for sessionID: while it runs the
// session's agent (a run active or queued here). Otherwise a command is refused
// (NotServedReply), and its sender looks again for where the agent runs.
func (r *replicas) serves(sessionID string) bool {
	s := r.s
	st := s.states.get(sessionID)
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.active != nil || len(st.queue) > 0
}

// handle takes a command another replica sent: done here while this replica runs the
// session's agent (through the service's one door, exec), refused NotServed otherwise.
func (r *replicas) handle(ctx context.Context, cmd *Command) *Reply {
	if !r.serves(cmd.SessionID) {
		return NotServedReply()
	}
	return r.exec(ctx, cmd)
}

// published tells the replicas following st's session about events just made durable.
func (r *replicas) published(st *sessionState, evs []*Event) {
	r.cluster.Publish(st.id, evs)
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

// admission admits a run to RUNNING across every replica: ERATELIMIT while the user's
// runs hold limit slots on them (the run waits, see execute).
func (r *replicas) admission(run *Run, limit int) *Admission {
	return &Admission{UserID: run.UserID, RunID: run.ID, Limit: limit}
}

func (r *replicas) ready() error { return r.cluster.Ready() }

// leave ends this replica's part once the service closed: the heartbeat stops, and the
// others take its queued and waiting runs over now.
func (r *replicas) leave() {
	<-r.leasesDone
	if err := r.coord.Leave(context.Background(), r.me); err != nil {
		r.s.log.Warn("leaving the replicas", "err", err)
	}
	r.cluster.Announce(r.me)
	r.unserve()
}

func (r *replicas) stats(st *Stats) {
	st.Takeovers = r.takeovers.Load()
	if c, ok := r.cluster.(ReconnectCounter); ok {
		st.BrokerReconnects = c.Reconnects()
	}
	if c, ok := r.cluster.(DropCounter); ok {
		st.BusDropped = c.Dropped()
	}
}
