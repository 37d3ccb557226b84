package graph

import (
	"bytes"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// renderable is the fast renderer's field table: each type it writes without the executor,
// and for each of them every field it writes, with the function that writes it. It is the
// one list of what the renderer knows: plans are made from it (see makePlan), so a field
// that is not in it (a message's question or tool calls, which read more than the event
// holds) leaves its type to the executor, and a field in it is written by its own
// function, never by a case that guesses. TestRenderableMatchesTheSchema checks it against
// schema.graphqls, both ways.
var renderable = map[string]objectType{
	"MessageChunk": event[*model.MessageChunk]("MessageChunk", map[string]field{
		"messageId": scalar(func(buf *bytes.Buffer, e *model.MessageChunk) { writeID(buf, e.MessageID) }),
		"delta":     scalar(func(buf *bytes.Buffer, e *model.MessageChunk) { writeString(buf, e.Delta) }),
		"offset":    scalar(func(buf *bytes.Buffer, e *model.MessageChunk) { writeInt(buf, e.Offset) }),
	}),
	"ToolCallOutput": event[*model.ToolCallOutput]("ToolCallOutput", map[string]field{
		"toolCallId": scalar(func(buf *bytes.Buffer, e *model.ToolCallOutput) { writeID(buf, e.ToolCallID) }),
		"messageId":  scalar(func(buf *bytes.Buffer, e *model.ToolCallOutput) { writeID(buf, e.MessageID) }),
		"delta":      scalar(func(buf *bytes.Buffer, e *model.ToolCallOutput) { writeString(buf, e.Delta) }),
		"offset":     scalar(func(buf *bytes.Buffer, e *model.ToolCallOutput) { writeInt(buf, e.Offset) }),
	}),
	"MessageAdded": event[*model.MessageAdded]("MessageAdded", map[string]field{
		"message": object("Message", func(e *model.MessageAdded) *service.HistoryMessage { return e.Message }),
	}),
	"MessageCompleted": event[*model.MessageCompleted]("MessageCompleted", map[string]field{
		"message": object("Message", func(e *model.MessageCompleted) *service.HistoryMessage { return e.Message }),
	}),
	"BranchSelected": event[*model.BranchSelected]("BranchSelected", map[string]field{
		"leafId": scalar(func(buf *bytes.Buffer, e *model.BranchSelected) { writeID(buf, e.LeafID) }),
	}),
	"RunStatusChanged": event[*model.RunStatusChanged]("RunStatusChanged", map[string]field{
		"run": object("Run", func(e *model.RunStatusChanged) *service.Run { return e.Run }),
	}),
	"Message": objectOf("Message", map[string]field{
		"id":        scalar(func(buf *bytes.Buffer, m *service.HistoryMessage) { writeID(buf, m.ID) }),
		"sessionId": scalar(func(buf *bytes.Buffer, m *service.HistoryMessage) { writeID(buf, m.SessionID) }),
		"role":      scalar(func(buf *bytes.Buffer, m *service.HistoryMessage) { writeString(buf, string(m.Role)) }),
		"kind":      scalar(func(buf *bytes.Buffer, m *service.HistoryMessage) { writeString(buf, string(m.Kind)) }),
		"content":   scalar(func(buf *bytes.Buffer, m *service.HistoryMessage) { writeString(buf, m.Content) }),
		"status":    scalar(func(buf *bytes.Buffer, m *service.HistoryMessage) { writeString(buf, string(m.Status)) }),
		"error":     scalar(func(buf *bytes.Buffer, m *service.HistoryMessage) { writeOptString(buf, m.Error) }),
		"runId":     scalar(func(buf *bytes.Buffer, m *service.HistoryMessage) { writeOptString(buf, m.RunID) }),
		"createdAt": scalar(func(buf *bytes.Buffer, m *service.HistoryMessage) { writeTime(buf, m.CreatedAt) }),
		"parentId":  scalar(func(buf *bytes.Buffer, m *service.HistoryMessage) { writeOptString(buf, m.ParentID) }),
	}),
	"Run": objectOf("Run", map[string]field{
		"id":         scalar(func(buf *bytes.Buffer, r *service.Run) { writeID(buf, r.ID) }),
		"sessionId":  scalar(func(buf *bytes.Buffer, r *service.Run) { writeID(buf, r.SessionID) }),
		"status":     scalar(func(buf *bytes.Buffer, r *service.Run) { writeString(buf, string(r.Status)) }),
		"error":      scalar(func(buf *bytes.Buffer, r *service.Run) { writeOptString(buf, r.Error) }),
		"agent":      scalar(func(buf *bytes.Buffer, r *service.Run) { writeString(buf, r.Agent) }),
		"usage":      object("Usage", func(r *service.Run) *service.Usage { return r.Usage }),
		"createdAt":  scalar(func(buf *bytes.Buffer, r *service.Run) { writeTime(buf, r.CreatedAt) }),
		"startedAt":  scalar(func(buf *bytes.Buffer, r *service.Run) { writeOptTime(buf, r.StartedAt) }),
		"finishedAt": scalar(func(buf *bytes.Buffer, r *service.Run) { writeOptTime(buf, r.FinishedAt) }),
		"waitsForBudget": scalar(func(buf *bytes.Buffer, r *service.Run) {
			if r.Status != service.RunWaitingForInput {
				writeOptString(buf, "")
				return
			}
			writeOptString(buf, string(r.Budget))
		}),
	}),
	"Usage": objectOf("Usage", map[string]field{
		"inputTokens":       scalar(func(buf *bytes.Buffer, u *service.Usage) { writeInt(buf, u.InputTokens) }),
		"outputTokens":      scalar(func(buf *bytes.Buffer, u *service.Usage) { writeInt(buf, u.OutputTokens) }),
		"cachedInputTokens": scalar(func(buf *bytes.Buffer, u *service.Usage) { writeOptInt(buf, u.CachedInputTokens) }),
	}),
}

// render writes the response data of m, {"<root>":{...}}, when a plan of the stream covers
// its type, and reports whether it did; false leaves m to the executor.
func (st *Stream) render(buf *bytes.Buffer, m model.SessionEvent) bool {
	p := st.plans[eventType(m)]
	if p == nil {
		return false
	}
	buf.WriteByte('{')
	buf.WriteString(st.rootKey)
	p.write(buf, m)
	buf.WriteByte('}')
	return true
}

// write writes v, a value of the type p was made for, as an object with p's fields.
func (p *plan) write(buf *bytes.Buffer, v any) {
	buf.WriteByte('{')
	for i, write := range p.writes {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(p.keys[i])
		write(buf, v, p.subs[i])
	}
	buf.WriteByte('}')
}

// eventType is the name of m's type when the fast renderer may write it, or "" to leave it
// to the executor: an event of another type, or one without the object it must hold (the
// executor answers that with an error). It names every event type of renderable, which
// TestFastRenderingMatchesTheExecutor checks.
func eventType(m model.SessionEvent) string {
	switch e := m.(type) {
	case *model.MessageChunk:
		return "MessageChunk"
	case *model.ToolCallOutput:
		return "ToolCallOutput"
	case *model.MessageAdded:
		if e.Message != nil {
			return "MessageAdded"
		}
	case *model.MessageCompleted:
		if e.Message != nil {
			return "MessageCompleted"
		}
	case *model.RunStatusChanged:
		if e.Run != nil {
			return "RunStatusChanged"
		}
	case *model.BranchSelected:
		return "BranchSelected"
	}
	return ""
}

// An objectType is a type of renderable: the types whose fields a selection on it takes
// (itself, and for an event the SessionEvent interface, as fragments may name either), its
// fields, and whether it is an event, which a subscription's plans start from.
type objectType struct {
	satisfies []string
	fields    map[string]field
	event     bool
}

// A field is how the fast renderer writes one field of a type: write writes the field of
// v, a value of the type (an event, a message, a run or a usage); for a field that holds an
// object, object names the object's type and write is given the plan of the field's own
// selection as sub (nil for a scalar).
type field struct {
	object string
	write  func(buf *bytes.Buffer, v any, sub *plan)
}

// event is the objectType of the event type typ, E its model: fields and what every event
// has, its __typename, cursor and time.
func event[E model.SessionEvent](typ string, fields map[string]field) objectType {
	fields["cursor"] = scalar(func(buf *bytes.Buffer, e E) { writeString(buf, e.GetCursor()) })
	fields["at"] = scalar(func(buf *bytes.Buffer, e E) { writeTime(buf, e.GetAt()) })
	t := objectOf(typ, fields)
	t.satisfies = append(t.satisfies, "SessionEvent")
	t.event = true
	return t
}

// objectOf is the objectType of the object type typ with fields, and its __typename.
func objectOf(typ string, fields map[string]field) objectType {
	name := jsonString(typ)
	fields["__typename"] = field{write: func(buf *bytes.Buffer, _ any, _ *plan) { buf.WriteString(name) }}
	return objectType{satisfies: []string{typ}, fields: fields}
}

// scalar is a field whose value write writes, of a T.
func scalar[T any](write func(buf *bytes.Buffer, v T)) field {
	return field{write: func(buf *bytes.Buffer, v any, _ *plan) { write(buf, v.(T)) }}
}

// object is a field holding an object of type typ, which get takes from a T; null when
// get answers nil (the objects of the events' non-null fields are checked by eventType).
func object[T, O any](typ string, get func(T) *O) field {
	return field{object: typ, write: func(buf *bytes.Buffer, v any, sub *plan) {
		if o := get(v.(T)); o != nil {
			sub.write(buf, o)
			return
		}
		buf.WriteString("null")
	}}
}

// The writers of scalars write what the executor writes for the field's GraphQL type,
// with gqlgen's own marshalers.

func writeString(buf *bytes.Buffer, s string) { graphql.MarshalString(s).MarshalGQL(buf) }

func writeID(buf *bytes.Buffer, id string) { graphql.MarshalID(id).MarshalGQL(buf) }

func writeInt(buf *bytes.Buffer, i int) { graphql.MarshalInt(i).MarshalGQL(buf) }

func writeTime(buf *bytes.Buffer, t time.Time) { graphql.MarshalTime(t).MarshalGQL(buf) }

// writeOptString writes a nullable String that is null when empty, as the error resolvers
// answer.
func writeOptString(buf *bytes.Buffer, s string) {
	if s == "" {
		buf.WriteString("null")
		return
	}
	writeString(buf, s)
}

// writeOptTime writes a nullable Time.
func writeOptTime(buf *bytes.Buffer, t *time.Time) {
	if t == nil {
		buf.WriteString("null")
		return
	}
	writeTime(buf, *t)
}

// writeOptInt writes a nullable Int.
func writeOptInt(buf *bytes.Buffer, i *int) {
	if i == nil {
		buf.WriteString("null")
		return
	}
	writeInt(buf, *i)
}

// jsonString is s as the executor writes a String.
func jsonString(s string) string {
	var b bytes.Buffer
	writeString(&b, s)
	return b.String()
}
