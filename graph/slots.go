package graph

import (
	"context"
	"sync/atomic"

	"github.com/talkgraph/talkgraph/service"
)

// SubscriptionSlots bounds the subscriptions open at once on one connection; a transport
// puts one in the context of every operation on the connection (WithSubscriptionSlots).
type SubscriptionSlots struct {
	max  int32
	used atomic.Int32
}

type slotsKey struct{}

// WithSubscriptionSlots returns ctx carrying room for max subscriptions.
func WithSubscriptionSlots(ctx context.Context, max int) context.Context {
	return context.WithValue(ctx, slotsKey{}, &SubscriptionSlots{max: int32(max)})
}

// take takes one of the connection's slots; ERATELIMIT when all are taken. Operations
// without slots in their context (HTTP, SSE) always get one.
func takeSlot(ctx context.Context) error {
	l, _ := ctx.Value(slotsKey{}).(*SubscriptionSlots)
	if l == nil {
		return nil
	}
	if l.used.Add(1) > l.max {
		l.used.Add(-1)
		return service.Errorf(service.ERATELIMIT, "too many subscriptions on this connection (at most %d)", l.max)
	}
	return nil
}

func releaseSlot(ctx context.Context) {
	if l, _ := ctx.Value(slotsKey{}).(*SubscriptionSlots); l != nil {
		l.used.Add(-1)
	}
}
