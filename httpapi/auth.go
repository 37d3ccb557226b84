package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
)

// authenticate puts the user of the request's bearer token in its context. A request
// without a token goes on without a user (operations then answer UNAUTHENTICATED); a
// request with a bad token is refused with 401. Websocket upgrades carry their token in
// connection_init instead.
func authenticate(a *jwtauth.Auth, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		if h == "" {
			next.ServeHTTP(w, r)
			return
		}
		tok, ok := jwtauth.Bearer(h)
		var id jwtauth.Identity
		var err error
		if !ok {
			err = service.Errorf(service.EUNAUTHORIZED, "the Authorization header must be: Bearer <token>")
		} else {
			id, err = a.Verify(tok)
		}
		if err != nil {
			if !chargeAnonymous(w, r) { // a refused token counts as no token
				return
			}
			if r.Header.Get("Upgrade") != "" {
				next.ServeHTTP(w, r) // connection_init decides
				return
			}
			refuse(w, r, http.StatusUnauthorized, err)
			return
		}
		ctx := withIdentity(r.Context(), id)
		ctx = context.WithValue(ctx, identityKey{}, id)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type identityKey struct{}

// withIdentity returns ctx for operations of the user id names (a guest's, when it is).
func withIdentity(ctx context.Context, id jwtauth.Identity) context.Context {
	ctx = service.WithUser(ctx, id.UserID)
	if id.Guest {
		ctx = service.WithGuest(ctx)
	}
	return ctx
}

// guestHandler answers POST /auth/guest with a token for a new random user.
func guestHandler(a *jwtauth.Auth, enabled bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, service.Errorf(service.EINVALID, "use POST"))
			return
		}
		if !enabled || len(a.Secret) == 0 {
			writeError(w, http.StatusForbidden, service.Errorf(service.EUNAUTHORIZED, "guest sign-in is switched off on this server"))
			return
		}
		user := uuid.NewString()
		tok, exp, err := a.IssueGuest(user)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(map[string]any{"token": tok, "userId": user, "expiresAt": exp.UTC().Format(time.RFC3339)})
	})
}

// writeError writes a GraphQL response holding one error, for requests refused before
// they reach the executor.
func writeError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []any{graph.Error(err)}})
}
