package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"

	"github.com/gorilla/websocket"

	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/jwtauth"
)

// closeCode waits for the socket to be closed and returns the close code.
func closeCode(t *testing.T, conn *websocket.Conn) int {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(tgtest.Wait))
	for {
		_, _, err := conn.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		t.Fatalf("socket ended without a close frame: %v", err)
	}
}

// A missing token is no longer refused: such a socket serves shared reads alone (see
// TestSharedConversationWithoutASignIn).
func TestBadTokenClosesWebsocketWith4401(t *testing.T) {
	a := startApp(t, "memory", nil)
	forged, _, _ := (&jwtauth.Auth{Secret: []byte("not the server's secret at all")}).Issue("mallory")
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		for name, payload := range map[string]map[string]any{
			"garbage": {"Authorization": "Bearer nonsense"},
			"forged":  {"authorization": "Bearer " + forged},
		} {
			t.Run(proto+"/"+name, func(t *testing.T) {
				s, err := tgtest.Dial(t, a.URL, proto, payload)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Conn.Close()
				if got := closeCode(t, s.Conn); got != 4401 {
					t.Errorf("close code %d, want 4401", got)
				}
			})
		}
	}
}

func TestForgedTokenIsRefusedOverHTTP(t *testing.T) {
	a := startApp(t, "memory", nil)
	forged, _, _ := (&jwtauth.Auth{Secret: []byte("not the server's secret at all")}).Issue("mallory")
	c := &tgtest.Client{T: t, Base: a.URL, Token: forged, HTTP: http.DefaultClient}
	r := c.Do(`{ viewer { id } }`, nil)
	if r.Status != http.StatusUnauthorized || r.Code() != "UNAUTHENTICATED" {
		t.Errorf("forged token: status %d, errors %+v", r.Status, r.Errors)
	}
	c.Token = ""
	if r := c.Do(`{ viewer { id } }`, nil); r.Code() != "UNAUTHENTICATED" {
		t.Errorf("no token: %+v", r.Errors)
	}
	if r := c.Do(`{ sessions { edges { cursor } } }`, nil); r.Code() != "UNAUTHENTICATED" {
		t.Errorf("no token, sessions: %+v", r.Errors)
	}
}

func TestExpiredTokenClosesSocket(t *testing.T) {
	a := startApp(t, "memory", func(c *app.Config) { c.TokenTTL = 3 * time.Second })
	c := guest(t, a)
	s := c.Connect("graphql-transport-ws")
	select {
	case err := <-s.Closed:
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != 4401 {
			t.Errorf("socket closed with %v, want 4401", err)
		}
	case <-time.After(tgtest.Wait):
		t.Fatal("socket still open after its token expired")
	}
}

func TestLegacyProtocolAndSSEStreamTheSameEvents(t *testing.T) {
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	sid := c.CreateSession(nil)
	cur := c.Cursor(sid)
	legacy := c.Connect("graphql-ws")
	_, evs := legacy.Stream(sid, cur)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sse, err := c.SSE(ctx, tgtest.StreamQuery, map[string]any{"s": sid, "a": cur})
	if err != nil {
		t.Fatal(err)
	}
	_, run := c.Send(sid, "over every transport")
	evs.Until("run ends", tgtest.RunEnds(run))
	var sseEvents []tgtest.Event
	deadline := time.After(tgtest.Wait)
	for done := false; !done; {
		select {
		case raw, ok := <-sse:
			if !ok {
				t.Fatal("SSE stream ended early")
			}
			var wrap struct {
				Data struct{ MessageStream tgtest.Event }
			}
			if err := json.Unmarshal(raw, &wrap); err != nil {
				t.Fatalf("SSE data %s: %v", raw, err)
			}
			sseEvents = append(sseEvents, wrap.Data.MessageStream)
			done = tgtest.RunEnds(run)(wrap.Data.MessageStream)
		case <-deadline:
			t.Fatalf("SSE: run end not seen; %d events", len(sseEvents))
		}
	}
	if len(sseEvents) != len(evs.All) {
		t.Fatalf("SSE saw %d events, graphql-ws %d", len(sseEvents), len(evs.All))
	}
	for i := range sseEvents {
		if sseEvents[i].Cursor != evs.All[i].Cursor {
			t.Fatalf("event %d: SSE %s, websocket %s", i, sseEvents[i].Cursor, evs.All[i].Cursor)
		}
	}
}

