package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
)

// originChecker allows upgrades with no Origin (not a browser), from the server's own
// origin, and from the listed origins ("*" allows any).
func originChecker(allowed []string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		origin := r.Header.Get("Origin")
		if origin == "" {
			return true
		}
		u, err := url.Parse(origin)
		if err != nil {
			return false
		}
		if strings.EqualFold(u.Host, r.Host) {
			return true
		}
		for _, a := range allowed {
			if a == "*" || strings.EqualFold(strings.TrimRight(a, "/"), origin) {
				return true
			}
		}
		return false
	}
}

// wsValues keeps of a websocket's upgrade request the identity its Authorization header
// proved, if any (wsAuthenticate falls back on it), and its client address (which its
// subscriptions count against, see crowding), and nothing else: the request's own context
// holds the HTTP server's state for the connection it came on.
func wsValues(addrs clientAddresses, publicURL string) func(r *http.Request) context.Context {
	return func(r *http.Request) context.Context {
		ctx := context.WithValue(context.Background(), clientAddrKey{}, addrs.of(r))
		ctx = graph.WithPublicURL(ctx, publicBase(r, publicURL))
		if id, ok := r.Context().Value(identityKey{}).(jwtauth.Identity); ok {
			ctx = context.WithValue(ctx, identityKey{}, id)
		} else if r.Header.Get("Authorization") != "" {
			ctx = context.WithValue(ctx, refusedHeaderKey{}, true)
		}
		return ctx
	}
}

// refusedHeaderKey marks a websocket whose upgrade carried an Authorization header that
// was refused: connection_init must then carry a good token.
type refusedHeaderKey struct{}

// wsAuthenticate authorises a websocket with the token of connection_init's payload
// (Authorization, key matched without regard to case, "Bearer <token>" or the bare token),
// or else the upgrade request's Authorization header; with neither, the connection has no
// user, and serves only what needs none (shared reads). A token that is refused, in the
// payload or the header, closes it. The socket's authorisation ends at
// the token's expiry. A token past its expiry is refused here even within the clock skew
// that Verify tolerates for single requests: a socket would be acknowledged only to be
// closed at once.
func wsAuthenticate(auth *jwtauth.Auth) func(ctx context.Context, payload map[string]any) (context.Context, time.Time, error) {
	return func(ctx context.Context, payload map[string]any) (context.Context, time.Time, error) {
		var value string
		for k, v := range payload {
			if strings.EqualFold(k, "authorization") {
				value, _ = v.(string)
			}
		}
		var id jwtauth.Identity
		switch {
		case value != "":
			tok, ok := jwtauth.Bearer(value)
			if !ok {
				tok = strings.TrimSpace(value) // a bare token is accepted too
			}
			var err error
			if id, err = auth.Verify(tok); err != nil {
				return nil, time.Time{}, err
			}
		case ctx.Value(refusedHeaderKey{}) != nil:
			return nil, time.Time{}, service.Errorf(service.EUNAUTHORIZED, `connection_init needs {"Authorization": "Bearer <token>"}`)
		default:
			var ok bool
			if id, ok = ctx.Value(identityKey{}).(jwtauth.Identity); !ok {
				// No token at all: a connection for shared reads (sharedStream), on which
				// every other operation answers UNAUTHENTICATED.
				return ctx, time.Time{}, nil
			}
		}
		if !id.Expires.IsZero() && !time.Now().Before(id.Expires) {
			return nil, time.Time{}, service.Errorf(service.EUNAUTHORIZED, "token expired")
		}
		return withIdentity(ctx, id), id.Expires, nil
	}
}
