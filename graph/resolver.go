// Package graph is talkgraph's GraphQL layer: the resolvers, which translate between the
// schema and service calls and hold no business logic, the mapping of log events to their
// GraphQL types, subscription streams, and the error presenter, the one place where domain
// error codes become extensions.code. The executor gqlgen generates from schema.graphqls
// lives in graph/generated, its models in graph/model. Transports and everything else that
// speaks HTTP live in package httpapi.
package graph

//go:generate go tool gqlgen generate

import (
	"github.com/talkgraph/talkgraph/service"
)

// Resolver is the root resolver.
type Resolver struct {
	Service *service.Service
}
