package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// The shared reads over real sockets: what a reader without a sign-in gets on every
// transport, what ends it, and what the owner's data never reaches.

// sharedStreamQuery is tgtest.StreamQuery for sharedStream: aliased, so that tgtest's
// Events reads it.
var sharedStreamQuery = strings.Replace(strings.Replace(tgtest.StreamQuery,
	"subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){",
	"subscription($t: String!, $a: String){ messageStream: sharedStream(token: $t, after: $a){", 1),
	"... on QuestionAsked { question { id prompt runId choices multiple answerSchema expiresAt } }", "", 1)

const sharedQuery = `query($t: String!){ sharedSession(token: $t){ title live streamCursor
	messages { id sessionId role kind content status siblingIds question { id } toolCalls { name status arguments output result } } } }`

// shared is a SharedSession as a test reads it.
type shared struct {
	Title        string
	Live         bool
	StreamCursor *string
	Messages     []struct {
		ID, SessionID, Role, Kind, Content, Status string
		SiblingIds                                 []string
		Question                                   *struct{ ID string }
		ToolCalls                                  []struct {
			Name, Status, Arguments, Output string
			Result                          *string
		}
	}
}

// link makes a share link of the owner's session and returns its token and URL.
func link(t *testing.T, owner *tgtest.Client, sid string, input string) (id, token, url string) {
	t.Helper()
	var out struct {
		CreateShareLink struct {
			Token, URL string
			ShareLink  struct{ ID string }
		}
	}
	owner.Must(`mutation($s: ID!){ createShareLink(input: {sessionId: $s`+input+`}){ token url shareLink { id } } }`, map[string]any{"s": sid}, &out)
	return out.CreateShareLink.ShareLink.ID, out.CreateShareLink.Token, out.CreateShareLink.URL
}

// readShared reads what token opens, as c; nil when it opens nothing.
func readShared(t *testing.T, c *tgtest.Client, token string) *shared {
	t.Helper()
	var out struct{ SharedSession *shared }
	c.Must(sharedQuery, map[string]any{"t": token}, &out)
	return out.SharedSession
}

func anonymous(t *testing.T, a *testApp) *tgtest.Client {
	return &tgtest.Client{T: t, Base: a.URL, HTTP: &http.Client{Timeout: tgtest.Wait}}
}

// A live link is read and followed without a sign-in: over HTTP, over a websocket whose
// connection_init carries no token (of either protocol), and over server-sent events; on
// such a websocket nothing else is served; revoking the link ends each stream with
// NOT_FOUND and its reads with null; every answer says noindex.
func TestSharedConversationWithoutASignIn(t *testing.T) {
	a := startApp(t, "sqlite", nil)
	owner := guest(t, a)
	sid := owner.CreateSession(nil)
	_, evs := owner.Connect("graphql-transport-ws").Stream(sid, owner.Cursor(sid))
	_, run := owner.Send(sid, "/tool secret-argument")
	evs.Until("the first reply", tgtest.RunEnds(run))
	lid, token, url := link(t, owner, sid, ", live: true")
	if url != a.URL+"/s/"+token || len(token) < 22 {
		t.Errorf("url %q for token %q", url, token)
	}
	reader := anonymous(t, a)

	// HTTP, with its header.
	body, _ := json.Marshal(map[string]any{"query": sharedQuery, "variables": map[string]any{"t": token}})
	resp, err := http.Post(a.URL+"/query", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Robots-Tag"); !strings.Contains(got, "noindex") {
		t.Errorf("X-Robots-Tag %q on a shared answer", got)
	}
	got := readShared(t, reader, token)
	if got == nil || !got.Live || got.StreamCursor == nil || len(got.Messages) != 2 {
		t.Fatalf("the shared session: %+v", got)
	}
	if calls := got.Messages[1].ToolCalls; len(calls) != 1 || calls[0].Name != "echo" || calls[0].Arguments != "" || calls[0].Output != "" || calls[0].Result != nil {
		t.Errorf("tool calls without includeTools: %+v", calls)
	}
	vars := map[string]any{"t": token, "a": *got.StreamCursor}

	// Websockets without a token: the shared stream, and nothing else.
	type follower struct {
		name string
		evs  *tgtest.Events
	}
	var followers []follower
	for _, proto := range protocols {
		ws := reader.Connect(proto)
		id, frames := ws.Subscribe(sharedStreamQuery, vars)
		_ = id
		followers = append(followers, follower{proto, &tgtest.Events{}})
		followers[len(followers)-1].evs = eventsOf(t, frames)
		_, other := ws.Subscribe(tgtest.StreamQuery, map[string]any{"s": sid})
		if f := <-other; len(f.Errors) == 0 || f.Errors[0].Code() != "UNAUTHENTICATED" {
			t.Errorf("%s: messageStream without a token: %+v", proto, f)
		}
		_, viewer := ws.Subscribe(`{ viewer { id } }`, nil)
		if f := <-viewer; len(f.Errors) == 0 || f.Errors[0].Code() != "UNAUTHENTICATED" {
			t.Errorf("%s: viewer without a token: %+v", proto, f)
		}
	}
	// Server-sent events without a token.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sse, err := reader.SSEStream(ctx, strings.Replace(sharedStreamQuery, "messageStream: ", "", 1), vars)
	if err != nil {
		t.Fatal(err)
	}

	_, run = owner.Send(sid, "hello readers")
	for _, f := range followers {
		f.evs.Until(f.name+": the new reply", tgtest.RunEnds(run))
		if text := tgtest.Text(f.evs.All); !strings.Contains(strings.Join(values(text), " "), "hello readers") {
			t.Errorf("%s: the reader's stream carried %q", f.name, text)
		}
	}
	waitSSE(t, sse, func(data string) bool { return strings.Contains(data, "COMPLETED") })

	owner.Must(`mutation($l: ID!){ revokeShareLink(id: $l){ revokedAt } }`, map[string]any{"l": lid}, nil)
	for _, f := range followers {
		if _, ok := f.evs.TryNext(tgtest.Wait); ok || len(f.evs.Err) == 0 || f.evs.Err[0].Code() != "NOT_FOUND" {
			t.Errorf("%s after the revocation: errors %+v, done %v", f.name, f.evs.Err, f.evs.Done)
		}
	}
	last := waitSSE(t, sse, func(data string) bool { return strings.Contains(data, "NOT_FOUND") })
	if ev := <-sse; ev.Event != "complete" {
		t.Errorf("SSE after its error %s: %s %s, want complete", last, ev.Event, ev.Data)
	}
	if ev, open := <-sse; open {
		t.Errorf("SSE went on after its end: %s %s", ev.Event, ev.Data)
	}
	if got := readShared(t, reader, token); got != nil {
		t.Errorf("a revoked link reads %+v", got)
	}
}

