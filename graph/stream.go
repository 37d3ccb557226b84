package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// Stream drives one subscription (messageStream or viewerEvents) for the transport that
// serves it, with the rules every transport shares, so that a transport only says how a
// result is sent (an Output) and how a subscription ends (Pump's StreamState). It has no
// goroutine: it is a position in a log (a feed: a session's log, or a user's viewer log);
// Subscribe opens it, and whenever its notify function is called the transport calls
// Pump, one call at a time, which
//
//   - reads what is new in the log and turns each event into its GraphQL type;
//   - renders an event a plan covers with the fast renderer (see plan), and any other with
//     gqlgen's executor, which executes the operation again for this stream from a compact
//     copy (see operation and execute) and whose state goes when Pump returns, so that an
//     idle subscription keeps none;
//   - sends at most perTurn events, so that the other subscriptions of a connection get
//     their turn;
//   - when the log cannot be read now, calls notify again after retryAfter;
//   - ends: the session deleted (complete), the server shutting down (the client resumes
//     with its cursor), or a failure (an internal error).
type Stream struct {
	src    feed // nil until the resolver has opened it (see withStream)
	notify func()
	exec   graphql.GraphExecutor
	op     operation
	log    *slog.Logger

	// plans render the commonest events without the executor (see planFrom); rootKey is
	// the messageStream field's response key as JSON, with its colon.
	rootKey string
	plans   map[string]*plan
	// responses and rctx are the executor's response handler and the context to call it
	// with, while a turn of Pump renders with it (see execute).
	responses graphql.ResponseHandler
	rctx      context.Context

	// resume, when resuming, is where the subscription starts whatever its after argument
	// says (see SubscribeFrom).
	resume   string
	resuming bool

	mu     sync.Mutex // guards retry and closed: Close may come while Pump runs
	retry  *time.Timer
	closed bool
}

// Output is how a transport sends a subscription's results: Pump calls Send with each.
type Output interface {
	// Send sends one result, the event at cursor, and reports false when the subscription
	// is over for the transport (the client stopped it, the connection is gone): Pump then
	// stops at once. cursor is the event's cursor (its cursor field, whether or not the
	// operation selects it): a subscription resumed after it starts with the next event.
	// resp is Pump's own and valid only until Send returns: it may hold data the fast
	// renderer wrote into a buffer that Pump uses again.
	Send(resp *graphql.Response, cursor string) bool
}

// StreamState is where a stream stands after a turn of Pump, which tells the transport
// what to do next.
type StreamState int

const (
	// StreamIdle: the stream has caught up, or was stopped meanwhile, or its log cannot be
	// read now and a retry is due. Nothing to do until notify is called.
	StreamIdle StreamState = iota
	// StreamMore: the turn sent perTurn events and more may wait. Pump again, once the
	// transport's other subscriptions have had their turn.
	StreamMore
	// StreamDeleted: the session was deleted. End the subscription, telling the client
	// it is complete.
	StreamDeleted
	// StreamShutDown: the server is shutting down and the stream has sent everything
	// recorded. End the subscription without complete: the client resumes with its
	// cursor from another server, or this one once it is back.
	StreamShutDown
	// StreamFailed: the stream broke (a panic, or the executor answered nothing; it was
	// logged). End the subscription with an internal error.
	StreamFailed
	// StreamGone: a share link's stream whose link no longer opens its session (revoked,
	// expired, the session deleted). End the subscription with GoneError (NOT_FOUND).
	StreamGone
)

// perTurn is how many events one turn of Pump sends at most.
const perTurn = 64

// retryAfter is how long a stream whose log could not be read waits before it reads again.
const retryAfter = 200 * time.Millisecond

// Subscribe starts the subscription rc describes, a messageStream operation exec created
// in ctx: it executes the operation with the Stream in its context, so that the resolver
// opens the stream's subscription to the session's log (see withStream), and keeps of the
// operation a compact copy to execute it again when an event needs the executor; the
// executor's state of this first execution is dropped. notify is called, on any goroutine and with the
// service's locks held, whenever Pump may have something new to send: it must only
// schedule a call of Pump. log receives what the stream reports (a read that failed, a
// panic); nil is slog.Default().
//
// When the operation is refused (the session is not the caller's, a bad cursor, too many
// subscriptions…) Subscribe returns no Stream, and the executor's answer, whose errors
// the transport sends to the client (an internal error when the executor had none).
func Subscribe(ctx context.Context, exec graphql.GraphExecutor, rc *graphql.OperationContext, notify func(), log *slog.Logger) (st *Stream, refused *graphql.Response) {
	return subscribe(ctx, exec, rc, &Stream{notify: notify}, log)
}

