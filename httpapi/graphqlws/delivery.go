package graphqlws

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/service"
)

// notify schedules s for delivery; the service calls it with locks held, so it only
// queues.
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

// deliver writes what ready subscriptions have, taking them in turn, and ends when there
// is nothing left.
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

// perTurn is how many events one subscription sends before the others of its connection
// get their turn.
const perTurn = 64

// pump sends up to perTurn events of s.
func (c *conn) pump(s *sub) {
	defer func() { s.responses, s.rctx = nil, nil }() // see sub
	defer func() {
		if p := recover(); p != nil {
			c.t.Log.Error("subscription panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			c.fail(s, gqlerror.List{graph.Error(service.Errorf(service.EINTERNAL, "internal error"))})
		}
	}()
	for range perTurn {
		ok, err := s.stream.Next(s.ctx)
		switch {
		case errors.Is(err, service.ErrSessionDeleted):
			c.finish(s, &message{ID: s.id, Type: "complete"})
			return
		case errors.Is(err, service.ErrShutdown):
			c.finish(s, nil) // closes the connection with 1001 once it has no subscription left
			return
		case err != nil:
			if s.ctx.Err() != nil || service.ErrorCode(err) == service.ECONFLICT {
				return // stopped meanwhile
			}
			// The log cannot be read now: try again in a moment.
			c.t.Log.Warn("subscription read", "err", err)
			c.mu.Lock()
			if c.subs.get(s.id) == s {
				s.retry = time.AfterFunc(200*time.Millisecond, s.notify)
			}
			c.mu.Unlock()
			return
		case !ok:
			return // caught up: notify brings it back
		}
		if data := s.stream.Rendered(); data != nil {
			if !c.writeNext(s, &graphql.Response{Data: data}) {
				return // stopped, or the connection is gone
			}
			continue
		}
		if s.responses == nil && !c.execute(s) {
			return
		}
		resp := s.responses(s.rctx)
		if resp == nil {
			return
		}
		if !c.writeNext(s, resp) {
			return // stopped, or the connection is gone
		}
	}
	s.notify() // more may be waiting: back of the line
}

// execute executes s's operation again for its stream (see graph.StreamSink), for the
// executor to render the event Next left to it; false when that failed and s is over.
func (c *conn) execute(s *sub) bool {
	rc := s.op.context(&c.funcs)
	ctx := graphql.WithOperationContext(graphql.StartOperationTrace(s.ctx), rc)
	sink := &graph.StreamSink{Notify: s.notify, Stream: s.stream}
	responses, rctx := c.exec.DispatchOperation(graph.WithStreamSink(ctx, sink), rc)
	if responses == nil {
		c.fail(s, gqlerror.List{graph.Error(service.Errorf(service.EINTERNAL, "internal error"))})
		return false
	}
	s.responses, s.rctx = responses, rctx
	return true
}
