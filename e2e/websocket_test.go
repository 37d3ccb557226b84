package e2e

// Tests of the websocket transport's promises, from outside: a real server, real sockets,
// both subprotocols wherever both apply. The promises are the ones of package graphqlws and
// the API contract: a subscription is completed only when it really ends (the client stops
// it, or its session is deleted); a server that shuts down, or a connection that stopped
// answering or reading, is closed (1001) so that the client reconnects and resumes with its
// cursor; protocol errors close with the graphql-transport-ws codes; messageStream(after: c)
// delivers every event after c, then live ones, with no gap and no duplicate.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/demo"
)

// protocols are the two websocket subprotocols the server speaks.
var protocols = []string{"graphql-transport-ws", "graphql-ws"}

// Message types that differ between the protocols.
func startType(proto string) string {
	if proto == "graphql-ws" {
		return "start"
	}
	return "subscribe"
}

func stopType(proto string) string {
	if proto == "graphql-ws" {
		return "stop"
	}
	return "complete"
}

func nextType(proto string) string {
	if proto == "graphql-ws" {
		return "data"
	}
	return "next"
}

func wsURL(base string) string { return "ws" + strings.TrimPrefix(base, "http") + "/query" }

// wsMsg is a message of either protocol.
type wsMsg struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// keepAlive reports whether m is one of the protocols' keep-alive messages.
func (m wsMsg) keepAlive() bool { return m.Type == "ka" || m.Type == "ping" || m.Type == "pong" }

// event decodes a messageStream event from a next or data message.
func (m wsMsg) event(t testing.TB) tgtest.Event {
	t.Helper()
	var p struct {
		Data struct{ MessageStream *tgtest.Event }
	}
	if err := json.Unmarshal(m.Payload, &p); err != nil || p.Data.MessageStream == nil {
		t.Fatalf("not a messageStream event: %s %s", m.Type, m.Payload)
	}
	return *p.Data.MessageStream
}

// wsConn is a websocket spoken by hand, so that a test sees every frame the server sends
// and decides what the client sends, and when it reads.
type wsConn struct {
	t     testing.TB
	proto string
	*websocket.Conn

	wmu    sync.Mutex
	frames chan wsMsg    // filled by the read loop, once started
	ended  chan struct{} // closed when the read loop ends
	err    error         // why it ended, once ended is closed
}

func dialWS(t testing.TB, base, proto string) *wsConn {
	t.Helper()
	return dialWSWith(t, base, proto, websocket.Dialer{})
}

func dialWSWith(t testing.TB, base, proto string, d websocket.Dialer) *wsConn {
	t.Helper()
	d.Subprotocols = []string{proto}
	d.HandshakeTimeout = tgtest.Wait
	conn, _, err := d.Dial(wsURL(base), nil)
	if err != nil {
		t.Fatalf("dial %s: %v", proto, err)
	}
	if conn.Subprotocol() != proto {
		t.Fatalf("asked for %s, got %q", proto, conn.Subprotocol())
	}
	t.Cleanup(func() { conn.Close() })
	return &wsConn{t: t, proto: proto, Conn: conn}
}

// sendText sends one text message as it is.
func (c *wsConn) sendText(s string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(tgtest.Wait))
	return c.WriteMessage(websocket.TextMessage, []byte(s))
}

func (c *wsConn) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.sendText(string(b))
}

func (c *wsConn) mustSend(v any) {
	c.t.Helper()
	if err := c.send(v); err != nil {
		c.t.Fatalf("send %v: %v", v, err)
	}
}

// readMsg reads the next message itself (the read loop must not run).
func (c *wsConn) readMsg(d time.Duration) (wsMsg, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, data, err := c.ReadMessage()
	if err != nil {
		return wsMsg{}, err
	}
	var m wsMsg
	if err := json.Unmarshal(data, &m); err != nil {
		c.t.Fatalf("server sent something that is not JSON: %q", data)
	}
	return m, nil
}

// init sends connection_init with the token and waits for connection_ack.
func (c *wsConn) init(token string) {
	c.t.Helper()
	c.mustSend(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + token}})
	for {
		m, err := c.readMsg(tgtest.Wait)
		if err != nil {
			c.t.Fatalf("%s: waiting for connection_ack: %v", c.proto, err)
		}
		if m.Type == "connection_ack" {
			return
		}
		if !m.keepAlive() {
			c.t.Fatalf("%s: waiting for connection_ack, got %s %s", c.proto, m.Type, m.Payload)
		}
	}
}

// closeCode reads until the server closes the connection, and returns the close code (0
// when the connection ended without a close frame) and the messages that came before it.
// It fails the test when the connection is still open after within.
func (c *wsConn) closeCode(within time.Duration) (int, []wsMsg) {
	c.t.Helper()
	var seen []wsMsg
	deadline := time.Now().Add(within)
	for {
		m, err := c.readMsg(time.Until(deadline))
		if err == nil {
			seen = append(seen, m)
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code, seen
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("%s: connection still open after %v (seen %v)", c.proto, within, types(seen))
		}
		return 0, seen
	}
}

func types(msgs []wsMsg) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Type)
	}
	return out
}

// readLoop starts reading on a goroutine of its own: messages go to c.frames.
func (c *wsConn) readLoop() {
	c.frames = make(chan wsMsg, 100000)
	c.ended = make(chan struct{})
	go func() {
		defer close(c.ended)
		defer close(c.frames)
		_ = c.SetReadDeadline(time.Time{})
		for {
			_, data, err := c.ReadMessage()
			if err != nil {
				c.err = err
				return
			}
			var m wsMsg
			if err := json.Unmarshal(data, &m); err != nil {
				c.err = fmt.Errorf("server sent something that is not JSON: %q", data)
				return
			}
			c.frames <- m
		}
	}()
}

