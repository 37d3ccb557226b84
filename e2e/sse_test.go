package e2e

// Tests of the server-sent events transport's promises, from outside: "complete" only
// when a subscription really ends (its session deleted), a stream that just ends when the
// server shuts down, so that the client resumes with its cursor; and subscriptions refused
// where they cannot stream (a plain POST or GET).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// sseLog is what a test saw of one SSE subscription.
type sseLog struct {
	t         testing.TB
	ch        <-chan tgtest.SSEEvent
	Events    []tgtest.Event
	Completed bool // the server sent event: complete
	Ended     bool // the stream ended
}

func sseSubscribe(t testing.TB, c *tgtest.Client, sid, after string) *sseLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	vars := map[string]any{"s": sid}
	if after != "" {
		vars["a"] = after
	}
	ch, err := c.SSEStream(ctx, tgtest.StreamQuery, vars)
	if err != nil {
		t.Fatal(err)
	}
	return &sseLog{t: t, ch: ch}
}

// read takes the next event in; false when the stream ended or nothing came within d.
func (l *sseLog) read(d time.Duration) bool {
	l.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case ev, ok := <-l.ch:
		if !ok {
			l.Ended = true
			return false
		}
		switch ev.Event {
		case "complete":
			l.Completed = true
		case "next":
			var r struct {
				Data   struct{ MessageStream *tgtest.Event }
				Errors []tgtest.GQLError
			}
			if err := json.Unmarshal(ev.Data, &r); err != nil || r.Data.MessageStream == nil {
				l.t.Fatalf("SSE: not a messageStream event: %s (%v)", ev.Data, err)
			}
			l.Events = append(l.Events, *r.Data.MessageStream)
		default:
			l.t.Fatalf("SSE: unexpected event %q: %s", ev.Event, ev.Data)
		}
		return true
	case <-timer.C:
		return false
	}
}

// until reads until cond holds, failing the test when the stream ends first or nothing
// comes within tgtest.Wait.
func (l *sseLog) until(what string, cond func() bool) {
	l.t.Helper()
	for !cond() {
		if !l.read(tgtest.Wait) {
			l.t.Fatalf("SSE: waiting for %s: stream ended %v, completed %v, %d events", what, l.Ended, l.Completed, len(l.Events))
		}
	}
}

func (l *sseLog) sawRunEnd(run string) bool {
	for _, ev := range l.Events {
		if tgtest.RunEnds(run)(ev) {
			return true
		}
	}
	return false
}

func (l *sseLog) chunks() int {
	n := 0
	for _, ev := range l.Events {
		if ev.Typename == "MessageChunk" {
			n++
		}
	}
	return n
}

// TestSSEShutdownEndsTheStreamWithoutCompleteAndResumingMissesNothing sends SIGTERM to a
// real server while a reply streams over SSE, restarts it on the same SQLite file, and
// resumes from the last cursor seen.
func TestSSEShutdownEndsTheStreamWithoutCompleteAndResumingMissesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	dataDir := t.TempDir()
	port := freePort(t)
	srv := startChild(t, dataDir, port)
	g := tgtest.Guest(t, srv.URL)
	sid := g.CreateSession(nil)
	l := sseSubscribe(t, g, sid, g.Cursor(sid))
	_, run := g.Send(sid, "/slow 500")
	l.until("a few chunks", func() bool { return l.chunks() >= 5 })

	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	for l.read(tgtest.Wait) {
	}
	if !l.Ended {
		t.Fatalf("SSE stream still open %v after SIGTERM", tgtest.Wait)
	}
	if l.Completed {
		t.Error("SSE: event complete at shutdown")
	}
	t.Logf("run end seen before the stream ended: %v", l.sawRunEnd(run))
	select {
	case err := <-srv.done:
		if err != nil {
			t.Errorf("exit: %v", err)
		}
	case <-time.After(tgtest.Wait):
		t.Fatal("server did not exit")
	}

	startChild(t, dataDir, port)
	seen := l.Events
	mid := len(seen) / 2
	rest := sseSubscribe(t, g, sid, seen[len(seen)-1].Cursor)
	fromMid := sseSubscribe(t, g, sid, seen[mid].Cursor)
	_, after := g.Send(sid, "after the restart")
	rest.until("the new run's end", func() bool { return rest.sawRunEnd(after) })
	fromMid.until("the new run's end", func() bool { return fromMid.sawRunEnd(after) })
	all := append(append([]tgtest.Event(nil), seen...), rest.Events...)
	checkTexts(t, g, sid, checkContinuous(t, sid, all))
	checkTexts(t, g, sid, checkContinuous(t, sid, append(append([]tgtest.Event(nil), seen[:mid+1]...), fromMid.Events...)))
	if got, want := notChunks(fromMid.Events), notChunks(all[mid+1:]); got != want {
		t.Errorf("resumed from event %d: events\n%s\nwant\n%s", mid, got, want)
	}
	if rest.Completed || fromMid.Completed {
		t.Error("a resumed SSE subscription completed")
	}
}

