// Package graph is talkgraph's GraphQL layer: the gqlgen resolvers, which translate between
// the schema and service calls and hold no business logic, the HTTP handler with its
// transports (HTTP, websocket, SSE), authentication, limits, the error presenter and
// metrics. The domain lives in service/.
package graph

//go:generate go tool gqlgen generate

import (
	"sync"

	"github.com/talkgraph/talkgraph/service"
)

// Resolver is the root resolver.
type Resolver struct {
	Service *service.Service
	// streams counts the goroutines forwarding subscriptions, so shutdown can let them
	// deliver their last events.
	streams sync.WaitGroup
}
