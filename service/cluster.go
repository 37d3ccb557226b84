package service

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"
)

// Cluster connects the replicas that share one store (package nats implements it over a
// NATS server). It carries two kinds of messages, neither of which needs to be durable,
// since the store's log stays the truth:
//
//   - a session's new events, from the replica that wrote them to the replicas whose
//     clients follow the session (a replica that misses some sees the gap in sequence
//     numbers, or is told of a reconnection, and reads the log);
//   - commands (stop, answers, messages, deletion) from the replica a client called to the
//     replica that runs the session's agent, which alone can act on it.
type Cluster interface {
	// Publish tells the replicas following sessionID that its log grew with events, which
	// are durable; nil events tell that the session was deleted. It must not block.
	Publish(sessionID string, events []*Event)
	// Follow calls deliver with what other replicas publish for sessionID, in the order
	// they published it, until stop is called. deliver must return quickly.
	Follow(sessionID string, deliver func(events []*Event)) (stop func(), err error)
	// Serve answers the commands sent to replicaID with handle, until stop is called.
	// A replica serves its own ID for as long as it runs: it answers a command for a
	// session whose agent it does not run with ErrNoServer.
	Serve(replicaID string, handle func(ctx context.Context, cmd *Command) *Reply) (stop func(), err error)
	// Send hands cmd to replica replicaID and returns its reply: ErrNoServer when that
	// replica is not there or does not run the session's agent, EUNAVAILABLE when the
	// broker cannot be reached or the replica does not answer in time.
	Send(ctx context.Context, replicaID string, cmd *Command) (*Reply, error)
	// Announce tells every replica that this one leaves (it shuts down), and OnLeft
	// registers what to do when another does: take its runs over at once.
	Announce(replicaID string)
	OnLeft(fn func(replicaID string))
	// OnReconnect registers fn, called when the broker is reached again after a loss:
	// published events may have been missed meanwhile.
	OnReconnect(fn func())
	// Ready returns nil while the broker can be reached.
	Ready() error
	// Flush returns once the broker has taken everything this replica sent before it
	// (subscriptions included): events published from then on reach this replica's
	// followers.
	Flush() error
}

// ErrNoServer is Cluster.Send's answer when no replica serves the session.
var ErrNoServer = Errorf(EUNAVAILABLE, "no replica runs this session's agent right now; try again")

// Command is an operation one replica asks the replica that runs a session's agent to do,
// on behalf of UserID.
type Command struct {
	Op         string         `json:"op"`
	UserID     string         `json:"user"`
	SessionID  string         `json:"session"`
	Content    string         `json:"content,omitempty"`
	Key        string         `json:"key,omitempty"`
	QuestionID string         `json:"question,omitempty"`
	Answer     string         `json:"answer,omitempty"`
	Title      string         `json:"title,omitempty"`
	Settings   *SettingsInput `json:"settings,omitempty"`
}

// Command operations.
const (
	opAdd      = "addMessage"
	opCancel   = "cancelRun"
	opRespond  = "respond"
	opDelete   = "delete"
	opRename   = "rename"
	opSettings = "settings"
)

// Reply is what a command returned: its error's code and message, or its results.
type Reply struct {
	Code     string       `json:"code,omitempty"`
	Error    string       `json:"error,omitempty"`
	Message  *Message     `json:"message,omitempty"`
	Run      *Run         `json:"run,omitempty"`
	Question *Question    `json:"question,omitempty"`
	Session  *TalkSession `json:"session,omitempty"`
}

func (r *Reply) err() error {
	if r.Code == "" {
		return nil
	}
	return Errorf(r.Code, "%s", r.Error)
}

func replyOf(r *Reply, err error) *Reply {
	if r == nil {
		r = &Reply{}
	}
	if err != nil {
		r.Code, r.Error = ErrorCode(err), ErrorMessage(err)
	}
	return r
}

type forwardedKey struct{}

// forwarded reports whether the operation in ctx came from another replica: it is done
// here, never sent on.
func forwarded(ctx context.Context) bool { return ctx.Value(forwardedKey{}) != nil }

