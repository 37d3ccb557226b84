package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/demo"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// The users of the tests, and a context without one.
var (
	alice  = service.WithUser(context.Background(), "alice")
	bob    = service.WithUser(context.Background(), "bob")
	nobody = context.Background()
)

// patience is how long a test waits for something the service promises to do.
const patience = 10 * time.Second

// setup is how a test wants its Service.
type setup struct {
	store  service.Store             // nil: a new in-memory store
	agents map[string]service.Runner // registered besides "demo"
	config func(*service.Config)     // changes to DefaultConfig
}

// startService starts a Service with the demo agent, without pauses, as "demo", and
// closes it when the test ends. It returns the store it runs on.
func startService(t *testing.T, s setup) (*service.Service, service.Store) {
	t.Helper()
	if s.store == nil {
		s.store = inmem.New()
	}
	svc, err := tryStart(s)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	t.Cleanup(svc.Close)
	return svc, s.store
}

func tryStart(s setup) (*service.Service, error) {
	if s.store == nil {
		panic("tryStart without a store")
	}
	agents := &service.Agents{}
	agents.Register("demo", demo.Description, &demo.Agent{})
	for name, r := range s.agents {
		agents.Register(name, "agent "+name, r)
	}
	cfg := service.DefaultConfig()
	if s.config != nil {
		s.config(&cfg)
	}
	return service.New(context.Background(), s.store, agents, cfg, quietLog)
}

// start is startService on a new in-memory store.
func start(t *testing.T, s setup) *service.Service {
	t.Helper()
	svc, _ := startService(t, s)
	return svc
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// withPuppet is a setup with p registered as "puppet".
func withPuppet(p *puppet) setup { return setup{agents: map[string]service.Runner{"puppet": p}} }

// newSession creates a session of the user of ctx with the agent (the demo when "") and
// busy policy (the default when "").
func newSession(t *testing.T, svc *service.Service, ctx context.Context, agent string, policy service.BusyPolicy) *service.SessionView {
	t.Helper()
	var in service.SettingsInput
	if agent != "" {
		in.Agent = &agent
	}
	if policy != "" {
		in.BusyPolicy = &policy
	}
	v, err := svc.CreateTalkSession(ctx, "", in)
	if err != nil {
		t.Fatalf("CreateTalkSession: %v", err)
	}
	return v
}

// send adds a message and fails the test when that fails.
func send(t *testing.T, svc *service.Service, ctx context.Context, sessionID, content string) (*service.Message, *service.Run) {
	t.Helper()
	m, r, err := svc.AddMessage(ctx, sessionID, content, "")
	if err != nil {
		t.Fatalf("AddMessage(%q): %v", content, err)
	}
	return m, r
}

func view(t *testing.T, svc *service.Service, ctx context.Context, id string) *service.SessionView {
	t.Helper()
	v, err := svc.View(ctx, id)
	if err != nil {
		t.Fatalf("View: %v", err)
	}
	return v
}

// history returns the whole history of a session, as of now.
func history(t *testing.T, svc *service.Service, ctx context.Context, id string) []*service.HistoryMessage {
	t.Helper()
	n := 100
	msgs, _, _, err := svc.History(ctx, id, nil, &n, "", nil, "")
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	return msgs
}

func getRun(t *testing.T, svc *service.Service, ctx context.Context, id string) *service.Run {
	t.Helper()
	r, err := svc.Run(ctx, id)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return r
}

// wantCode reports an error unless err has the code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := service.ErrorCode(err); got != code {
		t.Errorf("%s: error %v, want code %q", what, err, code)
	}
}

// wantSameError reports an error unless a and b are the same error, as a client sees it.
func wantSameError(t *testing.T, a, b error) {
	t.Helper()
	if a == nil || b == nil || service.ErrorCode(a) != service.ErrorCode(b) || service.ErrorMessage(a) != service.ErrorMessage(b) {
		t.Errorf("errors differ: %v and %v", a, b)
	}
}

// missingID is a well-formed ID that nothing has.
const missingID = "00000000-0000-4000-8000-000000000000"

// feed reads a subscription the way a transport does, for a test: events arrive on a
// channel, which is closed when the subscription ends; err then says why.
type feed struct {
	t      *testing.T
	events chan *service.Event
	err    error // set before events is closed
	last   *service.Event
}

