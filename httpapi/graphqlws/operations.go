package graphqlws

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/service"
)

// Operations: subscribe takes an operation's ID and starts it on a goroutine of its own
// (start): a query or mutation runs to its end (once), a subscription until its stream is
// in place, then its events are delivered (see delivery.go). An operation ends once
// (finish), by the client (stop), by itself, or with the connection (closeWith).

// sub is one operation of a connection: a subscription while it streams, or a query or
// mutation while it runs. A subscription keeps its stream (graph.Stream), which holds all
// it needs to deliver events: an idle subscription costs its stream and little else.
type sub struct {
	id     string
	c      *conn
	ctx    context.Context // the connection's operation context
	cancel context.CancelFunc
	stream *graph.Stream
	queued bool   // in c.ready
	leave  func() // gives back what AdmitSubscription gave a subscription; nil once done
}

// subSet is a connection's operations by ID. Most connections hold one or two (and at
// most MaxSubscriptions): a slice searched in order costs less than a map.
type subSet []*sub

func (ss subSet) get(id string) *sub {
	for _, s := range ss {
		if s.id == id {
			return s
		}
	}
	return nil
}

func (ss subSet) len() int { return len(ss) }

// set adds s, or puts it in the place of the operation with its ID.
func (ss *subSet) set(s *sub) {
	for i, o := range *ss {
		if o.id == s.id {
			(*ss)[i] = s
			return
		}
	}
	*ss = append(*ss, s)
}

func (ss *subSet) del(id string) {
	for i, o := range *ss {
		if o.id == id {
			last := len(*ss) - 1
			(*ss)[i], (*ss)[last] = (*ss)[last], nil
			*ss = (*ss)[:last]
			if last == 0 {
				*ss = nil
			}
			return
		}
	}
}

// subscribe takes an operation's ID and starts the operation.
func (c *conn) subscribe(id string, raw json.RawMessage) bool {
	start := graphql.Now()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	old := c.subs.get(id)
	if old != nil && !c.proto.legacy {
		c.mu.Unlock()
		c.closeWith(CloseSubscriberUsed, "Subscriber for "+truncate(id, 40)+" already exists")
		return false
	}
	// The legacy protocol has no such code: like its reference server
	// (subscriptions-transport-ws), a start with an ID in use stops that operation, without
	// complete, and the ID names the new one from now on.
	if old == nil && c.subs.len() >= c.t.MaxSubscriptions {
		c.mu.Unlock()
		c.sendError(id, gqlerror.List{graph.Error(service.Errorf(service.ERATELIMIT, "too many subscriptions on this connection (at most %d)", c.t.MaxSubscriptions))})
		return true
	}
	// The ID is taken now; the operation starts on a goroutine of its own, so that the
	// reader goes on reading (and answering keep-alives) and its stack stays small while
	// the connection idles.
	s := &sub{id: id, c: c, cancel: func() {}}
	c.subs.set(s)
	opCtx := c.opCtx
	c.mu.Unlock()
	if old != nil {
		c.release(old)
	}
	go c.start(s, opCtx, raw, start)
	return true
}

// live reports whether s is still the connection's operation under its ID.
func (c *conn) live(s *sub) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && c.subs.get(s.id) == s
}

// fail ends an operation with errors: one that could not start, or a subscription whose
// stream failed.
func (c *conn) fail(s *sub, errs gqlerror.List) {
	c.finish(s, &message{ID: s.id, Type: "error", Payload: mustJSON(errs)})
}

