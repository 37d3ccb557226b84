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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
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

// wsFrom opens a websocket to base with d (graphql-transport-ws); header goes with the
// upgrade. A refused upgrade returns the server's answer.
func wsFrom(t *testing.T, base string, d websocket.Dialer, header http.Header) (*wsConn, *http.Response, error) {
	t.Helper()
	conn, resp, err := d.Dial(wsURL(base), header)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { conn.Close() })
	return &wsConn{t: t, proto: "graphql-transport-ws", Conn: conn}, resp, nil
}

// mustWS opens a websocket and has its connection_init acknowledged.
func mustWS(t *testing.T, base string, d websocket.Dialer, token string) *wsConn {
	t.Helper()
	c, resp, err := wsFrom(t, base, d, nil)
	if err != nil {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	c.init(token)
	return c
}

// wantUpgradeRefused checks that an upgrade was refused with 429, Retry-After and a
// RATE_LIMITED error that says why.
func wantUpgradeRefused(t *testing.T, what string, resp *http.Response, err error, says string) {
	t.Helper()
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("%s: %v, %v; want 429 with Retry-After", what, resp, err)
		return
	}
	var r tgtest.Response
	_ = json.NewDecoder(resp.Body).Decode(&r)
	if r.Code() != "RATE_LIMITED" || !strings.Contains(r.Errors[0].Message, says) {
		t.Errorf("%s: %+v; want RATE_LIMITED about %q", what, r.Errors, says)
	}
}

// subscribeAll starts n subscriptions on c, each from the cursor after, named prefix0…,
// and returns how many streamed (their first event came) and the refusals' messages
// (each an error with RATE_LIMITED).
func subscribeAll(t *testing.T, c *wsConn, prefix string, n int, sid, after string) (streaming int, refused []string) {
	t.Helper()
	pending := map[string]bool{}
	for i := range n {
		id := fmt.Sprint(prefix, i)
		pending[id] = true
		c.subscribe(id, sid, after)
	}
	deadline := time.Now().Add(tgtest.Wait)
	for len(pending) > 0 {
		m, err := c.readMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("%d subscriptions without an answer: %v", len(pending), err)
		}
		if !pending[m.ID] {
			continue
		}
		delete(pending, m.ID)
		switch m.Type {
		case "next":
			streaming++
		case "error":
			var errs []tgtest.GQLError
			_ = json.Unmarshal(m.Payload, &errs)
			if len(errs) != 1 || errs[0].Code() != "RATE_LIMITED" {
				t.Fatalf("subscription %s refused with %s", m.ID, m.Payload)
			}
			refused = append(refused, errs[0].Message)
		default:
			t.Fatalf("subscription %s: %s %s", m.ID, m.Type, m.Payload)
		}
	}
	return streaming, refused
}

// sseFirst subscribes over server-sent events through hc and returns the stream's first
// event and a function that ends the stream.
func sseFirst(t *testing.T, hc *http.Client, base, token, sid, after string) (name string, data tgtest.Response, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	body, _ := json.Marshal(map[string]any{"query": tgtest.StreamQuery, "variables": map[string]any{"s": sid, "a": after}})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	streaming := *hc
	streaming.Timeout = 0 // the stream lasts; cancel ends it
	resp, err := streaming.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("SSE: %v %v", resp, err)
	}
	stop = func() { cancel(); resp.Body.Close() }
	t.Cleanup(stop)
	got := make(chan struct{})
	go func() {
		defer close(got)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event:"):
				name = strings.TrimSpace(line[len("event:"):])
			case strings.HasPrefix(line, "data:"):
				_ = json.Unmarshal([]byte(strings.TrimSpace(line[len("data:"):])), &data)
			case line == "" && name != "":
				return
			}
		}
	}()
	select {
	case <-got:
	case <-time.After(tgtest.Wait):
		t.Fatal("SSE: no event")
	}
	return name, data, stop
}

