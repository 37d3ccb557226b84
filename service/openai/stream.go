package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/talkgraph/talkgraph/service"
)

// turn is what one streamed response produced.
type turn struct {
	text   strings.Builder
	calls  []*call
	finish string         // the finish_reason, "" when none arrived
	usage  *service.Usage // what the provider said the request cost, if it did
}

// call is one tool call of a response, as it is assembled from deltas and then run.
type call struct {
	index   int64
	modelID string // the ID the model gave, possibly empty or repeated
	name    string
	args    strings.Builder
	// handle is set once the call has been reported with StartTool; id is then the
	// handle's ID, the one used with the model from there on.
	handle service.ToolHandle
	id     string
}

func (t *turn) wireCalls() []wireCall {
	out := make([]wireCall, len(t.calls))
	for i, c := range t.calls {
		out[i] = wireCall{id: c.id, name: c.name, args: validArgs(c.args.String())}
	}
	return out
}

// stream makes one request, retrying it while that is safe: the failure is transient
// (429, 5xx, a connection error) and nothing of the response reached out yet, so a retry
// can never show the user something twice.
func (a *Agent) stream(ctx context.Context, params oai.ChatCompletionNewParams, out *guardedOutput, used map[string]bool, rt *runTrace) (*turn, error) {
	for attempt := 0; ; attempt++ {
		span := rt.startCall(ctx, attempt)
		t, emitted, err := a.attempt(ctx, params, out, used)
		rt.endCall(span, t, err, a.secret)
		if err == nil {
			return t, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var f *failure
		if !errors.As(err, &f) {
			return nil, err // out refused a write: the run is over
		}
		if emitted || !f.retry || attempt >= a.retries {
			return nil, f.err(a.secret)
		}
		delay := f.retryAfter
		if delay < 0 {
			// Exponential backoff with jitter: 0.5s, 1s, 2s, … ±25%, at most 8s.
			delay = min(a.baseDelay<<attempt, 8*time.Second)
			delay += time.Duration((rand.Float64() - 0.5) * 0.5 * float64(delay))
		}
		if delay > a.maxDelay {
			// Retrying sooner than the provider allows would only fail again.
			return nil, f.err(a.secret)
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

// attempt makes one streamed request and passes the reply to out as it arrives. emitted
// reports whether anything was written to out. A failure of the request is a *failure; an
// error from out is returned as it is. used holds the tool call IDs of the session, which
// are not offered to the service again.
func (a *Agent) attempt(ctx context.Context, params oai.ChatCompletionNewParams, out *guardedOutput, used map[string]bool) (t *turn, emitted bool, err error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &watchdog{idle: a.idle, stall: func() { cancel(errStalled) }}
	defer w.stop()

	// The middleware sees the raw exchange: it arms the watchdog, keeps error responses
	// away from the SDK (whose error keeps the request, Authorization header included)
	// and wraps the body so that every byte read feeds the watchdog.
	mw := func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		w.arm()
		res, err := next(req)
		if err != nil {
			w.setTransportErr(err)
			return nil, err
		}
		if res.StatusCode >= 400 {
			body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
			_ = res.Body.Close()
			return nil, &statusError{
				status:     res.StatusCode,
				retryAfter: parseRetryAfter(res.Header, time.Now()),
				message:    providerMessage(body, a.secret),
			}
		}
		w.feed()
		res.Body = &watchedBody{ReadCloser: res.Body, w: w}
		return res, nil
	}

	s := a.client.NewStreaming(actx, params, option.WithMiddleware(mw))
	defer s.Close()

	t = &turn{}
	fail := func(err error) (*turn, bool, error) {
		_ = out.flush() // what was received stays, even when the run fails
		abandon(t.calls, "not run: the model's reply failed")
		return nil, emitted, err
	}
	for s.Next() {
		chunk := s.Current()
		if u := chunk.Usage; chunk.JSON.Usage.Valid() {
			t.usage = &service.Usage{InputTokens: int(u.PromptTokens), OutputTokens: int(u.CompletionTokens)}
			if u.PromptTokensDetails.JSON.CachedTokens.Valid() {
				cached := int(u.PromptTokensDetails.CachedTokens)
				t.usage.CachedInputTokens = &cached
			}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue // only one choice is asked for
			}
			for _, delta := range []string{ch.Delta.Content, ch.Delta.Refusal} {
				if delta == "" {
					continue
				}
				emitted = true
				t.text.WriteString(delta)
				if err := out.Text(delta); err != nil {
					return fail(err)
				}
			}
			for _, d := range ch.Delta.ToolCalls {
				t.addDelta(d)
			}
			if ch.FinishReason != "" {
				t.finish = ch.FinishReason
			}
		}
		// Report calls as soon as they are complete, so that they show while the
		// model is still writing the next one.
		if err := t.start(out, false, &emitted, used); err != nil {
			return fail(err)
		}
	}

	err = s.Err()
	switch {
	case ctx.Err() != nil:
		return fail(ctx.Err())
	case errors.Is(context.Cause(actx), errStalled):
		return fail(&failure{message: "the model provider stopped responding", cause: errStalled.Error(), retryAfter: -1})
	case err != nil:
		return fail(classify(err, w, a.secret))
	case t.finish == "":
		return fail(&failure{message: "the model's reply was cut off", cause: "the stream ended without a finish_reason", retryAfter: -1})
	}
	for _, c := range t.calls {
		if c.name == "" {
			return fail(&failure{message: "the model provider sent a malformed reply", cause: "a tool call without a name", retryAfter: -1})
		}
	}
	if err := t.start(out, true, &emitted, used); err != nil {
		return fail(err)
	}
	if err := out.flush(); err != nil {
		return fail(err)
	}
	return t, emitted, nil
}

// classify turns the error that ended a stream into a failure.
func classify(err error, w *watchdog, key *secret) *failure {
	var se *statusError
	var ev *ssestream.StreamError
	switch {
	case errors.As(err, &se):
		return failureFor(se)
	case errors.As(err, &ev):
		return &failure{
			message:    "the model provider reported an error: " + streamErrorMessage(ev.Event.Data, key),
			cause:      "error event in the stream",
			retryAfter: -1,
		}
	case w.isTransportErr(err):
		return &failure{message: "could not reach the model provider", cause: err.Error(), retry: true, retryAfter: -1}
	case w.isReadErr(err):
		return &failure{message: "the connection to the model provider was lost", cause: err.Error(), retry: true, retryAfter: -1}
	default:
		// What is left is the SDK failing to decode a chunk.
		return &failure{message: "the model provider sent a malformed reply", cause: err.Error(), retryAfter: -1}
	}
}

// addDelta merges one tool-call delta into the turn. Servers differ: OpenAI sends the ID
// and name once and the arguments in fragments, keyed by index; vLLM repeats the ID in
// every fragment; Ollama sends each call whole, sometimes several with the same index.
// So a known ID continues its call, a new ID starts one, and a fragment without ID
// continues the latest call with its index unless it names a tool again.
func (t *turn) addDelta(d oai.ChatCompletionChunkChoiceDeltaToolCall) {
	var c *call
	if d.ID != "" {
		for _, k := range t.calls {
			if k.modelID == d.ID {
				c = k
			}
		}
	} else {
		for _, k := range t.calls {
			if k.index == d.Index {
				c = k
			}
		}
		if c != nil && d.Function.Name != "" && c.name != "" {
			c = nil
		}
	}
	if c == nil {
		c = &call{index: d.Index, modelID: d.ID}
		t.calls = append(t.calls, c)
	}
	if c.name == "" {
		c.name = d.Function.Name
	}
	c.args.WriteString(d.Function.Arguments)
}

// start reports with StartTool the calls that are complete: all of them when final,
// otherwise those whose arguments already form a JSON value (nothing can follow it) or that
// another call has followed.
//
// A call keeps the model's own ID, which goes to the service as the call's CallID and back
// to the model with the results and the history, unless the model gave none or the session
// used it already (some servers number their calls afresh in every response): then the
// call gets an ID of the shape every provider accepts (newCallID).
func (t *turn) start(out service.Output, final bool, emitted *bool, used map[string]bool) error {
	for i, c := range t.calls {
		if c.handle != nil || c.name == "" {
			continue
		}
		if !final && i == len(t.calls)-1 && !completeJSON(c.args.String()) {
			continue
		}
		id := c.modelID
		for used[id] {
			id = newCallID()
		}
		*emitted = true
		h, err := out.StartTool(id, c.name, c.args.String())
		if err != nil {
			return err
		}
		c.handle, c.id = h, id
		used[c.modelID], used[id] = true, true
	}
	return nil
}

// newCallID returns a random tool call ID of nine letters and digits: the strictest shape
// providers ask for (Mistral's), and plenty for the calls of one session.
func newCallID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 9)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

func completeJSON(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasSuffix(s, "}") && json.Valid([]byte(s))
}

// abandon finishes calls that were reported but will not run. After a stop the service
// may refuse the report; that is fine, it marks them itself.
func abandon(calls []*call, why string) {
	for _, c := range calls {
		if c.handle != nil {
			_ = c.handle.Finish("", errors.New(why))
		}
	}
}

// watchdog cancels a request that receives nothing for idle. It also remembers the errors
// the transport gave, to tell them from decoding errors later.
type watchdog struct {
	idle  time.Duration
	stall func()

	mu           sync.Mutex
	timer        *time.Timer
	stopped      bool
	transportErr error
	readErr      error
}

func (w *watchdog) arm() {
	if w.idle <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(w.idle, w.stall)
		return
	}
	w.timer.Reset(w.idle)
}

// feed is called on every sign of life.
func (w *watchdog) feed() { w.arm() }

func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

func (w *watchdog) setTransportErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.transportErr = err
}

func (w *watchdog) setReadErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.readErr == nil {
		w.readErr = err
	}
}

func (w *watchdog) isTransportErr(err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.transportErr != nil && errors.Is(err, w.transportErr)
}

func (w *watchdog) isReadErr(err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readErr != nil && errors.Is(err, w.readErr)
}

// watchedBody feeds the watchdog with every read that returns data, keep-alive comments
// included, and records the first read error.
type watchedBody struct {
	io.ReadCloser
	w *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.feed()
	}
	if err != nil && err != io.EOF {
		b.w.setReadErr(err)
	}
	return n, err
}