// route does cmd where the session's agent runs: here (local) when this replica runs it or
// nobody does, else on the replica that runs it. A local write that finds the log moved
// on (another replica wrote first) is tried again on the state read anew, and a replica
// that no longer answers for its runs has them taken over first.
func (s *Service) route(ctx context.Context, cmd *Command, local func(ctx context.Context) (*Reply, error)) (*Reply, error) {
	if s.coord == nil || forwarded(ctx) {
		return local(ctx)
	}
	if s.cluster != nil {
		// Without the broker this replica can neither reach the replica running the
		// session's agent nor be reached by others for the run it would start.
		if err := s.cluster.Ready(); err != nil {
			return nil, err
		}
	}
	var err error
	var r *Reply
	for attempt := 0; attempt < 4; attempt++ {
		var owner string
		owner, err = s.ownerOf(ctx, cmd.SessionID)
		if err != nil {
			return nil, err
		}
		if owner == "" || owner == s.id || s.cluster == nil {
			r, err = local(ctx)
			if errors.Is(err, ErrNotNext) {
				continue
			}
			return r, err
		}
		r, err = s.cluster.Send(ctx, owner, cmd)
		if errors.Is(err, ErrNoServer) {
			// Its owner does not serve the session: it died or is handing over. Take its
			// runs over if its lease has lapsed, then look again.
			s.claim(ctx)
			if pauseOrStop(ctx, nil, time.Duration(attempt+1)*50*time.Millisecond) != nil {
				return nil, ctx.Err()
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		return r, r.err()
	}
	return r, err
}

// ownerOf returns the replica running sessionID's agent: this one when it has the run in
// memory, the stored owner of its active run otherwise, "" when it has none or its owner
// is not alive (the run is then claimed here).
func (s *Service) ownerOf(ctx context.Context, sessionID string) (string, error) {
	s.statesMu.Lock()
	st := s.states[sessionID]
	s.statesMu.Unlock()
	if st != nil {
		st.mu.Lock()
		mine := st.active != nil || len(st.queue) > 0
		st.mu.Unlock()
		if mine {
			return s.id, nil
		}
	}
	run, err := s.coord.ActiveRun(ctx, sessionID)
	if ErrorCode(err) == ENOTFOUND {
		return "", nil
	} else if err != nil {
		return "", err
	}
	if run.Owner == s.id || s.alive(run.Owner) {
		return run.Owner, nil
	}
	// Its owner was not alive at this replica's last heartbeat: it may be gone, or have
	// started since. The store decides: runs whose owner's lease lapsed are claimed here,
	// and the run's owner is read again.
	s.claim(ctx)
	run, err = s.coord.ActiveRun(ctx, sessionID)
	if ErrorCode(err) == ENOTFOUND {
		return "", nil
	} else if err != nil {
		return "", err
	}
	return run.Owner, nil
}

// alive reports whether replica id was alive at the last heartbeat.
func (s *Service) alive(id string) bool {
	live, _ := s.live.Load().([]string)
	return id != "" && slices.Contains(live, id)
}

// serves reports whether this replica answers commands for sessionID: while it runs the
// session's agent (a run active or queued here). Otherwise a command is refused with
// ErrNoServer, which its sender retries where the agent runs.
func (s *Service) serves(sessionID string) bool {
	s.statesMu.Lock()
	st := s.states[sessionID]
	s.statesMu.Unlock()
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.active != nil || len(st.queue) > 0
}

// handle does a command another replica sent.
func (s *Service) handle(ctx context.Context, cmd *Command) *Reply {
	if !s.serves(cmd.SessionID) {
		return replyOf(nil, ErrNoServer)
	}
	ctx = context.WithValue(WithUser(ctx, cmd.UserID), forwardedKey{}, true)
	switch cmd.Op {
	case opAdd:
		m, r, err := s.AddMessage(ctx, cmd.SessionID, cmd.Content, cmd.Key)
		return replyOf(&Reply{Message: m, Run: r}, err)
	case opCancel:
		r, err := s.CancelRun(ctx, cmd.SessionID)
		return replyOf(&Reply{Run: r}, err)
	case opRespond:
		q, r, err := s.Respond(ctx, cmd.QuestionID, cmd.Answer)
		return replyOf(&Reply{Question: q, Run: r}, err)
	case opDelete:
		return replyOf(nil, s.DeleteTalkSession(ctx, cmd.SessionID))
	case opRename:
		v, err := s.RenameTalkSession(ctx, cmd.SessionID, cmd.Title)
		return replyOf(sessionReply(v), err)
	case opSettings:
		var in SettingsInput
		if cmd.Settings != nil {
			in = *cmd.Settings
		}
		v, err := s.UpdateSettings(ctx, cmd.SessionID, in)
		return replyOf(sessionReply(v), err)
	}
	return replyOf(nil, Errorf(EINVALID, "unknown command %q", cmd.Op))
}

func sessionReply(v *SessionView) *Reply {
	if v == nil {
		return nil
	}
	return &Reply{Session: v.TalkSession}
}

// publish tells the replicas following st's session about events just made durable.
func (s *Service) publish(st *sessionState, evs []*Event) {
	if s.cluster != nil {
		s.cluster.Publish(st.id, evs)
	}
}

// followLocked makes st receive the events other replicas write to its session, while it
// has subscribers here; st.mu must be held.
func (s *Service) followLocked(st *sessionState) {
	if s.cluster == nil || st.following != nil {
		return
	}
	stop, err := s.cluster.Follow(st.id, func(evs []*Event) { s.remote(st, evs) })
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
		if err := s.cluster.Flush(); err == nil {
			s.resyncState(context.Background(), st)
		}
	}()
}

// remote takes events another replica wrote to st's session: those that follow the log
// as this replica knows it join it; after a gap the log is read again from the store.
func (s *Service) remote(st *sessionState, evs []*Event) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.deleted {
		return
	}
	if evs == nil { // the session was deleted
		st.deleted = true
		st.wakeLocked()
		return
	}
	last := evs[len(evs)-1]
	if last.Seq <= st.lastSeq {
		return // seen already (this replica's own, or a duplicate)
	}
	if evs[0].Seq > st.lastSeq+1 {
		// A gap: readers fetch what is missing from the store.
		st.lastSeq, st.lastOff = last.Seq, CursorOf(last).Off
		st.tail, st.tailStart = nil, last.Seq+1
		st.sess = nil
		st.wakeLocked()
		return
	}
	i := 0
	for i < len(evs) && evs[i].Seq <= st.lastSeq {
		i++
	}
	s.appendLocked(st, evs[i:])
}

