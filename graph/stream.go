package graph

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// Stream is a messageStream subscription that a transport drives itself, so that an open
// subscription costs no goroutine: the transport puts a StreamSink in the operation's
// context, the resolver leaves the Stream there, and whenever the sink's Notify is called
// the transport calls Next and, for each event it yields, the executor's response handler,
// which takes the event from the stream's channel and renders it, on the transport's own
// goroutine.
type Stream struct {
	r   *Resolver
	sub *service.Subscription
	ch  chan model.SessionEvent // buffered(1): what the response handler renders next
	buf []*service.Event
	// plans render the commonest events without the executor (see plan and planFrom);
	// rootKey is the messageStream field's response key as JSON, with its colon; rendered
	// is the event Next rendered so.
	rootKey  string
	plans    map[string]*plan
	rendered []byte
}

// StreamSink receives the Stream of a subscription the transport executes. Notify is
// called, on any goroutine, whenever Next may have something new; it must not block.
//
// The transport need not keep the executor's response handler while the stream idles:
// to render an event Next left to the executor it may execute the operation again with
// a sink that holds the Stream already, and the resolver then answers that stream's
// events instead of subscribing anew (see Resumed).
type StreamSink struct {
	Notify func()
	Stream *Stream
}

type sinkKey struct{}

// Resumed reports whether ctx executes a subscription again for a Stream the transport
// drives already (see StreamSink): not a new operation.
func Resumed(ctx context.Context) bool {
	sink, _ := ctx.Value(sinkKey{}).(*StreamSink)
	return sink != nil && sink.Stream != nil
}

// WithStreamSink returns ctx for executing a subscription whose stream the transport
// drives itself.
func WithStreamSink(ctx context.Context, sink *StreamSink) context.Context {
	return context.WithValue(ctx, sinkKey{}, sink)
}

// Next makes the next event ready: rendered already (see Rendered), or for the response
// handler. It returns false with a nil
// error when the stream has caught up (Notify says when to try again), and false with an
// error when it is over: service.ErrSessionDeleted when the session was deleted (the
// subscription is complete), service.ErrShutdown when the server shuts down (the client
// should reconnect), or another error when the log cannot be read now (try again later).
func (s *Stream) Next(ctx context.Context) (bool, error) {
	for {
		if len(s.buf) == 0 {
			evs, err := s.sub.Read(ctx, 0)
			if err != nil || len(evs) == 0 {
				return false, err
			}
			s.buf = evs
		}
		ev := s.buf[0]
		s.buf[0] = nil
		s.buf = s.buf[1:]
		if m := s.r.event(ctx, ev); m != nil {
			if s.rendered = s.fast(m); s.rendered == nil {
				s.ch <- m
			}
			return true, nil
		}
	}
}

// Close ends the stream.
func (s *Stream) Close() { s.sub.Close() }

