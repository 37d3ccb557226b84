package e2e

// Both transports stream a subscription through graph.Stream, which renders the commonest
// events itself (text chunks, tool output, new and completed messages, run status changes)
// without gqlgen's executor (graph.plan), and the others with it; graph's
// TestFastRenderingMatchesTheExecutor compares the two renderings byte for byte. These
// tests replay one session's log over each transport with documents of several shapes and
// check that every event arrives as the same JSON: the same keys in the same order with
// the same values (the transports may escape a character differently: server-sent events
// write <, > and & as \u003c, \u003e and \u0026).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// renderDocuments are subscription documents whose chunk selections differ in every way
// the plan must follow: aliases, repeated fields, fragments, @skip and @include with
// variables, a selection the plan leaves to the executor. Each selects the run's status so
// that the replay's end can be seen.
var renderDocuments = map[string]string{
	"the app's": tgtest.StreamQuery,
	"aliases and repeats": `subscription($s: ID!, $a: String){ ev: messageStream(sessionId: $s, after: $a){
		kind: __typename
		... on MessageChunk { text: delta delta at: offset offset kind: __typename messageId }
		... on ToolCallOutput { tool: toolCallId text: delta offset messageId }
		... on RunStatusChanged { run { status } }
		c: cursor when: at
	} }`,
	"fragments and directives": `subscription($s: ID!, $a: String, $yes: Boolean!, $no: Boolean!){ messageStream(sessionId: $s, after: $a){
		...Common
		... on MessageChunk { ...Chunk offset @skip(if: $yes) }
		... on ToolCallOutput @include(if: $yes) { delta offset @include(if: $no) toolCallId }
		... on RunStatusChanged { run { status } }
	} }
	fragment Common on SessionEvent { cursor __typename }
	fragment Chunk on MessageChunk { delta @include(if: $yes) messageId @skip(if: $no) at }`,
	"only a typename": `subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){
		__typename ... on RunStatusChanged { run { status } }
	} }`,
	"messages and runs": `subscription($s: ID!, $a: String, $yes: Boolean!, $no: Boolean!){ messageStream(sessionId: $s, after: $a){
		__typename cursor at
		... on MessageChunk { delta }
		... on MessageAdded { message { ...Whole } }
		... on MessageCompleted {
			m: message { id content c: content status error @include(if: $yes) runId @skip(if: $yes) kind }
			message { __typename createdAt role sessionId } message { content error }
		}
		... on RunStatusChanged {
			run { __typename id sessionId status error agent createdAt startedAt finishedAt
				usage { inputTokens outputTokens cachedInputTokens __typename } }
			r: run { status @skip(if: $yes) id @include(if: $no) ... on Run { agent } }
		}
	} }
	fragment Whole on Message { id role kind status error runId createdAt content sessionId __typename }`,
	"a message's tool calls (left to the executor)": `subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){
		__typename cursor
		... on MessageChunk { delta }
		... on MessageCompleted { message { id content toolCalls { id name output status } } }
		... on RunStatusChanged { run { status usage { outputTokens } } }
	} }`,
}

// sent are the messages the session of the render tests is sent: a tool call, text
// with characters JSON escapes, and a run that fails.
var sent = []string{"/tool one two 😀 \"three\"", "Emoji 😀 then 𝄞 and <tags> & \\ back\nslash", "/fail"}

func TestEventsAreRenderedAlikeOnEveryTransport(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		a, c, sid, _, evs := watchedSession(t, store)
		_ = a
		start := c.Cursor(sid)
		for _, content := range sent {
			_, run := c.Send(sid, content)
			evs.Until("the run's end", tgtest.RunEnds(run))
		}
		vars := map[string]any{"s": sid, "a": start, "yes": true, "no": false}
		for name, doc := range renderDocuments {
			t.Run(name, func(t *testing.T) {
				want := sseReplay(t, c, doc, vars)
				chunks := 0
				for _, d := range want {
					var ev map[string]map[string]any
					_ = json.Unmarshal(d, &ev)
					for _, v := range ev {
						if v["delta"] != nil || v["text"] != nil {
							chunks++
						}
					}
				}
				if name != "only a typename" && chunks == 0 {
					t.Fatalf("the replay has no chunk to compare: %s", want)
				}
				for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
					got := wsReplay(t, c, proto, doc, vars, len(want))
					if len(got) != len(want) {
						t.Fatalf("%s: %d events, server-sent events gave %d", proto, len(got), len(want))
					}
					for i := range want {
						if canonical(t, got[i]) != canonical(t, want[i]) {
							t.Errorf("%s: event %d is\n%s\nover server-sent events it is\n%s", proto, i, got[i], want[i])
						}
					}
				}
			})
		}
	})
}

