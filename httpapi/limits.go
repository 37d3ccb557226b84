package httpapi

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/service"
)

// operationLimits is a gqlgen extension that enforces each user's operation rate before
// an operation runs, and each address's operations made without a sign-in (shared
// reads). Subscribing draws on a budget of its own: a client that reconnects
// resubscribes to everything it follows at once, cheaply (with after:), and the sockets'
// and the server's subscription caps bound what stays open.
type operationLimits struct {
	rate      *keyedLimiter // queries and mutations, per user
	subscribe *keyedLimiter // subscriptions, per user
	anonymous *keyedLimiter // operations without a user (shared reads), per client address
}

var (
	_ graphql.HandlerExtension        = operationLimits{}
	_ graphql.OperationContextMutator = operationLimits{}
)

func (operationLimits) ExtensionName() string                   { return "OperationLimits" }
func (operationLimits) Validate(graphql.ExecutableSchema) error { return nil }
func (o operationLimits) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	u := service.UserFrom(ctx)
	if u == "" {
		// A shared read without a user counts against its address (the operations'
		// context carries it, see operationValues and wsValues).
		addr, _ := ctx.Value(clientAddrKey{}).(string)
		if o.anonymous != nil && readsShared(rc) {
			if ok, _ := o.anonymous.allow(addr); !ok {
				return graph.Error(service.Errorf(service.ERATELIMIT, "too many reads without a sign-in from your address; slow down"))
			}
		}
		return nil
	}
	lim, what := o.rate, "operations"
	if rc.Operation != nil && rc.Operation.Operation == ast.Subscription {
		lim, what = o.subscribe, "subscriptions"
	}
	if lim != nil {
		if ok, _ := lim.allow(u); !ok {
			return graph.Error(service.Errorf(service.ERATELIMIT, "too many %s; slow down", what))
		}
	}
	return nil
}

// readsShared reports whether the operation selects a shared read (sharedSession,
// sharedStream) at its root, directly or in a fragment.
func readsShared(rc *graphql.OperationContext) bool {
	if rc.Operation == nil {
		return false
	}
	// Collected as the executor does: a read inside a fragment counts too.
	for _, f := range graphql.CollectFields(rc, rc.Operation.SelectionSet, []string{"Query", "Subscription"}) {
		if f.Name == "sharedSession" || f.Name == "sharedStream" {
			return true
		}
	}
	return false
}