// streamChannel runs a subscription on a goroutine of its own and hands its events over on
// a channel, for transports that read subscriptions as channels (server-sent events). The
// channel is closed when the session is deleted or ctx ends; at shutdown it stays open
// until ctx ends, so that the transport does not report the subscription complete.
func (r *Resolver) streamChannel(ctx context.Context, sessionID, after string) (<-chan model.SessionEvent, error) {
	wake := make(chan struct{}, 1)
	sub, err := r.Service.Subscribe(ctx, sessionID, after, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	out := make(chan model.SessionEvent)
	go func() {
		defer sub.Close()
		for {
			evs, err := sub.Read(ctx, 0)
			switch {
			case err == service.ErrSessionDeleted:
				close(out)
				return
			case err == service.ErrShutdown:
				<-ctx.Done()
				return
			case err != nil: // the log cannot be read now: try again
				select {
				case <-ctx.Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			for _, ev := range evs {
				m := r.event(ctx, ev)
				if m == nil {
					continue
				}
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			}
			if len(evs) > 0 {
				continue
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// A plan renders the events a subscription sends most without the executor: text chunks
// and tool output, new and completed messages, and run status changes. Their fields are
// scalars or objects of scalars, so once the subscription's selection for the type is
// known (collected as the executor collects it, with fragments merged and @skip and
// @include applied) each event is a few writes with gqlgen's own marshalers, byte for
// byte what the executor would answer. A selection a plan cannot render (a deferred
// field, a field with arguments, one that reads more than the event: a message's question
// or tool calls) leaves the type to the executor.
type plan struct {
	keys  []string // response keys in order, each written once as JSON with its colon
	names []string // each key's field name
	subs  []*plan  // each key's plan of its object's fields; nil for a scalar
}

// planTypes are the event types with a plan, with the types they satisfy.
var planTypes = map[string][]string{
	"MessageChunk":     {"MessageChunk", "SessionEvent"},
	"ToolCallOutput":   {"ToolCallOutput", "SessionEvent"},
	"MessageAdded":     {"MessageAdded", "SessionEvent"},
	"MessageCompleted": {"MessageCompleted", "SessionEvent"},
	"RunStatusChanged": {"RunStatusChanged", "SessionEvent"},
}

// planFields says which fields of each type a plan renders: "" for a scalar, else the
// type of the object it holds.
var planFields = map[string]map[string]string{
	"MessageChunk":     {"__typename": "", "cursor": "", "at": "", "messageId": "", "delta": "", "offset": ""},
	"ToolCallOutput":   {"__typename": "", "cursor": "", "at": "", "messageId": "", "toolCallId": "", "delta": "", "offset": ""},
	"MessageAdded":     {"__typename": "", "cursor": "", "at": "", "message": "Message"},
	"MessageCompleted": {"__typename": "", "cursor": "", "at": "", "message": "Message"},
	"RunStatusChanged": {"__typename": "", "cursor": "", "at": "", "run": "Run"},
	"Message": {"__typename": "", "id": "", "sessionId": "", "role": "", "kind": "", "content": "", "status": "",
		"error": "", "runId": "", "createdAt": ""},
	"Run": {"__typename": "", "id": "", "sessionId": "", "status": "", "error": "", "agent": "", "usage": "Usage",
		"createdAt": "", "startedAt": "", "finishedAt": ""},
	"Usage": {"__typename": "", "inputTokens": "", "outputTokens": "", "cachedInputTokens": ""},
}

// planFrom makes the stream's plans from the operation and the messageStream field whose
// resolver runs in ctx, when the subscription starts: nothing of the operation then stays
// with the stream. Plans of a document without directives are shared (see plansOf), so
// that starting costs a lookup. Once made, a later call (the transport executing the
// operation again to render an event) changes nothing.
func (s *Stream) planFrom(ctx context.Context) {
	if s.plans != nil || !graphql.HasOperationContext(ctx) {
		return
	}
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		s.rootKey = jsonKey(fc.Field.Alias)
		s.plans = plansOf(graphql.GetOperationContext(ctx), &fc.Field)
	}
}

// plan returns the plan for an event type; nil leaves it to the executor.
func (s *Stream) plan(typ string) *plan { return s.plans[typ] }

// plansOf makes the plans of a subscription's messageStream field. Plans are the same
// for every subscription made with one document, unless a directive's variable tells
// them apart, so those of a document without directives are kept and shared (a
// thousand clients subscribing with the same query plan it once). Documents are those of
// the executor's query cache; shared keeps the plans of at most maxSharedPlans of them.
func plansOf(oc *graphql.OperationContext, root *graphql.CollectedField) map[string]*plan {
	key := planKey{oc.Doc, oc.OperationName, root.Alias}
	share := shareable(oc)
	if share {
		shared.mu.Lock()
		plans, ok := shared.m[key]
		shared.mu.Unlock()
		if ok {
			return plans
		}
	}
	plans := make(map[string]*plan, len(planTypes))
	for t, satisfies := range planTypes {
		if p := makePlan(oc, root.Selections, t, satisfies); p != nil {
			plans[t] = p
		}
	}
	if share {
		shared.mu.Lock()
		if len(shared.m) >= maxSharedPlans {
			clear(shared.m)
		}
		shared.m[key] = plans
		shared.mu.Unlock()
	}
	return plans
}

// shareable reports whether the plans of oc's document may be shared: no directive's
// variable can tell two of its subscriptions apart.
func shareable(oc *graphql.OperationContext) bool {
	return oc.Doc != nil && !strings.Contains(oc.RawQuery, "@")
}

// planKey names the messageStream field of one operation of one document.
type planKey struct {
	doc       *ast.QueryDocument
	operation string
	alias     string
}

const maxSharedPlans = 256

// shared holds the plans of documents without directives. Plans never change once made.
var shared = struct {
	mu sync.Mutex
	m  map[planKey]map[string]*plan
}{m: map[planKey]map[string]*plan{}}

// makePlan plans the selection sel of an object of type typ; nil when some field is
// beyond a plan.
func makePlan(oc *graphql.OperationContext, sel ast.SelectionSet, typ string, satisfies []string) *plan {
	known := planFields[typ]
	p := &plan{}
	seen := map[string]bool{}
	for _, f := range graphql.CollectFields(oc, sel, satisfies) {
		if len(f.Deferrables) > 0 || len(f.Arguments) > 0 {
			return nil
		}
		object, ok := known[f.Name]
		if !ok || (object == "") != (len(f.Selections) == 0) {
			return nil
		}
		if seen[f.Alias] {
			continue
		}
		seen[f.Alias] = true
		var sub *plan
		if object != "" {
			if sub = makePlan(oc, f.Selections, object, []string{object}); sub == nil {
				return nil
			}
		}
		p.keys = append(p.keys, jsonKey(f.Alias))
		p.names = append(p.names, f.Name)
		p.subs = append(p.subs, sub)
	}
	return p
}

// fast renders m when a plan covers its type: the response data, {"<root>":{...}}.
func (s *Stream) fast(m model.SessionEvent) []byte {
	var typ string
	switch e := m.(type) {
	case *model.MessageChunk:
		typ = "MessageChunk"
	case *model.ToolCallOutput:
		typ = "ToolCallOutput"
	case *model.MessageAdded:
		typ = "MessageAdded"
		if e.Message == nil {
			return nil
		}
	case *model.MessageCompleted:
		typ = "MessageCompleted"
		if e.Message == nil {
			return nil
		}
	case *model.RunStatusChanged:
		typ = "RunStatusChanged"
		if e.Run == nil {
			return nil
		}
	default:
		return nil
	}
	p := s.plan(typ)
	if p == nil {
		return nil
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	buf.WriteString(s.rootKey)
	p.event(&buf, typ, m)
	buf.WriteByte('}')
	return buf.Bytes()
}

// jsonKey is a response key as the executor writes it, with its colon.
func jsonKey(key string) string {
	var b bytes.Buffer
	graphql.MarshalString(key).MarshalGQL(&b)
	b.WriteByte(':')
	return b.String()
}

// object writes an object with p's fields, each field's value written by value. The
// values are written at once with gqlgen's marshalers, never kept as Marshalers: kept,
// each would cost an allocation.
func (p *plan) object(buf *bytes.Buffer, value func(i int, name string)) {
	buf.WriteByte('{')
	for i, name := range p.names {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(p.keys[i])
		value(i, name)
	}
	buf.WriteByte('}')
}

// event writes an event of type typ.
func (p *plan) event(buf *bytes.Buffer, typ string, m model.SessionEvent) {
	p.object(buf, func(i int, name string) {
		switch name {
		case "__typename":
			graphql.MarshalString(typ).MarshalGQL(buf)
		case "cursor":
			graphql.MarshalString(m.GetCursor()).MarshalGQL(buf)
		case "at":
			graphql.MarshalTime(m.GetAt()).MarshalGQL(buf)
		case "message":
			switch e := m.(type) {
			case *model.MessageAdded:
				p.subs[i].message(buf, e.Message)
			case *model.MessageCompleted:
				p.subs[i].message(buf, e.Message)
			}
		case "run":
			p.subs[i].run(buf, m.(*model.RunStatusChanged).Run)
		default:
			chunkField(buf, name, m)
		}
	})
}

// chunkField writes a field of a text chunk or of tool output.
func chunkField(buf *bytes.Buffer, name string, m model.SessionEvent) {
	var messageID, toolCallID, delta string
	var offset int
	switch e := m.(type) {
	case *model.MessageChunk:
		messageID, delta, offset = e.MessageID, e.Delta, e.Offset
	case *model.ToolCallOutput:
		messageID, toolCallID, delta, offset = e.MessageID, e.ToolCallID, e.Delta, e.Offset
	}
	switch name {
	case "messageId":
		graphql.MarshalID(messageID).MarshalGQL(buf)
	case "toolCallId":
		graphql.MarshalID(toolCallID).MarshalGQL(buf)
	case "delta":
		graphql.MarshalString(delta).MarshalGQL(buf)
	default: // offset
		graphql.MarshalInt(offset).MarshalGQL(buf)
	}
}

// message writes a Message as the executor does (error as its resolver answers it).
func (p *plan) message(buf *bytes.Buffer, m *service.HistoryMessage) {
	p.object(buf, func(_ int, name string) {
		switch name {
		case "__typename":
			graphql.MarshalString("Message").MarshalGQL(buf)
		case "id":
			graphql.MarshalID(m.ID).MarshalGQL(buf)
		case "sessionId":
			graphql.MarshalID(m.SessionID).MarshalGQL(buf)
		case "role":
			graphql.MarshalString(string(m.Role)).MarshalGQL(buf)
		case "kind":
			graphql.MarshalString(string(m.Kind)).MarshalGQL(buf)
		case "content":
			graphql.MarshalString(m.Content).MarshalGQL(buf)
		case "status":
			graphql.MarshalString(string(m.Status)).MarshalGQL(buf)
		case "error":
			optString(buf, m.Error)
		case "runId":
			graphql.MarshalID(m.RunID).MarshalGQL(buf)
		default: // createdAt
			graphql.MarshalTime(m.CreatedAt).MarshalGQL(buf)
		}
	})
}

// run writes a Run as the executor does (error as its resolver answers it).
func (p *plan) run(buf *bytes.Buffer, r *service.Run) {
	p.object(buf, func(i int, name string) {
		switch name {
		case "__typename":
			graphql.MarshalString("Run").MarshalGQL(buf)
		case "id":
			graphql.MarshalID(r.ID).MarshalGQL(buf)
		case "sessionId":
			graphql.MarshalID(r.SessionID).MarshalGQL(buf)
		case "status":
			graphql.MarshalString(string(r.Status)).MarshalGQL(buf)
		case "error":
			optString(buf, r.Error)
		case "agent":
			graphql.MarshalString(r.Agent).MarshalGQL(buf)
		case "usage":
			if r.Usage == nil {
				buf.WriteString("null")
			} else {
				p.subs[i].usage(buf, r.Usage)
			}
		case "createdAt":
			graphql.MarshalTime(r.CreatedAt).MarshalGQL(buf)
		case "startedAt":
			optTime(buf, r.StartedAt)
		default: // finishedAt
			optTime(buf, r.FinishedAt)
		}
	})
}

// usage writes a Usage.
func (p *plan) usage(buf *bytes.Buffer, u *service.Usage) {
	p.object(buf, func(_ int, name string) {
		switch name {
		case "__typename":
			graphql.MarshalString("Usage").MarshalGQL(buf)
		case "inputTokens":
			graphql.MarshalInt(u.InputTokens).MarshalGQL(buf)
		case "outputTokens":
			graphql.MarshalInt(u.OutputTokens).MarshalGQL(buf)
		default: // cachedInputTokens
			if u.CachedInputTokens == nil {
				buf.WriteString("null")
			} else {
				graphql.MarshalInt(*u.CachedInputTokens).MarshalGQL(buf)
			}
		}
	})
}

// optString writes a nullable String that is null when empty, as the error resolvers
// answer.
func optString(buf *bytes.Buffer, s string) {
	if s == "" {
		buf.WriteString("null")
		return
	}
	graphql.MarshalString(s).MarshalGQL(buf)
}

// optTime writes a nullable Time.
func optTime(buf *bytes.Buffer, t *time.Time) {
	if t == nil {
		buf.WriteString("null")
		return
	}
	graphql.MarshalTime(*t).MarshalGQL(buf)
}

// Rendered returns the response data of the event Next made ready when it rendered it
// itself (a text chunk or tool output), or nil when the executor's response handler must
// render it.
func (s *Stream) Rendered() []byte {
	b := s.rendered
	s.rendered = nil
	return b
}