// SubscribeFrom is Subscribe for a subscription that resumes after cursor, whatever its
// after argument says: a transport whose clients name the last event they received on
// their own (server-sent events' Last-Event-ID) passes it here. cursor is checked as
// after is, and refused with the same errors.
func SubscribeFrom(ctx context.Context, exec graphql.GraphExecutor, rc *graphql.OperationContext, cursor string, notify func(), log *slog.Logger) (st *Stream, refused *graphql.Response) {
	return subscribe(ctx, exec, rc, &Stream{notify: notify, resume: cursor, resuming: true}, log)
}

// subscribe is Subscribe and SubscribeFrom, for st as they made it.
func subscribe(ctx context.Context, exec graphql.GraphExecutor, rc *graphql.OperationContext, made *Stream, log *slog.Logger) (st *Stream, refused *graphql.Response) {
	if log == nil {
		log = slog.Default()
	}
	st = made
	st.exec, st.log = exec, log
	defer func() {
		if p := recover(); p != nil {
			log.Error("subscription panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if st != nil && st.src != nil {
				st.src.close()
			}
			st, refused = nil, internalError()
		}
	}()
	responses, rctx := exec.DispatchOperation(withStream(ctx, st), rc)
	if st.src == nil {
		if responses != nil {
			refused = responses(rctx)
		}
		if refused == nil || len(refused.Errors) == 0 {
			refused = internalError()
		}
		return nil, refused
	}
	st.op = operationOf(rc)
	return st, nil
}

// internalError is the answer to a subscription that failed inside the server.
func internalError() *graphql.Response {
	return &graphql.Response{Errors: gqlerror.List{Error(service.Errorf(service.EINTERNAL, "internal error"))}}
}

// streamKey is the context key of withStream.
type streamKey struct{}

// withStream returns ctx for executing a messageStream subscription for st: the one seam
// between a Stream and the resolver, used by Subscribe and Pump (the transports go through
// them, never through the context). With a Stream in ctx that is not open yet, the resolver
// opens its subscription to the session's log (with the stream's notify function), makes
// its plans from the operation, and answers with the stream's channel, to which execute
// hands the events the executor renders; with a Stream open already (Pump executing the
// operation again, see Resumed) it answers with that channel and subscribes to nothing.
// Without a Stream it refuses the subscription with an internal error: a subscription
// needs a transport that drives a Stream, which gqlgen's own transports do not.
func withStream(ctx context.Context, st *Stream) context.Context {
	return context.WithValue(ctx, streamKey{}, st)
}

// sessionEvents is the channel of the session feed that the stream in ctx drives for the
// field: open opens it on the first execution; when it is open already and the operation is
// executed again to render an event no plan covers, the resolver answers with it as it is.
func sessionEvents(ctx context.Context, field string, open func(*Stream) error) (<-chan model.SessionEvent, error) {
	st := streamOf(ctx)
	if st == nil {
		return nil, service.Errorf(service.EINTERNAL, "%s needs a transport that drives a graph.Stream", field)
	}
	if st.src == nil {
		if err := open(st); err != nil {
			return nil, err
		}
	}
	f, ok := st.src.(*sessionFeed)
	if !ok {
		return nil, service.Errorf(service.EINTERNAL, "one subscription per operation")
	}
	return f.ch, nil
}

// streamOf is the Stream ctx executes a subscription for (see withStream), or nil.
func streamOf(ctx context.Context) *Stream {
	st, _ := ctx.Value(streamKey{}).(*Stream)
	return st
}

// Resumed reports whether ctx executes a subscription again to render an event of a
// Stream that is open already, rather than a new operation, so that an operation
// interceptor can leave it alone (the tracing extension makes no span for it).
func Resumed(ctx context.Context) bool {
	st := streamOf(ctx)
	return st != nil && st.src != nil
}

// from is where the subscription st drives starts: after after, or where SubscribeFrom
// said.
func (st *Stream) from(after string) string {
	if st.resuming {
		return st.resume
	}
	return after
}

