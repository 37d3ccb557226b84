package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
)

// endStreamsAtExpiry ends a server-sent events stream when the token that opened it
// expires, as websockets are closed with 4401 then. The stream gets one last event, a
// `next` whose payload is an error with code UNAUTHENTICATED ("token expired"), and then
// the response ends WITHOUT `event: complete`: the subscription did not complete, so a
// client should sign in again and resubscribe after the last cursor it saw.
func endStreamsAtExpiry(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := r.Context().Value(identityKey{}).(jwtauth.Identity)
		if !ok || id.Expires.IsZero() || !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		ew := &expiringWriter{ResponseWriter: w}
		t := time.AfterFunc(time.Until(id.Expires), func() {
			ew.expire()
			cancel()
		})
		defer t.Stop()
		next.ServeHTTP(ew, r.WithContext(ctx))
	})
}

var tokenExpiredEvent = func() []byte {
	b, _ := json.Marshal(map[string]any{"errors": []any{graph.Error(service.Errorf(service.EUNAUTHORIZED, "token expired"))}})
	return append(append([]byte("event: next\ndata: "), b...), "\n\n"...)
}()

var errStreamEnded = errors.New("the stream's token expired")

// expiringWriter passes a stream through until its token expires, then writes the
// expiry event and swallows the rest (gqlgen's `event: complete` among it).
type expiringWriter struct {
	http.ResponseWriter
	mu      sync.Mutex
	started bool // something was written: headers are sent
	pending bool // expired before anything was written
	ended   bool
}

// expire runs on the timer's goroutine: it writes the event only once the handler has
// written (and so set its headers); otherwise the handler's next write does.
func (e *expiringWriter) expire() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return
	}
	if !e.started {
		e.pending = true
		return
	}
	e.endLocked()
}

func (e *expiringWriter) endLocked() {
	_, _ = e.ResponseWriter.Write(tokenExpiredEvent)
	if f, ok := e.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	e.ended = true
}

func (e *expiringWriter) Write(b []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return 0, errStreamEnded
	}
	if e.pending {
		e.endLocked()
		return 0, errStreamEnded
	}
	e.started = true
	return e.ResponseWriter.Write(b)
}

func (e *expiringWriter) Flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f, ok := e.ResponseWriter.(http.Flusher); ok && !e.ended {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (e *expiringWriter) Unwrap() http.ResponseWriter { return e.ResponseWriter }