// closeErr returns the close code the read loop ended with (0 for none) and its error.
func (c *wsConn) closeErr() (int, error) {
	<-c.ended
	var ce *websocket.CloseError
	if errors.As(c.err, &ce) {
		return ce.Code, c.err
	}
	return 0, c.err
}

// subscribe starts messageStream(sessionId: sid, after: after) as id.
func (c *wsConn) subscribe(id, sid, after string) {
	c.t.Helper()
	vars := map[string]any{"s": sid}
	if after != "" {
		vars["a"] = after
	}
	c.mustSend(map[string]any{"type": startType(c.proto), "id": id, "payload": map[string]any{"query": tgtest.StreamQuery, "variables": vars}})
}

// stream is what a test saw of one subscription.
type stream struct {
	Events    []tgtest.Event
	Completed bool   // the server sent complete (or error) for it
	End       string // which of the two
}

func cursorSeq(t testing.TB, sid, cursor string) int64 {
	t.Helper()
	c, err := service.DecodeCursor(sid, cursor)
	if err != nil {
		t.Fatalf("cursor %q: %v", cursor, err)
	}
	return c.Seq
}

// checkContinuous checks that events are in log order with no duplicate, and that each
// message's chunks follow one another with no gap or overlap; it returns each message's
// text assembled from its chunks.
func checkContinuous(t testing.TB, sid string, evs []tgtest.Event) map[string]string {
	t.Helper()
	text := map[string]string{}
	for i, ev := range evs {
		if i > 0 && cursorSeq(t, sid, ev.Cursor) <= cursorSeq(t, sid, evs[i-1].Cursor) {
			t.Fatalf("event %d (%s, %s) is not after the one before (%s): a duplicate or disorder", i, ev.Typename, ev.Cursor, evs[i-1].Cursor)
		}
		if ev.Typename != "MessageChunk" {
			continue
		}
		if got := len([]rune(text[ev.MessageID])); ev.Offset != got {
			t.Fatalf("event %d: chunk of %s at offset %d, but %d code points came before it: a gap or a duplicate", i, ev.MessageID, ev.Offset, got)
		}
		text[ev.MessageID] += ev.Delta
	}
	return text
}

// notChunks lists the events other than chunks, one a line.
func notChunks(evs []tgtest.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Typename != "MessageChunk" && ev.Typename != "ToolCallOutput" {
			fmt.Fprintf(&b, "%s %s\n", ev.Typename, ev.Cursor)
		}
	}
	return b.String()
}

// checkTexts checks that the deltas seen add up to every assistant reply's final content.
func checkTexts(t testing.TB, c *tgtest.Client, sid string, text map[string]string) {
	t.Helper()
	n := 0
	for _, m := range c.Messages(sid) {
		if m.Role == "ASSISTANT" && m.Kind == "TEXT" {
			n++
			if text[m.ID] != m.Content {
				t.Errorf("message %s (%s): deltas add up to %q, content is %q", m.ID, m.Status, text[m.ID], m.Content)
			}
		}
	}
	if n == 0 {
		t.Error("no assistant reply in the history")
	}
}

// fastSlow replaces the demo agent by one whose /slow streams a chunk every d, so a test
// can stream a lot quickly.
func fastSlow(d time.Duration) func(*app.Config) {
	return func(c *app.Config) {
		c.Agents = func(a *service.Agents) {
			a.Register("demo", demo.Description, &demo.Agent{ChunkDelay: c.DemoChunkDelay, SlowDelay: d})
		}
	}
}

func configure(changes ...func(*app.Config)) func(*app.Config) {
	return func(c *app.Config) {
		for _, ch := range changes {
			ch(c)
		}
	}
}

// ---- Protocol errors ----

func TestSubscribeBeforeConnectionInitClosesWith4401(t *testing.T) {
	a := startApp(t, "memory", nil)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			c := dialWS(t, a.URL, proto)
			c.mustSend(map[string]any{"type": startType(proto), "id": "1", "payload": map[string]any{"query": "{ viewer { id } }"}})
			if code, seen := c.closeCode(tgtest.Wait); code != 4401 {
				t.Errorf("close code %d after %v, want 4401", code, types(seen))
			}
		})
	}
}

// A client may authenticate a socket with the upgrade request's Authorization header
// instead of connection_init's payload; a bad header does not refuse the upgrade, and
// connection_init without a token then closes with 4401.
func TestWebsocketAuthenticatedByTheUpgradeHeader(t *testing.T) {
	a := startApp(t, "memory", nil)
	g := guest(t, a)
	var me struct{ Viewer struct{ ID string } }
	g.Must(`{ viewer { id } }`, nil, &me)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			dial := func(header string) *wsConn {
				d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: tgtest.Wait}
				conn, _, err := d.Dial(wsURL(a.URL), http.Header{"Authorization": {header}})
				if err != nil {
					t.Fatalf("dial with the header %q: %v", header, err)
				}
				t.Cleanup(func() { conn.Close() })
				return &wsConn{t: t, proto: proto, Conn: conn}
			}
			c := dial("Bearer " + g.Token)
			c.mustSend(map[string]any{"type": "connection_init", "payload": map[string]any{}})
			c.mustSend(map[string]any{"type": startType(proto), "id": "1", "payload": map[string]any{"query": "{ viewer { id } }"}})
			for {
				m, err := c.readMsg(tgtest.Wait)
				if err != nil {
					t.Fatalf("waiting for the viewer: %v", err)
				}
				if m.Type == "connection_ack" || m.keepAlive() {
					continue
				}
				if m.Type != nextType(proto) || !strings.Contains(string(m.Payload), me.Viewer.ID) {
					t.Fatalf("got %s %s, want the viewer %s", m.Type, m.Payload, me.Viewer.ID)
				}
				break
			}

			bad := dial("Bearer nonsense")
			bad.mustSend(map[string]any{"type": "connection_init", "payload": map[string]any{}})
			if code, seen := bad.closeCode(tgtest.Wait); code != 4401 {
				t.Errorf("a bad header and no token: close code %d after %v, want 4401", code, types(seen))
			}
		})
	}
}