// An idle subscription keeps no executor: an event no plan covers (here a session renamed)
// executes the operation again for the stream, and the executor's state goes once it is
// delivered. Each rename comes after the subscriptions caught up and idled, and must
// arrive over each websocket protocol as it does over server-sent events.
func TestEventsLeftToTheExecutorAfterIdling(t *testing.T) {
	a := startApp(t, "sqlite", nil)
	c := guest(t, a)
	sid := c.CreateSession(nil)
	doc := `subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){
		__typename cursor
		... on SessionUpdated { at session { id title status settings { agent } } }
		... on MessageChunk { delta }
	} }`
	vars := map[string]any{"s": sid, "a": c.Cursor(sid)}
	ctx, cancel := context.WithTimeout(context.Background(), tgtest.Wait)
	defer cancel()
	sse, err := c.SSE(ctx, doc, vars)
	if err != nil {
		t.Fatal(err)
	}
	type feed struct {
		name   string
		frames <-chan tgtest.Frame
	}
	var feeds []feed
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		ws := c.Connect(proto)
		defer ws.Close()
		_, frames := ws.Subscribe(doc, vars)
		feeds = append(feeds, feed{proto, frames})
	}
	for _, title := range []string{"first", "second", "third"} {
		c.Must(`mutation($id: ID!, $t: String!){ renameTalkSession(input: {id: $id, title: $t}){ id } }`,
			map[string]any{"id": sid, "t": title}, nil)
		var want json.RawMessage
		select {
		case raw, ok := <-sse:
			if !ok {
				t.Fatal("the SSE stream ended")
			}
			var p struct{ Data json.RawMessage }
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("decoding %s: %v", raw, err)
			}
			want = p.Data
		case <-ctx.Done():
			t.Fatalf("no SSE event for the rename to %q", title)
		}
		if !strings.Contains(string(want), title) {
			t.Fatalf("the SSE event %s is not the rename to %q", want, title)
		}
		for _, f := range feeds {
			select {
			case fr, ok := <-f.frames:
				if !ok || fr.Complete || len(fr.Errors) > 0 {
					t.Fatalf("%s: the subscription ended (errors %+v)", f.name, fr.Errors)
				}
				if canonical(t, fr.Data) != canonical(t, want) {
					t.Errorf("%s: the rename to %q is\n%s\nover server-sent events it is\n%s", f.name, title, fr.Data, want)
				}
			case <-ctx.Done():
				t.Fatalf("%s: no event for the rename to %q", f.name, title)
			}
		}
	}
}

// sseReplay subscribes over server-sent events and returns each event's data until the
// end of the last run of sent.
func sseReplay(t *testing.T, c *tgtest.Client, doc string, vars map[string]any) []json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tgtest.Wait)
	defer cancel()
	ch, err := c.SSE(ctx, doc, vars)
	if err != nil {
		t.Fatal(err)
	}
	var out []json.RawMessage
	ends := 0
	for ends < len(sent) {
		select {
		case raw, ok := <-ch:
			if !ok {
				t.Fatalf("the SSE stream ended after %d events", len(out))
			}
			var p struct{ Data json.RawMessage }
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("decoding %s: %v", raw, err)
			}
			out = append(out, p.Data)
			if runEnded(p.Data) {
				ends++
			}
		case <-ctx.Done():
			t.Fatalf("waiting for the replay over server-sent events: %d events seen", len(out))
		}
	}
	return out
}

// wsReplay subscribes over a websocket and returns the data of the first n events.
func wsReplay(t *testing.T, c *tgtest.Client, proto, doc string, vars map[string]any, n int) []json.RawMessage {
	t.Helper()
	ws := c.Connect(proto)
	defer ws.Close()
	_, frames := ws.Subscribe(doc, vars)
	timer := time.NewTimer(tgtest.Wait)
	defer timer.Stop()
	var out []json.RawMessage
	for len(out) < n {
		select {
		case f, ok := <-frames:
			if !ok || f.Complete || len(f.Errors) > 0 {
				t.Fatalf("%s: the subscription ended after %d events (errors %+v)", proto, len(out), f.Errors)
			}
			out = append(out, f.Data)
		case <-timer.C:
			t.Fatalf("%s: %d of %d events within %v", proto, len(out), n, tgtest.Wait)
		}
	}
	return out
}

// runEnded reports whether data is a RunStatusChanged event with a final status.
func runEnded(data json.RawMessage) bool {
	var ev map[string]struct {
		Run *struct{ Status string }
	}
	_ = json.Unmarshal(data, &ev)
	for _, v := range ev {
		if v.Run != nil {
			switch v.Run.Status {
			case "COMPLETED", "CANCELLED", "INTERRUPTED", "FAILED":
				return true
			}
		}
	}
	return false
}

// canonical re-encodes a JSON document token by token, keeping the order of keys, so that
// two encodings of the same document compare equal.
func canonical(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	// stack holds, for each open object or array, whether a value was written in it and,
	// for objects, whether the next string is a key.
	type level struct {
		object, any, key bool
	}
	var stack []level
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return b.String()
		}
		if err != nil {
			t.Fatalf("decoding %s: %v", raw, err)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			b.WriteRune(rune(d))
			stack = stack[:len(stack)-1]
			continue
		}
		if n := len(stack); n > 0 {
			top := &stack[n-1]
			switch {
			case top.object && top.key:
				if top.any {
					b.WriteByte(',')
				}
				top.any, top.key = true, false
			case top.object:
				b.WriteByte(':')
				top.key = true
			default:
				if top.any {
					b.WriteByte(',')
				}
				top.any = true
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			b.WriteRune(rune(v))
			stack = append(stack, level{object: v == '{', key: v == '{'})
		default:
			enc, _ := json.Marshal(v)
			b.Write(enc)
		}
	}
}
