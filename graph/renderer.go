package graph

import (
	"bytes"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// fast renders m when a plan covers its type: the response data, {"<root>":{...}}.
func (s *Stream) fast(m model.SessionEvent) []byte {
	var typ string
	switch e := m.(type) {
	case *model.MessageChunk:
		typ = "MessageChunk"
	case *model.ToolCallOutput:
		typ = "ToolCallOutput"
	case *model.MessageAdded:
		typ = "MessageAdded"
		if e.Message == nil {
			return nil
		}
	case *model.MessageCompleted:
		typ = "MessageCompleted"
		if e.Message == nil {
			return nil
		}
	case *model.RunStatusChanged:
		typ = "RunStatusChanged"
		if e.Run == nil {
			return nil
		}
	default:
		return nil
	}
	p := s.plan(typ)
	if p == nil {
		return nil
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	buf.WriteString(s.rootKey)
	p.event(&buf, typ, m)
	buf.WriteByte('}')
	return buf.Bytes()
}

// object writes an object with p's fields, each field's value written by value. The
// values are written at once with gqlgen's marshalers, never kept as Marshalers: kept,
// each would cost an allocation.
func (p *plan) object(buf *bytes.Buffer, value func(i int, name string)) {
	buf.WriteByte('{')
	for i, name := range p.names {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(p.keys[i])
		value(i, name)
	}
	buf.WriteByte('}')
}

// event writes an event of type typ.
func (p *plan) event(buf *bytes.Buffer, typ string, m model.SessionEvent) {
	p.object(buf, func(i int, name string) {
		switch name {
		case "__typename":
			graphql.MarshalString(typ).MarshalGQL(buf)
		case "cursor":
			graphql.MarshalString(m.GetCursor()).MarshalGQL(buf)
		case "at":
			graphql.MarshalTime(m.GetAt()).MarshalGQL(buf)
		case "message":
			switch e := m.(type) {
			case *model.MessageAdded:
				p.subs[i].message(buf, e.Message)
			case *model.MessageCompleted:
				p.subs[i].message(buf, e.Message)
			}
		case "run":
			p.subs[i].run(buf, m.(*model.RunStatusChanged).Run)
		default:
			chunkField(buf, name, m)
		}
	})
}

// chunkField writes a field of a text chunk or of tool output.
func chunkField(buf *bytes.Buffer, name string, m model.SessionEvent) {
	var messageID, toolCallID, delta string
	var offset int
	switch e := m.(type) {
	case *model.MessageChunk:
		messageID, delta, offset = e.MessageID, e.Delta, e.Offset
	case *model.ToolCallOutput:
		messageID, toolCallID, delta, offset = e.MessageID, e.ToolCallID, e.Delta, e.Offset
	}
	switch name {
	case "messageId":
		graphql.MarshalID(messageID).MarshalGQL(buf)
	case "toolCallId":
		graphql.MarshalID(toolCallID).MarshalGQL(buf)
	case "delta":
		graphql.MarshalString(delta).MarshalGQL(buf)
	default: // offset
		graphql.MarshalInt(offset).MarshalGQL(buf)
	}
}

// message writes a Message as the executor does (error as its resolver answers it).
func (p *plan) message(buf *bytes.Buffer, m *service.HistoryMessage) {
	p.object(buf, func(_ int, name string) {
		switch name {
		case "__typename":
			graphql.MarshalString("Message").MarshalGQL(buf)
		case "id":
			graphql.MarshalID(m.ID).MarshalGQL(buf)
		case "sessionId":
			graphql.MarshalID(m.SessionID).MarshalGQL(buf)
		case "role":
			graphql.MarshalString(string(m.Role)).MarshalGQL(buf)
		case "kind":
			graphql.MarshalString(string(m.Kind)).MarshalGQL(buf)
		case "content":
			graphql.MarshalString(m.Content).MarshalGQL(buf)
		case "status":
			graphql.MarshalString(string(m.Status)).MarshalGQL(buf)
		case "error":
			optString(buf, m.Error)
		case "runId":
			graphql.MarshalID(m.RunID).MarshalGQL(buf)
		default: // createdAt
			graphql.MarshalTime(m.CreatedAt).MarshalGQL(buf)
		}
	})
}

// run writes a Run as the executor does (error as its resolver answers it).
func (p *plan) run(buf *bytes.Buffer, r *service.Run) {
	p.object(buf, func(i int, name string) {
		switch name {
		case "__typename":
			graphql.MarshalString("Run").MarshalGQL(buf)
		case "id":
			graphql.MarshalID(r.ID).MarshalGQL(buf)
		case "sessionId":
			graphql.MarshalID(r.SessionID).MarshalGQL(buf)
		case "status":
			graphql.MarshalString(string(r.Status)).MarshalGQL(buf)
		case "error":
			optString(buf, r.Error)
		case "agent":
			graphql.MarshalString(r.Agent).MarshalGQL(buf)
		case "usage":
			if r.Usage == nil {
				buf.WriteString("null")
			} else {
				p.subs[i].usage(buf, r.Usage)
			}
		case "createdAt":
			graphql.MarshalTime(r.CreatedAt).MarshalGQL(buf)
		case "startedAt":
			optTime(buf, r.StartedAt)
		default: // finishedAt
			optTime(buf, r.FinishedAt)
		}
	})
}

// usage writes a Usage.
func (p *plan) usage(buf *bytes.Buffer, u *service.Usage) {
	p.object(buf, func(_ int, name string) {
		switch name {
		case "__typename":
			graphql.MarshalString("Usage").MarshalGQL(buf)
		case "inputTokens":
			graphql.MarshalInt(u.InputTokens).MarshalGQL(buf)
		case "outputTokens":
			graphql.MarshalInt(u.OutputTokens).MarshalGQL(buf)
		default: // cachedInputTokens
			if u.CachedInputTokens == nil {
				buf.WriteString("null")
			} else {
				graphql.MarshalInt(*u.CachedInputTokens).MarshalGQL(buf)
			}
		}
	})
}

// optString writes a nullable String that is null when empty, as the error resolvers
// answer.
func optString(buf *bytes.Buffer, s string) {
	if s == "" {
		buf.WriteString("null")
		return
	}
	graphql.MarshalString(s).MarshalGQL(buf)
}

// optTime writes a nullable Time.
func optTime(buf *bytes.Buffer, t *time.Time) {
	if t == nil {
		buf.WriteString("null")
		return
	}
	graphql.MarshalTime(*t).MarshalGQL(buf)
}