func TestSecondConnectionInitClosesWith4429(t *testing.T) {
	a := startApp(t, "memory", nil)
	g := guest(t, a)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			c := dialWS(t, a.URL, proto)
			c.init(g.Token)
			c.mustSend(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + g.Token}})
			if code, seen := c.closeCode(tgtest.Wait); code != 4429 {
				t.Errorf("close code %d after %v, want 4429", code, types(seen))
			}
		})
	}
}

func TestNoConnectionInitInTimeClosesWith4408(t *testing.T) {
	const initTimeout = 300 * time.Millisecond
	a := startApp(t, "memory", func(c *app.Config) { c.HTTP.InitTimeout = initTimeout })
	for _, proto := range protocols {
		for name, pings := range map[string]bool{"silent": false, "pinging": true} {
			t.Run(proto+"/"+name, func(t *testing.T) {
				c := dialWS(t, a.URL, proto)
				start := time.Now()
				if pings {
					// Pings are answered, but they are no connection_init.
					c.mustSend(map[string]any{"type": "ping"})
					if m, err := c.readMsg(tgtest.Wait); err != nil || m.Type != "pong" {
						t.Fatalf("ping before connection_init: %+v %v", m, err)
					}
				}
				code, seen := c.closeCode(tgtest.Wait)
				if code != 4408 {
					t.Errorf("close code %d after %v, want 4408", code, types(seen))
				}
				if took := time.Since(start); took < initTimeout-50*time.Millisecond {
					t.Errorf("closed after %v, before the init timeout of %v", took, initTimeout)
				}
			})
		}
	}
}

func TestDuplicateSubscriptionIDClosesWith4409(t *testing.T) {
	a := startApp(t, "memory", nil)
	g := guest(t, a)
	sid := g.CreateSession(nil)
	from := g.Cursor(sid)
	t.Run("graphql-transport-ws", func(t *testing.T) {
		c := dialWS(t, a.URL, "graphql-transport-ws")
		c.init(g.Token)
		c.subscribe("a", sid, "")
		c.subscribe("a", sid, "")
		if code, seen := c.closeCode(tgtest.Wait); code != 4409 {
			t.Errorf("close code %d after %v, want 4409", code, types(seen))
		}
	})
	// The legacy protocol names no such code. Its clients take an error for an ID as the
	// end of that operation, so an error would leave the first subscription streaming to
	// a client that dropped it; instead, as in the protocol's reference server, the second
	// start replaces the first: no complete, no error, and from then on the ID's frames
	// are the new subscription's only.
	t.Run("graphql-ws", func(t *testing.T) {
		c := dialWS(t, a.URL, "graphql-ws")
		c.init(g.Token)
		c.readLoop()
		l := newFrameLog(t, c, sid)
		c.subscribe("a", sid, from)
		_, first := g.Send(sid, "first")
		l.until("the first run's end", func() bool { return l.sawRunEnd("a", first) })
		replayed := l.sub("a").Events[0].Cursor
		l.subs["a"] = &stream{}
		c.subscribe("a", sid, from) // the same ID, from the start again
		l.until("the replay's first event", func() bool { return len(l.sub("a").Events) > 0 })
		if got := l.sub("a").Events[0].Cursor; got != replayed {
			t.Fatalf("after the second start, the first event for a is %s, want the replay's %s", got, replayed)
		}
		_, second := g.Send(sid, "second")
		l.until("the second run's end", func() bool { return l.sawRunEnd("a", second) })
		checkTexts(t, g, sid, checkContinuous(t, sid, l.sub("a").Events))
		if l.sub("a").Completed {
			t.Errorf("the ID's subscription ended with %s", l.sub("a").End)
		}
		waitFor(t, "the replaced subscription to be closed", func() bool { return a.Service.Stats().Subscriptions == 1 })
	})
}

// An ID is free again once the server completed its operation: a client may reuse it
// as soon as it has the complete.
func TestIDIsReusableOnceItsOperationCompleted(t *testing.T) {
	a := startApp(t, "memory", nil)
	g := guest(t, a)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			c := dialWS(t, a.URL, proto)
			c.init(g.Token)
			for i := 0; i < 200; i++ {
				c.mustSend(map[string]any{"type": startType(proto), "id": "q", "payload": map[string]any{"query": "{ viewer { id } }"}})
				var got []string
				for {
					m, err := c.readMsg(tgtest.Wait)
					if err != nil {
						var ce *websocket.CloseError
						if errors.As(err, &ce) {
							t.Fatalf("query %d reusing ID q: closed with %d %q after %v", i, ce.Code, ce.Text, got)
						}
						t.Fatalf("query %d reusing ID q: %v after %v", i, err, got)
					}
					if m.keepAlive() {
						continue
					}
					got = append(got, m.Type)
					if m.Type == "complete" || m.Type == "error" {
						break
					}
				}
				if strings.Join(got, ",") != nextType(proto)+",complete" {
					t.Fatalf("query %d reusing ID q: got %v", i, got)
				}
			}
		})
	}
}