// eventsOf reads frames as tgtest.Events.
func eventsOf(t *testing.T, frames <-chan tgtest.Frame) *tgtest.Events {
	return tgtest.NewEvents(t, frames)
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// waitSSE reads server-sent events until one's data matches, and returns that data.
func waitSSE(t *testing.T, sse <-chan tgtest.SSEEvent, match func(data string) bool) string {
	t.Helper()
	deadline := time.After(tgtest.Wait)
	for {
		select {
		case ev, ok := <-sse:
			if !ok {
				t.Fatal("the event stream ended first")
			}
			if match(string(ev.Data)) {
				return string(ev.Data)
			}
		case <-deadline:
			t.Fatal("no such server-sent event in time")
		}
	}
}

// Wrong, malformed, revoked, expired and guessed tokens answer alike: sharedSession null,
// no error, the same bytes; a stream refused with the same error.
func TestTokensThatOpenNothingAnswerAlike(t *testing.T) {
	a := startApp(t, "memory", nil)
	owner := guest(t, a)
	sid := owner.CreateSession(nil)
	lid, revoked, _ := link(t, owner, sid, ", live: true")
	owner.Must(`mutation($l: ID!){ revokeShareLink(id: $l){ id } }`, map[string]any{"l": lid}, nil)
	exp := time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)
	_, expired, _ := link(t, owner, sid, `, live: true, expiresAt: "`+exp+`"`)
	_, good, _ := link(t, owner, sid, "")
	reader := anonymous(t, a)
	// The expiring link's stream ends at its expiry: then it is expired.
	evs := eventsOf(t, mustSub(reader.Connect("graphql-transport-ws"), sharedStreamQuery, map[string]any{"t": expired}))
	if _, ok := evs.TryNext(tgtest.Wait); ok || len(evs.Err) == 0 || evs.Err[0].Code() != "NOT_FOUND" {
		t.Fatalf("the expiring link's stream: %+v", evs.Err)
	}
	guessed := good[:len(good)-1] + "A"
	if good[len(good)-1] == 'A' {
		guessed = good[:len(good)-1] + "E"
	}
	tokens := map[string]string{"wrong": strings.Repeat("x", 43), "malformed": "!!", "revoked": revoked, "expired": expired, "guessed": guessed}
	var first []byte
	ws := reader.Connect("graphql-transport-ws")
	for name, token := range tokens {
		body, _ := json.Marshal(map[string]any{"query": `query($t: String!){ sharedSession(token: $t){ title } }`, "variables": map[string]any{"t": token}})
		resp, err := http.Post(a.URL+"/query", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(raw) != `{"data":{"sharedSession":null}}` {
			t.Errorf("%s token: %s", name, raw)
		}
		if first == nil {
			first = raw
		}
		f := <-mustSub(ws, sharedStreamQuery, map[string]any{"t": token})
		if len(f.Errors) != 1 || f.Errors[0].Code() != "NOT_FOUND" || f.Errors[0].Message != "shared conversation not found" {
			t.Errorf("%s token's stream: %+v", name, f)
		}
	}
	if got := readShared(t, reader, good); got == nil {
		t.Error("the good token reads nothing")
	}
}

func mustSub(ws *tgtest.Socket, query string, vars map[string]any) <-chan tgtest.Frame {
	_, frames := ws.Subscribe(query, vars)
	return frames
}

// Reads without a sign-in are limited per address; a signed-in reader is not counted there.
func TestAnonymousSharedReadsAreLimitedPerAddress(t *testing.T) {
	a := startApp(t, "memory", func(c *app.Config) { c.HTTP.SharedReadsPerSecond, c.HTTP.SharedReadsBurst = 0.001, 3 })
	owner := guest(t, a)
	_, token, _ := link(t, owner, owner.CreateSession(nil), "")
	reader := anonymous(t, a)
	for i := range 3 {
		if r := reader.Do(sharedQuery, map[string]any{"t": token}); len(r.Errors) > 0 {
			t.Fatalf("read %d: %+v", i, r.Errors)
		}
	}
	if r := reader.Do(`query($t: String!){ ... on Query { sharedSession(token: $t){ title } } }`, map[string]any{"t": token}); r.Code() != "RATE_LIMITED" {
		t.Errorf("the 4th read without a sign-in (in a fragment): %s %+v, want RATE_LIMITED", r.Code(), r.Errors)
	}
	if r := reader.Do(`{ __typename }`, nil); len(r.Errors) > 0 {
		t.Errorf("an operation without a sign-in that reads nothing shared: %+v", r.Errors)
	}
	_, frames := reader.Connect("graphql-transport-ws").Subscribe(sharedStreamQuery, map[string]any{"t": token})
	if f := <-frames; len(f.Errors) == 0 || f.Errors[0].Code() != "RATE_LIMITED" {
		t.Errorf("a stream from the same address: %+v, want RATE_LIMITED", f)
	}
	if got := readShared(t, guest(t, a), token); got == nil {
		t.Error("a signed-in reader was refused")
	}
}

// Another user continues the conversation as a session of their own; without a sign-in
// that is UNAUTHENTICATED; the copy holds what the link shows and nothing of the owner's
// settings.
func TestForkSharedSessionOverHTTP(t *testing.T) {
	a := startApp(t, "sqlite", nil)
	owner := guest(t, a)
	sid := owner.CreateSession(map[string]any{"systemPrompt": "owner-only prompt"})
	_, evs := owner.Connect("graphql-transport-ws").Stream(sid, owner.Cursor(sid))
	_, run := owner.Send(sid, "one two three")
	evs.Until("the reply", tgtest.RunEnds(run))
	_, token, _ := link(t, owner, sid, "")
	if r := anonymous(t, a).Do(`mutation($t: String!){ forkSharedSession(token: $t){ id } }`, map[string]any{"t": token}); r.Code() != "UNAUTHENTICATED" {
		t.Errorf("a fork without a sign-in: %+v", r.Errors)
	}
	other := guest(t, a)
	var out struct {
		ForkSharedSession struct {
			ID       string
			Settings struct{ SystemPrompt *string }
		}
	}
	other.Must(`mutation($t: String!){ forkSharedSession(token: $t, title: "mine"){ id settings { systemPrompt } } }`, map[string]any{"t": token}, &out)
	if out.ForkSharedSession.Settings.SystemPrompt != nil {
		t.Errorf("the fork took the owner's system prompt")
	}
	msgs := other.Messages(out.ForkSharedSession.ID)
	if len(msgs) != 2 || msgs[0].Content != "one two three" || msgs[1].Status != "COMPLETE" {
		t.Errorf("the fork holds %+v", msgs)
	}
	if r := other.Do(`query($s: ID!){ session(id: $s){ id } }`, map[string]any{"s": sid}); string(r.Data) != `{"session":null}` {
		t.Errorf("the original, for the other user: %s", r.Data)
	}
}

// The chat app's page for a shared conversation is served with noindex, in its header and
// its meta, and without a Referer to leak the token.
func TestSharedPageIsNotIndexed(t *testing.T) {
	a := startApp(t, "memory", nil)
	resp, err := http.Get(a.URL + "/s/some-token")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("X-Robots-Tag"), "noindex") || resp.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	if !bytes.Contains(body, []byte(`<meta name="robots" content="noindex, nofollow">`)) || !bytes.Contains(body, []byte(`<div id="root">`)) {
		t.Errorf("the page:\n%s", body)
	}
	// The page names its scripts relative to itself: /s/assets/… are the app's.
	script := regexp.MustCompile(`src="\./(assets/[^"]+\.js)"`).FindSubmatch(body)
	if script == nil {
		t.Fatalf("no script in the page:\n%s", body)
	}
	resp, err = http.Get(a.URL + "/s/" + string(script[1]))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
		t.Errorf("/s/%s: status %d, type %q", script[1], resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
