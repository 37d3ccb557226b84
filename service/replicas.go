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

	live    atomic.Value // []string: the replicas alive at the last heartbeat
	claimMu sync.Mutex
	// unrecovered holds the runs this replica claimed but could not bring back (the store
	// failed meanwhile): they are its own now, so no other replica claims them, and each
	// claim tries them again until they are back or no longer this replica's. claimMu
	// guards it.
	unrecovered map[string]bool
	leaseMu     sync.Mutex
	leaseUntil  time.Time // when this replica's lease runs out, as of its last heartbeat
	claimNow    chan struct{}
	leasesDone  chan struct{}
	takeovers   atomic.Int64
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
	}
	for _, run := range append(r.stillUnrecovered(ctx), runs...) {
		if err := s.recoverRun(ctx, run); err != nil {
			s.log.Warn("recovering a run taken over failed; the next claim tries again", "run", run.ID, "session", run.SessionID, "err", err)
			r.unrecovered[run.ID] = true
			continue
		}
		delete(r.unrecovered, run.ID)
	}
}

// stillUnrecovered returns the runs of unrecovered, read again, that are still active and
// this replica's; the others leave the set. claimMu must be held.
func (r *replicas) stillUnrecovered(ctx context.Context) []*Run {
	if r.unrecovered == nil {
		r.unrecovered = map[string]bool{}
	}
	var runs []*Run
	for id := range r.unrecovered {
		run, err := r.s.store.Run(ctx, id)
		switch {
		case ErrorCode(err) == ENOTFOUND:
			delete(r.unrecovered, id)
		case err != nil: // still out of reach: the next claim
		case run.Owner != r.me || run.Status.Final():
			delete(r.unrecovered, id)
		default:
			runs = append(runs, run)
		}
	}
	return runs
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