func TestUnknownMessageTypeClosesWith4400(t *testing.T) {
	a := startApp(t, "memory", nil)
	g := guest(t, a)
	for _, proto := range protocols {
		other := map[string]string{"graphql-ws": "complete", "graphql-transport-ws": "stop"}[proto]
		cases := map[string]string{
			"unknown type":                  `{"type":"nonsense"}`,
			"no type":                       `{"id":"1"}`,
			"not JSON":                      `hello`,
			"a JSON array":                  `[{"type":"ping"}]`,
			"subscribe without ID":          `{"type":"` + startType(proto) + `","payload":{"query":"{ viewer { id } }"}}`,
			"the other protocol's " + other: `{"type":"` + other + `","id":"1"}`,
		}
		if proto == "graphql-transport-ws" {
			cases["connection_terminate (legacy only)"] = `{"type":"connection_terminate"}`
		}
		for name, msg := range cases {
			for _, inited := range []bool{false, true} {
				if !inited && strings.HasPrefix(name, "subscribe") {
					continue // before connection_init a subscribe is unauthorised first
				}
				t.Run(fmt.Sprintf("%s/%s/inited=%v", proto, name, inited), func(t *testing.T) {
					c := dialWS(t, a.URL, proto)
					if inited {
						c.init(g.Token)
					}
					if err := c.sendText(msg); err != nil {
						t.Fatal(err)
					}
					if code, seen := c.closeCode(tgtest.Wait); code != 4400 {
						t.Errorf("%s: close code %d after %v, want 4400", msg, code, types(seen))
					}
				})
			}
		}
	}
	// In the legacy protocol connection_terminate is how a client says goodbye.
	t.Run("graphql-ws/connection_terminate", func(t *testing.T) {
		c := dialWS(t, a.URL, "graphql-ws")
		c.init(g.Token)
		c.mustSend(map[string]any{"type": "connection_terminate"})
		if code, seen := c.closeCode(tgtest.Wait); code != websocket.CloseNormalClosure {
			t.Errorf("close code %d after %v, want 1000", code, types(seen))
		}
	})
}

func TestConnectionInitPayloadThatIsNotAnObjectClosesWith4400WithoutAck(t *testing.T) {
	const initTimeout = 2 * time.Second
	a := startApp(t, "memory", func(c *app.Config) { c.HTTP.InitTimeout = initTimeout })
	g := guest(t, a)
	for _, proto := range protocols {
		for _, payload := range []string{`"Bearer ` + g.Token + `"`, `42`, `[]`, `["Authorization","Bearer ` + g.Token + `"]`, `true`} {
			t.Run(proto+"/"+payload[:min(len(payload), 12)], func(t *testing.T) {
				c := dialWS(t, a.URL, proto)
				if err := c.sendText(`{"type":"connection_init","payload":` + payload + `}`); err != nil {
					t.Fatal(err)
				}
				// Closed at once, and in any case no later than the init timeout: such a
				// connection_init does not count as one.
				code, seen := c.closeCode(initTimeout + 2*time.Second)
				for _, m := range seen {
					if m.Type == "connection_ack" {
						t.Errorf("payload %s acknowledged", payload)
					}
				}
				if code != 4400 {
					t.Errorf("payload %s: close code %d after %v, want 4400", payload, code, types(seen))
				}
			})
		}
	}
}

func TestMessageOverMaxBodyBytesClosesWith1009(t *testing.T) {
	const limit = 4096
	a := startApp(t, "memory", func(c *app.Config) { c.HTTP.MaxBodyBytes = limit })
	g := guest(t, a)
	for _, proto := range protocols {
		for _, inited := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/inited=%v", proto, inited), func(t *testing.T) {
				c := dialWS(t, a.URL, proto)
				if inited {
					c.init(g.Token)
				}
				// Just under the limit is fine.
				query := "{ viewer { id } }"
				msg := func(size int) string {
					m := `{"type":"` + startType(proto) + `","id":"big","payload":{"query":"` + query + `"}}`
					return m[:len(m)-3] + strings.Repeat(" ", size-len(m)) + `"}}`
				}
				if inited {
					if err := c.sendText(msg(limit)); err != nil {
						t.Fatal(err)
					}
					m, err := c.readMsg(tgtest.Wait)
					for err == nil && m.keepAlive() {
						m, err = c.readMsg(tgtest.Wait)
					}
					if err != nil || m.Type != nextType(proto) {
						t.Fatalf("message of exactly %d bytes: %+v %v", limit, m, err)
					}
				}
				if err := c.sendText(msg(limit + 1000)); err != nil {
					t.Fatal(err)
				}
				if code, seen := c.closeCode(tgtest.Wait); code != websocket.CloseMessageTooBig {
					t.Errorf("close code %d after %v, want 1009", code, types(seen))
				}
			})
		}
	}
}

// ---- Endings ----

// frameLog is every message of a connection, split by subscription ID, as a read loop
// delivers them.
type frameLog struct {
	t    testing.TB
	c    *wsConn
	sid  string
	subs map[string]*stream
	// after holds, for each ID the client stopped, the messages that came for it once the
	// server had taken the stop in (see barrier).
	after   map[string][]wsMsg
	stopped map[string]bool
	pongs   int
}

func newFrameLog(t testing.TB, c *wsConn, sid string) *frameLog {
	return &frameLog{t: t, c: c, sid: sid, subs: map[string]*stream{}, after: map[string][]wsMsg{}, stopped: map[string]bool{}}
}

func (l *frameLog) sub(id string) *stream {
	if l.subs[id] == nil {
		l.subs[id] = &stream{}
	}
	return l.subs[id]
}

// read takes the next message in, failing the test when none comes within tgtest.Wait or
// the connection ends.
func (l *frameLog) read(what string) wsMsg {
	l.t.Helper()
	timer := time.NewTimer(tgtest.Wait)
	defer timer.Stop()
	select {
	case m, ok := <-l.c.frames:
		if !ok {
			code, err := l.c.closeErr()
			l.t.Fatalf("%s: waiting for %s: the connection ended (code %d, %v)", l.c.proto, what, code, err)
		}
		switch {
		case m.Type == "pong":
			l.pongs++
		case m.keepAlive():
		case l.stopped[m.ID]:
			l.after[m.ID] = append(l.after[m.ID], m)
		case m.Type == "complete" || m.Type == "error":
			l.sub(m.ID).Completed = true
			l.sub(m.ID).End = m.Type
		case m.Type == nextType(l.c.proto):
			l.sub(m.ID).Events = append(l.sub(m.ID).Events, m.event(l.t))
		default:
			l.t.Fatalf("%s: unexpected message %s %s", l.c.proto, m.Type, m.Payload)
		}
		return m
	case <-timer.C:
		l.t.Fatalf("%s: waiting for %s: nothing within %v", l.c.proto, what, tgtest.Wait)
	}
	panic("unreachable")
}

