package nats

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/talkgraph/talkgraph/service"
)

// Serve implements service.Cluster.
func (c *Cluster) Serve(replicaID string, handle func(ctx context.Context, cmd *service.Command) *service.Reply) (func(), error) {
	subject := c.names.commands(replicaID)
	// A queue group: should two processes ever share a replica's name for a moment (one
	// restarting while the other stops), a command is still done once.
	sub, err := c.nc.ChanQueueSubscribe(subject, "runners", c.commands)
	if err != nil {
		return nil, service.Errorf(service.EUNAVAILABLE, "cannot serve commands on NATS: %v", err)
	}
	srv := &server{handle}
	c.mu.Lock()
	c.servers[subject] = srv
	c.mu.Unlock()
	return func() {
		// Commands that arrive from now on are refused (NotServedReply), which their
		// senders retry elsewhere. Draining rather than unsubscribing lets those already on their
		// way arrive to be refused: an unsubscribed client drops them unanswered and
		// leaves their senders waiting out their deadlines. While the connection is
		// down there is nothing on its way, and a drain would have nats.go subscribe
		// again on reconnecting.
		c.mu.Lock()
		if c.servers[subject] == srv { // not a later Serve of the name
			delete(c.servers, subject)
		}
		c.mu.Unlock()
		if c.nc.Status() == nats.CONNECTED {
			_ = sub.Drain()
		} else {
			_ = sub.Unsubscribe()
		}
	}, nil
}

// server is one Serve of a replica's name.
type server struct {
	handle func(ctx context.Context, cmd *service.Command) *service.Reply
}

// serveCommands does each command on a goroutine of its own: a command may wait for a
// write, and must not hold up others.
func (c *Cluster) serveCommands() {
	for {
		select {
		case m := <-c.commands:
			c.mu.Lock()
			var handle func(context.Context, *service.Command) *service.Reply
			if srv := c.servers[m.Subject]; srv != nil {
				handle = srv.handle
			}
			c.mu.Unlock()
			go c.answer(m, handle)
		case <-c.done:
			return
		}
	}
}

// answer does one command sent to this replica and sends the reply, sealed for that
// request alone. A command that does not open, is stale or was taken before (here, or
// where Replays remembers) is dropped unanswered: its sender (if a replica) gets no reply
// and answers UNAVAILABLE. One that Replays cannot check is answered EUNAVAILABLE, not
// done.
func (c *Cluster) answer(m *nats.Msg, handle func(context.Context, *service.Command) *service.Reply) {
	o, ok := c.openOnce(m.Subject, m.Data)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
	defer cancel()
	first, err := c.firstSeen(ctx, o)
	if err == nil && !first {
		c.dropFor(m.Subject, dropReplayed)
		return
	}
	var reply *service.Reply
	switch cmd, undecodable := service.DecodeCommand(o.body); {
	case err != nil: // whether it was done before cannot be told
		reply = &service.Reply{Code: service.ErrorCode(err), Error: service.ErrorMessage(err)}
	case undecodable != nil:
		reply = &service.Reply{Code: service.EINVALID, Error: "undecodable command"}
	case handle == nil: // stopped serving meanwhile
		reply = service.NotServedReply()
	default:
		reply = handle(ctx, cmd)
	}
	data, err := reply.Encode()
	if err == nil {
		env, _ := c.seal.seal(replyAD(o.id), c.opts.Name, data)
		err = m.Respond(env)
	}
	if err != nil {
		c.opts.Log.Warn("answering a command over NATS", "subject", m.Subject, "err", err)
	}
}

// Send implements service.Cluster. The command goes sealed for the replica's subject, and
// only a reply sealed for this request is taken: anything else (a member of NATS answering
// in the replica's place, a reply replayed from another request) makes the command fail
// with EUNAVAILABLE, never succeed.
func (c *Cluster) Send(ctx context.Context, replicaID string, cmd *service.Command) (*service.Reply, error) {
	data, err := cmd.Encode()
	if err != nil {
		return nil, err
	}
	subject := c.names.commands(replicaID)
	env, id := c.seal.seal([]byte(subject), c.opts.Name, data)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	if err := c.Ready(); err != nil {
		// While reconnecting, nats.go would keep the request for later and the caller
		// would wait out its deadline: the command cannot reach anyone now.
		return nil, err
	}
	m, err := c.nc.RequestWithContext(ctx, subject, env)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, service.ErrNoServer
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, service.Errorf(service.EUNAVAILABLE, "the replica running this session's agent did not answer in time")
	case err != nil:
		return nil, service.Errorf(service.EUNAVAILABLE, "the other replicas cannot be reached: %v", err)
	}
	o, err := c.seal.open(replyAD(id), m.Data, time.Now())
	if err != nil {
		c.drop(m.Subject, err)
		return nil, service.Errorf(service.EUNAVAILABLE, "the answer of the replica running this session's agent could not be verified; try again")
	}
	reply, err := service.DecodeReply(o.body)
	if err != nil {
		return nil, err
	}
	if reply.NotServed {
		return nil, service.ErrNoServer
	}
	return reply, nil
}

// replyAD is what a reply to the request with the given ID is sealed for: that request
// and no other.
func replyAD(request [idSize]byte) []byte {
	return append([]byte("reply:"), request[:]...)
}

// openOnce opens a command or an announcement sent on subject, dropping it (and counting
// why) when it does not open, is stale or was taken before.
func (c *Cluster) openOnce(subject string, env []byte) (opened, bool) {
	now := time.Now()
	o, err := c.seal.open([]byte(subject), env, now)
	if err != nil {
		c.drop(subject, err)
		return o, false
	}
	if !c.seen.first(o.id, now) {
		c.dropFor(subject, dropReplayed)
		return o, false
	}
	return o, true
}

// firstSeen asks Replays whether the command o was taken before by any replica, even in
// an earlier life of this one; without Replays, the seen set's answer (true) stands. An
// error is EUNAVAILABLE: whether the command was done cannot be told.
func (c *Cluster) firstSeen(ctx context.Context, o opened) (bool, error) {
	if c.opts.Replays == nil {
		return true, nil
	}
	// The ID can be taken as fresh until MaxAge after it was sent, by a replica whose
	// clock is up to MaxAge behind the one that deletes it.
	first, err := c.opts.Replays.FirstSeen(ctx, o.id[:], o.sentAt.Add(2*c.opts.MaxAge))
	if err != nil {
		c.opts.Log.Warn("refused a command from another replica: cannot tell whether it was done before", "err", err)
		return false, service.Errorf(service.EUNAVAILABLE, "the replica running this session's agent cannot reach its storage; try again")
	}
	return first, nil
}