func TestSSEDeletingTheSessionSendsComplete(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", fastSlow(2*time.Millisecond))
	g := guest(t, a)
	doomed, kept := g.CreateSession(nil), g.CreateSession(nil)
	dl := sseSubscribe(t, g, doomed, g.Cursor(doomed))
	kl := sseSubscribe(t, g, kept, g.Cursor(kept))
	g.Send(doomed, "/slow 5000")
	dl.until("a chunk", func() bool { return dl.chunks() > 0 })
	g.Must(`mutation($s: ID!){ deleteTalkSession(id: $s) }`, map[string]any{"s": doomed}, nil)
	dl.until("complete", func() bool { return dl.Completed })
	n := len(dl.Events)
	if dl.read(tgtest.Wait); !dl.Ended || len(dl.Events) != n {
		t.Errorf("after complete: stream ended %v, %d more events", dl.Ended, len(dl.Events)-n)
	}
	_, run := g.Send(kept, "still here")
	kl.until("the other session's run end", func() bool { return kl.sawRunEnd(run) })
	if kl.Completed {
		t.Error("the other session's stream completed too")
	}
}

// A subscription can only stream over a websocket or SSE: sent as a plain POST or GET it
// is refused at once with an error, instead of hanging until an event comes and then
// answering with that one event.
func TestSubscriptionOverPlainHTTPIsRefused(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", nil)
	g := guest(t, a)
	sid := g.CreateSession(nil)
	query := `subscription($s: ID!){ messageStream(sessionId: $s){ __typename cursor } }`
	vars, _ := json.Marshal(map[string]any{"s": sid})
	refused := func(t *testing.T, req *http.Request, says string) {
		t.Helper()
		req.Header.Set("Authorization", "Bearer "+g.Token)
		client := &http.Client{Timeout: 5 * time.Second}
		resp, err := client.Do(req)
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no answer within %v: the subscription waits for an event", client.Timeout)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r tgtest.Response
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		if len(r.Errors) == 0 || !strings.Contains(strings.ToLower(r.Errors[0].Message), says) {
			t.Errorf("status %d, errors %+v: want an error saying %q", resp.StatusCode, r.Errors, says)
		}
		if string(r.Data) != "" && string(r.Data) != "null" {
			t.Errorf("data %s alongside the refusal", r.Data)
		}
		waitFor(t, "no subscription left", func() bool { return a.Service.Stats().Subscriptions == 0 })
	}
	t.Run("GET", func(t *testing.T) {
		req, _ := http.NewRequest("GET", a.URL+"/query?query="+url.QueryEscape(query)+"&variables="+url.QueryEscape(string(vars)), nil)
		refused(t, req, "text/event-stream")
	})
	t.Run("POST", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"query": query, "variables": json.RawMessage(vars)})
		req, _ := http.NewRequest("POST", a.URL+"/query", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		refused(t, req, "text/event-stream")
	})
}