// Finding 3: three guests of one address filled MAX_SUBSCRIPTIONS and the next user's
// subscription was refused; a token in the upgrade's header opened sockets without
// limit. Now an address holds at most MAX_SOCKETS_PER_ADDRESS sockets and
// MAX_SUBSCRIPTIONS_PER_ADDRESS subscriptions, a user MAX_SOCKETS_PER_USER and
// MAX_SUBSCRIPTIONS_PER_USER (server-sent events counted with websockets), and the slots
// come back when sockets and subscriptions close.
func TestOneAddressCannotTakeEverySubscription(t *testing.T) {
	const (
		server, subsPerAddress, subsPerUser = 40, 30, 12
		socketsPerAddress, socketsPerUser   = 9, 3
	)
	srv := startChild(t, t.TempDir(), freePort(t), "DATABASE_URL=memory:",
		fmt.Sprintf("MAX_SUBSCRIPTIONS=%d", server),
		fmt.Sprintf("MAX_SUBSCRIPTIONS_PER_ADDRESS=%d", subsPerAddress), fmt.Sprintf("MAX_SUBSCRIPTIONS_PER_USER=%d", subsPerUser),
		fmt.Sprintf("MAX_SOCKETS_PER_ADDRESS=%d", socketsPerAddress), fmt.Sprintf("MAX_SOCKETS_PER_USER=%d", socketsPerUser))
	home, homeWS := from("127.0.0.1")
	away, awayWS := from("127.0.0.2")
	before := quietFigures(t, away, srv.URL)

	// Three guests of one address, each with a session that has something to resume, so
	// that a subscription that streams says so at once.
	type user struct {
		c          *tgtest.Client
		sid, after string
		sockets    []*wsConn
	}
	newUser := func(hc *http.Client) *user {
		u := &user{c: guestVia(t, hc, srv.URL)}
		u.sid = u.c.CreateSession(nil)
		u.after = u.c.Cursor(u.sid)
		u.c.Send(u.sid, "something to resume")
		return u
	}
	a, b, c := newUser(home), newUser(home), newUser(home)
	d := newUser(away)

	// A user's sockets: the fourth is closed with 1013 once connection_init names its user.
	for range socketsPerUser {
		a.sockets = append(a.sockets, mustWS(t, srv.URL, homeWS, a.c.Token))
	}
	extra, resp, err := wsFrom(t, srv.URL, homeWS, nil)
	if err != nil {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	extra.mustSend(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + a.c.Token}})
	if code, seen := extra.closeCode(tgtest.Wait); code != websocket.CloseTryAgainLater || slices.ContainsFunc(seen, func(m wsMsg) bool { return m.Type == "connection_ack" }) {
		t.Errorf("a user's 4th socket: closed with %d after %v, want 1013 before any ack", code, types(seen))
	}
	// The server gives the address's slot back as it closes the socket, before it stops
	// counting it.
	if !waitUntil(tgtest.Wait, func() bool {
		return serverMetrics(t, away, srv.URL)["talkgraph_websockets_open"] == socketsPerUser
	}) {
		t.Fatal("the refused socket is still counted")
	}
	// With the token in the upgrade's header the user is known at once: 429 before the upgrade.
	header := http.Header{"Authorization": {"Bearer " + b.c.Token}}
	for range socketsPerUser {
		s, resp, err := wsFrom(t, srv.URL, homeWS, header)
		if err != nil {
			t.Fatalf("upgrade with a token: %v %v", resp, err)
		}
		s.init(b.c.Token)
		b.sockets = append(b.sockets, s)
	}
	_, resp, err = wsFrom(t, srv.URL, homeWS, header)
	wantUpgradeRefused(t, "a user's 4th upgrade with a token", resp, err, "for this user")
	// The address's sockets: a fourth guest of the address is refused before the upgrade.
	for range socketsPerUser {
		c.sockets = append(c.sockets, mustWS(t, srv.URL, homeWS, c.c.Token))
	}
	_, resp, err = wsFrom(t, srv.URL, homeWS, nil)
	wantUpgradeRefused(t, "an upgrade past the address's sockets", resp, err, "from your address")
	d.sockets = append(d.sockets, mustWS(t, srv.URL, awayWS, d.c.Token))

	// Subscriptions: each user of the address asks for five on each socket.
	count := func(u *user) (int, []string) {
		total, all := 0, []string(nil)
		for i, s := range u.sockets {
			n, refused := subscribeAll(t, s, fmt.Sprintf("s%d-", i), 5, u.sid, u.after)
			total, all = total+n, append(all, refused...)
		}
		return total, all
	}
	for _, tc := range []struct {
		name    string
		u       *user
		streams int
		says    string
	}{
		{"A", a, subsPerUser, "open for this user (at most 12)"},
		{"B", b, subsPerUser, "open for this user (at most 12)"},
		{"C", c, subsPerAddress - 2*subsPerUser, "open from your address (at most 30)"},
	} {
		n, refused := count(tc.u)
		if n != tc.streams || len(refused) != 15-tc.streams {
			t.Errorf("user %s: %d of 15 subscriptions streamed, %d refused; want %d", tc.name, n, len(refused), tc.streams)
		}
		for _, msg := range refused {
			if !strings.Contains(msg, tc.says) {
				t.Errorf("user %s: refused with %q, want about %q", tc.name, msg, tc.says)
			}
		}
	}
	// The sockets stay: a query on one that had subscriptions refused is answered.
	a.sockets[0].mustSend(map[string]any{"type": "subscribe", "id": "q", "payload": map[string]any{"query": "{ viewer { id } }"}})
	for {
		m, err := a.sockets[0].readMsg(tgtest.Wait)
		if err != nil {
			t.Fatalf("a query on a socket after refusals: %v", err)
		}
		if m.ID == "q" {
			if m.Type != "next" {
				t.Fatalf("a query on a socket after refusals: %s %s", m.Type, m.Payload)
			}
			break
		}
	}
	// The address holds 30 of the server's 40: a user of another address is served.
	if n, refused := subscribeAll(t, d.sockets[0], "d", server-subsPerAddress-1, d.sid, d.after); n != server-subsPerAddress-1 {
		t.Errorf("a user of another address: %d subscriptions streamed, refused %v", n, refused)
	}
	// Over server-sent events, as over websockets: A holds its sockets and subscriptions;
	// D has room for one more.
	name, data, _ := sseFirst(t, home, srv.URL, a.c.Token, a.sid, a.after)
	if name != "next" || data.Code() != "RATE_LIMITED" {
		t.Errorf("A over server-sent events: %s %+v, want RATE_LIMITED", name, data.Errors)
	}
	name, data, stopD := sseFirst(t, away, srv.URL, d.c.Token, d.sid, d.after)
	if name != "next" || len(data.Errors) > 0 {
		t.Errorf("D over server-sent events: %s %+v", name, data.Errors)
	}

	// Slots come back: a subscription stopped frees one at once (the socket's reader takes
	// the stop before the next message) ...
	a.sockets[0].mustSend(map[string]any{"type": "complete", "id": "s0-0"})
	a.sockets[0].mustSend(map[string]any{"type": "complete", "id": "s0-1"})
	if n, refused := subscribeAll(t, a.sockets[0], "again", 2, a.sid, a.after); n != 2 {
		t.Errorf("after two stops: %d of 2 streamed, refused %v", n, refused)
	}
	// ... and closed sockets give theirs back once the server has seen them close.
	open := serverMetrics(t, away, srv.URL)["talkgraph_websockets_open"]
	for _, s := range a.sockets {
		s.Close()
	}
	if !waitUntil(tgtest.Wait, func() bool {
		return serverMetrics(t, away, srv.URL)["talkgraph_websockets_open"] == open-socketsPerUser
	}) {
		t.Fatal("the server did not see A's sockets close")
	}
	a.sockets = nil
	for range socketsPerUser {
		a.sockets = append(a.sockets, mustWS(t, srv.URL, homeWS, a.c.Token))
	}
	if n, _ := count(a); n != subsPerUser {
		t.Errorf("A again: %d subscriptions streamed, want %d", n, subsPerUser)
	}

	// Everyone leaves: the server is back where it was.
	stopD()
	for _, u := range []*user{a, b, c, d} {
		for _, s := range u.sockets {
			s.Close()
		}
	}
	if !waitUntil(tgtest.Wait, func() bool {
		m := serverMetrics(t, away, srv.URL)
		return m["talkgraph_websockets_open"] == 0 && m["talkgraph_subscriptions_active"] == 0
	}) {
		t.Fatal("sockets or subscriptions remain open")
	}
	backTo(t, away, srv.URL, before)
}

// The per-address caps count addresses as the rest of the server does: behind a trusted
// proxy, by X-Forwarded-For.
func TestSocketCapsCountForwardedAddresses(t *testing.T) {
	a := startApp(t, "memory", func(c *app.Config) {
		c.HTTP.SocketsPerAddress = 2
		c.HTTP.TrustedProxies = mustProxies(t, "127.0.0.1/32")
	})
	g := guest(t, a)
	_, d := from("127.0.0.1")
	for _, client := range []string{"198.51.100.1", "198.51.100.2"} {
		header := http.Header{"X-Forwarded-For": {client}}
		for range 2 {
			s, resp, err := wsFrom(t, a.URL, d, header)
			if err != nil {
				t.Fatalf("%s: %v %v", client, resp, err)
			}
			s.init(g.Token)
		}
		_, resp, err := wsFrom(t, a.URL, d, header)
		wantUpgradeRefused(t, client+"'s third socket", resp, err, "from your address")
	}
}
