package service_test

import (
	"context"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// watch subscribes to a session and hands its events over on a channel, closed when the
// session is deleted, the server shuts down or ctx ends: the way a transport reads a
// Subscription, for tests.
func watch(svc *service.Service, ctx context.Context, sessionID, after string) (<-chan *service.Event, error) {
	wake := make(chan struct{}, 1)
	sub, err := svc.Subscribe(ctx, sessionID, after, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	out := make(chan *service.Event)
	go func() {
		defer close(out)
		defer sub.Close()
		for {
			evs, err := sub.Read(ctx, 0)
			if err == service.ErrSessionDeleted || err == service.ErrShutdown {
				return
			}
			if err != nil {
				select {
				case <-time.After(50 * time.Millisecond):
					continue
				case <-ctx.Done():
					return
				}
			}
			for _, ev := range evs {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			if len(evs) == 0 {
				select {
				case <-wake:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
