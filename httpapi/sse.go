package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
)

// sse is the server-sent events transport (POST /query with Accept: text/event-stream),
// for clients that cannot open a websocket. Each result is an event "next" whose data is
// the GraphQL response; "complete" follows only when the operation really ended (a query
// or mutation answered, a subscription's session deleted). When the server shuts down, the
// client goes away or stops reading (a write takes longer than writeTimeout), or the token
// expires (then after a last "next" with an UNAUTHENTICATED error), the stream just ends,
// so that a client reconnects and resumes with its cursor. A comment line every keepAlive
// keeps proxies from closing a quiet stream.
//
// Each event of a subscription carries its cursor as its id, and a request with a
// Last-Event-ID header resumes its subscription after that cursor, whatever its after
// argument says: a client reconnects as a browser's EventSource does, sending the same
// request again with the last id it received (see graph.SubscribeFrom).
type sse struct {
	keepAlive    time.Duration
	writeTimeout time.Duration // default 10s, as websockets'
	log          *slog.Logger  // what subscriptions report (see graph.Subscribe)
	// admit, when set, is asked before a subscription starts whether the request may hold
	// one (see crowding.admitStream); an error refuses it, release is called once it ends.
	admit func(ctx context.Context, r *http.Request) (release func(), err error)
}

var _ graphql.Transport = sse{}

func (sse) Supports(r *http.Request) bool {
	if r.Method != http.MethodPost || !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		return false
	}
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mediaType == "application/json"
}

func (t sse) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	ctx := r.Context()
	if _, ok := w.(http.Flusher); !ok {
		writeError(w, http.StatusInternalServerError, service.Errorf(service.EINTERNAL, "streaming is not supported here"))
		return
	}
	start := graphql.Now()
	params := &graphql.RawParams{}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, service.Errorf(service.EINVALID, "the body is not a GraphQL request: %v", err))
		return
	}
	if err := graph.DecodeRequest(body, params); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	expires := time.Time{}
	if id, ok := ctx.Value(identityKey{}).(jwtauth.Identity); ok {
		expires = id.Expires
	}
	// As on a websocket, a token already past its expiry gets no stream, even within the
	// clock skew single requests are allowed: it would end at once, its operation cut off.
	if !expires.IsZero() && !time.Now().Before(expires) {
		writeError(w, http.StatusUnauthorized, service.Errorf(service.EUNAUTHORIZED, "token expired"))
		return
	}
	if !expires.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, expires)
		defer cancel()
	}

	// A client that stops reading is let go: a write that does not get through within
	// writeTimeout ends the operation, and with it the stream.
	ctx, stuck := context.WithCancel(ctx)
	defer stuck()
	var broken atomic.Bool
	ctl := http.NewResponseController(w)
	timeout := cmp.Or(t.writeTimeout, 10*time.Second)

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	// write writes one event; false once the client is taken for gone.
	write := func(b []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		if broken.Load() {
			return false
		}
		// The deadline holds for this write only: one that passed while the stream was
		// quiet could not be moved any more.
		_ = ctl.SetWriteDeadline(time.Now().Add(timeout))
		_, err := w.Write(b)
		if err == nil {
			err = ctl.Flush()
		}
		if err == nil {
			err = ctl.SetWriteDeadline(time.Time{})
		}
		if err != nil && !errors.Is(err, http.ErrNotSupported) {
			broken.Store(true)
			stuck()
			return false
		}
		return true
	}
	write([]byte(":\n\n"))
	if t.keepAlive > 0 {
		tick := time.NewTicker(t.keepAlive)
		defer tick.Stop()
		go func() {
			for {
				select {
				case <-tick.C:
					write([]byte(": ping\n\n"))
				case <-ctx.Done():
					return
				}
			}
		}()
	}

	rc, errs := exec.CreateOperationContext(ctx, params)
	if errs != nil {
		write(nextEvent(exec.DispatchError(graphql.WithOperationContext(ctx, rc), errs)))
		write([]byte("event: complete\n\n"))
		return
	}
	if rc.Operation.Operation == ast.Subscription {
		release := func() {}
		if t.admit != nil {
			var err error
			if release, err = t.admit(ctx, r); err != nil {
				write(nextEvent(&graphql.Response{Errors: gqlerror.List{graph.Error(err)}}))
				write([]byte("event: complete\n\n"))
				return
			}
		}
		t.stream(ctx, exec, rc, r.Header.Get("Last-Event-ID"), write)
		release()
	} else {
		responses, rctx := exec.DispatchOperation(graphql.WithOperationContext(ctx, rc), rc)
		for {
			resp := responses(rctx)
			if resp == nil {
				break
			}
			write(nextEvent(resp))
		}
	}
	switch {
	case r.Context().Err() != nil || broken.Load(): // the client left or stopped reading, or the server shuts down
	case ctx.Err() != nil: // the token expired
		write(nextEvent(&graphql.Response{Errors: gqlerror.List{graph.Error(service.Errorf(service.EUNAUTHORIZED, "token expired"))}}))
	default:
		write([]byte("event: complete\n\n"))
	}
}

