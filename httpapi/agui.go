package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/talkgraph/talkgraph/agui"
	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
)

// aguiHandler serves POST /agui: AG-UI (a RunAgentInput in, its events out as server-sent
// events), for CopilotKit and @ag-ui/client. The request's thread is bound to a session
// (service.OpenThread), its new user message added (AddMessage, its ID the idempotency
// key) and its resume entries answered (Resume), through the service's commands as on
// /query; then the session's log is rendered from where it stood before them (package
// agui) until the run ends or waits. Every event carries the cursor of its log event as its
// SSE id, and a request with Last-Event-ID changes nothing and resumes after that cursor,
// on any replica. It holds its connection as an SSE subscription of /query does, under the
// same caps (crowding.admitStream), rates and write timeout.
type aguiHandler struct {
	svc          *service.Service
	keepAlive    time.Duration
	writeTimeout time.Duration
	log          *slog.Logger
	rate         *keyedLimiter // the user's operations, as on /query
	admit        func(ctx context.Context, r *http.Request) (release func(), err error)
}

// aguiBatch is how many log events a response reads at once.
const aguiBatch = 64

func (h *aguiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, service.Errorf(service.EINVALID, "use POST with a RunAgentInput"))
		return
	}
	user := service.UserFrom(ctx)
	if user == "" {
		writeError(w, http.StatusUnauthorized, service.Errorf(service.EUNAUTHORIZED, "sign in: send Authorization: Bearer <token>"))
		return
	}
	if ok, wait := h.rate.allow(user); !ok {
		tooMany(w, r, wait, "too many operations for this user")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, service.Errorf(service.EINVALID, "the body could not be read"))
		return
	}
	in, err := agui.Decode(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, service.Errorf(service.EINVALID, "%s", err.Error()))
		return
	}
	var expires time.Time
	if id, ok := ctx.Value(identityKey{}).(jwtauth.Identity); ok {
		expires = id.Expires
	}
	if !expires.IsZero() && !time.Now().Before(expires) {
		writeError(w, http.StatusUnauthorized, service.Errorf(service.EUNAUTHORIZED, "token expired"))
		return
	}
	release, err := h.admit(ctx, r)
	if err != nil {
		writeError(w, http.StatusTooManyRequests, err)
		return
	}
	defer release()

	wake := make(chan struct{}, 1)
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	var st *aguiStream
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		st, err = h.resume(ctx, in, last, notify)
	} else {
		st, err = h.start(ctx, in, notify)
	}
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	defer st.sub.Close()
	if !expires.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, expires)
		defer cancel()
	}
	out, ok := newSSEOut(w, cmp.Or(h.writeTimeout, 10*time.Second))
	if !ok {
		writeError(w, http.StatusInternalServerError, service.Errorf(service.EINTERNAL, "streaming is not supported here"))
		return
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	out.onBroken = stop
	if h.keepAlive > 0 {
		go out.keepAlive(ctx, h.keepAlive)
	}
	if !out.frames(st.first) || st.done {
		return
	}
	h.pump(r.Context(), ctx, st, out, wake)
}

// aguiStream is one response's reading of its session's log.
type aguiStream struct {
	sessionID string
	sub       *service.Subscription
	tr        *agui.Translator
	first     []agui.Frame // what the response begins with
	done      bool         // first ends the run already
}

// start does what a request without Last-Event-ID asks (its thread, its resume entries,
// its message), with its subscription opened where the session's log stood before.
func (h *aguiHandler) start(ctx context.Context, in *agui.Input, notify func()) (*aguiStream, error) {
	v, err := h.svc.OpenThread(ctx, in.ThreadID)
	if err != nil {
		return nil, err
	}
	sub, err := h.svc.Subscribe(ctx, v.ID, v.StreamCursor, notify)
	if err != nil {
		return nil, err
	}
	run, err := h.commands(ctx, in, v)
	if err != nil {
		sub.Close()
		return nil, err
	}
	active := ""
	if v.ActiveRun != nil && v.ActiveRun.Status != service.RunQueued {
		active = v.ActiveRun.ID
	}
	tr := agui.New(in.ThreadID, v.ID, run, active)
	return &aguiStream{sessionID: v.ID, sub: sub, tr: tr, first: tr.Start("", 0)}, nil
}

