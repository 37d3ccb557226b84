package openai

import (
	"context"
	"errors"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkgraph/talkgraph/service"
)

// The agent's spans are children of the run's: the service puts the run's span in the
// context, and its TracerProvider makes them (a no-op one when the server does not trace,
// which costs next to nothing). One span per request to the provider (each retry its
// own) and one per tool call, named and annotated after OpenTelemetry's conventions for
// generative AI, with the session and run IDs. Nothing in them holds the API key.
const tracerName = "github.com/talkgraph/talkgraph/service/openai"

var (
	attrOperation    = attribute.Key("gen_ai.operation.name")
	attrFinish       = attribute.Key("gen_ai.response.finish_reasons")
	attrToolName     = attribute.Key("gen_ai.tool.name")
	attrToolCallID   = attribute.Key("gen_ai.tool.call.id")
	attrErrorType    = attribute.Key("error.type")
	attrHTTPStatus   = attribute.Key("http.response.status_code")
	attrServerAddr   = attribute.Key("server.address")
	attrServerPort   = attribute.Key("server.port")
	attrAttempt      = attribute.Key("talkgraph.attempt")
	attrToolCallItem = attribute.Key("talkgraph.tool_call.id")
)

// runTrace makes the spans of one run.
type runTrace struct {
	tracer trace.Tracer
	model  string
	ids    []attribute.KeyValue // the session's and the run's
	server []attribute.KeyValue // the provider's host and port
}

func (a *Agent) tracing(ctx context.Context, req service.RunRequest, model string) *runTrace {
	rt := &runTrace{
		tracer: trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName),
		model:  model,
		ids:    []attribute.KeyValue{service.AttrSessionID.String(req.SessionID), service.AttrRunID.String(req.RunID)},
	}
	if u, err := url.Parse(a.cfg.BaseURL); err == nil { // host and port only: the URL may hold a credential
		rt.server = append(rt.server, attrServerAddr.String(u.Hostname()))
		if p, err := strconv.Atoi(u.Port()); err == nil {
			rt.server = append(rt.server, attrServerPort.Int(p))
		}
	}
	return rt
}

// startCall starts the span of one request to the provider.
func (rt *runTrace) startCall(ctx context.Context, attempt int) trace.Span {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return trace.SpanFromContext(ctx) // not traced: nothing to build
	}
	attrs := append([]attribute.KeyValue{attrOperation.String("chat"), service.AttrModel.String(rt.model), attrAttempt.Int(attempt + 1)}, rt.ids...)
	_, span := rt.tracer.Start(ctx, "chat "+rt.model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(append(attrs, rt.server...)...))
	return span
}

// endCall ends a request's span with what it cost, or why it failed.
func (rt *runTrace) endCall(span trace.Span, t *turn, err error, key *secret) {
	if !span.IsRecording() {
		return
	}
	defer span.End()
	if t != nil {
		if t.finish != "" {
			span.SetAttributes(attrFinish.StringSlice([]string{t.finish}))
		}
		if u := t.usage; u != nil {
			span.SetAttributes(service.AttrInputTokens.Int(u.InputTokens), service.AttrOutputTokens.Int(u.OutputTokens))
			if u.CachedInputTokens != nil {
				span.SetAttributes(service.AttrCachedTokens.Int(*u.CachedInputTokens))
			}
		}
	}
	var f *failure
	if !errors.As(err, &f) {
		return // done, stopped, or the run ended under it: not the provider's failure
	}
	kind := "transport"
	if f.status != 0 {
		kind = strconv.Itoa(f.status)
		span.SetAttributes(attrHTTPStatus.Int(f.status))
	}
	span.SetAttributes(attrErrorType.String(kind))
	span.SetStatus(codes.Error, key.redact(f.message+": "+f.cause))
}

// startTool starts the span of a tool call; the tool runs in its context, so that a tool
// of the embedder's can make spans of its own under it.
func (rt *runTrace) startTool(ctx context.Context, c *call) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(ctx)
	}
	attrs := append([]attribute.KeyValue{attrOperation.String("execute_tool"), attrToolName.String(c.name), attrToolCallID.String(c.id)}, rt.ids...)
	if c.handle != nil {
		attrs = append(attrs, attrToolCallItem.String(c.handle.ID()))
	}
	return rt.tracer.Start(ctx, "execute_tool "+c.name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// endTool ends a tool call's span, failed when the call failed.
func (rt *runTrace) endTool(span trace.Span, err error, key *secret) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, key.redact(err.Error()))
	}
	span.End()
}
