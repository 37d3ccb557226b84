package service

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes that tie traces to talkgraph's records. The service sets them on the
// span of each run and on the span of each operation that names a session or a run (the
// HTTP layer's, found in the context); agents set them on their own spans.
const (
	AttrSessionID = attribute.Key("talkgraph.session.id")
	AttrRunID     = attribute.Key("talkgraph.run.id")
	AttrAgent     = attribute.Key("talkgraph.agent")
	AttrRunStatus = attribute.Key("talkgraph.run.status")
	// AttrModel and the token counts follow OpenTelemetry's conventions for generative AI.
	AttrModel        = attribute.Key("gen_ai.request.model")
	AttrInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	AttrCachedTokens = attribute.Key("gen_ai.usage.cache_read.input_tokens")
)

// tracerName names the service's tracer (the instrumentation scope of its spans).
const tracerName = "github.com/talkgraph/talkgraph/service"

// annotate adds the IDs an operation concerns to the span in ctx, the operation's. It
// does nothing unless the service traces (Config.Tracing) and that span records.
func (s *core) annotate(ctx context.Context, sessionID, runID string) {
	if s.tracer == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if sessionID != "" {
		span.SetAttributes(AttrSessionID.String(sessionID))
	}
	if runID != "" {
		span.SetAttributes(AttrRunID.String(runID))
	}
}

// startRunSpan starts the span of a run, from the moment it becomes its session's active
// run (a wait for a worker slot included) until its goroutine returns. cause is the span
// of the operation that started the run, if any: the run's span links to it (it is not
// its child: a run outlives the request that started it).
func (s *core) startRunSpan(ctx context.Context, st *sessionState, run *Run, cause trace.SpanContext) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(
		AttrSessionID.String(st.id), AttrRunID.String(run.ID), AttrAgent.String(run.Agent))}
	if cause.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: cause}))
	}
	return s.tracer.Start(ctx, "run "+run.Agent, opts...)
}

// endSpan ends the span of ar with how the run stands: its status, usage and error.
func (ar *activeRun) endSpan(cause error) {
	ar.st.mu.Lock()
	r := *ar.run
	ar.st.mu.Unlock()
	span := ar.span
	span.SetAttributes(AttrRunStatus.String(string(r.Status)))
	if u := r.Usage; u != nil {
		span.SetAttributes(AttrInputTokens.Int(u.InputTokens), AttrOutputTokens.Int(u.OutputTokens))
		if u.CachedInputTokens != nil {
			span.SetAttributes(AttrCachedTokens.Int(*u.CachedInputTokens))
		}
	}
	if r.Status == RunFailed {
		if cause != nil {
			span.RecordError(cause)
		}
		span.SetStatus(codes.Error, r.Error)
	}
	span.End()
}