// start parses and runs an operation: a query or mutation to its end, a subscription until
// its stream is in place.
func (c *conn) start(s *sub, opCtx context.Context, raw json.RawMessage, start time.Time) {
	params := &graphql.RawParams{}
	if err := graph.DecodeRequest(raw, params); err != nil {
		c.fail(s, gqlerror.List{graph.Error(err)})
		return
	}
	// The headers stay out of the operation: kept with every subscription they would cost
	// more than the rest of it, and no resolver reads them.
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	ctx := graphql.StartOperationTrace(opCtx)
	rc, errs := c.exec.CreateOperationContext(ctx, params)
	if errs != nil {
		c.fail(s, c.exec.DispatchError(graphql.WithOperationContext(ctx, rc), errs).Errors)
		return
	}
	ctx = graphql.WithOperationContext(ctx, rc)
	if rc.Operation.Operation != ast.Subscription {
		// A query or mutation can be stopped alone; a subscription ends with its stream
		// (and all of them with the connection), so it costs no context of its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		c.mu.Lock()
		s.cancel = cancel
		c.mu.Unlock()
		if !c.live(s) {
			cancel()
			return
		}
		c.once(s, ctx, rc)
		return
	}
	leave := func() {}
	if c.t.AdmitSubscription != nil {
		var err error
		if leave, err = c.t.AdmitSubscription(ctx); err != nil {
			c.fail(s, gqlerror.List{graph.Error(err)})
			return
		}
	}
	st, refused := graph.Subscribe(ctx, c.exec, rc, s.notify, c.t.Log)
	if st == nil {
		leave()
		c.fail(s, refused.Errors)
		return
	}
	c.mu.Lock()
	stale := c.closed || c.subs.get(s.id) != s
	if !stale {
		s.ctx, s.stream, s.leave = opCtx, st, leave
	}
	c.mu.Unlock()
	if stale { // stopped or closed while it started: whoever ended it found no stream
		st.Close()
		leave()
		return
	}
	s.notify() // deliver what the cursor left behind, if anything
}

// once runs a query or mutation sent over the socket.
func (c *conn) once(s *sub, ctx context.Context, rc *graphql.OperationContext) {
	var resp *graphql.Response
	func() {
		defer func() {
			if p := recover(); p != nil {
				c.t.Log.Error("operation panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				resp = &graphql.Response{Errors: internalError()}
			}
		}()
		responses, rctx := c.exec.DispatchOperation(ctx, rc)
		resp = responses(rctx)
	}()
	if resp != nil && !c.writeNext(s, resp) {
		c.finish(s, nil) // stopped by the client, or the connection is gone
		return
	}
	// The ID is free again before the client hears complete: it may reuse it at once.
	c.finish(s, &message{ID: s.id, Type: "complete"})
}

// stop ends an operation the client stopped. Once the reader has taken the stop in,
// nothing more is written for it (see writeFor).
func (c *conn) stop(id string) {
	c.mu.Lock()
	s := c.subs.get(id)
	c.mu.Unlock()
	if s == nil {
		return
	}
	var end *message
	if c.proto.legacy {
		end = &message{ID: id, Type: "complete"}
	}
	c.finish(s, end)
}

// finish ends s from either side: it forgets s, so that its ID is free and nothing more
// is written for it, then writes end (a complete or an error; nil for none), and releases
// what s holds. It reports whether s was still the connection's operation under its ID;
// if not, someone else ended it and nothing is written.
func (c *conn) finish(s *sub, end *message) bool {
	c.mu.Lock()
	live := !c.closed && c.subs.get(s.id) == s
	if live {
		c.subs.del(s.id)
	}
	c.mu.Unlock()
	if !live {
		return false
	}
	// A write for s that began before s was forgotten ends before end is written (both
	// hold wmu), and none begins after (writeFor checks under wmu).
	if end != nil {
		c.writeFrame(end)
	}
	c.release(s)
	return true
}

// release ends an operation that is no longer in c.subs (see end), and closes the
// connection when the server shuts down and it was the last.
func (c *conn) release(s *sub) {
	s.end()
	c.mu.Lock()
	idle := c.subs.len() == 0
	c.mu.Unlock()
	if idle {
		c.shutdownIfIdle()
	}
}

// end releases what an operation that is no longer in c.subs holds: a query's or
// mutation's context, a subscription's stream (see graph.Stream.Close) and its place in
// the caps AdmitSubscription keeps.
func (s *sub) end() {
	s.c.mu.Lock()
	st, cancel, leave := s.stream, s.cancel, s.leave
	s.leave = nil
	s.c.mu.Unlock()
	cancel()
	if st != nil {
		st.Close()
	}
	if leave != nil {
		leave()
	}
}

// internalError is the error of an operation that failed inside the server.
func internalError() gqlerror.List {
	return gqlerror.List{graph.Error(service.Errorf(service.EINTERNAL, "internal error"))}
}