// until reads until cond holds.
func (l *frameLog) until(what string, cond func() bool) {
	l.t.Helper()
	for !cond() {
		l.read(what)
	}
}

// sawRunEnd reports whether subscription id saw run end.
func (l *frameLog) sawRunEnd(id, run string) bool {
	for _, ev := range l.sub(id).Events {
		if tgtest.RunEnds(run)(ev) {
			return true
		}
	}
	return false
}

func (l *frameLog) chunks(id string) int {
	n := 0
	for _, ev := range l.sub(id).Events {
		if ev.Typename == "MessageChunk" {
			n++
		}
	}
	return n
}

// stop stops subscription id and waits until the server has taken the stop in: in the
// legacy protocol it answers with complete; in graphql-transport-ws, which has no answer,
// a ping sent after the stop is answered after it (the server handles a connection's
// messages in order). Messages for id after that are kept in l.after.
func (l *frameLog) stop(id string) {
	l.t.Helper()
	l.c.mustSend(map[string]any{"type": stopType(l.c.proto), "id": id})
	if l.c.proto == "graphql-ws" {
		l.until("complete for the stopped "+id, func() bool { return l.sub(id).Completed })
		l.stopped[id] = true
		return
	}
	pongs := l.pongs
	l.c.mustSend(map[string]any{"type": "ping"})
	l.until("pong after the stop", func() bool { return l.pongs > pongs })
	l.stopped[id] = true
}

func TestStoppingOneSubscriptionLeavesTheOthersStreaming(t *testing.T) {
	t.Parallel()
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			a := startApp(t, "memory", fastSlow(2*time.Millisecond))
			g := guest(t, a)
			sid := g.CreateSession(nil)
			from := g.Cursor(sid)
			c := dialWS(t, a.URL, proto)
			c.init(g.Token)
			c.readLoop()
			l := newFrameLog(t, c, sid)
			for _, id := range []string{"a", "b", "c"} {
				c.subscribe(id, sid, from)
			}
			_, run := g.Send(sid, "/slow 500")
			l.until("chunks on every subscription", func() bool { return l.chunks("a") > 0 && l.chunks("b") > 0 && l.chunks("c") > 0 })
			l.stop("a")
			if proto == "graphql-transport-ws" && l.sub("a").Completed {
				t.Error("the server answered the client's complete with a complete")
			}
			l.until("run end on b and c", func() bool { return l.sawRunEnd("b", run) && l.sawRunEnd("c", run) })
			for _, id := range []string{"b", "c"} {
				if l.sub(id).Completed {
					t.Errorf("subscription %s completed when a was stopped", id)
				}
				checkTexts(t, g, sid, checkContinuous(t, sid, l.sub(id).Events))
			}
			waitFor(t, "the stopped subscription to be closed", func() bool { return a.Service.Stats().Subscriptions == 2 })
			if n := len(l.after["a"]); n > 0 {
				t.Errorf("%d messages for a after the server took its stop in: %v", n, types(l.after["a"]))
			}
		})
	}
}

// Once the server has taken a client's stop (graphql-ws) or complete
// (graphql-transport-ws) in, nothing more comes for that subscription: the server has
// answered a ping the client sent after it (graphql-transport-ws) or sent complete
// (graphql-ws). Many subscriptions streaming fast on one connection make an event in
// flight at the stop likely.
func TestNothingMoreComesForASubscriptionOnceTheServerTookItsStopIn(t *testing.T) {
	t.Parallel()
	const subs, rounds = 50, 10
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			a := startApp(t, "memory", fastSlow(time.Millisecond))
			g := guest(t, a)
			late := 0
			for round := 0; round < rounds; round++ {
				sid := g.CreateSession(nil)
				from := g.Cursor(sid)
				c := dialWS(t, a.URL, proto)
				c.init(g.Token)
				c.readLoop()
				l := newFrameLog(t, c, sid)
				for i := 0; i < subs; i++ {
					c.subscribe(fmt.Sprint(i), sid, from)
				}
				_, run := g.Send(sid, "/slow 10000")
				for i := 0; i < subs-1; i++ {
					id := fmt.Sprint(i)
					l.until("a chunk on "+id, func() bool { return l.chunks(id) > 0 })
					l.stop(id)
				}
				// The connection's subscriptions take turns: once the last one has had a few
				// more events (or the run's end, on a machine slow enough for the run to end
				// meanwhile), whatever was in flight for the others has been written.
				last := fmt.Sprint(subs - 1)
				n := len(l.sub(last).Events)
				l.until("more events on "+last, func() bool { return len(l.sub(last).Events) > n+5 || l.sawRunEnd(last, run) })
				for id, msgs := range l.after {
					if len(msgs) > 0 {
						late++
						t.Errorf("round %d: %d messages for %s after the server took its stop in: %v", round, len(msgs), id, types(msgs))
					}
				}
				c.Close()
				g.Cancel(sid)
			}
			t.Logf("%d of %d stopped subscriptions got messages after the stop", late, rounds*(subs-1))
		})
	}
}

