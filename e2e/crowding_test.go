package e2e

// Crowding: what one client address, or one user, can hold open on a server. Each test
// reproduces a finding of the security review against a real server process, from
// outside, with clients of two addresses (Linux answers on every 127.x.y.z, so a client
// can pick 127.0.0.2 as its own), and checks that the server now refuses the crowd
// cheaply, serves the other address meanwhile, and is back to its goroutines, descriptors
// and memory once the crowd has gone. The servers keep their data in memory: an SQLite
// store keeps the connections a busy moment opened, which would blur the descriptors.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// from returns an HTTP client and a websocket dialer whose connections come from ip.
// The HTTP client keeps no connection open between requests, so that what it leaves on
// the server is only what a test means it to.
func from(ip string) (*http.Client, websocket.Dialer) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: tgtest.Wait}
	hc := &http.Client{Timeout: tgtest.Wait, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	return hc, websocket.Dialer{NetDialContext: d.DialContext, HandshakeTimeout: tgtest.Wait, Subprotocols: []string{"graphql-transport-ws"}}
}

// guestVia signs in a new guest through hc.
func guestVia(t *testing.T, hc *http.Client, base string) *tgtest.Client {
	t.Helper()
	resp, err := hc.Post(base+"/auth/guest", "application/json", nil)
	if err != nil {
		t.Fatalf("guest sign-in: %v", err)
	}
	defer resp.Body.Close()
	var out struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Token == "" {
		t.Fatalf("guest sign-in: status %d, %v", resp.StatusCode, err)
	}
	return &tgtest.Client{T: t, Base: base, Token: out.Token, HTTP: hc}
}

// processFigures are what a server process's /metrics says of its own cost.
type processFigures struct{ goroutines, fds, heap float64 }

func (f processFigures) String() string {
	return fmt.Sprintf("%.0f goroutines, %.0f descriptors, %.1f MB of heap in use", f.goroutines, f.fds, f.heap/(1<<20))
}

// figures reads the server's goroutines, open descriptors and heap in use.
func figures(t *testing.T, hc *http.Client, base string) processFigures {
	t.Helper()
	m := serverMetrics(t, hc, base)
	return processFigures{m["go_goroutines"], m["process_open_fds"], m["go_memstats_heap_inuse_bytes"]}
}

// serverMetrics reads the server's metrics without labels.
func serverMetrics(t *testing.T, hc *http.Client, base string) map[string]float64 {
	t.Helper()
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = f
		}
	}
	return out
}

// quietFigures waits for the server to be quiet and returns its figures then: the fewest
// goroutines and descriptors of a few readings, as connections of earlier requests end.
func quietFigures(t *testing.T, hc *http.Client, base string) processFigures {
	t.Helper()
	f := figures(t, hc, base)
	for range 5 {
		g := figures(t, hc, base)
		f.goroutines, f.fds, f.heap = min(f.goroutines, g.goroutines), min(f.fds, g.fds), min(f.heap, g.heap)
	}
	return f
}

// backTo waits until the server's goroutines, descriptors and heap are back near before
// (the slack is the connection reading /metrics and what Go keeps between collections),
// failing the test after tgtest.Wait.
func backTo(t *testing.T, hc *http.Client, base string, before processFigures) {
	t.Helper()
	var now processFigures
	if !waitUntil(tgtest.Wait, func() bool {
		now = figures(t, hc, base)
		return now.goroutines <= before.goroutines+3 && now.fds <= before.fds+3 && now.heap <= before.heap+16<<20
	}) {
		t.Fatalf("the server did not come back to %v: %v", before, now)
	}
	t.Logf("before: %v; after: %v", before, now)
}

// slowAnswer is what the server answered a request whose body came slowly.
type slowAnswer struct {
	status     int
	retryAfter string
	code, msg  string
	closed     bool // the server closed the connection after its answer
	err        error
}

