// Package graphqlws serves GraphQL over websockets with both subprotocols clients speak:
// graphql-transport-ws (the graphql-ws library, Apollo's GraphQLWsLink) and the legacy
// graphql-ws (subscriptions-transport-ws). It is a gqlgen transport on gorilla/websocket,
// written for many long, mostly idle subscriptions:
//
//   - An open connection costs one goroutine, the one reading it; a subscription costs no
//     goroutine at all. When a subscription's session has new events, its stream notifies
//     the connection, and a short-lived goroutine renders and writes what is new, then
//     ends (see graph.Stream).
//   - Keep-alives run on the connection's one timer, which also keeps the init deadline and
//     the token's expiry: a websocket ping frame and the protocol's own keep-alive ("ping"
//     or "ka") every KeepAlive. A connection from which nothing at all was read for twice
//     that long and 5 seconds more (pongs included) is dead, and is closed.
//   - Buffers are small and shared: reads go through a small buffer, writes borrow one
//     from a pool for the length of a message.
//
// Endings follow what clients expect. A subscription is completed only when it really ends
// (the client stops it, or its session is deleted). A server that shuts down closes the
// socket with 1001, a connection that stopped answering or reading is closed with 1001 too,
// so that clients reconnect and resume with their cursor; protocol errors close with the
// graphql-transport-ws codes: 4400 (a bad message), 4401 (not authorised), 4408 (no
// connection_init in time), 4409 (a subscription ID in use; the legacy protocol, which
// has no such code, replaces the operation under that ID, as its reference server does),
// 4429 (a second connection_init), 1009 (a message over ReadLimit); 1013 (try again
// later) closes a connection AdmitUser refuses. Once the reader has
// taken a client's stop in, and once the server has ended an operation, nothing more is
// written for its ID, which is free again.
package graphqlws

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/gorilla/websocket"

	"github.com/talkgraph/talkgraph/internal/shrink"
)

// Transport is the websocket transport. Set its fields before its first use.
type Transport struct {
	// Authenticate checks the connection_init payload and returns the context operations
	// on the connection run in, and when the connection's authorisation ends (zero:
	// never). ctx carries the upgrade request's values. An error closes the socket with
	// 4401 and the error's message.
	Authenticate func(ctx context.Context, payload map[string]any) (context.Context, time.Time, error)
	// Values returns the context a connection keeps of its upgrade request: what
	// Authenticate and the operations read of it. The default keeps all of the request's
	// context but its cancellation, and with it what the HTTP server put there for the
	// connection it served the request on, for as long as the websocket lasts.
	Values func(r *http.Request) context.Context
	// CheckOrigin allows or refuses an upgrade by its request's origin.
	CheckOrigin func(r *http.Request) bool
	// KeepAlive is the interval of keep-alives; default 15s.
	KeepAlive time.Duration
	// InitTimeout is how long a client has to send connection_init; default 10s.
	InitTimeout time.Duration
	// WriteTimeout is how long one write may take before the connection is taken for stuck
	// and closed; default 10s.
	WriteTimeout time.Duration
	// ReadLimit is the largest message a client may send; default 1 MiB.
	ReadLimit int64
	// MaxSubscriptions is how many subscriptions one connection may hold; default 100.
	MaxSubscriptions int
	// Admit, when set, is asked before each upgrade whether the request may open a
	// websocket (a cap on the sockets of one client address, say), so that a refusal costs
	// no upgrade. When it refuses, it has answered the request; when it admits, release is
	// called once the connection ends.
	Admit func(w http.ResponseWriter, r *http.Request) (release func(), ok bool)
	// AdmitUser, when set, is asked once connection_init is authorised, with the context
	// Authenticate returned, whether the connection may go on (a cap on one user's
	// sockets). An error closes the socket with CloseTryAgainLater and the error's message;
	// otherwise release is called once the connection ends.
	AdmitUser func(ctx context.Context) (release func(), err error)
	// AdmitSubscription, when set, is asked before a subscription starts, with the
	// connection's operation context, whether it may (caps on the subscriptions of a user
	// or an address). An error refuses the subscription with an error message for its ID,
	// and the connection stays; otherwise release is called once the subscription ends.
	AdmitSubscription func(ctx context.Context) (release func(), err error)
	Log               *slog.Logger

	once     sync.Once
	upgrader websocket.Upgrader

	mu       sync.Mutex
	conns    map[*conn]struct{}
	peak     int // the most connections the map has held since it was made (see shrink.Map)
	shutting bool
	gone     chan struct{} // signalled when a connection ends while shutting down
}

