package graph

import (
	"bytes"
	"context"
	"time"

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
			var buf bytes.Buffer
			if s.rendered = nil; s.render(&buf, m) {
				s.rendered = buf.Bytes()
			} else {
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

// Rendered returns the response data of the event Next made ready when it rendered it
// itself (a text chunk or tool output), or nil when the executor's response handler must
// render it.
func (s *Stream) Rendered() []byte {
	b := s.rendered
	s.rendered = nil
	return b
}
