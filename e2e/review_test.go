package e2e

// These tests reproduce the second round of findings of the security review against a real
// server (or process) over real sockets: what anyone can read on /metrics, text that is not
// valid UTF-8 or holds nothing to read, what an error answer echoes, the API key's encoded
// forms in the log, the profiler's command line, and smaller checks of keys, cursors and
// numbers. Each says what the server promises instead.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service"
)

// getBody fetches url and returns its status and body.
func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: tgtest.Wait}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

var modelLabel = regexp.MustCompile(`^talkgraph_model_tokens_total\{kind="([a-z_]+)",model="([^"]*)"\} (\d+)$`)

// Finding 4: with a provider that takes any model name, what users chose became labels of
// the public /metrics (an e-mail address among them), two series a run, and the service's
// table behind them grew without end. Only the models the operator configured are labels
// now; every other model is counted under "other".
func TestMetricsLabelOnlyConfiguredModels(t *testing.T) {
	const runs = 20
	var script []http.HandlerFunc
	for range runs + 2 {
		script = append(script, fakellm.TextReply("ok"))
	}
	f := fakellm.New(t, script...)
	a := startOpenAI(t, "memory", f, func(c *app.Config) {
		c.OpenAI.Model = "served-model"
		c.OpenAI.Models = []string{"expected-a", "expected-b"}
	})
	c := guest(t, a)
	ws := c.Connect("graphql-transport-ws")
	run := func(settings map[string]any) {
		t.Helper()
		sid := openAISession(c, settings)
		_, evs := ws.Stream(sid, c.Cursor(sid))
		_, id := c.Send(sid, "hi")
		if end := evs.Until("run ends", tgtest.RunEnds(id)); end.Run.Status != "COMPLETED" {
			t.Fatalf("run ended %s: %s", end.Run.Status, end.Run.Error)
		}
	}
	run(nil) // the server's model
	run(map[string]any{"model": "expected-a"})
	for i := range runs {
		model := "chosen-" + string(rune('a'+i))
		if i == 0 {
			model = "someone@example.com"
		}
		run(map[string]any{"model": model})
	}

	_, body := getBody(t, a.URL+"/metrics")
	if strings.Contains(body, "example.com") || strings.Contains(body, "chosen-") {
		t.Error("/metrics shows a model name a user chose")
	}
	got := map[string]map[string]string{} // model → kind → value
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "talkgraph_model_tokens_total{") {
			continue
		}
		m := modelLabel.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("unexpected line %q", line)
			continue
		}
		if got[m[2]] == nil {
			got[m[2]] = map[string]string{}
		}
		got[m[2]][m[1]] = m[3]
	}
	var models []string
	for m := range got {
		models = append(models, m)
	}
	slices.Sort(models)
	if want := []string{"expected-a", "other", "served-model"}; !slices.Equal(models, want) {
		t.Errorf("model labels %q, want %q", models, want)
	}
	// Each run read 20 tokens and wrote 1, as the fake provider reports.
	if o := got["other"]; o["input"] != "400" || o["output"] != "20" {
		t.Errorf(`tokens under "other" = %v, want 400 in and 20 out (the %d runs of models nobody configured)`, o, runs)
	}
	if s := got["served-model"]; s["input"] != "20" {
		t.Errorf("tokens of the server's model = %v, want 20 in", s)
	}
}

