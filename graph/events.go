package graph

import (
	"context"
	"sync"

	"github.com/99designs/gqlgen/graphql"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// event converts a log event to its GraphQL type.
func (r *Resolver) event(ctx context.Context, ev *service.Event) model.SessionEvent {
	cur := service.EncodeCursor(ev.SessionID, service.CursorOf(ev))
	switch ev.Type {
	case service.EventMessageAdded:
		return &model.MessageAdded{Cursor: cur, At: ev.At, Message: ev.Message}
	case service.EventMessageChunk:
		return &model.MessageChunk{Cursor: cur, At: ev.At, MessageID: ev.MessageID, Delta: ev.Delta, Offset: ev.Offset}
	case service.EventMessageCompleted:
		return &model.MessageCompleted{Cursor: cur, At: ev.At, Message: ev.Message}
	case service.EventRunStatusChanged:
		return &model.RunStatusChanged{Cursor: cur, At: ev.At, Run: ev.Run}
	case service.EventQuestionAsked:
		return &model.QuestionAsked{Cursor: cur, At: ev.At, Question: ev.Question}
	case service.EventQuestionAnswered:
		return &model.QuestionAnswered{Cursor: cur, At: ev.At, Question: ev.Question}
	case service.EventToolCallStarted:
		return &model.ToolCallStarted{Cursor: cur, At: ev.At, ToolCall: ev.ToolCall}
	case service.EventToolCallOutput:
		return &model.ToolCallOutput{Cursor: cur, At: ev.At, ToolCallID: ev.Key, MessageID: ev.MessageID, Delta: ev.Delta, Offset: ev.Offset}
	case service.EventToolCallFinished:
		return &model.ToolCallFinished{Cursor: cur, At: ev.At, ToolCall: ev.ToolCall}
	default: // SessionUpdated
		v, err := r.Service.View(ctx, ev.SessionID)
		if err != nil {
			v = &service.SessionView{TalkSession: ev.Session, Status: service.SessionIdle}
		}
		return &model.SessionUpdated{Cursor: cur, At: ev.At, Session: v}
	}
}

func settingsInput(in *model.SessionSettingsInput) service.SettingsInput {
	if in == nil {
		return service.SettingsInput{}
	}
	return service.SettingsInput{Agent: in.Agent, Model: in.Model, SystemPrompt: in.SystemPrompt, Temperature: in.Temperature, BusyPolicy: in.BusyPolicy}
}

// requestCache lives for one operation; it lets a page of messages load its tool calls
// with one query instead of one per message.
type requestCache struct {
	mu        sync.Mutex
	toolCalls map[string][]*service.ToolCall // by message ID, for the messages preloaded
}

type requestCacheKey struct{}

// Loaders is the gqlgen extension that gives each operation its request cache.
type Loaders struct{}

var (
	_ graphql.HandlerExtension     = Loaders{}
	_ graphql.OperationInterceptor = Loaders{}
)

func (Loaders) ExtensionName() string                   { return "Loaders" }
func (Loaders) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptOperation gives the operation a request cache of its own.
func (Loaders) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	return next(context.WithValue(ctx, requestCacheKey{}, &requestCache{toolCalls: map[string][]*service.ToolCall{}}))
}

// preloadToolCalls loads the tool calls of a page of messages into the request cache.
func preloadToolCalls(ctx context.Context, svc *service.Service, sessionID string, msgs []*service.Message) error {
	c, _ := ctx.Value(requestCacheKey{}).(*requestCache)
	if c == nil {
		return nil
	}
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if m.Role == service.RoleAssistant {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	calls, err := svc.ToolCalls(ctx, sessionID, ids)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.toolCalls[id] = []*service.ToolCall{}
	}
	for _, tc := range calls {
		c.toolCalls[tc.MessageID] = append(c.toolCalls[tc.MessageID], tc)
	}
	return nil
}

// toolCallsLoader returns a message's tool calls, from the request cache when preloaded.
func toolCallsLoader(ctx context.Context, svc *service.Service, m *service.Message) ([]*service.ToolCall, error) {
	if c, _ := ctx.Value(requestCacheKey{}).(*requestCache); c != nil {
		c.mu.Lock()
		calls, ok := c.toolCalls[m.ID]
		c.mu.Unlock()
		if ok {
			return calls, nil
		}
	}
	calls, err := svc.ToolCalls(ctx, m.SessionID, []string{m.ID})
	if calls == nil {
		calls = []*service.ToolCall{}
	}
	return calls, err
}
