package graph

import (
	"bytes"
	"context"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// A plan renders the events a subscription sends most without the executor: text chunks
// and tool output, new and completed messages, and run status changes. Their fields are
// scalars or objects of scalars, so once the subscription's selection for the type is
// known (collected as the executor collects it, with fragments merged and @skip and
// @include applied) each event is a few writes with gqlgen's own marshalers, byte for
// byte what the executor would answer. A selection a plan cannot render (a deferred
// field, a field with arguments, one that reads more than the event: a message's question
// or tool calls) leaves the type to the executor.
type plan struct {
	keys  []string // response keys in order, each written once as JSON with its colon
	names []string // each key's field name
	subs  []*plan  // each key's plan of its object's fields; nil for a scalar
}

// planTypes are the event types with a plan, with the types they satisfy.
var planTypes = map[string][]string{
	"MessageChunk":     {"MessageChunk", "SessionEvent"},
	"ToolCallOutput":   {"ToolCallOutput", "SessionEvent"},
	"MessageAdded":     {"MessageAdded", "SessionEvent"},
	"MessageCompleted": {"MessageCompleted", "SessionEvent"},
	"RunStatusChanged": {"RunStatusChanged", "SessionEvent"},
}

// planFields says which fields of each type a plan renders: "" for a scalar, else the
// type of the object it holds.
var planFields = map[string]map[string]string{
	"MessageChunk":     {"__typename": "", "cursor": "", "at": "", "messageId": "", "delta": "", "offset": ""},
	"ToolCallOutput":   {"__typename": "", "cursor": "", "at": "", "messageId": "", "toolCallId": "", "delta": "", "offset": ""},
	"MessageAdded":     {"__typename": "", "cursor": "", "at": "", "message": "Message"},
	"MessageCompleted": {"__typename": "", "cursor": "", "at": "", "message": "Message"},
	"RunStatusChanged": {"__typename": "", "cursor": "", "at": "", "run": "Run"},
	"Message": {"__typename": "", "id": "", "sessionId": "", "role": "", "kind": "", "content": "", "status": "",
		"error": "", "runId": "", "createdAt": ""},
	"Run": {"__typename": "", "id": "", "sessionId": "", "status": "", "error": "", "agent": "", "usage": "Usage",
		"createdAt": "", "startedAt": "", "finishedAt": ""},
	"Usage": {"__typename": "", "inputTokens": "", "outputTokens": "", "cachedInputTokens": ""},
}

// planFrom makes the stream's plans from the operation and the messageStream field whose
// resolver runs in ctx, when the subscription starts: nothing of the operation then stays
// with the stream. Plans of a document without directives are shared (see plansOf), so
// that starting costs a lookup. Once made, a later call (the transport executing the
// operation again to render an event) changes nothing.
func (s *Stream) planFrom(ctx context.Context) {
	if s.plans != nil || !graphql.HasOperationContext(ctx) {
		return
	}
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		s.rootKey = jsonKey(fc.Field.Alias)
		s.plans = plansOf(graphql.GetOperationContext(ctx), &fc.Field)
	}
}

// plan returns the plan for an event type; nil leaves it to the executor.
func (s *Stream) plan(typ string) *plan { return s.plans[typ] }

// plansOf makes the plans of a subscription's messageStream field. Plans are the same
// for every subscription made with one document, unless a directive's variable tells
// them apart, so those of a document without directives are kept and shared (a
// thousand clients subscribing with the same query plan it once). Documents are those of
// the executor's query cache; shared keeps the plans of at most maxSharedPlans of them.
func plansOf(oc *graphql.OperationContext, root *graphql.CollectedField) map[string]*plan {
	key := planKey{oc.Doc, oc.OperationName, root.Alias}
	share := shareable(oc)
	if share {
		shared.mu.Lock()
		plans, ok := shared.m[key]
		shared.mu.Unlock()
		if ok {
			return plans
		}
	}
	plans := make(map[string]*plan, len(planTypes))
	for t, satisfies := range planTypes {
		if p := makePlan(oc, root.Selections, t, satisfies); p != nil {
			plans[t] = p
		}
	}
	if share {
		shared.mu.Lock()
		if len(shared.m) >= maxSharedPlans {
			clear(shared.m)
		}
		shared.m[key] = plans
		shared.mu.Unlock()
	}
	return plans
}

// shareable reports whether the plans of oc's document may be shared: no directive's
// variable can tell two of its subscriptions apart.
func shareable(oc *graphql.OperationContext) bool {
	return oc.Doc != nil && !strings.Contains(oc.RawQuery, "@")
}

// planKey names the messageStream field of one operation of one document.
type planKey struct {
	doc       *ast.QueryDocument
	operation string
	alias     string
}

const maxSharedPlans = 256

// shared holds the plans of documents without directives. Plans never change once made.
var shared = struct {
	mu sync.Mutex
	m  map[planKey]map[string]*plan
}{m: map[planKey]map[string]*plan{}}

// makePlan plans the selection sel of an object of type typ; nil when some field is
// beyond a plan.
func makePlan(oc *graphql.OperationContext, sel ast.SelectionSet, typ string, satisfies []string) *plan {
	known := planFields[typ]
	p := &plan{}
	seen := map[string]bool{}
	for _, f := range graphql.CollectFields(oc, sel, satisfies) {
		if len(f.Deferrables) > 0 || len(f.Arguments) > 0 {
			return nil
		}
		object, ok := known[f.Name]
		if !ok || (object == "") != (len(f.Selections) == 0) {
			return nil
		}
		if seen[f.Alias] {
			continue
		}
		seen[f.Alias] = true
		var sub *plan
		if object != "" {
			if sub = makePlan(oc, f.Selections, object, []string{object}); sub == nil {
				return nil
			}
		}
		p.keys = append(p.keys, jsonKey(f.Alias))
		p.names = append(p.names, f.Name)
		p.subs = append(p.subs, sub)
	}
	return p
}

// jsonKey is a response key as the executor writes it, with its colon.
func jsonKey(key string) string {
	var b bytes.Buffer
	graphql.MarshalString(key).MarshalGQL(&b)
	b.WriteByte(':')
	return b.String()
}