// Finding 7: the literal key was redacted from what a provider answers, but not the key
// URL-escaped or in base64, which a provider or a proxy in front of it may echo (an
// "Authorization" header quoted back, a URL with the key in its query). Each form now shows
// as [redacted], in the server's log and in the run's error.
func TestEncodedAPIKeyIsRedactedFromLogAndRunError(t *testing.T) {
	// A key with characters that escaping changes.
	const key = "sk-proj/Vq7+RzT2mL=x9PwKd41?q&u"
	b64 := []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding}
	forms := map[string]string{
		"query-escaped":            url.QueryEscape(key),
		"path-escaped":             url.PathEscape(key),
		"query-escaped, lower hex": regexp.MustCompile(`%[0-9A-F]{2}`).ReplaceAllStringFunc(url.QueryEscape(key), strings.ToLower),
		"Bearer, query-escaped":    url.QueryEscape("Bearer " + key),
	}
	// Inside a longer text, the base64 of the key is redacted where its characters depend
	// on the key alone: a character or two at each end may stay, the key's bytes do not.
	embedded := map[string]bool{}
	for i, enc := range b64 {
		for _, s := range []string{key, "Bearer " + key, "Authorization: Bearer " + key, "user:" + key} {
			name := fmt.Sprintf("base64 #%d of %q…", i, s[:min(len(s), 14)])
			forms[name] = enc.EncodeToString([]byte(s))
			embedded[name] = !strings.HasPrefix(s, key) && !strings.HasPrefix(s, "Bearer ")
		}
	}
	names := slices.Sorted(maps.Keys(forms))
	var script []http.HandlerFunc
	for _, name := range names {
		body, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "invalid key " + forms[name] + " given"}})
		script = append(script, fakellm.ErrorReply(http.StatusBadRequest, string(body)))
	}
	f := fakellm.New(t, script...)
	env := map[string]string{"DATA_DIR": t.TempDir(), "DATABASE_URL": "memory:", "OPENAI_BASE_URL": f.URL + "/v1", "OPENAI_API_KEY": key,
		"RATE_LIMIT": "1000", "RATE_BURST": "1000"}
	cfg, err := app.LoadConfig(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	a := serveAppLog(t, cfg, log)
	c := guest(t, a)
	sid := openAISession(c, nil)
	ws := c.Connect("graphql-transport-ws")
	_, evs := ws.Stream(sid, c.Cursor(sid))
	for _, name := range names {
		_, run := c.Send(sid, "hello")
		end := evs.Until("run ends", tgtest.RunEnds(run))
		want := "invalid key [redacted] given"
		if embedded[name] {
			want = "[redacted]"
		}
		if end.Run.Status != "FAILED" || !strings.Contains(end.Run.Error, want) || strings.Contains(end.Run.Error, forms[name]) {
			t.Errorf("%s: run ended %s: %q, want FAILED with the key redacted", name, end.Run.Status, end.Run.Error)
		}
	}
	if n := len(log.lines(`"run failed"`)); n != len(names) {
		t.Errorf("%d run failures logged, want %d", n, len(names))
	}
	logged := log.buf.String()
	for _, name := range names {
		if strings.Contains(logged, forms[name]) {
			t.Errorf("the log holds the key %s: %s", name, forms[name])
		}
	}
	if strings.Contains(logged, key) {
		t.Error("the log holds the key")
	}
}

// Finding 8: with PPROF_ADDR set, /debug/pprof/cmdline showed the process's command line
// to anyone reaching that address, secrets given as flags included. It now shows the
// command line with those values redacted, however the flags are written.
func TestProfilerCommandLineHidesSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	const (
		authSecret = "auth-secret-given-as-a-flag-Xq81"
		apiKey     = "sk-flag-Vq7RzT2mLx9PwKd41"
		basicPass  = "pw-in-the-url-7Yh"
	)
	dir := t.TempDir()
	pprofPort := freePort(t)
	args := []string{"-auth-secret=" + authSecret, "--openai-api-key", apiKey,
		"-openai-base-url", "http://user:" + basicPass + "@127.0.0.1:9/v1?key=" + apiKey, "-openai-model=flag-model"}
	startChildArgs(t, dir, freePort(t), args, fmt.Sprintf("PPROF_ADDR=127.0.0.1:%d", pprofPort))

	status, body := getBody(t, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/cmdline", pprofPort))
	if status != http.StatusOK {
		t.Fatalf("cmdline: status %d", status)
	}
	for _, secret := range []string{authSecret, apiKey, basicPass} {
		if strings.Contains(body, secret) {
			t.Errorf("the profiler's command line shows %q: %q", secret, body)
		}
	}
	got := strings.Split(body, "\x00")
	want := []string{"-auth-secret=[redacted]", "--openai-api-key", "[redacted]", "-openai-base-url",
		"http://user:xxxxx@127.0.0.1:9/v1?[redacted]", "-openai-model=flag-model"}
	if len(got) < len(want) || !slices.Equal(got[len(got)-len(want):], want) {
		t.Errorf("command line %q, want it to end with %q", got, want)
	}
}