func TestThousandSubscriptionsLeaveNoGoroutinesBehind(t *testing.T) {
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	sid := c.CreateSession(nil)
	cur := c.Cursor(sid)
	// Settle: the first connection starts lazily-created goroutines (HTTP keep-alives).
	c.Connect("graphql-transport-ws").Close()
	before := runtime.NumGoroutine()

	const sockets, perSocket = 100, 10
	var all []*tgtest.Socket
	var streams []*tgtest.Events
	for i := 0; i < sockets; i++ {
		s := c.Connect("graphql-transport-ws")
		all = append(all, s)
		for j := 0; j < perSocket; j++ {
			_, evs := s.Stream(sid, cur)
			streams = append(streams, evs)
		}
	}
	if got := a.Service.Stats().Subscriptions; got < sockets*perSocket-perSocket {
		t.Logf("%d subscriptions registered before the message", got)
	}
	_, run := c.Send(sid, "to a thousand listeners")
	var wg sync.WaitGroup
	var mu sync.Mutex
	texts := map[string]int{}
	for _, evs := range streams {
		wg.Add(1)
		go func(evs *tgtest.Events) {
			defer wg.Done()
			evs.Until("run ends", tgtest.RunEnds(run))
			mu.Lock()
			for _, txt := range tgtest.Text(evs.All) {
				texts[txt]++
			}
			mu.Unlock()
		}(evs)
	}
	wg.Wait()
	if len(texts) != 1 {
		t.Errorf("subscribers saw %d different texts: %v", len(texts), texts)
	}
	for txt, n := range texts {
		if n != sockets*perSocket || !strings.Contains(txt, "a thousand listeners") {
			t.Errorf("%d subscribers saw %q", n, txt)
		}
	}
	for _, s := range all {
		s.Close()
	}
	// Wait for the server to notice every close and end every goroutine it started.
	deadline := time.Now().Add(tgtest.Wait)
	for {
		n := runtime.NumGoroutine()
		if n <= before+5 && a.Service.Stats().Subscriptions == 0 {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines remain (%d before); %d subscriptions\n%s", n, before, a.Service.Stats().Subscriptions, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // polling a count with a deadline, not waiting for an event
	}
}

func TestBusyPolicyEnqueueAndReject(t *testing.T) {
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	t.Run("ENQUEUE", func(t *testing.T) {
		sid := c.CreateSession(map[string]any{"busyPolicy": "ENQUEUE"})
		ws := c.Connect("graphql-transport-ws")
		_, evs := ws.Stream(sid, c.Cursor(sid))
		_, first := c.Send(sid, "/slow 5")
		var out struct {
			AddMessage struct{ Run struct{ ID, Status string } }
		}
		c.Must(`mutation($s: ID!){ addMessage(input:{sessionId:$s, content:"after you"}){ run { id status } } }`, map[string]any{"s": sid}, &out)
		if out.AddMessage.Run.Status != "QUEUED" {
			t.Errorf("second run is %s, want QUEUED", out.AddMessage.Run.Status)
		}
		if e := evs.Until("first ends", tgtest.RunEnds(first)); e.Run.Status != "COMPLETED" {
			t.Errorf("first run ended %s", e.Run.Status)
		}
		if e := evs.Until("second ends", tgtest.RunEnds(out.AddMessage.Run.ID)); e.Run.Status != "COMPLETED" {
			t.Errorf("second run ended %s", e.Run.Status)
		}
	})
	t.Run("INTERRUPT after ENQUEUE supersedes the queue", func(t *testing.T) {
		sid := c.CreateSession(map[string]any{"busyPolicy": "ENQUEUE"})
		ws := c.Connect("graphql-transport-ws")
		_, evs := ws.Stream(sid, c.Cursor(sid))
		_, first := c.Send(sid, "/slow 100")
		_, queued := c.Send(sid, "waiting")
		c.Must(`mutation($s: ID!){ updateTalkSessionSettings(input:{id:$s, settings:{busyPolicy: INTERRUPT}}){ id } }`, map[string]any{"s": sid}, nil)
		_, third := c.Send(sid, "now")
		for run, want := range map[string]string{first: "INTERRUPTED", queued: "INTERRUPTED", third: "COMPLETED"} {
			var status string
			for _, ev := range evs.All {
				if tgtest.RunEnds(run)(ev) {
					status = ev.Run.Status
				}
			}
			if status == "" {
				status = evs.Until("run "+want, tgtest.RunEnds(run)).Run.Status
			}
			if status != want {
				t.Errorf("run %s ended %s, want %s", run, status, want)
			}
		}
	})
	t.Run("REJECT", func(t *testing.T) {
		sid := c.CreateSession(map[string]any{"busyPolicy": "REJECT"})
		c.Send(sid, "/slow 100")
		r := c.Do(`mutation($s: ID!){ addMessage(input:{sessionId:$s, content:"me too"}){ run { id } } }`, map[string]any{"s": sid})
		if r.Code() != "CONFLICT" {
			t.Errorf("busy REJECT session: %+v", r.Errors)
		}
		if users := userMessages(c, sid); users != 1 {
			t.Errorf("%d user messages stored, want 1", users)
		}
	})
}

func TestLimits(t *testing.T) {
	t.Run("operations per user per second", func(t *testing.T) {
		a := startApp(t, "memory", func(c *app.Config) { c.HTTP.OpsPerSecond = 0.01; c.HTTP.OpsBurst = 3 })
		c := guest(t, a)
		var codes []string
		for i := 0; i < 5; i++ {
			codes = append(codes, c.Do(`{ viewer { id } }`, nil).Code())
		}
		if got, want := strings.Join(codes, ","), ",,,RATE_LIMITED,RATE_LIMITED"; got != want {
			t.Errorf("codes = %s, want %s", got, want)
		}
		// Another user is not affected.
		if r := guest(t, a).Do(`{ viewer { id } }`, nil); r.Code() != "" {
			t.Errorf("other user: %+v", r.Errors)
		}
	})
	t.Run("depth and complexity", func(t *testing.T) {
		a := startApp(t, "memory", func(c *app.Config) { c.HTTP.MaxDepth = 4; c.HTTP.MaxComplexity = 50 })
		c := guest(t, a)
		deep := `{ sessions { edges { node { messages { edges { node { id } } } } } } }`
		if r := c.Do(deep, nil); r.Code() != "BAD_USER_INPUT" || !strings.Contains(r.Errors[0].Message, "deep") {
			t.Errorf("deep query: %+v", r.Errors)
		}
		wide := `{ ` + strings.Repeat(`a: viewer { id } `, 1)
		for i := 0; i < 60; i++ {
			wide += fmt.Sprintf("v%d: viewer { id } ", i)
		}
		wide += "}"
		if r := c.Do(wide, nil); len(r.Errors) == 0 || !strings.Contains(strings.ToLower(r.Errors[0].Message), "complexity") {
			t.Errorf("complex query: %+v", r.Errors)
		}
	})
	t.Run("request body size", func(t *testing.T) {
		a := startApp(t, "memory", func(c *app.Config) { c.HTTP.MaxBodyBytes = 1000 })
		c := guest(t, a)
		r := c.Do(`{ viewer { id } }`+strings.Repeat(" ", 2000), nil)
		if r.Status != http.StatusRequestEntityTooLarge || r.Code() != "BAD_USER_INPUT" {
			t.Errorf("oversized body: status %d %+v", r.Status, r.Errors)
		}
	})
	t.Run("subscriptions per connection", func(t *testing.T) {
		a := startApp(t, "memory", func(c *app.Config) { c.HTTP.SubsPerConnection = 2 })
		c := guest(t, a)
		sid := c.CreateSession(nil)
		s := c.Connect("graphql-transport-ws")
		s.Stream(sid, "")
		s.Stream(sid, "")
		waitFor(t, "two subscriptions", func() bool { return a.Service.Stats().Subscriptions == 2 })
		_, third := s.Stream(sid, "")
		if _, ok := third.TryNext(tgtest.Wait); ok || len(third.Err) == 0 || third.Err[0].Code() != "RATE_LIMITED" {
			t.Errorf("third subscription: %+v", third.Err)
		}
	})
	t.Run("introspection can be switched off", func(t *testing.T) {
		on := guest(t, startApp(t, "memory", nil))
		if r := on.Do(`{ __schema { queryType { name } } }`, nil); len(r.Errors) > 0 {
			t.Errorf("introspection on: %+v", r.Errors)
		}
		off := guest(t, startApp(t, "memory", func(c *app.Config) { c.HTTP.DisableIntrospection = true }))
		if r := off.Do(`{ __schema { queryType { name } } }`, nil); len(r.Errors) == 0 {
			t.Error("introspection answered while switched off")
		}
	})
	t.Run("websocket origin", func(t *testing.T) {
		a := startApp(t, "memory", func(c *app.Config) { c.HTTP.AllowedOrigins = []string{"https://app.example"} })
		for origin, ok := range map[string]bool{"https://evil.example": false, "https://app.example": true, a.URL: true} {
			d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}}
			h := http.Header{"Origin": {origin}}
			conn, resp, err := d.Dial("ws"+strings.TrimPrefix(a.URL, "http")+"/query", h)
			if ok != (err == nil) {
				status := 0
				if resp != nil {
					status = resp.StatusCode
				}
				t.Errorf("origin %s: err %v (status %d), want allowed=%v", origin, err, status, ok)
			}
			if conn != nil {
				conn.Close()
			}
		}
	})
}

