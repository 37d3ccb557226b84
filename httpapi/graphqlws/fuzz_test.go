package graphqlws_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/talkgraph/talkgraph/app"
)

// fuzzServer is a whole talkgraph (memory store) behind an httptest server, shared by the
// inputs of one fuzzing process.
type fuzzServer struct {
	URL, Token string
	app        *app.App
	log        *panicLog
	sid        string
}

// panicLog records log lines that tell of a recovered panic.
type panicLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *panicLog) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("panic")) {
		l.mu.Lock()
		l.lines = append(l.lines, string(p))
		l.mu.Unlock()
	}
	return len(p), nil
}

func (l *panicLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

const fuzzReadLimit = 4096

func startFuzzServer(f *testing.F) *fuzzServer {
	env := map[string]string{
		"DATABASE_URL": "memory:", "DATA_DIR": f.TempDir(), "DEMO_CHUNK_DELAY": "0s", "LOG_LEVEL": "warn",
		"RATE_LIMIT": "1000000", "RATE_BURST": "1000000", "MAX_BODY_BYTES": "4096", "WS_INIT_TIMEOUT": "2s",
		"ANON_RATE_LIMIT": "1000000", "ANON_RATE_BURST": "1000000",
	}
	cfg, err := app.LoadConfig(nil, func(k string) string { return env[k] })
	if err != nil {
		f.Fatal(err)
	}
	log := &panicLog{}
	a, err := app.Open(context.Background(), cfg, log)
	if err != nil {
		f.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler)
	f.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Close(ctx)
	})
	resp, err := http.Post(srv.URL+"/auth/guest", "application/json", nil)
	if err != nil {
		f.Fatal(err)
	}
	var out struct{ Token string }
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || out.Token == "" {
		f.Fatalf("guest sign-in: %v", err)
	}
	s := &fuzzServer{URL: srv.URL, Token: out.Token, app: a, log: log}
	var created struct {
		Data struct{ CreateTalkSession struct{ ID string } }
	}
	s.post(f, `mutation { createTalkSession(input: {title: "fuzz"}) { id } }`, &created)
	s.sid = created.Data.CreateTalkSession.ID
	if s.sid == "" {
		f.Fatal("no session")
	}
	return s
}

