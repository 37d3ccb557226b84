package service

import (
	"context"
	"time"
)

// This file is where a replica has a command done: here, when it runs the session's
// agent or nobody does, else on the replica that does (route), and what it answers for the
// commands others send it (handle). A replica without a broker has the lone Cluster.

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

func (lone) PublishViewer(string) {}

func (lone) FollowViewer(string, func()) (func(), error) { return func() {}, nil }

func (lone) Serve(string, func(context.Context, *Command) *Reply) (func(), error) {
	return func() {}, nil
}

func (lone) Send(context.Context, string, *Command) (*Reply, error) { return nil, ErrNoServer }

func (lone) Announce(string) {}

func (lone) OnLeft(func(string)) {}

func (lone) OnReconnect(func()) {}

func (lone) Ready() error { return nil }

func (lone) Flush() error { return errLone } // no events come from others to wait for

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