// Pump sends what is new in the stream to out, at most perTurn events, and reports where
// the stream stands (see StreamState). ctx is the context the stream's reads and
// executions run in; when it ends Pump stops. Pump must not be called again before it
// returns.
func (st *Stream) Pump(ctx context.Context, out Output) (state StreamState) {
	var sc *scratch
	defer func() {
		st.responses, st.rctx = nil, nil // the executor's state goes with the turn
		if sc != nil {
			sc.release()
		}
		if p := recover(); p != nil {
			st.log.Error("subscription panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			state = StreamFailed
		}
	}()
	for range perTurn {
		if ctx.Err() != nil {
			return StreamIdle // stopped: nothing more is sent, as the executor would not
		}
		m, err := st.src.next(ctx)
		switch {
		case errors.Is(err, service.ErrSessionDeleted):
			return StreamDeleted
		case errors.Is(err, service.ErrShutdown):
			return StreamShutDown
		case errors.Is(err, service.ErrNoShare):
			return StreamGone
		case service.ErrorCode(err) == service.ECURSOREXPIRED:
			// Behind for longer than the log keeps: the client subscribes again, and is
			// told so.
			st.log.Info("subscription fell behind what the log keeps", "err", err)
			return StreamFailed
		case err != nil:
			if ctx.Err() != nil || service.ErrorCode(err) == service.ECONFLICT {
				return StreamIdle // stopped meanwhile
			}
			st.log.Warn("subscription read", "err", err)
			st.retryLater()
			return StreamIdle
		case m == nil:
			return StreamIdle // caught up: notify brings it back
		}
		if sc == nil {
			sc = scratches.Get().(*scratch)
		}
		sc.buf.Reset()
		if se, ok := m.(model.SessionEvent); ok && st.render(&sc.buf, se) {
			sc.resp.Data = sc.buf.Bytes()
			if !out.Send(&sc.resp, m.GetCursor()) {
				return StreamIdle
			}
			continue
		}
		resp, ok := st.execute(ctx, m)
		if !ok {
			return StreamFailed
		}
		if resp == nil || !out.Send(resp, m.GetCursor()) {
			return StreamIdle // ctx ended, or the subscription is over for the transport
		}
	}
	return StreamMore
}

// execute renders m with gqlgen's executor. The first time in a turn it executes the
// operation again, from its compact copy, with the stream in the context (see withStream),
// and keeps the response handler for the rest of the turn; the handler then takes m from
// the stream's channel. resp is nil when ctx ended; ok is false when the executor answered
// nothing.
func (st *Stream) execute(ctx context.Context, m feedEvent) (resp *graphql.Response, ok bool) {
	if st.responses == nil {
		responses, rctx := st.exec.DispatchOperation(withStream(graphql.StartOperationTrace(ctx), st), st.op.context())
		if responses == nil {
			st.log.Error("subscription: the executor answered nothing")
			return nil, false
		}
		st.responses, st.rctx = responses, rctx
	}
	st.src.hand(m)
	return st.responses(st.rctx), true
}

// retryLater calls notify after retryAfter, unless the stream is closed by then.
func (st *Stream) retryLater() {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed:
	case st.retry == nil:
		st.retry = time.AfterFunc(retryAfter, st.notify)
	default:
		st.retry.Reset(retryAfter)
	}
}

// Close ends the stream: it closes its subscription to the log and stops a retry that is
// due. It may be called while Pump runs, and more than once.
func (st *Stream) Close() {
	st.mu.Lock()
	st.closed = true
	if st.retry != nil {
		st.retry.Stop()
	}
	st.mu.Unlock()
	st.src.close()
}

// scratch is what a turn of Pump renders events into, borrowed from scratches for the
// turn: a buffer for the fast renderer and the response that carries it to Send, so that
// neither is allocated for each event.
type scratch struct {
	buf  bytes.Buffer
	resp graphql.Response
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// maxScratch is the largest buffer a scratch keeps when it goes back to the pool: an
// event with a long message would otherwise keep its size there.
const maxScratch = 64 << 10

// release gives sc back to scratches, unless its buffer grew beyond maxScratch.
func (sc *scratch) release() {
	if sc.buf.Cap() > maxScratch {
		return
	}
	sc.resp = graphql.Response{}
	scratches.Put(sc)
}
