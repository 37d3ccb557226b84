package graph

import (
	"context"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"

	"github.com/talkgraph/talkgraph/graph/model"
	"github.com/talkgraph/talkgraph/service"
)

// This file is the viewer's side of the schema: viewerEvents, Viewer.eventsCursor and the
// webhooks' deliveries.

// viewerEvents is the viewerEvents resolver: like messageStream's, it opens the stream's
// feed, or answers with it when the operation is executed again to render an event.
func (r *Resolver) viewerEvents(ctx context.Context, after string) (<-chan model.ViewerEvent, error) {
	st := streamOf(ctx)
	if st == nil {
		return nil, service.Errorf(service.EINTERNAL, "viewerEvents needs a transport that drives a graph.Stream")
	}
	if st.src == nil {
		if err := st.openViewer(ctx, r, after); err != nil {
			return nil, err
		}
	}
	f, ok := st.src.(*viewerFeed)
	if !ok {
		return nil, service.Errorf(service.EINTERNAL, "one subscription per operation")
	}
	return f.ch, nil
}

// viewerEvent converts a viewer event to its GraphQL type. A SessionChanged's session is
// the session as the event left it (title, settings, updatedAt, status, unread, the
// stream cursor after it) over what is read of it now (its active run, pending inputs).
func (r *Resolver) viewerEvent(ctx context.Context, cursor string, ev *service.ViewerEvent) model.ViewerEvent {
	switch ev.Type {
	case service.ViewerSessionChanged:
		// An idle session has no active run nor anything pending: nothing to read.
		snap := service.SessionView{}
		if ev.Status != service.SessionIdle {
			if v, err := r.Service.View(ctx, ev.SessionID); err == nil {
				snap = *v
			}
		}
		snap.TalkSession, snap.Status = ev.Session, ev.Status
		snap.StreamCursor = service.EncodeCursor(ev.SessionID, service.Cursor{Seq: ev.SessionSeq})
		return &model.SessionChanged{Cursor: cursor, At: ev.At, Session: &snap}
	case service.ViewerSessionRemoved:
		return &model.SessionRemoved{Cursor: cursor, At: ev.At, SessionID: ev.SessionID}
	case service.ViewerRunEnded:
		return &model.RunEnded{Cursor: cursor, At: ev.At, Run: ev.Run}
	case service.ViewerInputRequested:
		return &model.InputRequested{Cursor: cursor, At: ev.At, SessionID: ev.SessionID, Question: ev.Question, ToolCall: ev.ToolCall}
	}
	// A kind this build does not know (written by a newer replica): the cursor moves on.
	return &model.SessionRemoved{Cursor: cursor, At: ev.At, SessionID: ev.SessionID}
}

// operationMemo is what one operation reads once for all its fields: the viewer cursor,
// read before the sessions (see eventsCursor).
type operationMemo struct {
	once   sync.Once
	cursor string
	err    error
}

type memoKey struct{}

// OperationMemo is an operation interceptor (handler.AroundOperations) that gives each
// operation what its fields read once: a query that reads Viewer.eventsCursor and
// sessions gets a cursor read before the sessions were, whichever field the executor
// resolves first, so that following viewerEvents after it misses nothing.
func OperationMemo(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	return next(context.WithValue(ctx, memoKey{}, &operationMemo{}))
}

// eventsCursor is the caller's viewer cursor as of the start of the operation's reads.
func (r *Resolver) eventsCursor(ctx context.Context) (string, error) {
	m, _ := ctx.Value(memoKey{}).(*operationMemo)
	if m == nil {
		return r.Service.EventsCursor(ctx)
	}
	m.once.Do(func() { m.cursor, m.err = r.Service.EventsCursor(ctx) })
	return m.cursor, m.err
}

// beforeSessions reads the viewer cursor of an operation that asks for it before the
// sessions are read (see eventsCursor).
func (r *Resolver) beforeSessions(ctx context.Context) {
	if graphql.HasOperationContext(ctx) && strings.Contains(graphql.GetOperationContext(ctx).RawQuery, "eventsCursor") {
		_, _ = r.eventsCursor(ctx)
	}
}

// deliveries is a page of a webhook's deliveries.
func (r *Resolver) deliveries(ctx context.Context, w *service.Webhook, first *int, after string) (*model.WebhookDeliveryConnection, error) {
	page, hasNext, err := r.Service.WebhookDeliveries(ctx, w, first, after)
	if err != nil {
		return nil, err
	}
	conn := &model.WebhookDeliveryConnection{Edges: make([]*model.WebhookDeliveryEdge, len(page))}
	cursors := make([]string, len(page))
	for i, d := range page {
		cursors[i] = service.EncodeDeliveryCursor(d)
		conn.Edges[i] = &model.WebhookDeliveryEdge{Cursor: cursors[i], Node: d}
	}
	conn.PageInfo = pageInfo(cursors, after != "", hasNext)
	return conn, nil
}
