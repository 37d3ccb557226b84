// Package nats connects talkgraph's replicas through a NATS server: it implements
// service.Cluster with core NATS (nats.go). Nothing it carries needs to last: the log in
// the shared database is the truth, a replica that misses a session's events sees the gap
// (or is told that the connection came back) and reads the log, and a command that gets
// no answer is answered UNAVAILABLE. So there is no JetStream stream to provision, and a
// NATS server restart costs clients a moment, not data.
//
// Replicas trust nothing on NATS but each other: every message is sealed with a key
// derived from the bus secret they share (see sealer), so that a client of the same NATS
// server reads nothing a user wrote, and nothing it forges, alters or replays takes
// effect (a command replayed after the replica that took it restarted included: the
// database remembers it, see Options.Replays). NATS's own security (credentials, nkeys,
// user and password, tokens, TLS) is the operator's to turn on besides (Options); the bus
// belongs on a private network even so.
//
// Subjects, under a prefix (default "talkgraph"), each message sealed for its subject:
//
//	<prefix>.ev.<token>   a session's new events, JSON (null: the session was deleted)
//	<prefix>.cmd.<token>  commands for a replica (request/reply, the reply sealed for its
//	                      request)
//	<prefix>.left         the ID of a replica that shuts down
//
// A token is a keyed hash of the session's ID or the replica's name, under a key derived
// from the bus secret (see subjects): no subject names a session or a replica to anyone
// but the replicas.
//
// A replica subscribes to a session's events only while it has subscribers of that
// session, sharing one delivery goroutine, so following many sessions costs no goroutine
// per session. It subscribes to its own commands once, for as long as it runs: a command
// is sent to the replica the store names as running the session's agent, and no
// subscription comes and goes with a run (a command on its way to a subscription that
// goes away is dropped unanswered).
package nats

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/talkgraph/talkgraph/service"
)

// Options tune a Cluster. Secret is required; the zero value of the rest is a good
// default.
type Options struct {
	// Secret is the bus secret every replica of the deployment shares and nothing else
	// has (at least 16 bytes): the key everything the Cluster sends is sealed with is
	// derived from it (see sealer).
	Secret []byte
	// MaxAge is how old a message may be when it arrives (and how far ahead of this
	// replica's clock); older ones are dropped as stale. The replicas' clocks must agree
	// within it. Default 1 minute.
	MaxAge time.Duration
	// Replays, when set, remembers the IDs of the commands taken, across restarts and
	// with the other replicas (the database they share), for 2 × MaxAge after each was
	// sent: a command replayed while it is fresh is dropped even by a replica that
	// restarted since it was taken. A command it cannot check is refused (its sender gets
	// EUNAVAILABLE). nil: this process's memory alone remembers them.
	Replays service.ReplayGuard
	// Prefix starts every subject; default "talkgraph".
	Prefix string
	// Name names the connection in the NATS server's monitoring (the replica's ID), and
	// the sender of what it sends.
	Name string
	// RequestTimeout bounds a command sent to another replica when its context has no
	// deadline; default 10s.
	RequestTimeout time.Duration
	// The NATS server's own security, each optional: a credentials file (JWT and seed),
	// an nkey seed file, the CA that signs a TLS server's certificate (for tls:// URLs;
	// default: the system's), and a client certificate and key for TLS. A user and
	// password or a token go in the URL.
	CredsFile, NKeyFile, CAFile, CertFile, KeyFile string
	Log                                            *slog.Logger
}

// Cluster is a service.Cluster over a NATS connection. Everything it sends is sealed,
// and everything it receives that does not open with the bus key, is stale, or was seen
// before is dropped and counted (see Dropped).
type Cluster struct {
	nc    *nats.Conn
	opts  Options
	seal  *sealer
	names subjects
	seen  *seenSet // the IDs of commands and announcements taken, before Replays is asked

	dropped  sync.Map // reason → *atomic.Int64
	warnedMu sync.Mutex
	warnedAt map[string]time.Time

	events   chan *nats.Msg // every followed session's events, in one delivery goroutine
	commands chan *nats.Msg // the commands sent to this replica
	done     chan struct{}

	mu        sync.Mutex
	followers map[string]*follow
	servers   map[string]*server
	left      []func(string)
	reconnect []func()

	reconnects atomic.Int64
}

type follow struct {
	sub     *nats.Subscription
	deliver func([]*service.Event)
	// last is, by sender, the send time of the last batch taken: a replica stamps what it
	// sends with times that only grow, and publishes a session's events in order, so a
	// batch that is not newer was seen before.
	last map[string]time.Time
}

var (
	_ service.Cluster          = (*Cluster)(nil)
	_ service.ReconnectCounter = (*Cluster)(nil)
	_ service.DropCounter      = (*Cluster)(nil)
)

