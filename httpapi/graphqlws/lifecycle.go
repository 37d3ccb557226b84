package graphqlws

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/gorilla/websocket"

	"github.com/talkgraph/talkgraph/service"
)

// A connection's life: connection_init authorises it (init) within InitTimeout; one timer
// (tick) then serves all its deadlines, the init's, each keep-alive's and the token's
// expiry; it ends with closeWith, whoever ends it (the client, a deadline, a failed read
// or write, the server shutting down).

// liveness is how long a connection may go without a sign of life (a message or a pong)
// before it is taken for dead: two keep-alives and some slack.
func (c *conn) liveness() time.Duration { return 2*c.t.KeepAlive + 5*time.Second }

// init authorises the connection with connection_init's payload.
func (c *conn) init(raw json.RawMessage) bool {
	payload := map[string]any{}
	if len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if err := json.Unmarshal(raw, &payload); err != nil {
			c.closeWith(CloseBadRequest, "the connection_init payload must be an object")
			return false
		}
	}
	ctx, expires, err := c.t.Authenticate(c.ctx, payload)
	if err != nil {
		msg := "Unauthorized: " + service.ErrorMessage(err)
		if c.proto.legacy {
			c.writeFrame(&message{Type: "connection_error", Payload: mustJSON(map[string]string{"message": msg})})
		}
		c.closeWith(CloseUnauthorized, msg)
		return false
	}
	if c.t.AdmitUser != nil {
		release, err := c.t.AdmitUser(ctx)
		if err != nil {
			c.closeWith(CloseTryAgainLater, service.ErrorMessage(err))
			return false
		}
		c.mu.Lock()
		closed := c.closed
		if !closed {
			c.releases = append(c.releases, release)
		}
		c.mu.Unlock()
		if closed {
			release()
			return false
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.inited, c.opCtx, c.expires = true, ctx, expires
	c.timer.Reset(time.Until(c.nextLocked()))
	c.mu.Unlock()
	return c.writeFrame(&message{Type: "connection_ack"})
}

// nextLocked is the connection's next deadline.
func (c *conn) nextLocked() time.Time {
	next := c.keepBy
	if !c.inited && c.initBy.Before(next) {
		next = c.initBy
	}
	if !c.expires.IsZero() && c.expires.Before(next) {
		next = c.expires
	}
	return next
}

// tick acts on the deadlines that have passed: no connection_init in time (4408), an
// expired token (4401), or a keep-alive due: a websocket ping and the protocol's own.
func (c *conn) tick() {
	now := time.Now()
	c.mu.Lock()
	closed, inited, expires := c.closed, c.inited, c.expires
	late, keep := !inited && !now.Before(c.initBy), !now.Before(c.keepBy)
	c.mu.Unlock()
	switch {
	case closed:
		return
	case late:
		c.closeWith(CloseInitTimeout, "connection initialisation timeout")
		return
	case !expires.IsZero() && !now.Before(expires):
		c.closeWith(CloseUnauthorized, "token expired")
		return
	}
	if keep {
		// The client has until liveness after the last sign of life to give the next one.
		_ = c.ws.SetReadDeadline(time.Unix(0, max(c.pongAt.Load(), c.readAt.Load())).Add(c.liveness()))
		if err := c.ws.WriteControl(websocket.PingMessage, nil, now.Add(c.t.WriteTimeout)); err != nil {
			c.closeWith(CloseGoingAway, "the connection is not keeping up")
			return
		}
		if inited && !c.writeFrame(&message{Type: c.proto.keepNow}) {
			return
		}
	}
	c.mu.Lock()
	if keep {
		c.keepBy = time.Now().Add(c.t.KeepAlive)
	}
	if !c.closed {
		c.timer.Reset(time.Until(c.nextLocked()))
	}
	c.mu.Unlock()
}

// shutdownIfIdle closes the connection with 1001 when the server is shutting down and it
// has no operation left.
func (c *conn) shutdownIfIdle() {
	c.t.mu.Lock()
	shutting := c.t.shutting
	c.t.mu.Unlock()
	if !shutting {
		return
	}
	c.mu.Lock()
	idle := c.subs.len() == 0
	c.mu.Unlock()
	if idle {
		c.closeWith(CloseGoingAway, "server shutting down")
	}
}

// closeWith closes the connection, with a close frame of code (none for 0), and ends its
// operations (see sub.end). Only the first call does anything.
func (c *conn) closeWith(code int, reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	subs, releases := c.subs, c.releases
	c.subs, c.ready, c.releases = nil, nil, nil
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	if code != 0 {
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, truncate(reason, 120)), time.Now().Add(time.Second))
	}
	_ = c.ws.Close()
	for _, s := range subs {
		s.end()
	}
	c.cancel()
	for _, release := range releases {
		release()
	}
	c.t.remove(c) // last: once Count no longer counts c, nothing of it is held
}
