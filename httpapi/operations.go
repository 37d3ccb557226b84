package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/service"
)

// Introspection modes (INTROSPECTION).
const (
	IntrospectionOn       = "on"        // anyone may introspect (the playground needs it)
	IntrospectionSignedIn = "signed-in" // only authenticated users may
	IntrospectionOff      = "off"       // nobody may
)

// introspectionGate is a gqlgen extension that allows introspection per the mode, and
// refuses an operation that introspects when it may not, before it runs: UNAUTHENTICATED
// for anonymous users in signed-in mode, BAD_USER_INPUT when it is off.
type introspectionGate struct{ mode string }

var _ graphql.OperationContextMutator = introspectionGate{}

func (introspectionGate) ExtensionName() string                   { return "IntrospectionGate" }
func (introspectionGate) Validate(graphql.ExecutableSchema) error { return nil }

func (g introspectionGate) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	allowed := g.mode == IntrospectionOn || (g.mode == IntrospectionSignedIn && service.UserFrom(ctx) != "")
	rc.DisableIntrospection = !allowed
	if allowed || rc.Operation == nil || !introspects(rc.Operation.SelectionSet, rc.Doc, map[string]bool{}) {
		return nil
	}
	if g.mode == IntrospectionSignedIn {
		return graph.Error(service.Errorf(service.EUNAUTHORIZED, "sign in to introspect the schema"))
	}
	return graph.Error(service.Errorf(service.EINVALID, "introspection is switched off on this server"))
}

// introspects reports whether a root selection asks for __schema or __type (validation
// has made sure they appear nowhere else), following fragments once each.
func introspects(set ast.SelectionSet, doc *ast.QueryDocument, seen map[string]bool) bool {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			if s.Name == "__schema" || s.Name == "__type" {
				return true
			}
		case *ast.InlineFragment:
			if introspects(s.SelectionSet, doc, seen) {
				return true
			}
		case *ast.FragmentSpread:
			if seen[s.Name] {
				continue
			}
			seen[s.Name] = true
			if f := doc.Fragments.ForName(s.Name); f != nil && introspects(f.SelectionSet, doc, seen) {
				return true
			}
		}
	}
	return false
}

// plainHTTP marks the requests a transport answers with one response (POST, GET), so that
// subscriptions over them are refused (see subscriptionTransport): gqlgen would hold such a
// request until the first event, answer it and drop the rest.
type plainHTTP struct{ graphql.Transport }

type plainHTTPKey struct{}

func (p plainHTTP) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	p.Transport.Do(w, r.WithContext(context.WithValue(r.Context(), plainHTTPKey{}, true)), exec)
}

// subscriptionTransport is a gqlgen extension refusing subscriptions over plain POST and
// GET with BAD_USER_INPUT.
type subscriptionTransport struct{}

var _ graphql.OperationContextMutator = subscriptionTransport{}

func (subscriptionTransport) ExtensionName() string                   { return "SubscriptionTransport" }
func (subscriptionTransport) Validate(graphql.ExecutableSchema) error { return nil }

func (subscriptionTransport) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	if rc.Operation != nil && rc.Operation.Operation == ast.Subscription && ctx.Value(plainHTTPKey{}) != nil {
		return graph.Error(service.Errorf(service.EINVALID,
			"subscriptions need a websocket (graphql-transport-ws or graphql-ws) or server-sent events (POST with Accept: text/event-stream); plain POST and GET answer queries and mutations only"))
	}
	return nil
}

// capErrors keeps at most n errors in a response, the last of them saying how many more
// there were: a document can hold thousands of mistakes, each answered with its own error.
func capErrors(n int) graphql.ResponseMiddleware {
	return func(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
		resp := next(ctx)
		if resp == nil || n < 2 || len(resp.Errors) <= n {
			return resp
		}
		dropped := resp.Errors[n-1:]
		code, _ := dropped[0].Extensions["code"].(string)
		if code == "" {
			code = graph.Code(service.Errorf(service.EINVALID, ""))
		}
		errs := make(gqlerror.List, n-1, n)
		copy(errs, resp.Errors[:n-1])
		resp.Errors = append(errs, &gqlerror.Error{
			Message:    fmt.Sprintf("too many errors: %d more not shown", len(dropped)),
			Extensions: map[string]any{"code": code},
		})
		return resp
	}
}