func TestDeletingTheSessionCompletesItsSubscriptions(t *testing.T) {
	t.Parallel()
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			a := startApp(t, "memory", fastSlow(2*time.Millisecond))
			g := guest(t, a)
			doomed, kept := g.CreateSession(nil), g.CreateSession(nil)
			c := dialWS(t, a.URL, proto)
			c.init(g.Token)
			c.readLoop()
			l := newFrameLog(t, c, doomed)
			c.subscribe("doomed", doomed, g.Cursor(doomed))
			c.subscribe("kept", kept, g.Cursor(kept))
			g.Send(doomed, "/slow 5000")
			l.until("a chunk", func() bool { return l.chunks("doomed") > 0 })
			g.Must(`mutation($s: ID!){ deleteTalkSession(id: $s) }`, map[string]any{"s": doomed}, nil)
			l.until("complete for the deleted session's subscription", func() bool { return l.sub("doomed").Completed })
			if end := l.sub("doomed").End; end != "complete" {
				t.Errorf("the deleted session's subscription ended with %s, want complete", end)
			}
			l.stopped["doomed"] = true // nothing may come for it any more
			// The connection and its other subscription go on.
			_, run := g.Send(kept, "still here")
			l.until("the other session's run end", func() bool { return l.sawRunEnd("kept", run) })
			if l.sub("kept").Completed {
				t.Error("the other session's subscription completed too")
			}
			if n := len(l.after["doomed"]); n > 0 {
				t.Errorf("%d messages for the deleted session's subscription after its complete: %v", n, types(l.after["doomed"]))
			}
			waitFor(t, "the deleted session's subscription to be closed", func() bool { return a.Service.Stats().Subscriptions == 1 })
		})
	}
}

// TestShutdownClosesWith1001WithoutCompleteAndResumingMissesNothing sends SIGTERM to a
// real server while a reply streams to subscribers of both protocols, restarts it on the
// same SQLite file, and resumes from the last cursor each one saw.
func TestShutdownClosesWith1001WithoutCompleteAndResumingMissesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	dataDir := t.TempDir()
	port := freePort(t)
	srv := startChild(t, dataDir, port)
	g := tgtest.Guest(t, srv.URL)
	sid := g.CreateSession(nil)
	from := g.Cursor(sid)
	logs := map[string]*frameLog{}
	for _, proto := range protocols {
		c := dialWS(t, srv.URL, proto)
		c.init(g.Token)
		c.readLoop()
		c.subscribe("s", sid, from)
		logs[proto] = newFrameLog(t, c, sid)
	}
	// Connections with no subscription, initialised or not, are closed with 1001 too.
	var idle []*wsConn
	for _, proto := range protocols {
		c := dialWS(t, srv.URL, proto)
		c.init(g.Token)
		idle = append(idle, c, dialWS(t, srv.URL, proto))
	}
	_, run := g.Send(sid, "/slow 500")
	for _, l := range logs {
		l.until("a few chunks", func() bool { return l.chunks("s") >= 5 })
	}

	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	for i, c := range idle {
		if code, seen := c.closeCode(tgtest.Wait); code != websocket.CloseGoingAway {
			t.Errorf("%s idle connection (initialised %v): close code %d after %v, want 1001", c.proto, i%2 == 0, code, types(seen))
		}
	}
	timeout := time.After(tgtest.Wait)
	for proto, l := range logs {
		for open := true; open; {
			select {
			case m, ok := <-l.c.frames:
				switch {
				case !ok:
					open = false
				case m.Type == "complete" || m.Type == "error":
					t.Errorf("%s: %s %s at shutdown", proto, m.Type, m.Payload)
				case m.Type == nextType(proto):
					l.sub("s").Events = append(l.sub("s").Events, m.event(t))
				}
			case <-timeout:
				t.Fatalf("%s: connection still open %v after SIGTERM", proto, tgtest.Wait)
			}
		}
		if code, err := l.c.closeErr(); code != websocket.CloseGoingAway {
			t.Errorf("%s: connection ended with %v, want close code 1001", proto, err)
		}
		// What the service recorded before it stopped is delivered before the close.
		if !l.sawRunEnd("s", run) {
			t.Errorf("%s: the interrupted run's end was not delivered before the close", proto)
		}
	}
	select {
	case err := <-srv.done:
		if err != nil {
			t.Errorf("exit: %v", err)
		}
	case <-time.After(tgtest.Wait):
		t.Fatal("server did not exit")
	}

	srv = startChild(t, dataDir, port)
	for _, proto := range protocols {
		seen := logs[proto].sub("s").Events
		last, mid := seen[len(seen)-1].Cursor, len(seen)/2
		c := dialWS(t, srv.URL, proto)
		c.init(g.Token)
		c.readLoop()
		l := newFrameLog(t, c, sid)
		c.subscribe("rest", sid, last)
		c.subscribe("mid", sid, seen[mid].Cursor)
		_, after := g.Send(sid, "after the restart "+proto)
		l.until("the new run's end", func() bool { return l.sawRunEnd("rest", after) && l.sawRunEnd("mid", after) })
		all := append(append([]tgtest.Event(nil), seen...), l.sub("rest").Events...)
		checkTexts(t, g, sid, checkContinuous(t, sid, all))
		// Resuming from an earlier cursor gives what followed it: the same events, the
		// chunks possibly folded into fewer (the log folds a finished message's chunks), with
		// the same text.
		got := l.sub("mid").Events
		checkTexts(t, g, sid, checkContinuous(t, sid, append(append([]tgtest.Event(nil), all[:mid+1]...), got...)))
		if g, w := notChunks(got), notChunks(all[mid+1:]); g != w {
			t.Errorf("%s: resumed from event %d: events\n%s\nwant\n%s", proto, mid, g, w)
		}
		if l.sub("rest").Completed || l.sub("mid").Completed {
			t.Errorf("%s: a resumed subscription completed", proto)
		}
		// Keep the log of this protocol for the next one's history check.
		logs[proto].sub("s").Events = all
	}
}

// ---- Clients that stop reading, stop answering, or read slowly ----

// waitUntil polls cond until it holds or within passes; it reports whether it held.
func waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // polling a count with a deadline, not waiting for an event
	}
	return true
}

