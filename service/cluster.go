package service

import "context"

// Cluster connects the replicas that share one store (package nats implements it over a
// NATS server). It carries two kinds of messages, neither of which needs to be durable,
// since the store's log stays the truth:
//
//   - a session's new events, from the replica that wrote them to the replicas whose
//     clients follow the session (a replica that misses some sees the gap in sequence
//     numbers, or is told of a reconnection, and reads the log);
//   - that a user's viewer log grew, to the replicas whose clients follow it (they read
//     the log from the store);
//   - commands (stop, answers, messages, deletion) from the replica a client called to the
//     replica that runs the session's agent, which alone can act on it.
type Cluster interface {
	// Publish tells the replicas following sessionID that its log grew with events, which
	// are durable; nil events tell that the session was deleted. It must not block.
	Publish(sessionID string, events []*Event)
	// Follow calls deliver with what other replicas publish for sessionID, in the order
	// they published it, until stop is called. deliver must return quickly.
	Follow(sessionID string, deliver func(events []*Event)) (stop func(), err error)
	// PublishViewer tells the replicas following userID's viewer log that a write told the
	// user something (it is durable). It must not block.
	PublishViewer(userID string)
	// FollowViewer calls wake whenever another replica publishes for userID, until stop is
	// called. wake must return quickly.
	FollowViewer(userID string, wake func()) (stop func(), err error)
	// Serve answers the commands sent to replicaID with handle, until stop is called.
	// A replica serves its own ID for as long as it runs: it answers a command for a
	// session whose agent it does not run with NotServedReply.
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

// ErrNoServer is Cluster.Send's answer when no replica serves the session: none answers
// on the replica's subject, or it answered NotServed.
var ErrNoServer = Errorf(EUNAVAILABLE, "no replica runs this session's agent right now; try again")

// ReconnectCounter is an ability of a Cluster whose connection to its broker can be lost
// and come back. Reconnects counts the times it came back; the service reports it in
// Stats.BrokerReconnects.
type ReconnectCounter interface {
	Reconnects() int64
}

// DropCounter is an ability of a Cluster that refuses what it receives when it cannot
// trust it. Dropped counts the messages dropped, by reason (a Cluster names its reasons;
// the NATS one: "unopenable", "stale", "replayed"); the service reports them in
// Stats.BusDropped.
type DropCounter interface {
	Dropped() map[string]int64
}
