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

// openShared opens the share link's stream st drives, for the resolver in ctx.
func (st *Stream) openShared(ctx context.Context, r *Resolver, token string, after *string) error {
	var cursor string
	if after != nil {
		cursor = *after
	}
	if st.resuming {
		cursor = st.resume
	}
	sub, err := r.Service.SubscribeShared(ctx, token, cursor, st.notify)
	if err != nil {
		return err
	}
	mask := sub.Mask()
	st.r, st.sub = r, sub
	st.view = func(ctx context.Context, ev *service.Event) model.SessionEvent {
		return r.eventAt(ctx, ev, service.EncodeShareCursor(service.CursorOf(ev)), mask)
	}
	st.planFrom(ctx)
	return nil
}

// GoneError is the error a subscription ends with when its stream is gone (StreamGone).
func GoneError() gqlerror.List { return gqlerror.List{Error(service.ErrNoShare)} }