// settle waits until the server has no subscription left and as few goroutines as before
// (a little slack for the HTTP client's idle connections), and fails the test otherwise.
func settle(t *testing.T, a *testApp, before int) {
	t.Helper()
	if !waitUntil(tgtest.Wait, func() bool { return runtime.NumGoroutine() <= before+5 && a.Service.Stats().Subscriptions == 0 }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines remain (%d before); %d subscriptions\n%s", runtime.NumGoroutine(), before, a.Service.Stats().Subscriptions, buf[:runtime.Stack(buf, true)])
	}
}

// baseline returns the number of goroutines once the server is quiet.
func baseline(t *testing.T, a *testApp) int {
	t.Helper()
	if !waitUntil(tgtest.Wait, func() bool { return a.Service.Stats().Subscriptions == 0 }) {
		t.Fatal("subscriptions left before the test")
	}
	n := runtime.NumGoroutine()
	// Let goroutines that are ending end: take the lowest count seen over a moment.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		n = min(n, runtime.NumGoroutine())
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

func metric(t testing.TB, a *testApp, name string) string {
	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" ")
		}
	}
	return ""
}

// writeTimeout is the transport's WriteTimeout (graphqlws.Transport), which the app's
// configuration does not set: a write blocked this long ends the connection.
const writeTimeout = 10 * time.Second

func TestStalledReaderIsDisconnectedAndLeavesNothingBehind(t *testing.T) {
	const keepAlive = 100 * time.Millisecond
	// Each subscription from the session's start has some 100 KB to send at once: together
	// more than the kernel's socket buffers hold (4 MB), so the server's writes block.
	const subscriptions = 80
	a := startApp(t, "memory", func(c *app.Config) { c.HTTP.KeepAlive = keepAlive })
	g := guest(t, a)
	sid := g.CreateSession(nil)
	from := g.Cursor(sid)
	watch := g.Connect("graphql-transport-ws")
	_, evs := watch.Stream(sid, from)
	_, first := g.Send(sid, strings.Repeat("lorem ipsum ", 2500))
	evs.Until("the long reply's end", tgtest.RunEnds(first))
	watch.Close()
	before := baseline(t, a)

	type stalled struct {
		name string
		c    *wsConn
	}
	var clients []stalled
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var senders sync.WaitGroup
	for _, proto := range protocols {
		// A silent client stops reading and sending: it answers no keep-alive either. A
		// talking one keeps sending (pongs, which the server takes silently), so only its
		// blocked writes show that it does not read.
		for _, talking := range []bool{false, true} {
			c := dialWS(t, a.URL, proto)
			c.init(g.Token)
			for i := 0; i < subscriptions; i++ {
				c.subscribe(fmt.Sprint(i), sid, from)
			}
			name := proto + "/silent"
			if talking {
				name = proto + "/talking"
				senders.Add(1)
				go func() {
					defer senders.Done()
					tick := time.NewTicker(keepAlive)
					defer tick.Stop()
					for {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
							if c.send(map[string]any{"type": "pong"}) != nil {
								return
							}
						}
					}
				}()
			}
			clients = append(clients, stalled{name, c})
		}
	}
	_, slow := g.Send(sid, "/slow 300")
	start := time.Now()
	// The silent ones answer no keep-alive: they are dropped first, as dead (see
	// TestUnansweringClientIsClosedWith1001AfterTwiceTheKeepAlive for the bound).
	bound := 2*keepAlive + 5*time.Second + 3*time.Second
	if !waitUntil(bound, func() bool { return a.Service.Stats().Subscriptions <= 2*subscriptions }) {
		t.Fatalf("after %v, %d subscriptions remain; the silent clients' %d should have ended", bound, a.Service.Stats().Subscriptions, 2*subscriptions)
	}
	t.Logf("silent clients dropped after %v", time.Since(start))
	// The talking ones within the write timeout: a write that blocks that long ends the
	// connection.
	bound = writeTimeout + 5*time.Second
	if !waitUntil(bound-time.Since(start), func() bool { return a.Service.Stats().Subscriptions == 0 }) {
		t.Fatalf("after %v, %d subscriptions of stalled clients remain", bound, a.Service.Stats().Subscriptions)
	}
	t.Logf("talking clients dropped after %v", time.Since(start))
	if open := metric(t, a, "talkgraph_websockets_open"); open != "0" {
		t.Errorf("talkgraph_websockets_open = %q once the stalled clients' subscriptions ended, want 0", open)
	}
	cancel()
	senders.Wait()
	// Reading again, each client gets what was on its way, then the end: a close frame
	// with 1001 if one got through, or the end of the TCP connection.
	for _, s := range clients {
		code, seen := s.c.closeCode(tgtest.Wait)
		switch code {
		case websocket.CloseGoingAway, 0, websocket.CloseAbnormalClosure: // 1006: gorilla's name for an end with no close frame
		default:
			t.Errorf("%s: close code %d, want 1001 or none", s.name, code)
		}
		for _, m := range seen {
			if m.Type == "complete" || m.Type == "error" {
				t.Errorf("%s: %s %s", s.name, m.Type, m.Payload)
			}
		}
		t.Logf("%s: %d messages, then close code %d", s.name, len(seen), code)
		s.c.Close()
	}
	g.Cancel(sid)
	watch2 := g.Connect("graphql-transport-ws")
	_, evs2 := watch2.Stream(sid, from)
	evs2.Until("the slow run's end", tgtest.RunEnds(slow))
	watch2.Close()
	settle(t, a, before)
}

