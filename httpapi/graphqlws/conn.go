package graphqlws

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/service"
)

// protocol names the message types of one subprotocol.
type protocol struct {
	name                       string
	next, start, stop, keepNow string
	legacy                     bool
}

var (
	transportWS = protocol{name: "graphql-transport-ws", next: "next", start: "subscribe", stop: "complete", keepNow: "ping"}
	legacyWS    = protocol{name: "graphql-ws", next: "data", start: "start", stop: "stop", keepNow: "ka", legacy: true}
)

// message is a message of either protocol.
type message struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

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
	ready      []*sub  // subscriptions with something to deliver
	delivering bool    // a goroutine delivers ready
	funcs      opFuncs // the executor's, taken from the first subscription (see operation)
	// One timer per connection serves its deadlines: connection_init's (initBy), the next
	// keep-alive (keepBy) and the token's expiry (expires, zero for none).
	timer                   *time.Timer
	initBy, keepBy, expires time.Time
	// pongAt is when the last pong came, readAt when the last read began (unix nanoseconds).
	pongAt, readAt atomic.Int64
}

// sub is one operation of a connection: a subscription while it streams, or a query or
// mutation while it runs.
//
// A subscription keeps its stream and, to render the events no plan of the stream
// covers, a compact copy of its operation (op): the executor's response handler and all it
// holds (field contexts, collected fields, the operation's contexts) are made again by
// executing op when such an event comes, and dropped once it is delivered (see pump).
// An idle subscription then costs its stream, op and little else.
type sub struct {
	id     string
	c      *conn
	ctx    context.Context // the connection's operation context
	cancel context.CancelFunc
	stream *graph.Stream
	op     operation
	queued bool // in c.ready
	retry  *time.Timer

	// While pump renders with the executor: its response handler and the context to call
	// it with. Only the connection's delivering goroutine touches them.
	responses graphql.ResponseHandler
	rctx      context.Context
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

func (c *conn) liveness() time.Duration { return 2*c.t.KeepAlive + 5*time.Second }

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

// fail ends an operation that could not start, with errors.
func (c *conn) fail(s *sub, errs gqlerror.List) {
	c.finish(s, &message{ID: s.id, Type: "error", Payload: mustJSON(errs)})
}

// start parses and runs an operation: a query or mutation to its end, a subscription until
// its stream is in place.
func (c *conn) start(s *sub, opCtx context.Context, raw json.RawMessage, start time.Time) {
	params := &graphql.RawParams{}
	if err := json.Unmarshal(raw, params); err != nil {
		c.fail(s, gqlerror.List{graph.Error(service.Errorf(service.EINVALID, "the subscribe payload is not a GraphQL request"))})
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
	sink := &graph.StreamSink{Notify: s.notify}
	var responses graphql.ResponseHandler
	var rctx context.Context
	func() {
		defer func() {
			if p := recover(); p != nil {
				c.t.Log.Error("subscription panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				sink.Stream = nil
			}
		}()
		responses, rctx = c.exec.DispatchOperation(graph.WithStreamSink(ctx, sink), rc)
	}()
	if sink.Stream == nil { // refused before it began: the handler holds the errors
		var errs gqlerror.List
		if responses != nil {
			if r := responses(rctx); r != nil {
				errs = r.Errors
			}
		}
		if len(errs) == 0 {
			errs = gqlerror.List{graph.Error(service.Errorf(service.EINTERNAL, "internal error"))}
		}
		c.fail(s, errs)
		return
	}
	// The response handler of this first execution is not kept: pump makes one again when
	// an event needs it.
	c.mu.Lock()
	s.ctx, s.stream, s.op = opCtx, sink.Stream, operationOf(rc)
	if c.funcs.field == nil {
		c.funcs = opFuncs{rc.RecoverFunc, rc.ResolverMiddleware, rc.RootResolverMiddleware}
	}
	stale := c.closed || c.subs.get(s.id) != s
	c.mu.Unlock()
	if stale { // stopped or closed while it started
		sink.Stream.Close()
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
				resp = &graphql.Response{Errors: gqlerror.List{graph.Error(service.Errorf(service.EINTERNAL, "internal error"))}}
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

// release ends an operation that is no longer in c.subs, and closes the connection when
// the server shuts down and it was the last.
func (c *conn) release(s *sub) {
	c.mu.Lock()
	st, cancel := s.stream, s.cancel
	if s.retry != nil {
		s.retry.Stop()
	}
	idle := c.subs.len() == 0
	c.mu.Unlock()
	cancel()
	if st != nil {
		st.Close()
	}
	if idle {
		c.shutdownIfIdle()
	}
}

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

// operation is what executing a subscription again needs of its operation context: the
// parsed document and operation (shared with the query cache), the variables as a list
// (a map is made when it runs), and nothing that executing it added (the executor
// caches collected fields in the context).
type operation struct {
	query, name string
	doc         *ast.QueryDocument
	def         *ast.OperationDefinition
	extensions  map[string]any
	vars        []variable
	noIntro     bool
}

type variable struct {
	name  string
	value any
}

// opFuncs are the executor's middleware and recovery, the same for all of a connection's
// operations.
type opFuncs struct {
	recover   graphql.RecoverFunc
	field     graphql.FieldMiddleware
	rootField graphql.RootFieldMiddleware
}

func operationOf(rc *graphql.OperationContext) operation {
	op := operation{query: rc.RawQuery, name: rc.OperationName, doc: rc.Doc, def: rc.Operation,
		extensions: rc.Extensions, noIntro: rc.DisableIntrospection}
	if len(rc.Variables) > 0 {
		op.vars = make([]variable, 0, len(rc.Variables))
		for k, v := range rc.Variables {
			op.vars = append(op.vars, variable{k, v})
		}
	}
	return op
}

// context makes an operation context of op to execute, with the executor's funcs.
func (op *operation) context(fn *opFuncs) *graphql.OperationContext {
	vars := make(map[string]any, len(op.vars))
	for _, v := range op.vars {
		vars[v.name] = v.value
	}
	return &graphql.OperationContext{
		RawQuery: op.query, Variables: vars, OperationName: op.name, Doc: op.doc,
		Extensions: op.extensions, Operation: op.def, DisableIntrospection: op.noIntro,
		RecoverFunc: fn.recover, ResolverMiddleware: fn.field, RootResolverMiddleware: fn.rootField,
	}
}

// writeNext sends one result of s; false when s is over or the connection is gone.
func (c *conn) writeNext(s *sub, resp *graphql.Response) bool {
	buf := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(buf)
	buf.Reset()
	buf.WriteString(`{"id":`)
	writeString(buf, s.id)
	buf.WriteString(`,"type":"` + c.proto.next + `","payload":{"data":`)
	if len(resp.Data) == 0 {
		buf.WriteString("null")
	} else {
		buf.Write(resp.Data)
	}
	if len(resp.Errors) > 0 {
		buf.WriteString(`,"errors":`)
		buf.Write(mustJSON(resp.Errors))
	}
	if len(resp.Extensions) > 0 {
		buf.WriteString(`,"extensions":`)
		buf.Write(mustJSON(resp.Extensions))
	}
	buf.WriteString("}}")
	return c.writeFor(s, buf.Bytes())
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// sendError ends an operation with errors.
func (c *conn) sendError(id string, errs gqlerror.List) {
	c.writeFrame(&message{ID: id, Type: "error", Payload: mustJSON(errs)})
}

func (c *conn) writeFrame(m *message) bool { return c.write(mustJSON(m)) }

// write sends one message. A write that fails or takes longer than WriteTimeout (the
// client stopped reading) ends the connection with 1001, so that the client reconnects and
// resumes.
func (c *conn) write(data []byte) bool {
	c.wmu.Lock()
	err := c.writeLocked(data)
	c.wmu.Unlock()
	return c.written(err)
}

// writeFor sends one message of s, unless s is over: once finish has forgotten s, nothing
// more is written for it, even by a goroutine that was rendering an event of s meanwhile.
// False when s is over or the connection is gone.
func (c *conn) writeFor(s *sub, data []byte) bool {
	c.wmu.Lock()
	c.mu.Lock()
	live := !c.closed && c.subs.get(s.id) == s
	c.mu.Unlock()
	if !live {
		c.wmu.Unlock()
		return false
	}
	err := c.writeLocked(data)
	c.wmu.Unlock()
	return c.written(err)
}

// writeLocked writes one message; c.wmu must be held.
func (c *conn) writeLocked(data []byte) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.t.WriteTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, data)
}

// written ends the connection after a failed write; it reports whether the write worked.
func (c *conn) written(err error) bool {
	if err != nil {
		c.closeWith(CloseGoingAway, "the connection is not keeping up")
		return false
	}
	return true
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
// operations.
func (c *conn) closeWith(code int, reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	subs := c.subs
	c.subs, c.ready = nil, nil
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	if code != 0 {
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, truncate(reason, 120)), time.Now().Add(time.Second))
	}
	_ = c.ws.Close()
	for _, s := range subs {
		c.mu.Lock()
		st, cancel := s.stream, s.cancel
		if s.retry != nil {
			s.retry.Stop()
		}
		c.mu.Unlock()
		cancel()
		if st != nil {
			st.Close()
		}
	}
	c.cancel()
	c.t.remove(c)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only values this package builds are encoded
	}
	return b
}

// writeString writes s as a JSON string.
func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	buf.Write(b)
}

// truncate cuts s to at most n bytes, at a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
