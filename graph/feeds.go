package graph

import (
	"context"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// A feed is what a Stream reads: a session's log (messageStream) or a user's viewer log
// (viewerEvents), each a position in it, with what it has read and not yet sent.
type feed interface {
	// next returns the next event the schema shows, in its GraphQL type; nil with a nil
	// error when the feed has caught up.
	next(ctx context.Context) (feedEvent, error)
	// hand gives m to the channel the subscription's resolver answered with, for the
	// executor to render it.
	hand(m feedEvent)
	// close ends the feed's subscription.
	close()
}

// feedEvent is an event of a feed in its GraphQL type: a SessionEvent or a ViewerEvent.
type feedEvent interface{ GetCursor() string }

// sessionFeed is a feed of a session's log: read whole (messageStream) or through a share
// link's mask (sharedStream).
type sessionFeed struct {
	sub reader
	// view maps an event of sub to its GraphQL type (nil: not shown): Resolver.event for
	// messageStream, through the link's mask for sharedStream.
	view func(ctx context.Context, ev *service.Event) model.SessionEvent
	buf  []*service.Event        // read from the log, not yet sent
	ch   chan model.SessionEvent // buffered(1): the event the executor renders next
}

// reader is what a sessionFeed reads: a session's log (service.Subscription), or a share
// link's (service.SharedSubscription).
type reader interface {
	Read(ctx context.Context, max int) ([]*service.Event, error)
	Close()
}

// openSession opens a feed of sessionID's log for the messageStream resolver in ctx, after
// after (or where SubscribeFrom said), and makes the stream's plans.
func (st *Stream) openSession(ctx context.Context, r *Resolver, sessionID, after string) error {
	sub, err := r.Service.Subscribe(ctx, sessionID, st.from(after), st.notify)
	if err != nil {
		return err
	}
	st.src = &sessionFeed{sub: sub, view: r.event, ch: make(chan model.SessionEvent, 1)}
	st.planFrom(ctx)
	return nil
}

func (f *sessionFeed) next(ctx context.Context) (feedEvent, error) {
	for {
		if len(f.buf) == 0 {
			evs, err := f.sub.Read(ctx, 0)
			if err != nil || len(evs) == 0 {
				return nil, err
			}
			f.buf = evs
		}
		ev := f.buf[0]
		f.buf[0] = nil
		f.buf = f.buf[1:]
		if m := f.view(ctx, ev); m != nil {
			return m, nil
		}
	}
}

func (f *sessionFeed) hand(m feedEvent) {
	select {
	case <-f.ch: // an event a handler whose context ended did not take
	default:
	}
	f.ch <- m.(model.SessionEvent)
}

func (f *sessionFeed) close() { f.sub.Close() }

// viewerFeed is a feed of a user's viewer log.
type viewerFeed struct {
	r   *Resolver
	sub *service.ViewerSubscription
	buf []*service.ViewerEvent
	ch  chan model.ViewerEvent
}

// openViewer opens a feed of the caller's viewer log for the viewerEvents resolver, after
// after (or where SubscribeFrom said). Its events are rare: the executor renders them.
func (st *Stream) openViewer(ctx context.Context, r *Resolver, after string) error {
	sub, err := r.Service.SubscribeViewer(ctx, st.from(after), st.notify)
	if err != nil {
		return err
	}
	st.src = &viewerFeed{r: r, sub: sub, ch: make(chan model.ViewerEvent, 1)}
	return nil
}

func (f *viewerFeed) next(ctx context.Context) (feedEvent, error) {
	if len(f.buf) == 0 {
		evs, err := f.sub.Read(ctx, 0)
		if err != nil || len(evs) == 0 {
			return nil, err
		}
		f.buf = evs
	}
	ev := f.buf[0]
	f.buf[0] = nil
	f.buf = f.buf[1:]
	return f.r.viewerEvent(ctx, f.sub.Cursor(ev), ev), nil
}

func (f *viewerFeed) hand(m feedEvent) {
	select {
	case <-f.ch:
	default:
	}
	f.ch <- m.(model.ViewerEvent)
}

func (f *viewerFeed) close() { f.sub.Close() }
