package service_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkgraph/talkgraph/internal/spans"
	"github.com/talkgraph/talkgraph/service"
)

// With Config.Tracing, a run has a span of its own that links to the operation that
// started it, carries the session, run, agent, model, status and usage, and is the parent
// of the spans the agent makes from its context; the operation's span gets the session
// and run IDs.
func TestRunSpans(t *testing.T) {
	rec := spans.New(t)
	agent := service.RunnerFunc(func(ctx context.Context, req service.RunRequest, out service.Output) error {
		_, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("agent").Start(ctx, "model call")
		defer span.End()
		if err := out.Text("partial"); err != nil {
			return err
		}
		if err := out.ReportUsage("m-1", service.Usage{InputTokens: 7, OutputTokens: 2}); err != nil {
			return err
		}
		if req.History[len(req.History)-1].Content == "fail" {
			return service.Errorf(service.EUNAVAILABLE, "the model went away")
		}
		return nil
	})
	svc := start(t, setup{agents: map[string]service.Runner{"traced": agent}, config: func(c *service.Config) { c.Tracing = rec }})
	sess := newSession(t, svc, alice, "traced", "")
	f := follow(t, svc, alice, sess.ID, sess.StreamCursor)

	for i, text := range []string{"hello", "fail"} {
		ctx, op := rec.Tracer("test").Start(alice, "mutation addMessage")
		_, run := send(t, svc, ctx, sess.ID, text)
		op.End()
		f.until(runEnds(run.ID))
		runs := rec.WaitNamed(t, "run traced", i+1)
		rs := runs[i]
		for k, want := range map[attribute.Key]string{service.AttrSessionID: sess.ID, service.AttrRunID: run.ID, service.AttrAgent: "traced",
			service.AttrInputTokens: "7", service.AttrOutputTokens: "2"} {
			if got := spans.Attr(rs, k); got != want {
				t.Errorf("%s: run span %s = %q, want %q", text, k, got, want)
			}
		}
		if len(rs.Links) != 1 || rs.Links[0].SpanContext.SpanID() != op.SpanContext().SpanID() {
			t.Errorf("%s: run span links %v, want the operation's span", text, rs.Links)
		}
		if rs.Parent.IsValid() {
			t.Errorf("%s: the run span has a parent: a run outlives its request", text)
		}
		ops := spans.Named(rec.Spans(), "mutation addMessage")
		if o := ops[len(ops)-1]; spans.Attr(o, service.AttrSessionID) != sess.ID || spans.Attr(o, service.AttrRunID) != run.ID {
			t.Errorf("%s: operation span attributes %v, want the session and the run", text, o.Attributes)
		}
		calls := spans.Named(rec.Spans(), "model call")
		if c := calls[len(calls)-1]; c.Parent.SpanID() != rs.SpanContext.SpanID() {
			t.Errorf("%s: the agent's span is not the run's child", text)
		}
		switch text {
		case "hello":
			if spans.Attr(rs, service.AttrRunStatus) != "COMPLETED" || rs.Status.Code == codes.Error {
				t.Errorf("completed run: span status %v, attributes %v", rs.Status, rs.Attributes)
			}
		case "fail":
			if spans.Attr(rs, service.AttrRunStatus) != "FAILED" || rs.Status.Code != codes.Error || rs.Status.Description != "the model went away" {
				t.Errorf("failed run: span status %v, attributes %v", rs.Status, rs.Attributes)
			}
			if len(rs.Events) == 0 || rs.Events[0].Name != "exception" {
				t.Errorf("failed run: span events %v, want the error recorded", rs.Events)
			}
		}
	}
}

// Without Config.Tracing, nothing is traced, and an operation's span (someone else's
// tracer) gets nothing from the service.
func TestNoTracingByDefault(t *testing.T) {
	rec := spans.New(t)
	svc := start(t, setup{})
	sess := newSession(t, svc, alice, "", "")
	f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
	ctx, op := rec.Tracer("test").Start(alice, "op")
	_, run := send(t, svc, ctx, sess.ID, "hi")
	op.End()
	f.until(runEnds(run.ID))
	got := rec.Spans()
	if len(got) != 1 || len(got[0].Attributes) != 0 {
		t.Errorf("spans %s, want only the test's own, without attributes", spans.Describe(tracetest.SpanStubs(got)))
	}
}