var _ graphql.Transport = (*Transport)(nil)

func (t *Transport) init() {
	t.once.Do(func() {
		if t.KeepAlive <= 0 {
			t.KeepAlive = 15 * time.Second
		}
		if t.InitTimeout <= 0 {
			t.InitTimeout = 10 * time.Second
		}
		if t.WriteTimeout <= 0 {
			t.WriteTimeout = 10 * time.Second
		}
		if t.ReadLimit <= 0 {
			t.ReadLimit = 1 << 20
		}
		if t.MaxSubscriptions <= 0 {
			t.MaxSubscriptions = 100
		}
		if t.Log == nil {
			t.Log = slog.Default()
		}
		t.upgrader = websocket.Upgrader{
			ReadBufferSize:  512, // clients' messages are small; bigger ones take more reads
			WriteBufferSize: 4096,
			WriteBufferPool: &sync.Pool{},
			Subprotocols:    []string{transportWS.name, legacyWS.name},
			CheckOrigin:     t.CheckOrigin,
			Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
				http.Error(w, http.StatusText(status)+": "+reason.Error(), status)
			},
		}
		t.conns = map[*conn]struct{}{}
		t.gone = make(chan struct{}, 1)
	})
}

// Supports reports whether r asks for a websocket.
func (t *Transport) Supports(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// Do upgrades the request and serves the connection on a goroutine of its own; the
// request's handler returns at once.
func (t *Transport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	t.init()
	t.mu.Lock()
	shutting := t.shutting
	t.mu.Unlock()
	if shutting {
		http.Error(w, "the server is shutting down", http.StatusServiceUnavailable)
		return
	}
	var release func()
	if t.Admit != nil {
		var ok bool
		if release, ok = t.Admit(w, r); !ok {
			return
		}
	}
	ws, err := t.upgrader.Upgrade(w, r, nil)
	if err != nil {
		if release != nil {
			release()
		}
		return // the upgrader answered
	}
	proto := legacyWS // clients that name no subprotocol speak the legacy one
	if ws.Subprotocol() == transportWS.name {
		proto = transportWS
	}
	ws.SetReadLimit(t.ReadLimit)
	// The connection outlives the request: its context keeps the request's values (or
	// those Values picks), not its cancellation.
	var base context.Context
	if t.Values != nil {
		base = t.Values(r)
	} else {
		base = context.WithoutCancel(r.Context())
	}
	ctx, cancel := context.WithCancel(base)
	// The request is not kept: it holds on to the HTTP server's buffers for the connection
	// (through its body's reader), which would stay for as long as the websocket.
	c := &conn{t: t, ws: ws, proto: proto, exec: exec, ctx: ctx, cancel: cancel}
	if release != nil {
		c.releases = append(c.releases, release)
	}
	t.mu.Lock()
	t.conns[c] = struct{}{}
	t.peak = max(t.peak, len(t.conns))
	t.mu.Unlock()
	go c.run()
}

// Count returns the number of open connections.
func (t *Transport) Count() int {
	t.init()
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// Shutdown refuses new connections and closes the open ones with 1001 once each has
// delivered what its subscriptions have left (the service ends them, see Stream), or when
// ctx ends.
func (t *Transport) Shutdown(ctx context.Context) {
	t.init()
	t.mu.Lock()
	t.shutting = true
	conns := make([]*conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		c.shutdownIfIdle()
	}
	for {
		t.mu.Lock()
		n := len(t.conns)
		t.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-t.gone:
		case <-ctx.Done():
			t.mu.Lock()
			conns = conns[:0]
			for c := range t.conns {
				conns = append(conns, c)
			}
			t.mu.Unlock()
			for _, c := range conns {
				c.closeWith(CloseGoingAway, "server shutting down")
			}
			return
		}
	}
}

func (t *Transport) remove(c *conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.conns, t.peak = shrink.Map(t.conns, t.peak) // once most of a crowd has gone
	shutting := t.shutting
	t.mu.Unlock()
	if shutting {
		select {
		case t.gone <- struct{}{}:
		default:
		}
	}
}
