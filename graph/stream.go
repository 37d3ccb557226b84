package graph

import (
	"bytes"
	"context"
	"time"

	"github.com/99designs/gqlgen/graphql"

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
	// plans render text chunks and tool output without the executor (see chunkPlan),
	// made from the operation and its messageStream field at the first chunk (an idle
	// subscription never needs them); rendered is the event Next rendered so.
	oc       *graphql.OperationContext
	root     *graphql.CollectedField
	plans    map[string]*chunkPlan
	rendered []byte
}

// StreamSink receives the Stream of a subscription the transport executes. Notify is
// called, on any goroutine, whenever Next may have something new; it must not block.
type StreamSink struct {
	Notify func()
	Stream *Stream
}

type sinkKey struct{}

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

// chunkPlan renders the events a subscription sends most, text chunks and tool output,
// without the executor: their fields are all scalars, so once the subscription's
// selection for the type is known (collected as the executor would, with @skip and
// @include applied) each event is a few writes with gqlgen's own marshalers, byte for byte
// what the executor would answer. A selection the plan cannot render (a deferred field, a
// field it does not know) leaves the type to the executor.
type chunkPlan struct {
	root   string   // the response key of messageStream
	fields []string // the response keys in order, each with its field's name below
	names  []string
}

// chunkTypes are the event types with a plan, with the types they satisfy.
var chunkTypes = map[string][]string{
	"MessageChunk":   {"MessageChunk", "SessionEvent"},
	"ToolCallOutput": {"ToolCallOutput", "SessionEvent"},
}

// planFrom keeps what the stream's plans are made from: the operation and the
// messageStream field whose resolver runs in ctx.
func (s *Stream) planFrom(ctx context.Context) {
	if !graphql.HasOperationContext(ctx) {
		return
	}
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		s.oc, s.root = graphql.GetOperationContext(ctx), &fc.Field
	}
}

// plan returns the plan for typ, making the stream's plans on first use.
func (s *Stream) plan(typ string) *chunkPlan {
	if s.plans == nil {
		s.plans = make(map[string]*chunkPlan, len(chunkTypes))
		if s.oc != nil {
			for t, satisfies := range chunkTypes {
				if p := planChunk(s.oc, *s.root, t, satisfies); p != nil {
					s.plans[t] = p
				}
			}
		}
		s.oc, s.root = nil, nil
	}
	return s.plans[typ]
}

func planChunk(oc *graphql.OperationContext, root graphql.CollectedField, typ string, satisfies []string) *chunkPlan {
	p := &chunkPlan{root: root.Alias}
	seen := map[string]bool{}
	for _, f := range graphql.CollectFields(oc, root.Selections, satisfies) {
		if len(f.Deferrables) > 0 || len(f.Selections) > 0 || len(f.Arguments) > 0 {
			return nil
		}
		switch f.Name {
		case "__typename", "cursor", "at", "messageId", "delta", "offset":
		case "toolCallId":
			if typ != "ToolCallOutput" {
				return nil
			}
		default:
			return nil
		}
		if seen[f.Alias] {
			continue
		}
		seen[f.Alias] = true
		p.fields = append(p.fields, f.Alias)
		p.names = append(p.names, f.Name)
	}
	return p
}

// render writes the response data of one chunk event.
func (p *chunkPlan) render(buf *bytes.Buffer, typ string, cursor string, at time.Time, messageID, toolCallID, delta string, offset int) {
	buf.WriteByte('{')
	graphql.MarshalString(p.root).MarshalGQL(buf)
	buf.WriteString(":{")
	for i, key := range p.fields {
		if i > 0 {
			buf.WriteByte(',')
		}
		graphql.MarshalString(key).MarshalGQL(buf)
		buf.WriteByte(':')
		switch p.names[i] {
		case "__typename":
			graphql.MarshalString(typ).MarshalGQL(buf)
		case "cursor":
			graphql.MarshalString(cursor).MarshalGQL(buf)
		case "at":
			graphql.MarshalTime(at).MarshalGQL(buf)
		case "messageId":
			graphql.MarshalID(messageID).MarshalGQL(buf)
		case "toolCallId":
			graphql.MarshalID(toolCallID).MarshalGQL(buf)
		case "delta":
			graphql.MarshalString(delta).MarshalGQL(buf)
		case "offset":
			graphql.MarshalInt(offset).MarshalGQL(buf)
		}
	}
	buf.WriteString("}}")
}

// fast renders m when a plan covers its type.
func (s *Stream) fast(m model.SessionEvent) []byte {
	var typ, cursor, messageID, toolCallID, delta string
	var at time.Time
	var offset int
	switch e := m.(type) {
	case *model.MessageChunk:
		typ, cursor, at, messageID, delta, offset = "MessageChunk", e.Cursor, e.At, e.MessageID, e.Delta, e.Offset
	case *model.ToolCallOutput:
		typ, cursor, at, messageID, delta, offset = "ToolCallOutput", e.Cursor, e.At, e.MessageID, e.Delta, e.Offset
		toolCallID = e.ToolCallID
	default:
		return nil
	}
	p := s.plan(typ)
	if p == nil {
		return nil
	}
	var buf bytes.Buffer
	p.render(&buf, typ, cursor, at, messageID, toolCallID, delta, offset)
	return buf.Bytes()
}

// Rendered returns the response data of the event Next made ready when it rendered it
// itself (a text chunk or tool output), or nil when the executor's response handler must
// render it.
func (s *Stream) Rendered() []byte {
	b := s.rendered
	s.rendered = nil
	return b
}