func (a slowAnswer) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("%d %s %q (Retry-After %q, closed %v)", a.status, a.code, a.msg, a.retryAfter, a.closed)
}

// slowPost sends, from 127.0.0.1, the headers of a POST to /query that announce a body of
// 100,000 bytes, then the body a byte at a time, every 200 ms, until the server answers;
// it returns the answer. headers are added to the request's.
func slowPost(host string, headers string) slowAnswer {
	conn, err := net.DialTimeout("tcp", host, tgtest.Wait)
	if err != nil {
		return slowAnswer{err: err}
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /query HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n%s\r\n{", host, headers)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(tgtest.Wait))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return slowAnswer{err: fmt.Errorf("no answer: %w", err)}
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r tgtest.Response
	_ = json.Unmarshal(body, &r)
	a := slowAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), code: r.Code()}
	if len(r.Errors) > 0 {
		a.msg = r.Errors[0].Message
	}
	// The connection is closed once the answer is out: nothing more comes, not even for
	// the rest of the body the client keeps sending (a reset instead of an end is a close
	// too: the server had unread bytes of it).
	_, err = br.ReadByte()
	var ne net.Error
	a.closed = err != nil && !(errors.As(err, &ne) && ne.Timeout())
	return a
}

// Finding 2: POSTs that announce a body and send it a byte at a time were all accepted,
// none refused, and all still open 40 s later (the review held 300 from one address, with
// 316 goroutines and 325 descriptors). Now the anonymous limit refuses them as their
// headers arrive, at most MAX_BODY_READS_PER_ADDRESS of one address may be sending their
// body at once, and a body has BODY_READ_TIMEOUT to arrive.
func TestSlowBodiesAreCutOffAndLimitedPerAddress(t *testing.T) {
	const timeout, reads, anonBurst, clients = 3 * time.Second, 5, 10, 20
	srv := startChild(t, t.TempDir(), freePort(t), "DATABASE_URL=memory:", "BODY_READ_TIMEOUT="+timeout.String(),
		fmt.Sprintf("MAX_BODY_READS_PER_ADDRESS=%d", reads), "ANON_RATE_LIMIT=0.01", fmt.Sprintf("ANON_RATE_BURST=%d", anonBurst))
	other, _ := from("127.0.0.2")
	before := quietFigures(t, other, srv.URL)
	host := strings.TrimPrefix(srv.URL, "http://")

	answers := make(chan slowAnswer, clients)
	for range clients {
		go func() { answers <- slowPost(host, "") }()
	}
	var refused, cut []slowAnswer
	for len(refused) < clients-reads {
		a := <-answers
		if a.err != nil || a.status != http.StatusTooManyRequests {
			t.Fatalf("after %d refusals, an answer before the body's deadline: %v", len(refused), a)
		}
		refused = append(refused, a)
	}
	byLimit := map[string]int{}
	for _, a := range refused {
		if a.code != "RATE_LIMITED" || a.retryAfter == "" || !a.closed {
			t.Errorf("a refusal: %v; want RATE_LIMITED with Retry-After, and the connection closed", a)
		}
		why, _, _ := strings.Cut(a.msg, ";")
		byLimit[why]++
	}
	t.Logf("refused at once: %v", byLimit)
	if n := byLimit["too many requests without a valid token from your address"]; n != clients-anonBurst {
		t.Errorf("%d refused by the anonymous limit, want %d", n, clients-anonBurst)
	}
	if n := byLimit["too many requests from your address are sending their body at once"]; n != anonBurst-reads {
		t.Errorf("%d refused by MAX_BODY_READS_PER_ADDRESS, want %d", n, anonBurst-reads)
	}

	// Meanwhile a user on another address signs in and is served.
	g := guestVia(t, other, srv.URL)
	g.Must(`{ viewer { id } }`, nil, nil)
	g.CreateSession(nil)

	// The bodies being read are cut off at their deadline.
	for len(cut) < reads {
		select {
		case a := <-answers:
			cut = append(cut, a)
		case <-time.After(timeout + tgtest.Wait):
			t.Fatalf("%d of %d slow bodies still being read %v after their deadline", reads-len(cut), reads, tgtest.Wait)
		}
	}
	for _, a := range cut {
		if a.err != nil || a.status != http.StatusRequestTimeout || a.code != "BAD_USER_INPUT" || !a.closed {
			t.Errorf("a slow body: %v; want 408 BAD_USER_INPUT and the connection closed", a)
		}
	}
	backTo(t, other, srv.URL, before)
}