// Connect connects to the NATS server at url (reconnecting by itself for as long as the
// process lives).
func Connect(url string, opts Options) (*Cluster, error) {
	if opts.Prefix == "" {
		opts.Prefix = "talkgraph"
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = time.Minute
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	seal, err := newSealer(opts.Secret, opts.MaxAge)
	if err != nil {
		return nil, service.Errorf(service.EINVALID, "the bus: %v", err)
	}
	names, err := newSubjects(opts.Secret, opts.Prefix)
	if err != nil {
		return nil, service.Errorf(service.EINVALID, "the bus: %v", err)
	}
	security, err := securityOptions(opts)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		opts:      opts,
		seal:      seal,
		names:     names,
		seen:      newSeenSet(opts.MaxAge),
		warnedAt:  map[string]time.Time{},
		events:    make(chan *nats.Msg, 65536),
		commands:  make(chan *nats.Msg, 4096),
		done:      make(chan struct{}),
		followers: map[string]*follow{},
		servers:   map[string]*server{},
	}
	nc, err := nats.Connect(url, append(security,
		nats.Name(opts.Name),
		// A replica has no use for what it sends itself (its own events, its own
		// announcement): the server keeps them from it.
		nats.NoEcho(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			opts.Log.Warn("lost the NATS server; replicas cannot reach each other until it is back", "err", err)
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			c.reconnects.Add(1)
			opts.Log.Info("reached the NATS server again")
			c.lost()
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				opts.Log.Warn("NATS messages were dropped for a slow consumer; reading the log again", "err", err)
				c.lost()
				return
			}
			opts.Log.Warn("NATS", "err", err)
		}),
	)...)
	if err != nil {
		return nil, service.Errorf(service.EUNAVAILABLE, "cannot connect to NATS at %s: %v", redactURL(url), err)
	}
	c.nc = nc
	// Announcements are remembered in this process's memory alone, not by Replays: all one
	// does is hasten a claim, which takes only the runs of replicas the store finds not
	// alive, so one replayed after a restart changes nothing.
	if _, err := nc.Subscribe(names.left(), func(m *nats.Msg) {
		o, ok := c.openOnce(m.Subject, m.Data)
		if !ok {
			return
		}
		c.mu.Lock()
		fns := append([]func(string){}, c.left...)
		c.mu.Unlock()
		for _, fn := range fns {
			fn(string(o.body))
		}
	}); err != nil {
		nc.Close()
		return nil, err
	}
	go c.deliverEvents()
	go c.serveCommands()
	return c, nil
}

// Close drains the connection and ends the delivery goroutines.
func (c *Cluster) Close() {
	_ = c.nc.Drain()
	deadline := time.After(5 * time.Second)
	for c.nc.IsDraining() {
		select {
		case <-deadline:
			c.nc.Close()
		case <-time.After(10 * time.Millisecond):
		}
	}
	c.nc.Close()
	close(c.done)
}

// Flush returns once the NATS server has taken everything sent before it (subscriptions
// included), or fails after a few seconds.
func (c *Cluster) Flush() error {
	if err := c.nc.FlushTimeout(5 * time.Second); err != nil {
		return service.Errorf(service.EUNAVAILABLE, "the message broker (NATS) cannot be reached: %v", err)
	}
	return nil
}

// Reconnects counts the times the connection came back after a loss.
func (c *Cluster) Reconnects() int64 { return c.reconnects.Load() }

func (c *Cluster) lost() {
	c.mu.Lock()
	fns := append([]func(){}, c.reconnect...)
	c.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Publish implements service.Cluster: the events go sealed for their session's subject.
func (c *Cluster) Publish(sessionID string, events []*service.Event) {
	data, err := json.Marshal(events)
	if err != nil {
		c.opts.Log.Error("encoding events for NATS", "session", sessionID, "err", err)
		return
	}
	subject := c.names.events(sessionID)
	env, _ := c.seal.seal([]byte(subject), c.opts.Name, data)
	if err := c.nc.Publish(subject, env); err != nil {
		c.opts.Log.Debug("publishing events", "session", sessionID, "err", err)
	}
}

// Follow implements service.Cluster.
func (c *Cluster) Follow(sessionID string, deliver func([]*service.Event)) (func(), error) {
	sub, err := c.nc.ChanSubscribe(c.names.events(sessionID), c.events)
	if err != nil {
		return nil, service.Errorf(service.EUNAVAILABLE, "cannot follow a session on NATS: %v", err)
	}
	f := &follow{sub: sub, deliver: deliver, last: map[string]time.Time{}}
	c.mu.Lock()
	c.followers[sub.Subject] = f
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.followers[sub.Subject] == f {
			delete(c.followers, sub.Subject)
		}
		c.mu.Unlock()
		_ = sub.Unsubscribe()
	}, nil
}