// Finding 9: an idempotency key with a NUL byte reached the store, and PostgreSQL (whose
// text cannot hold NUL) answered with a message naming the batch. Keys holding a control
// character are refused on every store, before anything is stored.
func TestIdempotencyKeyWithControlCharactersIsRefused(t *testing.T) {
	for _, store := range []string{"memory", "sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			a := startApp(t, store, nil)
			c := guest(t, a)
			sid := c.CreateSession(nil)
			for _, key := range []string{"a\x00b", "tab\tkey", "line\n", "del\x7f", "nel\u0085"} {
				r := c.Do(`mutation($s: ID!, $k: String){ addMessage(input:{sessionId:$s, content:"hi", idempotencyKey:$k}){ run { id } } }`,
					map[string]any{"s": sid, "k": key})
				wantCode(t, fmt.Sprintf("key %q", key), r, "BAD_USER_INPUT", "idempotency key must not hold control characters")
			}
			if n := len(c.Messages(sid)); n != 0 {
				t.Errorf("%d messages stored", n)
			}
			// A key of printable text, spaces and all, is fine.
			r := c.Do(`mutation($s: ID!){ addMessage(input:{sessionId:$s, content:"hi", idempotencyKey:"key 1 ✓"}){ run { id } } }`, map[string]any{"s": sid})
			if len(r.Errors) > 0 {
				t.Errorf("a printable key: %+v", r.Errors)
			}
		})
	}
}

// Finding 9: a cursor is a position just after an event, its offset the end of the text a
// chunk event held. A crafted cursor inside a folded run of chunks with an offset past its
// text replayed an empty delta at that offset (1,000,000,000); one with an offset on an
// event that holds no text was taken as it was. Like a cursor ahead of the log, such a
// cursor is one the server never hands out, and is refused with BAD_USER_INPUT; the
// cursors it hands out resume as before.
func TestCursorOffsetPastItsEventIsRefused(t *testing.T) {
	a1 := startApp(t, "sqlite", nil)
	c := guest(t, a1)
	sid := c.CreateSession(nil)
	ws := c.Connect("graphql-transport-ws")
	_, evs := ws.Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "/slow 4") // four chunk events, 100 ms apart
	evs.Until("run ends", tgtest.RunEnds(run))
	var chunks []tgtest.Event
	var added tgtest.Event
	for _, ev := range evs.All {
		switch {
		case ev.Typename == "MessageChunk":
			chunks = append(chunks, ev)
		case ev.Typename == "MessageAdded" && ev.Message.Role == "ASSISTANT":
			added = ev
		}
	}
	if len(chunks) < 3 {
		t.Fatalf("%d chunk events, want at least 3", len(chunks))
	}
	text := tgtest.Text(chunks)[chunks[0].MessageID]
	length := len([]rune(text))

	// At shutdown the reply's chunks are folded into one event in the store; after the
	// restart the log is read from the store.
	ctx, cancel := context.WithTimeout(context.Background(), tgtest.Wait)
	a1.Close(ctx)
	cancel()
	a2 := serveApp(t, a1.Config)
	c2 := c.On(a2.URL)
	ws2 := c2.Connect("graphql-transport-ws")

	// A cursor the server handed out, inside the folded run, resumes with the rest.
	_, rest := ws2.Stream(sid, chunks[0].Cursor)
	first := rest.Next()
	if first.Typename != "MessageChunk" || first.Offset != len([]rune(chunks[0].Delta)) || chunks[0].Delta+first.Delta != text {
		t.Errorf("after the first chunk: %+v, want the rest of %q in one event", first, text)
	}

	seq := cursorSeq(t, sid, chunks[0].Cursor)
	for name, cur := range map[string]service.Cursor{
		"offset far past the folded text":  {Seq: seq, Off: 1_000_000_000},
		"offset at the end of the folding": {Seq: seq, Off: length},
		"offset on an event without text":  {Seq: cursorSeq(t, sid, added.Cursor), Off: 5},
		"offset before the first event":    {Seq: 0, Off: 3},
	} {
		_, s := ws2.Stream(sid, service.EncodeCursor(sid, cur))
		if ev, ok := s.TryNext(tgtest.Wait); ok || len(s.Err) == 0 || s.Err[0].Code() != "BAD_USER_INPUT" {
			t.Errorf("%s: event %+v, errors %+v; want BAD_USER_INPUT", name, ev, s.Err)
		}
	}
	// The same on a live log (the tail in memory): a chunk's cursor with an offset past it.
	_, live := ws2.Stream(sid, c2.Cursor(sid))
	_, run2 := c2.Send(sid, "/slow 2")
	live.Until("run ends", tgtest.RunEnds(run2))
	for _, ev := range live.All {
		if ev.Typename != "MessageChunk" {
			continue
		}
		cur := service.Cursor{Seq: cursorSeq(t, sid, ev.Cursor), Off: ev.Offset + len([]rune(ev.Delta)) + 1}
		_, s := ws2.Stream(sid, service.EncodeCursor(sid, cur))
		if _, ok := s.TryNext(tgtest.Wait); ok || len(s.Err) == 0 || s.Err[0].Code() != "BAD_USER_INPUT" {
			t.Errorf("a live chunk's cursor one past its text: errors %+v; want BAD_USER_INPUT", s.Err)
		}
		break
	}
}