// stream sends the events of the subscription rc as events "next" until it ends, on the
// request's goroutine (see graph.Stream: the stream's rules are the websockets'), from
// after lastEventID when it is not empty. It returns when the subscription really ended
// (the session was deleted, or the subscription was refused or failed, its errors sent),
// when ctx ends, and, when the server shuts down, once the server ends ctx (Do then ends
// the response without "complete").
func (t sse) stream(ctx context.Context, exec graphql.GraphExecutor, rc *graphql.OperationContext, lastEventID string, write sseWriter) {
	wake := make(chan struct{}, 1)
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	var st *graph.Stream
	var refused *graphql.Response
	if lastEventID != "" {
		st, refused = graph.SubscribeFrom(ctx, exec, rc, lastEventID, notify, t.log)
	} else {
		st, refused = graph.Subscribe(ctx, exec, rc, notify, t.log)
	}
	if st == nil {
		write(nextEvent(refused))
		return
	}
	defer st.Close()
	for {
		switch st.Pump(ctx, write) {
		case graph.StreamMore:
			continue
		case graph.StreamDeleted:
			return
		case graph.StreamShutDown:
			// Ended now, the response would have the client resume at once, from a server
			// that serves no more subscriptions: it ends when the server ends the request.
			<-ctx.Done()
			return
		case graph.StreamFailed:
			write(nextEvent(&graphql.Response{Errors: gqlerror.List{graph.Error(service.Errorf(service.EINTERNAL, "internal error"))}}))
			return
		case graph.StreamGone:
			write(nextEvent(&graphql.Response{Errors: graph.GoneError()}))
			return
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return
		}
	}
}

// sseWriter writes one event of a stream; false once the client is taken for gone. It is
// the Output of a subscription's stream.
type sseWriter func([]byte) bool

// Send writes resp, the event at cursor, as an event "next" whose id is cursor.
func (w sseWriter) Send(resp *graphql.Response, cursor string) bool {
	buf := frames.Get().(*bytes.Buffer)
	buf.Reset()
	appendNext(buf, resp, cursor)
	ok := w(buf.Bytes()) // written through, not kept
	if buf.Cap() <= maxFrame {
		frames.Put(buf)
	}
	return ok
}

// frames are the buffers Send frames events in; one that grew beyond maxFrame (an event
// with a long message) is left to the collector rather than kept at its size.
var frames = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxFrame = 64 << 10

// nextEvent renders a response as an event "next" without an id: a query's or mutation's
// answer, or a subscription's refusal.
func nextEvent(resp *graphql.Response) []byte {
	var buf bytes.Buffer
	appendNext(&buf, resp, "")
	return buf.Bytes()
}

// appendNext writes resp as an event "next", with the id cursor unless it is empty. The
// data is the response as json.Marshal writes it, on one line: the response's data is
// written as it is, being compact JSON already (the fast renderer's, or the executor's),
// unless it holds a line break, which would end the event's data line.
func appendNext(buf *bytes.Buffer, resp *graphql.Response, cursor string) {
	if cursor != "" {
		buf.WriteString("id: ")
		buf.WriteString(cursor) // base64url: never a line break
		buf.WriteByte('\n')
	}
	buf.WriteString("event: next\ndata: ")
	data := resp.Data
	if resp.Label != "" || resp.Path != nil || resp.HasNext != nil ||
		bytes.IndexByte(data, '\n') >= 0 || bytes.IndexByte(data, '\r') >= 0 {
		b, err := json.Marshal(resp) // compacts the data; never the case for this server's responses
		if err != nil {
			b = []byte(`{"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}]}`)
		}
		buf.Write(b)
		buf.WriteString("\n\n")
		return
	}
	buf.WriteByte('{')
	if len(resp.Errors) > 0 {
		buf.WriteString(`"errors":`)
		buf.Write(mustJSON(resp.Errors))
		buf.WriteByte(',')
	}
	buf.WriteString(`"data":`)
	if len(data) == 0 {
		buf.WriteString("null")
	} else {
		buf.Write(data)
	}
	if len(resp.Extensions) > 0 {
		buf.WriteString(`,"extensions":`)
		buf.Write(mustJSON(resp.Extensions))
	}
	buf.WriteString("}\n\n")
}

// mustJSON is v as JSON; errors and extensions of a response always marshal.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte("null")
	}
	return b
}
