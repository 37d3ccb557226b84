package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
)

// gorillaWebsocket adapts gorilla/websocket to gqlgen's websocket transport (gqlgen
// itself ships only an adapter for another library).
type gorillaWebsocket struct {
	upgrader     websocket.Upgrader
	writeTimeout time.Duration
}

func newGorillaWebsocket(allowedOrigins []string, writeTimeout time.Duration) *gorillaWebsocket {
	g := &gorillaWebsocket{writeTimeout: writeTimeout}
	g.upgrader = websocket.Upgrader{
		ReadBufferSize:  4096,
		WriteBufferSize: 4096,
		CheckOrigin:     originChecker(allowedOrigins),
	}
	return g
}

// originChecker allows upgrades with no Origin (not a browser), from the server's own
// origin, and from the listed origins ("*" allows any).
func originChecker(allowed []string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		origin := r.Header.Get("Origin")
		if origin == "" {
			return true
		}
		u, err := url.Parse(origin)
		if err != nil {
			return false
		}
		if strings.EqualFold(u.Host, r.Host) {
			return true
		}
		for _, a := range allowed {
			if a == "*" || strings.EqualFold(strings.TrimRight(a, "/"), origin) {
				return true
			}
		}
		return false
	}
}

func (g *gorillaWebsocket) Accept(w http.ResponseWriter, r *http.Request, opts transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	up := g.upgrader
	up.Subprotocols = opts.Subprotocols
	c, err := up.Upgrade(w, r, opts.ResponseHeader)
	if err != nil {
		return nil, err
	}
	conn := &gorillaConn{c: c, writeTimeout: g.writeTimeout}
	if h, _ := r.Context().Value(wsHolderKey{}).(*wsHolder); h != nil {
		h.conn.Store(conn)
	}
	return conn, nil
}

type gorillaConn struct {
	c            *websocket.Conn
	wmu          sync.Mutex
	writeTimeout time.Duration
	closeOnce    sync.Once
}

func (g *gorillaConn) NextReader() (int, io.Reader, error) {
	mt, r, err := g.c.NextReader()
	if err != nil && websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived) {
		return 0, nil, transport.ErrWebsocketClosed
	}
	return mt, r, err
}

func (g *gorillaConn) WriteJSON(v any) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.writeTimeout > 0 {
		_ = g.c.SetWriteDeadline(time.Now().Add(g.writeTimeout))
	}
	return g.c.WriteJSON(v)
}

func (g *gorillaConn) WriteClose(code int, msg string) error {
	if len(msg) > 120 {
		msg = msg[:120]
	}
	return g.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, msg), time.Now().Add(time.Second))
}

func (g *gorillaConn) Close() error {
	var err error
	g.closeOnce.Do(func() { err = g.c.Close() })
	return err
}

func (g *gorillaConn) Subprotocol() string               { return g.c.Subprotocol() }
func (g *gorillaConn) SetReadLimit(n int64)              { g.c.SetReadLimit(n) }
func (g *gorillaConn) SetReadDeadline(t time.Time) error { return g.c.SetReadDeadline(t) }

// closeWith closes the connection with a code, from outside gqlgen's transport (token
// expiry, shutdown).
func (g *gorillaConn) closeWith(code int, reason string) {
	_ = g.WriteClose(code, reason)
	_ = g.Close()
}

// wsHolder lets connection_init reach the connection its request was upgraded to.
type wsHolder struct{ conn atomic.Pointer[gorillaConn] }

type wsHolderKey struct{}

// wsInit authenticates a websocket in connection_init: the payload's Authorization (key
// matched without regard to case) or else the upgrade request's header. A bad or missing
// token closes the socket with 4401; the socket is closed with 4401 when the token expires.
func wsInit(auth *jwtauth.Auth, maxSubs int, tracker *connTracker) transport.WebsocketInitFunc {
	return func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		refuse := func(msg string) (context.Context, *transport.InitPayload, error) {
			ctx = transport.WithWebsocketCloseCode(transport.AppendCloseReason(ctx, msg), 4401)
			return ctx, nil, errors.New(msg)
		}
		var value string
		for k, v := range payload {
			if strings.EqualFold(k, "authorization") {
				value, _ = v.(string)
			}
		}
		if value == "" {
			if id, ok := ctx.Value(identityKey{}).(jwtauth.Identity); ok {
				return authorised(ctx, id, maxSubs, tracker)
			}
			return refuse("Unauthorized: connection_init needs {\"Authorization\": \"Bearer <token>\"}")
		}
		tok, ok := jwtauth.Bearer(value)
		if !ok {
			tok = strings.TrimSpace(value) // a bare token is accepted too
		}
		id, err := auth.Verify(tok)
		if err != nil {
			return refuse("Unauthorized: " + service.ErrorMessage(err))
		}
		return authorised(ctx, id, maxSubs, tracker)
	}
}

func authorised(ctx context.Context, id jwtauth.Identity, maxSubs int, tracker *connTracker) (context.Context, *transport.InitPayload, error) {
	ctx = service.WithUser(ctx, id.UserID)
	ctx = graph.WithSubscriptionSlots(ctx, maxSubs)
	if h, _ := ctx.Value(wsHolderKey{}).(*wsHolder); h != nil {
		if conn := h.conn.Load(); conn != nil {
			tracker.add(conn)
			if !id.Expires.IsZero() {
				t := time.AfterFunc(time.Until(id.Expires), func() { conn.closeWith(4401, "token expired") })
				go func() { <-ctx.Done(); t.Stop() }()
			}
			go func() { <-ctx.Done(); tracker.remove(conn) }()
		}
	}
	return ctx, nil, nil
}

// connTracker knows the open websockets, so shutdown can close them (the HTTP server does
// not track hijacked connections).
type connTracker struct {
	mu    sync.Mutex
	conns map[*gorillaConn]struct{}
}

func newConnTracker() *connTracker { return &connTracker{conns: map[*gorillaConn]struct{}{}} }

func (t *connTracker) add(c *gorillaConn) {
	t.mu.Lock()
	t.conns[c] = struct{}{}
	t.mu.Unlock()
}

func (t *connTracker) remove(c *gorillaConn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

// closeAll closes every tracked socket with 1001 (going away).
func (t *connTracker) closeAll() {
	t.mu.Lock()
	conns := make([]*gorillaConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.conns = map[*gorillaConn]struct{}{}
	t.mu.Unlock()
	for _, c := range conns {
		c.closeWith(websocket.CloseGoingAway, "server shutting down")
	}
}

// count returns the number of open websockets.
func (t *connTracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}