func (s *fuzzServer) post(t testing.TB, query string, out any) {
	body, _ := json.Marshal(map[string]any{"query": query})
	req, _ := http.NewRequest("POST", s.URL+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// The close codes the transport documents (graphqlws package comment): 1000 when a legacy
// client says connection_terminate, 1001, 1009 and the graphql-transport-ws codes.
var documentedCodes = map[int]bool{1000: true, 1001: true, 1009: true, 4400: true, 4401: true, 4408: true, 4409: true, 4429: true}

// FuzzMessages sends fuzzed messages to a real talkgraph over either protocol, after a
// valid connection_init (init empty) or a fuzzed one, and checks that the server neither
// panics nor hangs: afterwards the connection still answers a query, or it was closed
// with one of the documented codes. In the inputs, $TOKEN stands for a valid token and
// $SID for a session of its user; frames holds one message a line.
func FuzzMessages(f *testing.F) {
	s := startFuzzServer(f)
	stream := `{"query":"subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){ __typename cursor ... on MessageChunk { delta offset } } }","variables":{"s":"$SID"}}`
	viewer := `{"query":"{ viewer { id } }"}`
	for _, legacy := range []bool{false, true} {
		start, stop := "subscribe", "complete"
		if legacy {
			start, stop = "start", "stop"
		}
		for _, frames := range []string{
			``,
			`{"type":"` + start + `","id":"1","payload":` + viewer + `}`,
			`{"type":"` + start + `","id":"1","payload":` + stream + `}` + "\n" + `{"type":"` + stop + `","id":"1"}`,
			`{"type":"` + start + `","id":"1","payload":` + stream + `}` + "\n" + `{"type":"` + start + `","id":"1","payload":` + stream + `}`,
			`{"type":"` + start + `","id":"s","payload":` + stream + `}` + "\n" + `{"type":"` + start + `","id":"m","payload":{"query":"mutation($s: ID!){ addMessage(input:{sessionId:$s, content:\"/slow 3\"}){ run { id } } }","variables":{"s":"$SID"}}}`,
			`{"type":"` + start + `","id":"1","payload":{"query":"subscription { messageStream(sessionId: \"nope\") { cursor } }"}}`,
			`{"type":"` + start + `","id":"1","payload":{"query":"subscription($s: ID!){ messageStream(sessionId: $s, after: \"garbage\") { cursor } }","variables":{"s":"$SID"}}}`,
			`{"type":"` + start + `","id":"1","payload":{"query":"{ viewer { id "}}`,
			`{"type":"` + start + `","id":"1","payload":"not an object"}`,
			`{"type":"` + start + `","id":"1","payload":{"query":"{ viewer { id } }","variables":[1,2]}}`,
			`{"type":"` + start + `","id":"1","payload":{"query":"query A { viewer { id } } query B { viewer { id } }"}}`,
			`{"type":"` + start + `","id":"1","payload":{"query":"{ __typename }","extensions":{"persistedQuery":{"version":1,"sha256Hash":"abc"}}}}`,
			`{"type":"` + start + `","payload":` + viewer + `}`,
			`{"type":"` + start + `","id":"","payload":` + viewer + `}`,
			`{"type":"` + start + `","id":1,"payload":` + viewer + `}`,
			`{"type":"` + stop + `","id":"never started"}`,
			`{"type":"ping"}` + "\n" + `{"type":"pong"}` + "\n" + `{"type":"ping","payload":{"x":1}}`,
			`{"type":"connection_init","payload":{"Authorization":"Bearer $TOKEN"}}`,
			`{"type":"connection_terminate"}`,
			`{"type":"nonsense"}`,
			`{"type":null}`,
			`{"type":["subscribe"]}`,
			`{}`,
			`[]`,
			`null`,
			`"subscribe"`,
			`not json at all`,
			`{"type":"` + start + `","id":"1","payload":` + viewer + `}` + strings.Repeat(" ", fuzzReadLimit),
			`{"type":"` + start + `","id":"\u0000\ud800","payload":` + viewer + `}`,
		} {
			f.Add(legacy, "", frames)
		}
		for _, init := range []string{
			`{"type":"connection_init"}`,
			`{"type":"connection_init","payload":null}`,
			`{"type":"connection_init","payload":{}}`,
			`{"type":"connection_init","payload":"$TOKEN"}`,
			`{"type":"connection_init","payload":42}`,
			`{"type":"connection_init","payload":["Bearer $TOKEN"]}`,
			`{"type":"connection_init","payload":{"Authorization":"$TOKEN"}}`,
			`{"type":"connection_init","payload":{"authorization":"Bearer $TOKEN"}}`,
			`{"type":"connection_init","payload":{"Authorization":42}}`,
			`{"type":"connection_init","payload":{"Authorization":"Bearer not-a-token"}}`,
			`{"type":"ping"}`,
			`{"type":"` + start + `","id":"1","payload":` + viewer + `}`,
			`connection_init`,
		} {
			f.Add(legacy, init, `{"type":"`+start+`","id":"1","payload":`+viewer+`}`)
		}
	}

	f.Fuzz(func(t *testing.T, legacy bool, init, frames string) {
		proto := "graphql-transport-ws"
		start := "subscribe"
		if legacy {
			proto, start = "graphql-ws", "start"
		}
		fill := strings.NewReplacer("$TOKEN", s.Token, "$SID", s.sid)
		d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 10 * time.Second}
		conn, _, err := d.Dial("ws"+strings.TrimPrefix(s.URL, "http")+"/query", nil)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.Close()
		if init == "" {
			init = `{"type":"connection_init","payload":{"Authorization":"Bearer $TOKEN"}}`
		}
		send := func(msg string) bool {
			_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			return conn.WriteMessage(websocket.TextMessage, []byte(fill.Replace(msg))) == nil
		}
		ok := send(init)
		for _, msg := range strings.Split(frames, "\n") {
			if !ok {
				break
			}
			if msg != "" {
				ok = send(msg)
			}
		}
		const probe = "fuzz-probe"
		if ok {
			// If this fails, the server closed the connection: its close frame tells why.
			send(`{"type":"` + start + `","id":"` + probe + `","payload":{"query":"{ viewer { id } }"}}`)
		}
		// Whatever came before, the probe is answered, or the connection was closed with a
		// documented code; neither may take long.
		deadline := time.Now().Add(10 * time.Second)
		_ = conn.SetReadDeadline(deadline)
		var seen []string
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				var ce *websocket.CloseError
				var ne net.Error
				switch {
				case errors.As(err, &ce):
					if !documentedCodes[ce.Code] {
						t.Fatalf("closed with %d %q, not a documented code (after %v)", ce.Code, ce.Text, seen)
					}
					t.Logf("closed with %d %q after %v", ce.Code, ce.Text, seen)
				case errors.As(err, &ne) && ne.Timeout():
					t.Fatalf("no answer to the probe and no close within 10 s (after %v)", seen)
				default:
					t.Fatalf("connection ended without a close frame: %v (after %v)", err, seen)
				}
				break
			}
			var m struct {
				Type, ID string
			}
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatalf("server sent something that is not a message: %q", data)
			}
			seen = append(seen, m.Type)
			if m.ID == probe && (m.Type == "next" || m.Type == "data" || m.Type == "error") {
				t.Logf("probe answered after %v", seen)
				break
			}
		}
		if lines := s.log.take(); len(lines) > 0 {
			t.Fatalf("the server recovered from a panic:\n%s", strings.Join(lines, "\n"))
		}
	})
}
