package graphqlws

import (
	"github.com/99designs/gqlgen/graphql"

	"github.com/talkgraph/talkgraph/graph"
)

// Delivery: a subscription costs no goroutine. The service calls a subscription's notify
// when its session has new events; notify queues it on its connection and, unless one
// runs already, starts a goroutine (deliver) that pumps the queued subscriptions' streams
// in turn (graph.Stream.Pump: reading, rendering, retries and endings are the stream's
// rules) and ends when the queue is empty.

// notify queues s for delivery; the service calls it with locks held, so it only queues.
func (s *sub) notify() {
	c := s.c
	c.mu.Lock()
	if c.closed || s.queued || c.subs.get(s.id) != s {
		c.mu.Unlock()
		return
	}
	s.queued = true
	c.ready = append(c.ready, s)
	start := !c.delivering
	c.delivering = true
	c.mu.Unlock()
	if start {
		go c.deliver()
	}
}

// deliver pumps the ready subscriptions, taking them in turn, and ends when there is
// nothing left.
func (c *conn) deliver() {
	for {
		c.mu.Lock()
		if c.closed || len(c.ready) == 0 {
			c.delivering = false
			c.ready = nil
			c.mu.Unlock()
			return
		}
		s := c.ready[0]
		c.ready[0] = nil
		c.ready = c.ready[1:]
		s.queued = false
		live := c.subs.get(s.id) == s && s.stream != nil // a stream still starting is notified once it has
		c.mu.Unlock()
		if live {
			c.pump(s)
		}
	}
}

// pump gives s a turn (see graph.Stream.Pump) and acts on where its stream then stands.
func (c *conn) pump(s *sub) {
	switch s.stream.Pump(s.ctx, s) {
	case graph.StreamMore:
		s.notify() // back of the line, behind the connection's other subscriptions
	case graph.StreamDeleted:
		c.finish(s, &message{ID: s.id, Type: "complete"})
	case graph.StreamShutDown:
		c.finish(s, nil) // closes the connection with 1001 once it has no subscription left
	case graph.StreamFailed:
		c.fail(s, internalError())
	case graph.StreamGone:
		c.fail(s, graph.GoneError())
	}
}

// Send is s as the Output of its stream: it writes one result as a frame "next" (or
// "data"); false when s is over or the connection is gone. Neither protocol frames an
// event's cursor: it is in the data when the operation selects it.
func (s *sub) Send(resp *graphql.Response, _ string) bool { return s.c.writeNext(s, resp) }
