package openai_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/internal/spans"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// In a traced run (a recording span in the context, as the service gives), each request
// to the provider and each tool call is a child span with the session and run IDs: a
// retried request is two spans, a failure says why without the API key, a reply says what
// it cost.
func TestProviderCallsAndToolCallsAreSpans(t *testing.T) {
	rec := spans.New(t)
	srv := newFakeServer(t,
		fakellm.ErrorReply(429, `{"error":{"message":"slow down, `+testKey+`"}}`, "Retry-After", "0"),
		fakellm.SSE(fakellm.Chunk(fakellm.ToolCallDelta(0, "call_1", "get_weather"), ""),
			fakellm.Chunk(fakellm.ArgumentsDelta(0, `{"city":"Rome"}`), ""), fakellm.Chunk(`{}`, "tool_calls"), fakellm.Done),
		fakellm.TextReply("Sunny."),
	)
	weather := &weatherTool{fail: errors.New("the weather service refused " + testKey)}
	a := newAgent(t, srv, openai.Config{Tools: []openai.Tool{weather}})
	ctx, runSpan := rec.Tracer("service").Start(context.Background(), "run openai")
	err := a.Run(ctx, service.RunRequest{SessionID: "s1", RunID: "r1", History: userSays("Rome?")}, newRecorder())
	runSpan.End()
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	all := rec.Spans()
	for _, s := range all {
		if s.Name == "run openai" {
			continue
		}
		if s.Parent.SpanID() != runSpan.SpanContext().SpanID() {
			t.Errorf("span %s is not the run's child", s.Name)
		}
		if spans.Attr(s, service.AttrSessionID) != "s1" || spans.Attr(s, service.AttrRunID) != "r1" {
			t.Errorf("span %s lacks the session and run IDs: %v", s.Name, s.Attributes)
		}
		if strings.Contains(s.Status.Description, testKey) || strings.Contains(spans.Describe(all), testKey) {
			t.Errorf("span %s holds the API key: %q", s.Name, s.Status.Description)
		}
	}
	calls := spans.Named(all, "chat gpt-test")
	if len(calls) != 3 {
		t.Fatalf("%d provider call spans, want 3 (a 429, its retry with a tool call, the reply):%s", len(calls), spans.Describe(all))
	}
	want := []map[attribute.Key]string{
		{"talkgraph.attempt": "1", "http.response.status_code": "429", "error.type": "429", "gen_ai.request.model": "gpt-test", "server.address": "127.0.0.1"},
		{"talkgraph.attempt": "2", "gen_ai.response.finish_reasons": `["tool_calls"]`},
		{"talkgraph.attempt": "1", "gen_ai.response.finish_reasons": `["stop"]`, "gen_ai.usage.input_tokens": "20", "gen_ai.usage.output_tokens": "1", "gen_ai.usage.cache_read.input_tokens": "5"},
	}
	for i, w := range want {
		for k, v := range w {
			if got := spans.Attr(calls[i], k); got != v {
				t.Errorf("call %d: %s = %q, want %q", i+1, k, got, v)
			}
		}
		if calls[i].SpanKind != trace.SpanKindClient {
			t.Errorf("call %d: kind %v", i+1, calls[i].SpanKind)
		}
	}
	if st := calls[0].Status; st.Code != codes.Error || !strings.Contains(st.Description, "rate limiting") || !strings.Contains(st.Description, "[redacted]") {
		t.Errorf("the 429's span status = %+v, want an error saying why, the key redacted", st)
	}
	if calls[1].Status.Code == codes.Error || calls[2].Status.Code == codes.Error {
		t.Error("a request that succeeded has an error status")
	}
	tools := spans.Named(all, "execute_tool get_weather")
	if len(tools) != 1 {
		t.Fatalf("%d tool spans, want 1:%s", len(tools), spans.Describe(all))
	}
	if st := tools[0].Status; st.Code != codes.Error || !strings.Contains(st.Description, "refused [redacted]") {
		t.Errorf("the failed tool call's span status = %+v", st)
	}
	if spans.Attr(tools[0], "gen_ai.tool.call.id") != "call_1" || spans.Attr(tools[0], "gen_ai.tool.name") != "get_weather" {
		t.Errorf("tool span attributes %v", tools[0].Attributes)
	}
}
