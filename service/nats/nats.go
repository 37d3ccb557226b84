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
	"crypto/tls"
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

// Announce implements service.Cluster.
func (c *Cluster) Announce(replicaID string) {
	subject := c.names.left()
	env, _ := c.seal.seal([]byte(subject), c.opts.Name, []byte(replicaID))
	_ = c.nc.Publish(subject, env)
	_ = c.nc.FlushTimeout(time.Second)
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