// Finding 9: GraphQL's Float and Int take numbers, and Int is 32 bits. gqlgen's own
// coercion took `temperature: "1"` and `first: "5"` (strings) and `first: 2147483648`;
// each is refused with BAD_USER_INPUT now, over variables and in the document alike.
func TestNumbersAreCoercedAsGraphQLSays(t *testing.T) {
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	create := `mutation($t: Float){ createTalkSession(input:{settings:{temperature:$t}}){ settings { temperature } } }`
	sessions := `query($n: Int){ sessions(first:$n){ edges { cursor } } }`
	for _, tc := range []struct {
		name, query string
		vars        map[string]any
		msg         string
	}{
		{"temperature as a string", create, map[string]any{"t": "1"}, "Float cannot represent a string"},
		{"first as a string", sessions, map[string]any{"n": "5"}, "Int cannot represent a string"},
		{"first past 32 bits", sessions, map[string]any{"n": 2147483648}, "Int must be between -2147483648 and 2147483647"},
		{"first far below", sessions, map[string]any{"n": -9007199254740991}, "Int must be between"},
		{"literal first past 32 bits", `{ sessions(first: 2147483648){ edges { cursor } } }`, nil, "Int must be between"},
		// gqlparser refuses these two itself, before the operation runs.
		{"temperature as a boolean", create, map[string]any{"t": true}, ""},
		{"first with a fraction", sessions, map[string]any{"n": 2.5}, ""},
	} {
		r := c.Do(tc.query, tc.vars)
		if tc.msg == "" {
			wantCode(t, tc.name, r, "GRAPHQL_VALIDATION_FAILED", "")
			continue
		}
		wantCode(t, tc.name, r, "BAD_USER_INPUT", tc.msg)
	}
	// Numbers are numbers, whole or not.
	for _, tmp := range []any{1, 0.5, json.Number("1.0"), 2} {
		c.Must(create, map[string]any{"t": tmp}, nil)
	}
	c.Must(sessions, map[string]any{"n": 2147483647}, nil)
	c.Must(`{ sessions(first: 3){ edges { cursor } } }`, nil, nil)
}