// resync brings every followed session up to date with the store, after the broker was
// out of reach and published events may have been missed.
func (s *Service) resync() {
	if s.cluster.Flush() != nil {
		return // out of reach again: the next reconnection resyncs
	}
	ctx := context.Background()
	for _, st := range s.liveStates() {
		s.resyncState(ctx, st)
	}
}

// resyncState moves st's end of the log to the store's, when the store's is further
// (events other replicas wrote were missed), so that its subscribers read them there.
func (s *Service) resyncState(ctx context.Context, st *sessionState) {
	sess, err := s.store.Session(ctx, st.id)
	if err != nil && ErrorCode(err) != ENOTFOUND {
		return
	}
	var off int
	if err == nil && sess.LastSeq > 0 {
		last, err := s.store.Events(ctx, st.id, sess.LastSeq-1, 1)
		if err != nil {
			return
		}
		if len(last) == 1 && last[0].Seq == sess.LastSeq {
			off = CursorOf(last[0]).Off
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	s.waitWriteLocked(st)
	switch {
	case st.deleted:
	case err != nil: // ENOTFOUND
		st.deleted = true
		st.wakeLocked()
	case sess.LastSeq > st.lastSeq && (st.active != nil || len(st.queue) > 0):
		// This replica runs the session's agent, and yet the log moved on: see whether
		// its run is still its own.
		s.reconcileSoon(st)
	case sess.LastSeq > st.lastSeq:
		st.lastSeq, st.lastOff = sess.LastSeq, off
		st.tail, st.tailStart = nil, sess.LastSeq+1
		st.sess = nil
		st.wakeLocked()
	}
}

// leases keeps this replica alive in the store, until the service closes: a heartbeat
// every third of the lease, each followed by a claim of the runs of replicas that are not
// alive. Claims run apart (claimer), so that a slow takeover never delays a heartbeat.
func (s *Service) leases() {
	defer close(s.leasesDone)
	claimerDone := make(chan struct{})
	go s.claimer(claimerDone)
	defer func() { <-claimerDone }()
	t := time.NewTicker(s.cfg.RunLease / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.heartbeat(context.Background())
			s.claimSoon()
		case <-s.closing:
			return
		}
	}
}

// claimer claims runs whenever claimSoon asks, until the service closes.
func (s *Service) claimer(done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-s.claimNow:
			s.claim(context.Background())
		case <-s.closing:
			return
		}
	}
}