// follow subscribes to a session after the cursor (at the end of its log when "") until
// the test ends.
func follow(t *testing.T, svc *service.Service, ctx context.Context, sessionID, after string) *feed {
	t.Helper()
	wake := make(chan struct{}, 1)
	sub, err := svc.Subscribe(ctx, sessionID, after, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	return feedOf(t, sub, wake)
}

// feedOf reads sub, woken by wake, until the test ends.
func feedOf(t *testing.T, sub eventReader, wake chan struct{}) *feed {
	rctx, cancel := context.WithCancel(context.Background())
	f := &feed{t: t, events: make(chan *service.Event)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(f.events)
		defer sub.Close()
		for {
			evs, err := sub.Read(rctx, 0)
			if err != nil {
				f.err = err
				return
			}
			for _, ev := range evs {
				select {
				case f.events <- ev:
				case <-rctx.Done():
					f.err = rctx.Err()
					return
				}
			}
			if len(evs) == 0 {
				select {
				case <-wake:
				case <-rctx.Done():
					f.err = rctx.Err()
					return
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// until returns the events up to and including the first for which stop is true; it fails
// the test when the subscription ends first or nothing matches in time.
func (f *feed) until(stop func(*service.Event) bool) []*service.Event {
	f.t.Helper()
	var out []*service.Event
	timeout := time.NewTimer(patience)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-f.events:
			if !ok {
				f.t.Fatalf("the subscription ended (%v) after %s", f.err, describe(out))
			}
			out = append(out, ev)
			f.last = ev
			if stop(ev) {
				return out
			}
		case <-timeout.C:
			f.t.Fatalf("waited %v in vain, after %s", patience, describe(out))
		}
	}
}

// rest returns every event until the subscription ends, and why it ended.
func (f *feed) rest() ([]*service.Event, error) {
	f.t.Helper()
	var out []*service.Event
	timeout := time.NewTimer(patience)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-f.events:
			if !ok {
				return out, f.err
			}
			out = append(out, ev)
			f.last = ev
		case <-timeout.C:
			f.t.Fatalf("the subscription did not end in %v, after %s", patience, describe(out))
		}
	}
}

// cursor is the position after the last event the feed handed over.
func (f *feed) cursor(sessionID string) string {
	if f.last == nil {
		f.t.Fatal("no event read yet")
	}
	return service.EncodeCursor(sessionID, service.CursorOf(f.last))
}

func describe(evs []*service.Event) string {
	var b strings.Builder
	b.WriteString("[")
	for i, ev := range evs {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(string(ev.Type))
		switch {
		case ev.Run != nil:
			b.WriteString(":" + string(ev.Run.Status))
		case ev.Type.Chunky():
			b.WriteString(":" + ev.Delta)
		case ev.Message != nil:
			b.WriteString(":" + string(ev.Message.Status))
		}
	}
	return b.String() + "]"
}

// Predicates on events.

func runIs(runID string, status service.RunStatus) func(*service.Event) bool {
	return func(ev *service.Event) bool {
		return ev.Type == service.EventRunStatusChanged && ev.Run.ID == runID && ev.Run.Status == status
	}
}

func runEnds(runID string) func(*service.Event) bool {
	return func(ev *service.Event) bool {
		return ev.Type == service.EventRunStatusChanged && ev.Run.ID == runID && ev.Run.Status.Final()
	}
}

func is(typ service.EventType) func(*service.Event) bool {
	return func(ev *service.Event) bool { return ev.Type == typ }
}

// first returns the first event of evs of the type for which match (when not nil) is
// true, failing the test when there is none.
func first(t *testing.T, evs []*service.Event, typ service.EventType, match func(*service.Event) bool) *service.Event {
	t.Helper()
	for _, ev := range evs {
		if ev.Type == typ && (match == nil || match(ev)) {
			return ev
		}
	}
	t.Fatalf("no %s among %s", typ, describe(evs))
	return nil
}

func count(evs []*service.Event, match func(*service.Event) bool) int {
	n := 0
	for _, ev := range evs {
		if match(ev) {
			n++
		}
	}
	return n
}

// lastEnd is the final run event among evs.
func lastEnd(t *testing.T, evs []*service.Event) *service.Run {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if ev := evs[i]; ev.Type == service.EventRunStatusChanged && ev.Run.Status.Final() {
			return ev.Run
		}
	}
	t.Fatalf("no run ended among %s", describe(evs))
	return nil
}

// completedMessage is the MessageCompleted of the message among evs.
func completedMessage(t *testing.T, evs []*service.Event, messageID string) *service.Message {
	t.Helper()
	return first(t, evs, service.EventMessageCompleted, func(ev *service.Event) bool { return ev.Message.ID == messageID }).Message
}

// replyOf is the assistant message of the run among evs (the first that ends).
func replyOf(t *testing.T, evs []*service.Event, runID string) *service.Message {
	t.Helper()
	return first(t, evs, service.EventMessageCompleted, func(ev *service.Event) bool {
		return ev.Message.RunID == runID && ev.Message.Role == service.RoleAssistant
	}).Message
}

// continueText appends to text, which a client already has, the deltas of the chunk events
// of one stream among evs, checking that each starts exactly where the text ends: no gap
// and no duplicate.
func continueText(t *testing.T, text string, evs []*service.Event, key string) string {
	t.Helper()
	n := utf8.RuneCountInString(text)
	for _, ev := range evs {
		if !ev.Type.Chunky() || ev.Key != key {
			continue
		}
		if ev.Offset != n {
			t.Fatalf("a chunk of %s at offset %d, but the text so far has %d code points (%q)", key, ev.Offset, n, text)
		}
		text += ev.Delta
		n += utf8.RuneCountInString(ev.Delta)
	}
	return text
}

// puppet is a runner the test drives: each run hands the test a *turn (its context,
// request and Output), and returns when the test says, or as soon as its context ends
// (unless stubborn: then only when the test says).
type puppet struct {
	turns    chan *turn
	stubborn bool
}

func newPuppet() *puppet { return &puppet{turns: make(chan *turn, 100)} }

type turn struct {
	ctx      context.Context
	req      service.RunRequest
	out      service.Output
	ret      chan error    // what Run returns
	returned chan struct{} // closed when Run has returned
}

func (p *puppet) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	tn := &turn{ctx: ctx, req: req, out: out, ret: make(chan error, 1), returned: make(chan struct{})}
	defer close(tn.returned)
	p.turns <- tn
	if p.stubborn {
		return <-tn.ret
	}
	select {
	case err := <-tn.ret:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next waits for the next run of the puppet to start.
func (p *puppet) next(t *testing.T) *turn {
	t.Helper()
	select {
	case tn := <-p.turns:
		return tn
	case <-time.After(patience):
		t.Fatal("no run started")
		return nil
	}
}

// idle reports an error when a run of the puppet has started and the test did not take it.
func (p *puppet) idle(t *testing.T) {
	t.Helper()
	select {
	case tn := <-p.turns:
		t.Errorf("an unexpected run %s started", tn.req.RunID)
	default:
	}
}

// say streams text, failing the test when the Output refuses it.
func (tn *turn) say(t *testing.T, text string) {
	t.Helper()
	if err := tn.out.Text(text); err != nil {
		t.Fatalf("Text(%q): %v", text, err)
	}
}

// finish makes Run return err.
func (tn *turn) finish(err error) { tn.ret <- err }

// stopped waits until the run's context ends.
func (tn *turn) stopped(t *testing.T) {
	t.Helper()
	select {
	case <-tn.ctx.Done():
	case <-time.After(patience):
		t.Fatal("the agent was not stopped")
	}
}

// running reports an error when the run's context has ended.
func (tn *turn) running(t *testing.T) {
	t.Helper()
	if err := tn.ctx.Err(); err != nil {
		t.Errorf("the agent was stopped: %v", err)
	}
}

// asking is an Ask in flight.
type asking struct {
	answer string
	err    error
	done   chan struct{}
}

// ask calls Ask on another goroutine, as an agent that waits for an answer does.
func (tn *turn) ask(prompt string, choices []string) *asking {
	a := &asking{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.answer, a.err = tn.out.Ask(tn.ctx, prompt, choices)
	}()
	return a
}

// wait waits for Ask to return.
func (a *asking) wait(t *testing.T) (string, error) {
	t.Helper()
	select {
	case <-a.done:
		return a.answer, a.err
	case <-time.After(patience):
		t.Fatal("Ask did not return")
		return "", nil
	}
}

func ptr[T any](v T) *T { return &v }

// errPlain is an error without a code, with details a user must not see.
var errPlain = errors.New("dial tcp 10.0.0.7:5432: password authentication failed for user admin")

// isCtxErr reports whether err is a context's end.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
