package httpapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// chunkCursor and chunkData are a chunk of a reply as the fast renderer writes it for the
// load generator's subscription (cmd/talkgraph-load).
const (
	chunkCursor = "czo1ZTI2ZWJlNS0xNzc1LTRiMTYtOTQ5Yy04ZGEwNGY0N2I1ZmY6MTIzOjQ1"
	chunkData   = `{"messageStream":{"__typename":"MessageChunk","cursor":"` + chunkCursor + `","messageId":"31f20c28-af59-411f-abd4-1acc8de29956","delta":"word ","offset":120}}`
)

// TestSSEEventsCarryTheirCursorAsID: an event of a subscription is framed with its cursor
// as its id, and its data is the response on one line, as json.Marshal writes it, even
// when the response's data holds a line break.
func TestSSEEventsCarryTheirCursorAsID(t *testing.T) {
	for name, resp := range map[string]*graphql.Response{
		"data":        {Data: []byte(chunkData)},
		"errors":      {Errors: gqlerror.List{{Message: "no <b>", Extensions: map[string]any{"code": "INTERNAL"}}}},
		"line breaks": {Data: []byte("{\n\"messageStream\":\r\n{\"delta\": \"a\\nb\"}}"), Extensions: map[string]any{"n": 1}},
	} {
		t.Run(name, func(t *testing.T) {
			var frame []byte
			sseWriter(func(b []byte) bool { frame = append([]byte(nil), b...); return true }).Send(resp, chunkCursor)
			lines := strings.Split(string(frame), "\n")
			if len(lines) != 5 || lines[0] != "id: "+chunkCursor || lines[1] != "event: next" || !strings.HasPrefix(lines[2], "data: ") || lines[3] != "" || lines[4] != "" {
				t.Fatalf("framed as %q", frame)
			}
			want, _ := json.Marshal(resp)
			var got, wantV any
			if err := json.Unmarshal([]byte(lines[2][len("data: "):]), &got); err != nil {
				t.Fatalf("data %q: %v", lines[2], err)
			}
			_ = json.Unmarshal(want, &wantV)
			if !reflect.DeepEqual(got, wantV) {
				t.Errorf("data %s, want %s", lines[2], want)
			}
		})
	}
	if got := string(nextEvent(&graphql.Response{Data: []byte(`{"viewer":null}`)})); got != "event: next\ndata: {\"data\":{\"viewer\":null}}\n\n" {
		t.Errorf("an answer is framed as %q, without an id", got)
	}
}

// BenchmarkSSEEvent frames one event of a subscription for server-sent events: what each
// chunk of a reply costs the transport between the stream and the connection.
func BenchmarkSSEEvent(b *testing.B) {
	resp := &graphql.Response{Data: []byte(chunkData)}
	n := 0
	out := sseWriter(func(frame []byte) bool { n += len(frame); return true })
	b.ReportAllocs()
	for b.Loop() {
		out.Send(resp, chunkCursor)
	}
	if n == 0 {
		b.Fatal("nothing written")
	}
}