// deliverEvents hands every followed session's events to its follower, in order.
func (c *Cluster) deliverEvents() {
	for {
		select {
		case m := <-c.events:
			c.mu.Lock()
			f := c.followers[m.Subject]
			c.mu.Unlock()
			if f == nil {
				continue
			}
			o, err := c.seal.open([]byte(m.Subject), m.Data, time.Now())
			if err != nil {
				c.drop(m.Subject, err)
				continue
			}
			// Only this goroutine touches f.last.
			if last, ok := f.last[o.sender]; ok && !o.sentAt.After(last) {
				c.dropFor(m.Subject, dropReplayed)
				continue
			}
			f.last[o.sender] = o.sentAt
			var evs []*service.Event
			if err := json.Unmarshal(o.body, &evs); err != nil {
				c.opts.Log.Warn("undecodable events from NATS", "subject", m.Subject, "err", err)
				continue
			}
			f.deliver(evs)
		case <-c.done:
			return
		}
	}
}

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

// Announce implements service.Cluster.
func (c *Cluster) Announce(replicaID string) {
	subject := c.names.left()
	env, _ := c.seal.seal([]byte(subject), c.opts.Name, []byte(replicaID))
	_ = c.nc.Publish(subject, env)
	_ = c.nc.FlushTimeout(time.Second)
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

// drop counts a message that open refused.
func (c *Cluster) drop(subject string, err error) {
	if errors.Is(err, errStale) {
		c.dropFor(subject, dropStale)
	} else {
		c.dropFor(subject, dropUnopenable)
	}
}

// dropFor counts a dropped message and, at most once a minute for each reason, says so
// in the log: something on this NATS server sends what the replicas did not.
func (c *Cluster) dropFor(subject, reason string) {
	n, _ := c.dropped.LoadOrStore(reason, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	c.warnedMu.Lock()
	warn := time.Since(c.warnedAt[reason]) > time.Minute
	if warn {
		c.warnedAt[reason] = time.Now()
	}
	c.warnedMu.Unlock()
	if warn {
		c.opts.Log.Warn("dropped a message on the bus: another deployment or an intruder shares this NATS server, a replica has another bus secret, or the replicas' clocks disagree",
			"reason", reason, "subject", subject)
	}
}

// Dropped implements service.DropCounter: the messages received and dropped, by reason
// ("unopenable", "stale", "replayed").
func (c *Cluster) Dropped() map[string]int64 {
	out := map[string]int64{}
	for _, r := range []string{dropUnopenable, dropStale, dropReplayed} {
		out[r] = 0
	}
	c.dropped.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// OnLeft implements service.Cluster.
func (c *Cluster) OnLeft(fn func(string)) {
	c.mu.Lock()
	c.left = append(c.left, fn)
	c.mu.Unlock()
}

// OnReconnect implements service.Cluster.
func (c *Cluster) OnReconnect(fn func()) {
	c.mu.Lock()
	c.reconnect = append(c.reconnect, fn)
	c.mu.Unlock()
}

// Ready implements service.Cluster.
func (c *Cluster) Ready() error {
	if c.nc.Status() != nats.CONNECTED {
		return service.Errorf(service.EUNAVAILABLE, "the message broker (NATS) cannot be reached")
	}
	return nil
}

// redactURL drops a password from a NATS URL, for messages.
func redactURL(u string) string {
	if at := strings.LastIndex(u, "@"); at >= 0 {
		if scheme := strings.Index(u, "://"); scheme >= 0 && scheme < at {
			return u[:scheme+3] + "…@" + u[at+1:]
		}
	}
	return u
}

// securityOptions are nats.go's options for the NATS server's own security that opts
// names; an error names the setting whose file cannot be used.
func securityOptions(opts Options) ([]nats.Option, error) {
	var out []nats.Option
	if opts.CredsFile != "" {
		if _, err := os.Stat(opts.CredsFile); err != nil {
			return nil, service.Errorf(service.EINVALID, "the NATS credentials file: %v", err)
		}
		out = append(out, nats.UserCredentials(opts.CredsFile))
	}
	if opts.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(opts.NKeyFile)
		if err != nil {
			return nil, service.Errorf(service.EINVALID, "the NATS nkey seed file: %v", err)
		}
		out = append(out, o)
	}
	if opts.CAFile != "" {
		if _, err := os.Stat(opts.CAFile); err != nil {
			return nil, service.Errorf(service.EINVALID, "the NATS CA file: %v", err)
		}
		out = append(out, nats.RootCAs(opts.CAFile))
	}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, service.Errorf(service.EINVALID, "a NATS client certificate needs both its certificate and its key")
	}
	if opts.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile); err != nil {
			return nil, service.Errorf(service.EINVALID, "the NATS client certificate: %v", err)
		}
		out = append(out, nats.ClientCert(opts.CertFile, opts.KeyFile))
	}
	return out, nil
}