// rawPost posts body as it is to /query with the headers, and returns the status, the raw
// answer and the answer decoded as a GraphQL response (nil when it is not JSON).
func rawPost(t *testing.T, base string, body []byte, headers map[string]string) (int, []byte, *tgtest.Response) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: tgtest.Wait}).Do(req)
	if err != nil {
		t.Fatalf("POST /query: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	out := &tgtest.Response{Status: resp.StatusCode}
	if json.Unmarshal(raw, out) != nil {
		out = nil
	}
	return resp.StatusCode, raw, out
}

// rawGet sends a GET /query with the URL parameters, and returns the status and the
// answer.
func rawGet(t *testing.T, base string, params url.Values, token string) (int, []byte, *tgtest.Response) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/query?"+params.Encode(), nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: tgtest.Wait}).Do(req)
	if err != nil {
		t.Fatalf("GET /query: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := &tgtest.Response{Status: resp.StatusCode}
	if json.Unmarshal(raw, out) != nil {
		out = nil
	}
	return resp.StatusCode, raw, out
}

// wsFirstAnswer sends one raw subscribe (or start) frame for operation 1 on a new socket of
// protocol proto and returns the first answer for it.
func wsFirstAnswer(t *testing.T, a *testApp, c *tgtest.Client, proto, payload string) wsMsg {
	t.Helper()
	ws := dialWS(t, a.URL, proto)
	ws.init(c.Token)
	if err := ws.sendText(`{"type":"` + startType(proto) + `","id":"1","payload":` + payload + `}`); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := ws.readMsg(tgtest.Wait)
		if err != nil {
			t.Fatalf("%s: no answer: %v", proto, err)
		}
		if m.ID == "1" {
			return m
		}
	}
}

// wsErrors decodes the errors of an answer: an error message, or a next/data message's.
func wsErrors(t *testing.T, m wsMsg) []tgtest.GQLError {
	t.Helper()
	var errs []tgtest.GQLError
	if m.Type == "error" {
		_ = json.Unmarshal(m.Payload, &errs)
		return errs
	}
	var p struct{ Errors []tgtest.GQLError }
	_ = json.Unmarshal(m.Payload, &p)
	return p.Errors
}

// Finding 5: text that is not valid UTF-8 (raw bytes \xff\xfe, or the escape of a lone
// surrogate \ud800) in a message or a title was stored as U+FFFD, since Go's JSON decoder
// replaces it before the service sees it; content of zero-width spaces only counted as a
// message. Both are refused with BAD_USER_INPUT now, on every transport, saying what is
// wrong and where, and nothing is stored.
func TestTextThatIsNotValidUTF8IsRefusedOnEveryTransport(t *testing.T) {
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	sid := c.CreateSession(nil)
	const add = `mutation($s: ID!, $c: String!){ addMessage(input:{sessionId:$s, content:$c}){ message { content } } }`
	const rename = `mutation($s: ID!, $t: String!){ renameTalkSession(input:{id:$s, title:$t}){ title } }`
	// request writes a request's JSON by hand, with text as it is (json.Marshal would
	// replace the bytes that are not UTF-8).
	request := func(query, name, text string) string {
		q, _ := json.Marshal(query)
		return `{"query":` + string(q) + `,"variables":{"s":"` + sid + `","` + name + `":"` + text + `"}}`
	}
	bad := map[string]struct{ text, says string }{
		"raw bytes":      {"ab\xff\xfecd", "is not valid UTF-8"},
		"lone surrogate": {`ab\ud800cd`, `holds a lone UTF-16 surrogate (\ud800), which is not a character`},
		"lone low half":  {`\udc00`, `holds a lone UTF-16 surrogate (\udc00)`},
	}
	for name, b := range bad {
		for _, op := range []struct{ query, variable string }{{add, "c"}, {rename, "t"}} {
			body := request(op.query, op.variable, b.text)
			want := "text in variables." + op.variable + " " + b.says

			status, _, r := rawPost(t, a.URL, []byte(body), bearer(c.Token))
			if status != http.StatusBadRequest || r == nil {
				t.Errorf("POST, %s in $%s: status %d, %+v", name, op.variable, status, r)
			} else {
				wantCode(t, fmt.Sprintf("POST, %s in $%s", name, op.variable), r, "BAD_USER_INPUT", want)
			}

			status, _, r = rawPost(t, a.URL, []byte(body), map[string]string{"Authorization": "Bearer " + c.Token, "Accept": "text/event-stream"})
			if status != http.StatusBadRequest || r == nil {
				t.Errorf("SSE, %s in $%s: status %d, %+v", name, op.variable, status, r)
			} else {
				wantCode(t, fmt.Sprintf("SSE, %s in $%s", name, op.variable), r, "BAD_USER_INPUT", want)
			}

			for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
				payload := body // the request is the payload
				m := wsFirstAnswer(t, a, c, proto, payload)
				errs := wsErrors(t, m)
				if m.Type != "error" || len(errs) == 0 || errs[0].Code() != "BAD_USER_INPUT" || !strings.Contains(errs[0].Message, want) {
					t.Errorf("%s, %s in $%s: %s %s, want an error saying %q", proto, name, op.variable, m.Type, m.Payload, want)
				}
			}
		}
		// GET takes queries only: the same text in a variable of one.
		vars := `{"s":"` + b.text + `"}`
		status, _, r := rawGet(t, a.URL, url.Values{"query": {`query($s: ID!){ session(id:$s){ id } }`}, "variables": {vars}}, c.Token)
		if status != http.StatusBadRequest || r == nil {
			t.Errorf("GET, %s: status %d, %+v", name, status, r)
		} else {
			wantCode(t, "GET, "+name, r, "BAD_USER_INPUT", "text in variables.s "+b.says)
		}
	}
	// In the document itself: raw bytes (GET has no JSON around them), and a lone
	// surrogate's escape in a string literal.
	status, _, r := rawGet(t, a.URL, url.Values{"query": {"{ session(id:\"\xff\") { id } }"}}, c.Token)
	if status != http.StatusBadRequest || r == nil {
		t.Errorf("GET, raw bytes in the query: status %d, %+v", status, r)
	} else {
		wantCode(t, "GET, raw bytes in the query", r, "BAD_USER_INPUT", "text in query is not valid UTF-8")
	}
	literal := `mutation($s: ID!){ addMessage(input:{sessionId:$s, content:"ab\ud800"}){ message { content } } }`
	wantCode(t, "a lone surrogate in a string of the query", c.Do(literal, map[string]any{"s": sid}), "BAD_USER_INPUT",
		`a string in the query holds a lone UTF-16 surrogate (\ud800)`)
	_, _, r = rawGet(t, a.URL, url.Values{"query": {`{ session(id:"\udfff") { id } }`}}, c.Token)
	if r == nil {
		t.Error("GET, a lone surrogate in the query: no GraphQL answer")
	} else {
		wantCode(t, "GET, a lone surrogate in the query", r, "BAD_USER_INPUT", `(\udfff)`)
	}

	// Text that shows nothing is empty.
	for _, blank := range []string{"\u200b", "\u200b\u200b\u200b", " \u2060\ufeff\u200d\u200c ", "\u3164", "\u00ad\n"} {
		wantCode(t, fmt.Sprintf("content %q", blank), c.Do(add, map[string]any{"s": sid, "c": blank}), "BAD_USER_INPUT", "message is empty")
	}
	if msgs := c.Messages(sid); len(msgs) != 0 {
		t.Errorf("%d messages stored: %+v", len(msgs), msgs)
	}
	var s struct{ Session struct{ Title string } }
	c.Must(`query($s: ID!){ session(id:$s){ title } }`, map[string]any{"s": sid}, &s)
	if s.Session.Title != "test" {
		t.Errorf("title %q, want it unchanged", s.Session.Title)
	}
	var out struct{ CreateTalkSession struct{ ID, Title string } }
	c.Must(`mutation{ createTalkSession(input:{title:"\u200b\u200b"}){ id title } }`, nil, &out)
	if out.CreateTalkSession.Title != "" {
		t.Errorf("a title of zero-width spaces is %q, want it empty (filled in by the first message)", out.CreateTalkSession.Title)
	}
	// Characters outside the Basic Multilingual Plane, escaped as pairs, are text.
	status, _, r = rawPost(t, a.URL, []byte(request(add, "c", `smile \ud83d\ude00`)), bearer(c.Token))
	if status != http.StatusOK || r == nil || len(r.Errors) > 0 || !strings.Contains(string(r.Data), "smile \U0001F600") {
		t.Errorf("a surrogate pair: status %d, %+v", status, r)
	}
}