// claimSoon asks the claimer to claim orphaned runs.
func (s *Service) claimSoon() {
	select {
	case s.claimNow <- struct{}{}:
	default:
	}
}

// heartbeat tells the store this replica lives for another lease, and learns who else
// does. When its lease had lapsed meanwhile (the store was out of reach for that long),
// survivors may have taken its runs over: each is checked, and dropped here if so.
func (s *Service) heartbeat(ctx context.Context) error {
	now := time.Now()
	live, err := s.coord.Heartbeat(ctx, s.id, now, now.Add(s.cfg.RunLease))
	if err != nil {
		s.log.Warn("heartbeat failed; runs here may be taken over if it keeps failing", "err", err)
		return err
	}
	s.live.Store(live)
	s.leaseMu.Lock()
	lapsed := !s.leaseUntil.IsZero() && time.Now().After(s.leaseUntil)
	s.leaseUntil = now.Add(s.cfg.RunLease)
	s.leaseMu.Unlock()
	if lapsed {
		s.log.Warn("this replica's lease lapsed (the store was out of reach); checking whether its runs were taken over")
		for _, st := range s.liveStates() {
			st.mu.Lock()
			mine := st.active != nil || len(st.queue) > 0
			st.mu.Unlock()
			if mine {
				s.holdState(st)
				go s.reconcile(st)
			}
		}
	}
	return nil
}

// reconcileSoon reconciles st once a write of it found that the log moved on without
// this replica (ErrNotNext) while it has a run here; st.mu must be held.
func (s *Service) reconcileSoon(st *sessionState) {
	if s.coord == nil || st.reconciling || (st.active == nil && len(st.queue) == 0) {
		return
	}
	st.reconciling = true
	s.holdState(st)
	go s.reconcile(st)
}

// reconcile brings st back in line with the store: its log is read again, and the runs
// this replica has for it are checked against their rows. A run that is no longer this
// replica's (a survivor took it over while this replica could not renew its lease) stops
// here without a write; the others go on. It releases st's reference when done.
func (s *Service) reconcile(st *sessionState) {
	defer s.releaseState(st)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st.mu.Lock()
	defer st.mu.Unlock()
	defer func() { st.reconciling = false }()
	s.reconcileLocked(ctx, st)
}

// reconcileLocked is reconcile with st.mu held; it returns an error when the store could
// not be read (nothing changed then).
func (s *Service) reconcileLocked(ctx context.Context, st *sessionState) error {
	st.synced = false
	if err := s.readyLocked(ctx, st); err != nil {
		return err
	}
	lost := func(r *Run) bool {
		stored, err := s.store.Run(ctx, r.ID)
		return err == nil && (stored.Owner != s.id || stored.Status.Final())
	}
	queue := st.queue[:0]
	for _, r := range st.queue {
		if !lost(r) {
			queue = append(queue, r)
		}
	}
	st.queue = queue
	if ar := st.active; ar != nil && !ar.sealed && lost(ar.run) {
		s.log.Warn("another replica took this run over; it stops here", "run", ar.run.ID, "session", st.id, "replica", s.id)
		s.dropActiveLocked(st)
		s.startNextLocked(st)
	}
	return nil
}

