package service

import (
	"context"
	"time"
)

type userKey struct{}

// WithUser returns a context for operations made by userID.
func WithUser(ctx context.Context, userID string) context.Context {
	return context.WithValue(ctx, userKey{}, userID)
}

// UserFrom returns the user of the context, or "" when there is none.
func UserFrom(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}

func unixNano(ns int64) time.Time { return time.Unix(0, ns).UTC() }