// Finding 6: a body that is not JSON was answered with an error that repeated it whole
// (900 KB in, 900 KB out, without a token), and other refusals quoted the client's text at
// any length. No answer repeats more than a short excerpt now, on any transport, and the
// refusals before GraphQL carry BAD_USER_INPUT.
func TestRefusalsDoNotEchoTheRequest(t *testing.T) {
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	pad := strings.Repeat("x", 900_000)
	small := func(what string, raw []byte) {
		t.Helper()
		if len(raw) > 2048 || strings.Contains(string(raw), strings.Repeat("x", 400)) {
			t.Errorf("%s: an answer of %d bytes: %.200s…", what, len(raw), raw)
		}
	}
	for _, tc := range []struct{ name, body, says string }{
		{"not JSON", pad, "the request is not JSON"},
		{"JSON cut short", `{"query":"` + pad, "the request is not JSON: it ends too soon"},
		{"a number as the query", `{"query":5,"pad":"` + pad + `"}`, "query must be a string"},
		{"a string as variables", `{"query":"{ viewer { id } }","variables":"` + pad + `"}`, "variables must be an object"},
		{"a list", `["` + pad + `"]`, "the request must be a JSON object"},
	} {
		for _, token := range []string{"", c.Token} {
			what := fmt.Sprintf("POST, %s, token %v", tc.name, token != "")
			h := map[string]string{}
			if token != "" {
				h["Authorization"] = "Bearer " + token
			}
			status, raw, r := rawPost(t, a.URL, []byte(tc.body), h)
			small(what, raw)
			if status != http.StatusBadRequest || r == nil {
				t.Errorf("%s: status %d", what, status)
			} else {
				wantCode(t, what, r, "BAD_USER_INPUT", tc.says)
			}
		}
		h := map[string]string{"Authorization": "Bearer " + c.Token, "Accept": "text/event-stream"}
		status, raw, r := rawPost(t, a.URL, []byte(tc.body), h)
		small("SSE, "+tc.name, raw)
		if status != http.StatusBadRequest || r == nil {
			t.Errorf("SSE, %s: status %d", tc.name, status)
		} else {
			wantCode(t, "SSE, "+tc.name, r, "BAD_USER_INPUT", tc.says)
		}
		if json.Valid([]byte(tc.body)) { // a frame that is not JSON closes the socket (4400)
			for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
				m := wsFirstAnswer(t, a, c, proto, tc.body)
				small(proto+", "+tc.name, m.Payload)
				if errs := wsErrors(t, m); m.Type != "error" || len(errs) == 0 || errs[0].Code() != "BAD_USER_INPUT" {
					t.Errorf("%s, %s: %s %.200s", proto, tc.name, m.Type, m.Payload)
				}
			}
		}
	}

	// GET: variables that are not JSON, and an operation name that names nothing.
	long := strings.Repeat("x", 200_000)
	status, raw, r := rawGet(t, a.URL, url.Values{"query": {"{ viewer { id } }"}, "variables": {long}}, c.Token)
	small("GET, variables not JSON", raw)
	if status != http.StatusBadRequest || r == nil {
		t.Errorf("GET, variables not JSON: status %d", status)
	} else {
		wantCode(t, "GET, variables not JSON", r, "BAD_USER_INPUT", "variables is not JSON")
	}
	_, raw, _ = rawGet(t, a.URL, url.Values{"query": {"query A { viewer { id } }"}, "operationName": {long}}, c.Token)
	small("GET, an unknown operation name", raw)

	// In GraphQL: a field, an argument and a fragment of long names the schema lacks, and an
	// operation name that names nothing. Messages quote names: a part of them at most.
	name := strings.Repeat("x", 30_000)
	for what, q := range map[string]string{
		"an unknown field":    "{ " + name + " }",
		"an unknown argument": "{ viewer(" + name + ": 1) { id } }",
		"a parse error":       "{ viewer { id } } " + name,
	} {
		_, raw, _ := post(t, a.URL, q, nil, bearer(c.Token))
		small(what, raw)
	}
	_, raw, _ = rawPost(t, a.URL, []byte(`{"query":"query A { viewer { id } }","operationName":"`+pad+`"}`), bearer(c.Token))
	small("POST, an unknown operation name", raw)
	ws := dialWS(t, a.URL, "graphql-transport-ws")
	ws.init(c.Token)
	if err := ws.sendText(`{"type":"subscribe","id":"1","payload":{"query":"{ ` + name + ` }"}}`); err != nil {
		t.Fatal(err)
	}
	m, err := ws.readMsg(tgtest.Wait)
	if err != nil || m.Type != "error" {
		t.Fatalf("websocket: %v %+v", err, m)
	}
	small("websocket, an unknown field", m.Payload)
}
