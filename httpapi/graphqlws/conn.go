package graphqlws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/gorilla/websocket"
)

// conn is one websocket connection.
type conn struct {
	t      *Transport
	ws     *websocket.Conn
	proto  protocol
	exec   graphql.GraphExecutor
	ctx    context.Context // ends when the connection ends
	cancel context.CancelFunc

	wmu sync.Mutex // one writer at a time

	mu         sync.Mutex
	opCtx      context.Context // the context operations run in, once authorised
	inited     bool
	closed     bool
	subs       subSet
	ready      []*sub   // subscriptions with something to deliver
	delivering bool     // a goroutine delivers ready
	releases   []func() // what Admit and AdmitUser gave the connection, given back when it closes
	// One timer per connection serves its deadlines: connection_init's (initBy), the next
	// keep-alive (keepBy) and the token's expiry (expires, zero for none).
	timer                   *time.Timer
	initBy, keepBy, expires time.Time
	// pongAt is when the last pong came, readAt when the last read began (unix nanoseconds).
	pongAt, readAt atomic.Int64
}

// run serves the connection until it ends: it arms the connection's timer (see tick) and
// reads the client's messages (see read).
func (c *conn) run() {
	c.mu.Lock()
	now := time.Now()
	c.initBy, c.keepBy = now.Add(c.t.InitTimeout), now.Add(c.t.KeepAlive)
	c.timer = time.AfterFunc(c.nextLocked().Sub(now), c.tick)
	c.mu.Unlock()
	// A pong only notes when it came; tick moves the read deadline on from it. (The handler
	// runs deep inside a waiting read: anything more would grow that goroutine's stack.)
	c.ws.SetPongHandler(func(string) error {
		c.pongAt.Store(time.Now().UnixNano())
		return nil
	})
	c.read()
}

// read reads and handles one message of the client, then goes on in a new goroutine until
// the connection ends: the stack that handling grew (a subscribe runs the executor) would
// otherwise stay with the connection while it waits, and a new goroutine's is the small
// one a waiting read needs. There is still one goroutine per connection.
func (c *conn) read() {
	now := time.Now()
	c.readAt.Store(now.UnixNano())
	_ = c.ws.SetReadDeadline(now.Add(c.liveness()))
	_, data, err := c.ws.ReadMessage()
	if err != nil {
		c.readFailed(err)
		return
	}
	if c.handle(data) {
		go c.read()
	}
}

// readFailed ends the connection after a failed read.
func (c *conn) readFailed(err error) {
	var ne net.Error
	switch {
	case errors.Is(err, websocket.ErrReadLimit):
		c.closeWith(CloseTooBig, fmt.Sprintf("message too big: at most %d bytes", c.t.ReadLimit))
	case errors.As(err, &ne) && ne.Timeout():
		c.closeWith(CloseGoingAway, "no answer to keep-alives")
	case websocket.IsUnexpectedCloseError(err) || errors.As(err, new(*websocket.CloseError)):
		c.closeWith(0, "") // the client closed; gorilla answered its close frame
	default:
		c.closeWith(0, "")
	}
}

// handle acts on one message from the client; false when the connection is over.
func (c *conn) handle(data []byte) bool {
	var m message
	if err := json.Unmarshal(data, &m); err != nil {
		c.closeWith(CloseBadRequest, "invalid message: not JSON")
		return false
	}
	c.mu.Lock()
	inited := c.inited
	c.mu.Unlock()
	switch m.Type {
	case "connection_init":
		if inited {
			c.closeWith(CloseTooManyInits, "too many initialisation requests")
			return false
		}
		return c.init(m.Payload)
	case "ping":
		c.writeFrame(&message{Type: "pong"})
	case "pong":
	case c.proto.start:
		if !inited {
			c.closeWith(CloseUnauthorized, "Unauthorized")
			return false
		}
		if m.ID == "" {
			c.closeWith(CloseBadRequest, "a subscribe message needs an id")
			return false
		}
		return c.subscribe(m.ID, m.Payload)
	case c.proto.stop:
		c.stop(m.ID)
	case "connection_terminate":
		if c.proto.legacy {
			c.closeWith(closeNormal, "")
			return false
		}
		fallthrough
	default:
		c.closeWith(CloseBadRequest, fmt.Sprintf("unknown message type %q", truncate(m.Type, 40)))
		return false
	}
	return true
}