// A client that stops reading a server-sent events stream is let go as a websocket's is:
// once a write has been blocked for 10 s the stream ends (no complete: the client resumes
// with its cursor), and its subscription and goroutines are released.
func TestStalledSSEReaderIsLetGo(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", func(c *app.Config) { c.Service.MaxMessageBytes = 600 << 10 })
	g := guest(t, a)
	sid := g.CreateSession(nil)
	from := g.Cursor(sid)
	// A history of several megabytes, more than the sockets' buffers hold, so that the
	// server's writes to a client that does not read block.
	watch := g.Connect("graphql-transport-ws")
	_, evs := watch.Stream(sid, from)
	for i := 0; i < 10; i++ {
		_, run := g.Send(sid, fmt.Sprintf("%d %s", i, strings.Repeat("lorem ipsum ", 40000)))
		evs.Until("the reply's end", tgtest.RunEnds(run))
	}
	watch.Close()
	before := baseline(t, a)

	const clients = 3
	body, _ := json.Marshal(map[string]any{"query": tgtest.StreamQuery, "variables": map[string]any{"s": sid, "a": from}})
	host := strings.TrimPrefix(a.URL, "http://")
	var conns []*net.TCPConn
	for i := 0; i < clients; i++ {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		conn := c.(*net.TCPConn)
		_ = conn.SetReadBuffer(4096)
		defer conn.Close()
		fmt.Fprintf(conn, "POST /query HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, g.Token, len(body), body)
		conns = append(conns, conn) // and never read
	}
	start := time.Now()
	waitFor(t, "the stalled clients' subscriptions", func() bool { return a.Service.Stats().Subscriptions == clients })
	if !waitUntil(writeTimeout+tgtest.Wait, func() bool { return a.Service.Stats().Subscriptions == 0 }) {
		t.Fatalf("%d subscriptions of clients that stopped reading remain after %v", a.Service.Stats().Subscriptions, time.Since(start))
	}
	t.Logf("stalled SSE clients let go after %v", time.Since(start))
	for _, c := range conns {
		c.Close()
	}
	settle(t, a, before)
}

// eventSource reads a server-sent events stream as a browser's EventSource does: it keeps
// the id of the last event it received, and sends it as Last-Event-ID when it reconnects
// with the same request.
type eventSource struct {
	t      *testing.T
	c      *tgtest.Client
	vars   map[string]any
	lastID string
	Events []tgtest.Event
}

// connect opens the stream, and reads it until stop says so; it fails the test when the
// stream ends first or nothing comes within tgtest.Wait. Every event "next" must carry
// its cursor as its id. It returns the events of this connection.
func (es *eventSource) connect(stop func(got []tgtest.Event) bool) []tgtest.Event {
	es.t.Helper()
	ctx, drop := context.WithCancel(context.Background())
	defer drop() // the connection is dropped, mid-stream
	ch, err := es.c.SSEResume(ctx, tgtest.StreamQuery, es.vars, es.lastID)
	if err != nil {
		es.t.Fatal(err)
	}
	var got []tgtest.Event
	for !stop(got) {
		select {
		case ev, ok := <-ch:
			if !ok {
				es.t.Fatalf("the stream ended after %d events", len(got))
			}
			var r struct {
				Data   struct{ MessageStream *tgtest.Event }
				Errors []tgtest.GQLError
			}
			if err := json.Unmarshal(ev.Data, &r); ev.Event != "next" || err != nil || r.Data.MessageStream == nil {
				es.t.Fatalf("event %q %s: %v", ev.Event, ev.Data, err)
			}
			if ev.ID == "" || ev.ID != r.Data.MessageStream.Cursor {
				es.t.Fatalf("event %s has id %q, want its cursor %q", r.Data.MessageStream.Typename, ev.ID, r.Data.MessageStream.Cursor)
			}
			es.lastID = ev.ID
			got = append(got, *r.Data.MessageStream)
		case <-time.After(tgtest.Wait):
			es.t.Fatalf("nothing within %v after %d events", tgtest.Wait, len(got))
		}
	}
	es.Events = append(es.Events, got...)
	return got
}

// TestSSEReconnectsAfterLastEventIDAsEventSourceDoes reads part of a long reply over
// server-sent events, drops the connection mid-stream and sends the same request again
// (its after still the cursor it first started from) with Last-Event-ID set to the last id
// it received: the two connections' events have no gap and no duplicate, and their deltas
// add up to the reply.
func TestSSEReconnectsAfterLastEventIDAsEventSourceDoes(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", fastSlow(20*time.Millisecond))
	g := guest(t, a)
	sid := g.CreateSession(nil)
	es := &eventSource{t: t, c: g, vars: map[string]any{"s": sid, "a": g.Cursor(sid)}}
	_, run := g.Send(sid, "/slow 50")
	chunks := func(n int) func([]tgtest.Event) bool {
		return func(got []tgtest.Event) bool {
			seen := 0
			for _, ev := range got {
				if ev.Typename == "MessageChunk" {
					seen++
				}
			}
			return seen >= n
		}
	}
	ended := func(got []tgtest.Event) bool { return slices.ContainsFunc(got, tgtest.RunEnds(run)) }
	first := es.connect(chunks(10))
	if ended(first) {
		t.Fatal("the run ended before the connection was dropped")
	}
	waitFor(t, "the dropped stream's subscription to end", func() bool { return a.Service.Stats().Subscriptions == 0 })
	second := es.connect(ended)
	i := slices.IndexFunc(second, func(ev tgtest.Event) bool { return ev.Typename == "MessageChunk" })
	if i < 0 || second[i].Offset == 0 {
		t.Fatalf("the reconnected stream did not go on within the reply: %s", notChunks(second))
	}
	checkTexts(t, g, sid, checkContinuous(t, sid, es.Events))
}

// TestSSELastEventIDIsCheckedAsAfterIs: a Last-Event-ID that is not a cursor, or is
// another session's, is refused as such an after is (one event "next" with BAD_USER_INPUT,
// then complete), and a good one is taken whatever after says.
func TestSSELastEventIDIsCheckedAsAfterIs(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", nil)
	g := guest(t, a)
	sid, other := g.CreateSession(nil), g.CreateSession(nil)
	start := g.Cursor(sid)
	_, run := g.Send(sid, "hello there")
	subscribe := func(after, lastEventID string) []tgtest.SSEEvent {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), tgtest.Wait)
		defer cancel()
		ch, err := g.SSEResume(ctx, tgtest.StreamQuery, map[string]any{"s": sid, "a": after}, lastEventID)
		if err != nil {
			t.Fatal(err)
		}
		var evs []tgtest.SSEEvent
		for ev := range ch {
			evs = append(evs, ev)
			if ev.Event == "complete" || strings.Contains(string(ev.Data), run) && strings.Contains(string(ev.Data), "COMPLETED") {
				break
			}
		}
		return evs
	}
	for name, tc := range map[string]struct{ lastEventID, says string }{
		"not a cursor":    {"bm90IGEgY3Vyc29y", "invalid cursor"},
		"another session": {g.Cursor(other), "cursor belongs to another session"},
		"too long":        {strings.Repeat("a", 4096), "invalid cursor"},
	} {
		t.Run(name, func(t *testing.T) {
			evs := subscribe(start, tc.lastEventID)
			if len(evs) != 2 || evs[0].Event != "next" || evs[1].Event != "complete" {
				t.Fatalf("events %s: want one next and complete", sseString(evs))
			}
			var r tgtest.Response
			if err := json.Unmarshal(evs[0].Data, &r); err != nil || r.Code() != "BAD_USER_INPUT" || r.Errors[0].Message != tc.says {
				t.Errorf("refused with %s, want BAD_USER_INPUT %q", evs[0].Data, tc.says)
			}
		})
	}
	t.Run("after is not a cursor", func(t *testing.T) {
		evs := subscribe("not a cursor", start)
		if len(evs) < 2 || evs[len(evs)-1].Event != "next" || evs[0].ID == "" {
			t.Errorf("events %s: want the session's events from its start, with ids", sseString(evs))
		}
	})
}

// sseString shows events as the server framed them.
func sseString(evs []tgtest.SSEEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "\n  id %q event %q data %s", ev.ID, ev.Event, ev.Data)
	}
	return b.String()
}