func TestUnansweringClientIsClosedWith1001AfterTwiceTheKeepAlive(t *testing.T) {
	const keepAlive = 200 * time.Millisecond
	a := startApp(t, "memory", func(c *app.Config) { c.HTTP.KeepAlive = keepAlive })
	g := guest(t, a)
	before := baseline(t, a)
	type dead struct {
		c     *wsConn
		start time.Time
		pings chan struct{}
	}
	var clients []dead
	for _, proto := range protocols {
		c := dialWS(t, a.URL, proto)
		// It reads (to see the close) but never answers a ping, and sends nothing after
		// connection_init.
		pings := make(chan struct{}, 1000)
		c.SetPingHandler(func(string) error {
			select {
			case pings <- struct{}{}:
			default:
			}
			return nil
		})
		c.init(g.Token)
		c.readLoop()
		clients = append(clients, dead{c, time.Now(), pings})
	}
	for _, d := range clients {
		select {
		case <-d.c.ended:
		case <-time.After(2*keepAlive + 5*time.Second + tgtest.Wait):
			t.Fatalf("%s: a client that answers nothing is still connected after %v", d.c.proto, time.Since(d.start))
		}
		took := time.Since(d.start)
		code, err := d.c.closeErr()
		if code != websocket.CloseGoingAway {
			t.Errorf("%s: ended with %v, want close code 1001", d.c.proto, err)
		}
		if len(d.pings) == 0 {
			t.Errorf("%s: no ping before the close", d.c.proto)
		}
		// The transport's documentation says twice the keep-alive; it allows 5 s more for
		// slow networks (conn.liveness).
		if took < 2*keepAlive || took > 2*keepAlive+5*time.Second+3*time.Second {
			t.Errorf("%s: closed after %v, want about twice the keep-alive of %v (+5 s)", d.c.proto, took, keepAlive)
		}
		t.Logf("%s: closed after %v, %d pings", d.c.proto, took, len(d.pings))
	}
	settle(t, a, before)
}

func TestBusyClientThatKeepsReadingIsNotClosed(t *testing.T) {
	const keepAlive = 100 * time.Millisecond
	const sessions = 8
	a := startApp(t, "memory", configure(fastSlow(5*time.Millisecond), func(c *app.Config) {
		c.HTTP.KeepAlive = keepAlive
		c.Service.RunsPerUser = sessions
	}))
	g := guest(t, a)
	var sids []string
	logs := map[string]*frameLog{}
	for _, proto := range protocols {
		c := dialWS(t, a.URL, proto)
		c.init(g.Token)
		c.readLoop()
		logs[proto] = newFrameLog(t, c, "")
	}
	for i := 0; i < sessions; i++ {
		sid := g.CreateSession(nil)
		sids = append(sids, sid)
		for _, l := range logs {
			l.c.subscribe(sid, sid, g.Cursor(sid))
		}
	}
	runs := map[string]string{}
	start := time.Now()
	// Longer than the time after which a silent connection is taken for dead
	// (twice the keep-alive, +5 s).
	for _, sid := range sids {
		_, runs[sid] = g.Send(sid, "/slow 1200")
	}
	var wg sync.WaitGroup
	for proto, l := range logs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, sid := range sids {
				for !l.sawRunEnd(sid, runs[sid]) {
					select {
					case m, ok := <-l.c.frames:
						if !ok {
							code, err := l.c.closeErr()
							t.Errorf("%s: a busy, reading client was closed (%d, %v) after %v", proto, code, err, time.Since(start))
							return
						}
						switch {
						case m.keepAlive():
						case m.Type == nextType(proto):
							l.sub(m.ID).Events = append(l.sub(m.ID).Events, m.event(t))
						default:
							t.Errorf("%s: %s %s for %s", proto, m.Type, m.Payload, m.ID)
							return
						}
					case <-time.After(tgtest.Wait):
						t.Errorf("%s: nothing for %v", proto, tgtest.Wait)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if t.Failed() {
		return
	}
	if took < 3*keepAlive {
		t.Errorf("streaming lasted only %v", took)
	}
	events := 0
	for _, l := range logs {
		for _, sid := range sids {
			evs := l.sub(sid).Events
			events += len(evs)
			checkTexts(t, g, sid, checkContinuous(t, sid, evs))
		}
		select {
		case <-l.c.ended:
			t.Errorf("%s: connection ended", l.c.proto)
		default:
		}
	}
	t.Logf("%d events over %v to %d connections", events, took, len(logs))
}

func TestSlowReaderReceivesEveryChunkInOrder(t *testing.T) {
	t.Parallel()
	const keepAlive = 100 * time.Millisecond
	a := startApp(t, "memory", configure(fastSlow(time.Millisecond), func(c *app.Config) { c.HTTP.KeepAlive = keepAlive }))
	g := guest(t, a)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			sid := g.CreateSession(nil)
			from := g.Cursor(sid)
			c := dialWS(t, a.URL, proto)
			c.init(g.Token)
			c.subscribe("s", sid, from)
			// A reader that keeps up tells when the run really ended.
			fast := g.Connect(proto)
			_, watch := fast.Stream(sid, from)
			start := time.Now()
			_, run := g.Send(sid, "/slow 2000")
			ended := make(chan time.Time, 1)
			go func() {
				for {
					ev, ok := watch.TryNext(tgtest.Wait)
					if !ok || tgtest.RunEnds(run)(ev) {
						ended <- time.Now()
						return
					}
				}
			}()
			var evs []tgtest.Event
			for done := false; !done; {
				time.Sleep(10 * time.Millisecond) // the slow reader: the behaviour under test
				m, err := c.readMsg(tgtest.Wait)
				if err != nil {
					t.Fatalf("after %d events and %v: %v", len(evs), time.Since(start), err)
				}
				switch {
				case m.keepAlive():
				case m.Type == nextType(proto):
					ev := m.event(t)
					evs = append(evs, ev)
					done = tgtest.RunEnds(run)(ev)
				default:
					t.Fatalf("%s %s before the run ended", m.Type, m.Payload)
				}
			}
			caughtUp := time.Now()
			checkTexts(t, g, sid, checkContinuous(t, sid, evs))
			t.Logf("%d events in %v; caught up %v after the run ended", len(evs), caughtUp.Sub(start), caughtUp.Sub(<-ended))
		})
	}
}
