package service

import (
	"context"
	"time"
)

type userKey struct{}
type guestKey struct{}

// WithUser returns a context for operations made by userID.
func WithUser(ctx context.Context, userID string) context.Context {
	return context.WithValue(ctx, userKey{}, userID)
}

// UserFrom returns the user of the context, or "" when there is none.
func UserFrom(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}

// WithGuest returns a context whose user signed in as a guest (a token of the server's
// guest sign-in). A guest's sessions are never offered the tools that act on the server's
// own machine (ToolInfo.Host) unless Config.GuestHostTools says so.
func WithGuest(ctx context.Context) context.Context {
	return context.WithValue(ctx, guestKey{}, true)
}

// GuestFrom reports whether the context's user signed in as a guest.
func GuestFrom(ctx context.Context) bool {
	g, _ := ctx.Value(guestKey{}).(bool)
	return g
}

func unixNano(ns int64) time.Time { return time.Unix(0, ns).UTC() }