func TestHealthReadinessAndMetrics(t *testing.T) {
	a, c, sid, _, evs := watchedSession(t, "memory")
	_, run := c.Send(sid, "count me")
	evs.Until("run ends", tgtest.RunEnds(run))
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(a.URL + path)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("%s: %v %v", path, err, resp)
		}
	}
	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`talkgraph_runs_finished_total{status="COMPLETED"} 1`, "talkgraph_subscriptions_active 1",
		"talkgraph_chunks_streamed_total", `talkgraph_operation_duration_seconds_count{type="mutation"}`, "talkgraph_build_info{",
		"talkgraph_writer_rounds_total", "talkgraph_writer_commands_waiting 0", `talkgraph_model_tokens_total{kind="output",model="demo"}`, "process_resident_memory_bytes"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestStreamCursorContinuesLoadedHistoryMidStream(t *testing.T) {
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	sid := c.CreateSession(nil)
	ws := c.Connect("graphql-transport-ws")
	_, watch := ws.Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "/slow 20")
	watch.Until("some text", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" && e.Offset > 10 })

	// Load the history and the cursor in one query while the reply streams.
	var out struct {
		Session struct {
			StreamCursor string
			Messages     struct {
				Edges []struct{ Node tgtest.Message }
			}
		}
	}
	c.Must(`query($s: ID!){ session(id: $s){ streamCursor messages(last: 50){ edges { node { id role kind content status runId } } } } }`, map[string]any{"s": sid}, &out)
	edges := out.Session.Messages.Edges
	reply := edges[len(edges)-1].Node
	if reply.Status != "STREAMING" {
		t.Fatalf("reply mid-stream is %s", reply.Status)
	}
	_, rest := ws.Stream(sid, out.Session.StreamCursor)
	rest.Until("run ends", tgtest.RunEnds(run))
	text := reply.Content
	for _, ev := range rest.All {
		if ev.Typename == "MessageChunk" && ev.MessageID == reply.ID {
			if ev.Offset != len([]rune(text)) {
				t.Fatalf("chunk at offset %d after history of %d code points: a gap or a duplicate", ev.Offset, len([]rune(text)))
			}
			text += ev.Delta
		}
	}
	final := c.Messages(sid)[1]
	if text != final.Content {
		t.Errorf("history + stream = %q, want %q", text, final.Content)
	}
}

