package graph

import (
	"context"
	"strings"

	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// Shared reads: sharedStream drives a Stream like messageStream's, over a share link's
// stream (service.SharedSubscription), whose events map to their GraphQL types with
// shared cursors and messages that read through the link's mask.

// publicURLKey is the context key of WithPublicURL.
type publicURLKey struct{}

// WithPublicURL returns ctx for operations whose share links live under base (the
// server's public URL, or the request's scheme and host): the transport sets it.
func WithPublicURL(ctx context.Context, base string) context.Context {
	return context.WithValue(ctx, publicURLKey{}, strings.TrimRight(base, "/"))
}

// ShareURL is where the chat app shows what token opens: <base>/s/<token>.
func ShareURL(ctx context.Context, token string) string {
	base, _ := ctx.Value(publicURLKey{}).(string)
	return base + "/s/" + token
}

// openShared opens a feed of the share link's stream for the sharedStream resolver in ctx,
// after after (or where SubscribeFrom said), and makes the stream's plans.
func (st *Stream) openShared(ctx context.Context, r *Resolver, token string, after *string) error {
	var cursor string
	if after != nil {
		cursor = *after
	}
	sub, err := r.Service.SubscribeShared(ctx, token, st.from(cursor), st.notify)
	if err != nil {
		return err
	}
	mask := sub.Mask()
	view := func(ctx context.Context, ev *service.Event) model.SessionEvent {
		return r.eventAt(ctx, ev, service.EncodeShareCursor(service.CursorOf(ev)), mask)
	}
	st.src = &sessionFeed{sub: sub, view: view, ch: make(chan model.SessionEvent, 1)}
	st.planFrom(ctx)
	return nil
}

// GoneError is the error a subscription ends with when its stream is gone (StreamGone).
func GoneError() gqlerror.List { return gqlerror.List{Error(service.ErrNoShare)} }
