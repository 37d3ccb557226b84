package graph

import (
	"bytes"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// leftToExecutor are the fields of the types in renderable that the fast renderer does not
// write, each with the reason. A selection with one of them leaves its type to the
// executor. A field the schema gains must be added either to renderable (with its writer)
// or here.
var leftToExecutor = map[string]string{
	"Message.question":   "an object of a type the renderer does not write (Question)",
	"Message.toolCalls":  "its resolver reads the message's tool calls from the store: more than the event holds",
	"Message.siblingIds": "its resolver reads the message's siblings from the store: more than the event holds",
}

// renderedTypes are the types the fast renderer is meant to write; the test fails if one
// of them goes missing from renderable.
var renderedTypes = []string{"MessageChunk", "ToolCallOutput", "MessageAdded", "MessageCompleted", "RunStatusChanged", "BranchSelected", "Message", "Run", "Usage"}

// TestRenderableMatchesTheSchema checks the fast renderer's field table against
// schema.graphqls: every field of a type it writes is written by the table or listed in
// leftToExecutor, every field in the table is the schema's, a field holding an object is
// planned with that object's type, a scalar's writer is not given a selection, and the
// types a selection on a type may name are the type and its interfaces.
func TestRenderableMatchesTheSchema(t *testing.T) {
	schema := loadSchema(t)
	for _, typ := range renderedTypes {
		if _, ok := renderable[typ]; !ok {
			t.Errorf("renderable has no %s", typ)
		}
	}
	for typ, rt := range renderable {
		def := schema.Types[typ]
		if def == nil || def.Kind != ast.Object {
			t.Errorf("renderable has %s, which is no object type of the schema", typ)
			continue
		}
		want := append([]string{typ}, def.Interfaces...)
		if got := slices.Sorted(slices.Values(rt.satisfies)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Errorf("%s satisfies %v in renderable, %v in the schema", typ, rt.satisfies, want)
		}
		if isEvent := slices.Contains(def.Interfaces, "SessionEvent"); rt.event != isEvent {
			t.Errorf("%s: event is %v in renderable; the schema says it is an event: %v", typ, rt.event, isEvent)
		}
		for _, f := range def.Fields {
			name := typ + "." + f.Name
			_, rendered := rt.fields[f.Name]
			reason, left := leftToExecutor[name]
			switch {
			case rendered && left:
				t.Errorf("%s is both in renderable and left to the executor (%s)", name, reason)
			case !rendered && !left:
				t.Errorf("%s is in the schema, but neither in renderable nor in leftToExecutor: "+
					"give it a writer in renderable, or say in leftToExecutor why the executor renders it", name)
			case rendered:
				if len(f.Arguments) > 0 {
					t.Errorf("%s takes arguments, which the renderer does not read", name)
				}
				checkField(t, schema, name, f.Type.Name(), rt.fields[f.Name])
			}
		}
		for name, f := range rt.fields {
			if name == "__typename" {
				if f.object != "" {
					t.Errorf("%s.__typename holds an object", typ)
				}
				continue
			}
			if def.Fields.ForName(name) == nil {
				t.Errorf("renderable writes %s.%s, which the schema does not have", typ, name)
			}
		}
	}
	for name := range leftToExecutor {
		typ, fieldName, _ := strings.Cut(name, ".")
		if def := schema.Types[typ]; def == nil || def.Fields.ForName(fieldName) == nil {
			t.Errorf("leftToExecutor lists %s, which the schema does not have", name)
		}
	}
}

// checkField checks the field name of the table against its type in the schema, named.
func checkField(t *testing.T, schema *ast.Schema, name, named string, f field) {
	t.Helper()
	if f.write == nil {
		t.Errorf("%s has no writer", name)
	}
	switch def := schema.Types[named]; {
	case def == nil:
		t.Errorf("%s: the schema has no type %s", name, named)
	case def.Kind == ast.Scalar || def.Kind == ast.Enum:
		if f.object != "" {
			t.Errorf("%s is a %s in the schema; renderable plans it as an object %s", name, named, f.object)
		}
	case f.object != named:
		t.Errorf("%s holds a %s in the schema; renderable plans it as %q", name, named, f.object)
	default:
		if _, ok := renderable[named]; !ok {
			t.Errorf("%s holds a %s, which renderable does not list", name, named)
		}
	}
}

// renderDocuments are subscription documents whose selections differ in every way the
// plans must follow: aliases, repeated fields, fragments on types and on the interface,
// @skip and @include with variables, and every field of the table (see everyField).
var renderDocuments = map[string]string{
	"the app's": `subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){
		__typename cursor at
		... on MessageAdded { message { ...M } }
		... on MessageChunk { messageId delta offset }
		... on MessageCompleted { message { ...M } }
		... on RunStatusChanged { run { id sessionId status error agent usage { inputTokens outputTokens cachedInputTokens } createdAt startedAt finishedAt } }
		... on ToolCallOutput { toolCallId messageId delta offset }
		... on BranchSelected { leafId }
	} }
	fragment M on Message { id sessionId role kind content status error runId createdAt parentId }`,
	"aliases and repeats": `subscription($s: ID!, $a: String){ ev: messageStream(sessionId: $s, after: $a){
		kind: __typename
		... on MessageChunk { text: delta delta at: offset offset kind: __typename messageId }
		... on ToolCallOutput { tool: toolCallId text: delta offset messageId }
		... on RunStatusChanged { run { status } r: run { s: status } }
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
	"only a typename": `subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){ __typename } }`,
	"messages and runs": `subscription($s: ID!, $a: String, $yes: Boolean!, $no: Boolean!){ messageStream(sessionId: $s, after: $a){
		__typename cursor at
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
	"every field": everyField(),
}

// everyField is a subscription selecting every field renderable writes, on every event type.
func everyField() string {
	var fields func(typ string) string
	fields = func(typ string) string {
		names := make([]string, 0, len(renderable[typ].fields))
		for name := range renderable[typ].fields {
			names = append(names, name)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, name := range names {
			b.WriteString(name)
			if object := renderable[typ].fields[name].object; object != "" {
				b.WriteString(" { " + fields(object) + " }")
			}
			b.WriteByte(' ')
		}
		return b.String()
	}
	var b strings.Builder
	b.WriteString(`subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){ `)
	for typ, rt := range renderable {
		if rt.event {
			b.WriteString("... on " + typ + " { " + fields(typ) + "} ")
		}
	}
	b.WriteString("} }")
	return b.String()
}

// sampleEvents are events of each type the renderer writes, with text JSON escapes,
// nullable fields null and not, and times in and out of UTC.
func sampleEvents() []model.SessionEvent {
	at := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	local := time.Date(2025, 3, 4, 7, 6, 7, 0, time.FixedZone("CEST", 2*3600))
	text := "Emoji 😀 then 𝄞 and <tags> & \\ back\nslash \"quoted\"\ttab \x01 \u2028"
	cached := 7
	msg := func(errText, runID string) *service.HistoryMessage {
		return &service.HistoryMessage{Message: service.Message{ID: "m-1", SessionID: "s-1", Role: service.RoleAssistant,
			Kind: service.KindText, Content: text, Status: service.MessageComplete, Error: errText, RunID: runID, CreatedAt: at}}
	}
	return []model.SessionEvent{
		&model.MessageChunk{Cursor: "c2Vzc2lvbi0xOjQy", At: at, MessageID: "m-1", Delta: text, Offset: 120},
		&model.MessageChunk{Cursor: "c", At: local, MessageID: "m-1", Delta: "", Offset: 0},
		&model.ToolCallOutput{Cursor: "c2", At: at, ToolCallID: "t-1", MessageID: "m-1", Delta: text, Offset: 3},
		&model.MessageAdded{Cursor: "c3", At: at, Message: msg("", "")},
		&model.MessageAdded{Cursor: "c3p", At: at, Message: &service.HistoryMessage{Message: service.Message{ID: "m-2",
			SessionID: "s-1", Role: service.RoleUser, Kind: service.KindText, Content: text, Status: service.MessageComplete,
			ParentID: "m-1", CreatedAt: at}}},
		&model.BranchSelected{Cursor: "c8", At: at, LeafID: "m-2"},
		&model.MessageCompleted{Cursor: "c4", At: at, Message: msg("it failed: <"+text+">", "r-1")},
		&model.RunStatusChanged{Cursor: "c5", At: at, Run: &service.Run{ID: "r-1", SessionID: "s-1", Status: service.RunQueued,
			Agent: "demo", CreatedAt: at}},
		&model.RunStatusChanged{Cursor: "c6", At: at, Run: &service.Run{ID: "r-1", SessionID: "s-1", Status: service.RunFailed,
			Error: text, Agent: "openai", CreatedAt: at, StartedAt: &at, FinishedAt: &local,
			Usage: &service.Usage{InputTokens: 10, OutputTokens: 20}}},
		&model.RunStatusChanged{Cursor: "c7", At: at, Run: &service.Run{ID: "r-1", SessionID: "s-1", Status: service.RunCompleted,
			Agent: "openai", CreatedAt: at, StartedAt: &at, FinishedAt: &at,
			Usage: &service.Usage{InputTokens: 10, OutputTokens: 20, CachedInputTokens: &cached}}},
	}
}

// TestFastRenderingMatchesTheExecutor renders every sample event with every document both
// ways, with the stream's plans and with gqlgen's executor, and wants the same bytes. It
// fails, too, when an event type of renderable was never written without the executor.
func TestFastRenderingMatchesTheExecutor(t *testing.T) {
	ts := newTestServer(t, 1)
	vars := map[string]any{"yes": true, "no": false}
	fast := map[string]bool{}
	for name, doc := range renderDocuments {
		t.Run(name, func(t *testing.T) {
			st, refused := ts.subscribe(t, doc, "", vars, func() {})
			if st == nil {
				t.Fatalf("refused: %+v", refused.Errors)
			}
			defer st.Close()
			for _, ev := range sampleEvents() {
				var buf bytes.Buffer
				if !st.render(&buf, ev) {
					continue
				}
				fast[eventType(ev)] = true
				resp, ok := st.execute(ts.ctx, ev)
				if !ok || resp == nil || len(resp.Errors) > 0 {
					t.Fatalf("%T: the executor answered %+v", ev, resp)
				}
				if got, want := buf.String(), string(resp.Data); got != want {
					t.Errorf("%T:\nfast:     %s\nexecutor: %s", ev, got, want)
				}
			}
		})
	}
	for typ, rt := range renderable {
		if rt.event && !fast[typ] {
			t.Errorf("no document had %s written by the fast renderer", typ)
		}
	}
}

// TestSelectionsBeyondTheTableAreLeftToTheExecutor: a selection with a field the table
// does not write (leftToExecutor) leaves the event type it is on to the executor, and only
// that type.
func TestSelectionsBeyondTheTableAreLeftToTheExecutor(t *testing.T) {
	ts := newTestServer(t, 1)
	for _, sel := range []string{"question { id }", "toolCalls { id }"} {
		doc := `subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){ __typename
			... on MessageChunk { delta } ... on MessageCompleted { message { id ` + sel + ` } } } }`
		st, refused := ts.subscribe(t, doc, "", nil, func() {})
		if st == nil {
			t.Fatalf("refused: %+v", refused.Errors)
		}
		st.Close()
		if st.plans["MessageCompleted"] != nil {
			t.Errorf("%s: MessageCompleted has a plan", sel)
		}
		for _, typ := range []string{"MessageChunk", "MessageAdded", "RunStatusChanged", "ToolCallOutput"} {
			if st.plans[typ] == nil {
				t.Errorf("%s: %s has no plan", sel, typ)
			}
		}
	}
}