func TestDeleteSessionStopsRunAndEndsStreams(t *testing.T) {
	_, c, sid, _, evs := watchedSession(t, "memory")
	c.Send(sid, "/slow 500")
	evs.Until("a chunk", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
	c.Must(`mutation($s: ID!){ deleteTalkSession(id: $s) }`, map[string]any{"s": sid}, nil)
	for {
		if _, ok := evs.TryNext(tgtest.Wait); !ok {
			break
		}
	}
	if !evs.Done {
		t.Error("stream did not end after the session was deleted")
	}
	var one struct{ Session *struct{ ID string } }
	c.Must(`query($s: ID!){ session(id: $s){ id } }`, map[string]any{"s": sid}, &one)
	if one.Session != nil {
		t.Error("deleted session still readable")
	}
}

func TestSessionsArePagedMostRecentFirst(t *testing.T) {
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, c.CreateSession(nil))
	}
	c.Must(`mutation($s: ID!){ renameTalkSession(input:{id:$s, title:"bumped"}){ id } }`, map[string]any{"s": ids[1]}, nil)
	want := []string{ids[1], ids[4], ids[3], ids[2], ids[0]}
	var got []string
	after := ""
	for page := 0; page < 5; page++ {
		var out struct {
			Sessions struct {
				Edges    []struct{ Node struct{ ID string } }
				PageInfo struct {
					HasNextPage bool
					EndCursor   string
				}
			}
		}
		vars := map[string]any{}
		if after != "" {
			vars["a"] = after
		}
		c.Must(`query($a: String){ sessions(first: 2, after: $a){ edges { node { id } } pageInfo { hasNextPage endCursor } } }`, vars, &out)
		for _, e := range out.Sessions.Edges {
			got = append(got, e.Node.ID)
		}
		if !out.Sessions.PageInfo.HasNextPage {
			break
		}
		after = out.Sessions.PageInfo.EndCursor
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("order = %v, want %v", got, want)
	}
}