// With a token the anonymous limit does not apply; MAX_BODY_READS_PER_ADDRESS does, and a
// body that does not come in time is cut off on every path, /auth/guest and /healthz
// included (the server would otherwise read it, however slowly, before answering).
func TestSlowBodiesWithATokenAndOnOtherPaths(t *testing.T) {
	const timeout, reads = 2 * time.Second, 3
	srv := startChild(t, t.TempDir(), freePort(t), "DATABASE_URL=memory:", "BODY_READ_TIMEOUT="+timeout.String(), fmt.Sprintf("MAX_BODY_READS_PER_ADDRESS=%d", reads))
	other, _ := from("127.0.0.2")
	before := quietFigures(t, other, srv.URL)
	host := strings.TrimPrefix(srv.URL, "http://")
	home, _ := from("127.0.0.1")
	u := guestVia(t, home, srv.URL)

	const clients = 12
	answers := make(chan slowAnswer, clients)
	for range clients {
		go func() { answers <- slowPost(host, "Authorization: Bearer "+u.Token+"\r\n") }()
	}
	statuses := map[int]int{}
	for range clients {
		select {
		case a := <-answers:
			if a.err != nil || !a.closed {
				t.Fatalf("a slow body with a token: %v", a)
			}
			statuses[a.status]++
		case <-time.After(timeout + tgtest.Wait):
			t.Fatalf("answers so far: %v", statuses)
		}
	}
	if statuses[http.StatusTooManyRequests] != clients-reads || statuses[http.StatusRequestTimeout] != reads {
		t.Errorf("answers %v; want %d refused and %d cut off", statuses, clients-reads, reads)
	}

	for _, path := range []string{"/auth/guest", "/healthz"} {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n\r\n{", path, host)
		_ = conn.SetReadDeadline(time.Now().Add(timeout + tgtest.Wait))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("POST %s with a body that does not come: %v %v; want 408", path, resp, err)
		}
		conn.Close()
	}
	backTo(t, other, srv.URL, before)
}

// The body's deadline is lifted once the body is read: a server-sent events stream, a
// POST that then streams for hours, is not cut.
func TestServerSentEventsOutliveTheBodyReadTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	a := startApp(t, "memory", func(c *app.Config) { c.HTTP.BodyReadTimeout = timeout })
	g := guest(t, a)
	sid := g.CreateSession(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := g.SSEStream(ctx, tgtest.StreamQuery, map[string]any{"s": sid, "a": g.Cursor(sid)})
	if err != nil {
		t.Fatal(err)
	}
	// /slow 10 streams for a second (a chunk every 100 ms): five times the body's deadline.
	_, run := g.Send(sid, "/slow 10")
	chunks := 0
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended after %d chunks", chunks)
			}
			var p struct {
				Data struct{ MessageStream tgtest.Event }
			}
			if err := json.Unmarshal(ev.Data, &p); err != nil || ev.Event != "next" {
				t.Fatalf("event %s %s", ev.Event, ev.Data)
			}
			e := p.Data.MessageStream
			if e.Typename == "MessageChunk" {
				chunks++
			}
			if tgtest.RunEnds(run)(e) {
				if chunks < 10 {
					t.Errorf("the run ended after %d chunks", chunks)
				}
				return
			}
		case <-time.After(tgtest.Wait):
			t.Fatalf("no event within %v; %d chunks", tgtest.Wait, chunks)
		}
	}
}