// commands answers the input's resume entries and adds its new message, and returns the
// run the response follows: the message's, or the run resumed, or the one running.
func (h *aguiHandler) commands(ctx context.Context, in *agui.Input, v *service.SessionView) (*service.Run, error) {
	run := v.ActiveRun
	if len(in.Resume) > 0 {
		isCall := func(id string) bool { _, err := h.svc.ToolCall(ctx, id); return err == nil }
		args, err := agui.Responses(in.Resume, v, isCall)
		if err != nil {
			return nil, service.Errorf(service.EINVALID, "%s", err.Error())
		}
		res, err := h.svc.Resume(ctx, v.ID, args.RespondArgs)
		if err != nil {
			return nil, args.Named(err)
		}
		run = res.Run
	}
	if m := in.Message; m != nil {
		_, r, err := h.svc.AddMessage(ctx, v.ID, m.Content, m.ID)
		if err != nil {
			return nil, err
		}
		run = r
	}
	if run == nil {
		return nil, service.Errorf(service.EINVALID, "nothing to run: the last message is not a new user message, nothing is resumed and no run is active")
	}
	return run, nil
}

// resume opens the stream of a request with Last-Event-ID: after that cursor, in the run
// of its event, inside the message whose text it was in.
func (h *aguiHandler) resume(ctx context.Context, in *agui.Input, last string, notify func()) (*aguiStream, error) {
	v, err := h.svc.Thread(ctx, in.ThreadID)
	if err != nil {
		return nil, err
	}
	at, err := h.svc.StreamAt(ctx, v.ID, last)
	if err != nil {
		return nil, err
	}
	if at.RunID == "" {
		return nil, service.Errorf(service.EINVALID, "Last-Event-ID is not an id this thread's AG-UI stream sent")
	}
	sub, err := h.svc.Subscribe(ctx, v.ID, last, notify)
	if err != nil {
		return nil, err
	}
	run := &service.Run{ID: at.RunID, Status: service.RunRunning}
	if ev := at.Event; ev.Type == service.EventRunStatusChanged {
		run = ev.Run
	}
	tr := agui.New(in.ThreadID, v.ID, run, at.RunID)
	st := &aguiStream{sessionID: v.ID, sub: sub, tr: tr, first: tr.Start(at.Open, at.Sent)}
	// A client that resumes after the run's end (or wait) gets that end again.
	if at.Event.Type == service.EventRunStatusChanged {
		ending := agui.Ended
		switch run.Status {
		case service.RunWaitingForInput:
			ending = agui.Waits
		case service.RunQueued, service.RunRunning:
			ending = agui.Going
		}
		if fs, done := h.end(ctx, st, ending, ""); done {
			st.first, st.done = append(st.first, fs...), true
		}
	}
	return st, nil
}

// end returns the frames that end the run for ending (id is the last one's), and whether
// they do: a run that waited once but does not wait now goes on (its answer is further on
// in the log).
func (h *aguiHandler) end(ctx context.Context, st *aguiStream, ending agui.Ending, id string) ([]agui.Frame, bool) {
	switch ending {
	case agui.Ended:
		return st.tr.Finish(id), true
	case agui.Waits:
		v, err := h.svc.View(ctx, st.sessionID)
		if err != nil || v.ActiveRun == nil || v.ActiveRun.ID != st.tr.RunID() || v.Status != service.SessionWaitingForInput {
			return nil, false
		}
		return st.tr.Interrupt(v.PendingQuestions, v.PendingApprovals, id), true
	}
	return nil, false
}