// waitFor polls cond until it holds, failing the test after tgtest.Wait. It is for states
// with no event to wait on (counters); each poll yields briefly.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(tgtest.Wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %v", what, tgtest.Wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGetQueriesPlaygroundAndGuestSwitch(t *testing.T) {
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	req, _ := http.NewRequest("GET", a.URL+"/query?query="+url.QueryEscape("{ viewer { id } }"), nil)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"viewer":{"id":`) {
		t.Errorf("GET /query: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get(a.URL + "/playground")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("/playground: %v %v", err, resp)
	}
	off := startApp(t, "memory", func(c *app.Config) { c.GuestSignIn = false })
	resp, err = http.Post(off.URL+"/auth/guest", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("guest sign-in switched off answered %d", resp.StatusCode)
	}
}

func TestWebsocketKeepAlivesAndInitTimeout(t *testing.T) {
	a := startApp(t, "memory", func(c *app.Config) {
		c.HTTP.KeepAlive = 100 * time.Millisecond
		c.HTTP.InitTimeout = 300 * time.Millisecond
	})
	c := guest(t, a)
	url := "ws" + strings.TrimPrefix(a.URL, "http") + "/query"
	for proto, want := range map[string]string{"graphql-ws": "ka", "graphql-transport-ws": "ping"} {
		conn, _, err := (&websocket.Dialer{Subprotocols: []string{proto}}).Dial(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + c.Token}})
		_ = conn.SetReadDeadline(time.Now().Add(tgtest.Wait))
		seen := map[string]int{}
		for seen[want] < 2 {
			var m struct{ Type string }
			if err := conn.ReadJSON(&m); err != nil {
				t.Fatalf("%s: waiting for keep-alives: %v (seen %v)", proto, err, seen)
			}
			seen[m.Type]++
			if m.Type == "ping" {
				_ = conn.WriteJSON(map[string]any{"type": "pong"})
			}
		}
		conn.Close()
	}
	// A socket that never sends connection_init is closed.
	conn, _, err := (&websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}}).Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if code := closeCode(t, conn); code == 0 {
		t.Error("no close code")
	}
}
