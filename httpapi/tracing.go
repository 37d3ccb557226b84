package httpapi

import (
	"context"
	"net/http"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkgraph/talkgraph/graph"
)

// operationTracing is a gqlgen extension that gives every GraphQL operation a span, named
// after its type and name ("mutation addMessage"), on every transport. A query or mutation's
// span lasts until its answer is ready; a subscription's until its stream is in place (its
// events are the run's, traced there). The service adds the session and run IDs the
// operation concerns. A caller's W3C traceparent header (POST, GET, server-sent events)
// makes the span part of the caller's trace. It is installed only when the server traces
// (HandlerConfig.Tracing), so it costs nothing otherwise.
type operationTracing struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

var (
	_ graphql.HandlerExtension     = operationTracing{}
	_ graphql.OperationInterceptor = operationTracing{}
)

const (
	attrOperationType = attribute.Key("graphql.operation.type")
	attrOperationName = attribute.Key("graphql.operation.name")
	attrErrorCodes    = attribute.Key("graphql.error.codes")
)

func newOperationTracing(tp trace.TracerProvider) operationTracing {
	return operationTracing{tracer: tp.Tracer("github.com/talkgraph/talkgraph/httpapi"), propagator: propagation.TraceContext{}}
}

func (operationTracing) ExtensionName() string                   { return "OperationTracing" }
func (operationTracing) Validate(graphql.ExecutableSchema) error { return nil }

func (o operationTracing) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	rc := graphql.GetOperationContext(ctx)
	if rc.Operation == nil || graph.Resumed(ctx) {
		return next(ctx) // a subscription's span ended as it began
	}
	if rc.Headers != nil {
		ctx = o.propagator.Extract(ctx, propagation.HeaderCarrier(http.Header(rc.Headers)))
	}
	kind := string(rc.Operation.Operation)
	name := kind
	if rc.Operation.Name != "" {
		name += " " + rc.Operation.Name
	}
	ctx, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrOperationType.String(kind), attrOperationName.String(rc.Operation.Name)))
	h := next(ctx)
	if rc.Operation.Operation == ast.Subscription {
		span.End()
		return h
	}
	ended := false
	return func(ctx context.Context) *graphql.Response {
		resp := h(ctx)
		if !ended {
			ended = true
			if resp != nil && len(resp.Errors) > 0 {
				var errCodes []string
				for _, e := range resp.Errors {
					if c, ok := e.Extensions["code"].(string); ok {
						errCodes = append(errCodes, c)
					}
				}
				span.SetAttributes(attrErrorCodes.StringSlice(errCodes))
				span.SetStatus(codes.Error, resp.Errors[0].Message)
			}
			span.End()
		}
		return resp
	}
}