// claim takes over the active runs of replicas that are no longer alive: a run that was
// RUNNING ends INTERRUPTED with its partial reply kept (it is never run again behind the
// user's back), a QUEUED one starts here, one WAITING_FOR_INPUT waits here for its answer.
func (s *Service) claim(ctx context.Context) {
	if s.closed.Load() {
		return
	}
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	runs, err := s.coord.ClaimRuns(ctx, s.id, time.Now())
	if err != nil {
		s.log.Warn("taking over runs of replicas that are gone", "err", err)
		return
	}
	for _, run := range runs {
		s.stats.takeovers.Add(1)
		s.log.Info("took over a run", "run", run.ID, "session", run.SessionID, "status", string(run.Status), "replica", s.id)
		if err := s.recoverRun(ctx, run); err != nil {
			s.log.Error("recovering a run taken over", "run", run.ID, "session", run.SessionID, "err", err)
		}
	}
}

// onLeft is called when another replica announces that it leaves: its runs are taken
// over now rather than when its lease lapses.
func (s *Service) onLeft(id string) {
	if id == s.id {
		return
	}
	s.claimSoon()
}

// encode and decode are the wire form of commands and replies, for Cluster
// implementations.
func (c *Command) Encode() ([]byte, error) { return json.Marshal(c) }

// DecodeCommand reads a command encoded with Encode.
func DecodeCommand(b []byte) (*Command, error) {
	var c Command
	err := json.Unmarshal(b, &c)
	return &c, err
}

// Encode returns the reply's wire form.
func (r *Reply) Encode() ([]byte, error) { return json.Marshal(r) }

// DecodeReply reads a reply encoded with Encode.
func DecodeReply(b []byte) (*Reply, error) {
	var r Reply
	err := json.Unmarshal(b, &r)
	return &r, err
}

// join makes this replica one of those sharing the store: it refuses to start beside a
// live replica when there is no Cluster to reach it, takes back the runs of its own
// earlier life (a replica restarted under the same ID), takes over those of replicas that
// are gone, and starts to heartbeat.
func (s *Service) join(ctx context.Context) error {
	now := time.Now()
	live, err := s.coord.Heartbeat(ctx, s.id, now, now.Add(s.cfg.RunLease))
	if err != nil {
		return err
	}
	s.live.Store(live)
	s.leaseMu.Lock()
	s.leaseUntil = now.Add(s.cfg.RunLease)
	s.leaseMu.Unlock()
	if s.cluster == nil {
		for _, id := range live {
			if id != s.id {
				_ = s.coord.Leave(ctx, s.id)
				return Errorf(EUNAVAILABLE, "another replica (%s) uses this database: set NATS_URL on every replica so that they can reach each other, or stop it", id)
			}
		}
	} else {
		s.cluster.OnLeft(s.onLeft)
		s.cluster.OnReconnect(func() { go s.resync() })
	}
	// This replica is alive now, so no other claims its runs: those of its earlier life
	// (its ID kept across a restart) are brought back here.
	runs, err := s.store.RunsByStatus(ctx, RunRunning, RunQueued, RunWaitingForInput)
	if err != nil {
		return err
	}
	for _, run := range runs {
		if run.Owner != s.id {
			continue
		}
		s.log.Info("took back a run of this replica's earlier life", "run", run.ID, "session", run.SessionID, "status", string(run.Status), "replica", s.id)
		if err := s.recoverRun(ctx, run); err != nil {
			return err
		}
	}
	s.claim(ctx)
	return nil
}

// recoverRun brings back one run left by another process (a replica that is gone, or this
// server's earlier life).
func (s *Service) recoverRun(ctx context.Context, run *Run) error {
	sess, err := s.store.Session(ctx, run.SessionID)
	if ErrorCode(err) == ENOTFOUND {
		return nil
	} else if err != nil {
		return err
	}
	st := s.acquireState(sess)
	defer s.releaseState(st)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := s.readyLocked(ctx, st); err != nil {
		return err
	}
	if ar := st.active; ar != nil && ar.run.ID == run.ID {
		return nil // already here
	}
	return s.recoverRunLocked(ctx, st, run)
}