// pump sends the log's events as AG-UI events until the run ends or waits, the session is
// deleted, the server shuts down or the client leaves.
func (h *aguiHandler) pump(reqCtx, ctx context.Context, st *aguiStream, out *sseOut, wake <-chan struct{}) {
	retry := time.NewTimer(0)
	<-retry.C
	defer retry.Stop()
	for {
		evs, err := st.sub.Read(ctx, aguiBatch)
		switch {
		case errors.Is(err, service.ErrSessionDeleted):
			out.frames(st.tr.Error("NOT_FOUND", "the session was deleted"))
			return
		case errors.Is(err, service.ErrShutdown):
			return // the client resumes with its Last-Event-ID
		case err != nil:
			if ctx.Err() != nil {
				h.expired(reqCtx, st, out)
				return
			}
			h.log.Warn("agui: reading the session's log", "session", st.sessionID, "err", err)
			retry.Reset(200 * time.Millisecond)
			select {
			case <-retry.C:
				continue
			case <-ctx.Done():
				return
			}
		}
		for _, ev := range evs {
			fs, ending := st.tr.Event(ev) // a run's status event has no frames of its own
			if ending != agui.Going {
				if end, done := h.end(ctx, st, ending, st.tr.Cursor(ev)); done {
					out.frames(append(fs, end...))
					return
				}
			}
			if !out.frames(fs) {
				return
			}
		}
		if len(evs) > 0 {
			continue
		}
		// Caught up: a run whose status says it ended or waits (a resume that answered
		// one of two questions, a message answered again by its key) ends here.
		switch st.tr.Status() {
		case service.RunCompleted, service.RunCancelled, service.RunInterrupted, service.RunFailed:
			out.frames(st.tr.Finish(""))
			return
		case service.RunWaitingForInput:
			if end, done := h.end(ctx, st, agui.Waits, ""); done {
				out.frames(end)
				return
			}
		}
		select {
		case <-wake:
		case <-ctx.Done():
			h.expired(reqCtx, st, out)
			return
		}
	}
}

// expired ends a stream whose context ended: with RUN_ERROR when the token expired, the
// client being still there (reqCtx, the request's context, did not end) and reading.
func (h *aguiHandler) expired(reqCtx context.Context, st *aguiStream, out *sseOut) {
	if reqCtx.Err() == nil && !out.broken() {
		out.frames(st.tr.Error("UNAUTHENTICATED", "token expired"))
	}
}

// statusOf is the HTTP status of a refusal by the service, before a stream begins.
func statusOf(err error) int {
	switch service.ErrorCode(err) {
	case service.EINVALID:
		return http.StatusBadRequest
	case service.EUNAUTHORIZED:
		return http.StatusUnauthorized
	case service.ENOTFOUND:
		return http.StatusNotFound
	case service.ECONFLICT:
		return http.StatusConflict
	case service.ERATELIMIT:
		return http.StatusTooManyRequests
	case service.EUNAVAILABLE:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// sseOut writes server-sent events, each within a write timeout; a client that does not
// take one in time is taken for gone (onBroken is called).
type sseOut struct {
	mu       sync.Mutex
	w        http.ResponseWriter
	ctl      *http.ResponseController
	timeout  time.Duration
	bad      bool
	onBroken func()
}

func newSSEOut(w http.ResponseWriter, timeout time.Duration) (*sseOut, bool) {
	if _, ok := w.(http.Flusher); !ok {
		return nil, false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sseOut{w: w, ctl: http.NewResponseController(w), timeout: timeout}, true
}

// write writes b whole and flushes it; false once the client is taken for gone.
func (o *sseOut) write(b []byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bad {
		return false
	}
	_ = o.ctl.SetWriteDeadline(time.Now().Add(o.timeout))
	_, err := o.w.Write(b)
	if err == nil {
		err = o.ctl.Flush()
	}
	if err == nil {
		err = o.ctl.SetWriteDeadline(time.Time{})
	}
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		o.bad = true
		if o.onBroken != nil {
			o.onBroken()
		}
		return false
	}
	return true
}

// broken reports whether the client was taken for gone.
func (o *sseOut) broken() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bad
}

// frames writes fs in one write: "id:" (when a frame has one) and "data:" with its JSON.
func (o *sseOut) frames(fs []agui.Frame) bool {
	if len(fs) == 0 {
		return true
	}
	var b bytes.Buffer
	for _, f := range fs {
		if err := agui.AppendFrame(&b, f); err != nil {
			return false
		}
	}
	return o.write(b.Bytes())
}

// keepAlive writes a comment every d until ctx ends, so that proxies keep a quiet stream.
func (o *sseOut) keepAlive(ctx context.Context, d time.Duration) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			o.write([]byte(": ping\n\n"))
		case <-ctx.Done():
			return
		}
	}
}
