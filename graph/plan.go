package graph

import (
	"bytes"
	"context"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// A plan is how the fast renderer writes a subscription's selection on one type: one of
// the events a subscription receives most (text chunks and tool output, new and completed
// messages, run status changes) or an object such an event holds (its message, its run,
// the run's usage). It is made once, when the subscription starts, from the selection as
// the executor collects it (fragments merged, @skip and @include applied) and from the
// field table (renderable); it then writes an event with a few calls of gqlgen's own
// marshalers, byte for byte what the executor would answer, without the executor's work
// per field. makePlan makes none for a selection the renderer cannot write (a deferred
// field, a field with arguments, a field renderable does not list), which leaves that
// event type to the executor.
type plan struct {
	keys   []string                                    // response keys in order, each as JSON with its colon
	writes []func(buf *bytes.Buffer, v any, sub *plan) // each key's field writer (see field)
	subs   []*plan                                     // each key's plan of the object it holds; nil for a scalar
}

// planFrom makes the stream's plans from the operation and the messageStream field whose
// resolver runs in ctx, as the stream opens. Plans of a document without directives are
// shared (see plansOf): a thousand clients subscribing with one app's document plan it once.
func (st *Stream) planFrom(ctx context.Context) {
	if !graphql.HasOperationContext(ctx) {
		return
	}
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		st.rootKey = jsonKey(fc.Field.Alias)
		st.plans = plansOf(graphql.GetOperationContext(ctx), &fc.Field)
	}
}

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
	plans := make(map[string]*plan, len(renderable))
	for typ, t := range renderable {
		if !t.event {
			continue
		}
		if p := makePlan(oc, root.Selections, typ); p != nil {
			plans[typ] = p
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

// makePlan plans the selection sel on an object of type typ, one of renderable; nil when
// some field is beyond the renderer.
func makePlan(oc *graphql.OperationContext, sel ast.SelectionSet, typ string) *plan {
	t := renderable[typ]
	p := &plan{}
	seen := map[string]bool{}
	for _, f := range graphql.CollectFields(oc, sel, t.satisfies) {
		if len(f.Deferrables) > 0 || len(f.Arguments) > 0 {
			return nil
		}
		known, ok := t.fields[f.Name]
		if !ok || (known.object == "") != (len(f.Selections) == 0) {
			return nil
		}
		if seen[f.Alias] {
			continue
		}
		seen[f.Alias] = true
		var sub *plan
		if known.object != "" {
			if sub = makePlan(oc, f.Selections, known.object); sub == nil {
				return nil
			}
		}
		p.keys = append(p.keys, jsonKey(f.Alias))
		p.writes = append(p.writes, known.write)
		p.subs = append(p.subs, sub)
	}
	return p
}

// jsonKey is a response key as the executor writes it, with its colon.
func jsonKey(key string) string { return jsonString(key) + ":" }
