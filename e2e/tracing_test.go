package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/internal/spans"
	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// withHeader is a transport that adds a header to every request.
type withHeader struct{ k, v string }

func (h withHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.k, h.v)
	return http.DefaultTransport.RoundTrip(r)
}

// cityTool answers the model's get_city calls.
type cityTool struct{}

func (cityTool) Name() string               { return "get_city" }
func (cityTool) Description() string        { return "The user's city." }
func (cityTool) Parameters() map[string]any { return nil }
func (cityTool) Call(_ context.Context, _ string, out openai.ToolOutput) (string, error) {
	_ = out.Output("looking… ")
	return "Rome", nil
}

// Through the whole server, with the SDK's in-memory exporter: a span per GraphQL
// operation (in the caller's trace when it sends a traceparent), one per run (linked to
// the operation that started it), and the openai agent's per provider request and tool
// call under the run's, all with the session and run IDs.
func TestTracesOfOperationsRunsAndAgentCalls(t *testing.T) {
	rec := spans.New(t)
	f := fakellm.New(t, toolCallReply("call_7", "get_city", `{}`), fakellm.TextReply("Ciao ", "Rome."))
	a := startOpenAI(t, "memory", f, func(c *app.Config) {
		c.TracerProvider = rec
		c.OpenAI.Tools = []openai.Tool{cityTool{}}
	})
	c := guest(t, a)
	sid := openAISession(c, map[string]any{"model": "gpt-test"})
	ws := c.Connect("graphql-transport-ws")
	_, evs := ws.Stream(sid, c.Cursor(sid))

	// The message comes from a caller that traces: its traceparent names the parent.
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	caller := *c
	caller.HTTP = &http.Client{Timeout: tgtest.Wait, Transport: withHeader{"traceparent", "00-" + traceID + "-" + parentID + "-01"}}
	var out struct {
		AddMessage struct{ Run struct{ ID string } }
	}
	caller.Must(`mutation Ask($s: ID!){ addMessage(input: {sessionId: $s, content: "where am I?"}){ run { id } } }`, map[string]any{"s": sid}, &out)
	run := out.AddMessage.Run.ID
	if end := evs.Until("run ends", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
		t.Fatalf("run ended %s: %s", end.Run.Status, end.Run.Error)
	}

	runSpan := rec.WaitNamed(t, "run openai", 1)[0]
	all := rec.Spans()
	ask := spans.Named(all, "mutation Ask")
	if len(ask) != 1 {
		t.Fatalf("%d spans for the mutation, want 1:%s", len(ask), spans.Describe(all))
	}
	op := ask[0]
	if op.SpanContext.TraceID().String() != traceID || op.Parent.SpanID().String() != parentID || op.SpanKind != trace.SpanKindServer {
		t.Errorf("the operation's span is in trace %s under %s (kind %v), want the caller's %s under %s",
			op.SpanContext.TraceID(), op.Parent.SpanID(), op.SpanKind, traceID, parentID)
	}
	if spans.Attr(op, service.AttrSessionID) != sid || spans.Attr(op, service.AttrRunID) != run || spans.Attr(op, "graphql.operation.type") != "mutation" {
		t.Errorf("the operation's span attributes: %v", op.Attributes)
	}
	if len(runSpan.Links) != 1 || runSpan.Links[0].SpanContext.SpanID() != op.SpanContext.SpanID() {
		t.Errorf("the run's span links to %v, want the mutation's span", runSpan.Links)
	}
	for k, want := range map[string]string{string(service.AttrSessionID): sid, string(service.AttrRunID): run, "talkgraph.agent": "openai",
		"gen_ai.request.model": "gpt-test", "talkgraph.run.status": "COMPLETED", "gen_ai.usage.output_tokens": "2"} {
		if got := spans.Attr(runSpan, attribute.Key(k)); got != want {
			t.Errorf("run span %s = %q, want %q", k, got, want)
		}
	}
	children := 0
	for _, s := range all {
		if s.Parent.SpanID() != runSpan.SpanContext.SpanID() {
			continue
		}
		children++
		if spans.Attr(s, service.AttrSessionID) != sid || spans.Attr(s, service.AttrRunID) != run {
			t.Errorf("span %s lacks the session and run: %v", s.Name, s.Attributes)
		}
	}
	if calls, tools := spans.Named(all, "chat gpt-test"), spans.Named(all, "execute_tool get_city"); len(calls) != 2 || len(tools) != 1 || children != 3 {
		t.Errorf("%d provider calls and %d tool calls, %d of the run's children; want 2, 1, 3:%s", len(calls), len(tools), children, spans.Describe(all))
	}
	// One span for the subscription, however often the transport executes it again to
	// render an event of its stream (the tool call's events are rendered so).
	subs := spans.Named(all, "subscription")
	if len(subs) != 1 || spans.Attr(subs[0], service.AttrSessionID) != sid {
		t.Errorf("%d subscription spans, want one with the session:%s", len(subs), spans.Describe(all))
	}
}

// collector is an OTLP receiver the test owns, over HTTP (protobuf) or gRPC.
type collector struct {
	URL string

	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string // the service.name of each batch
	changed chan struct{}
}

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				c.service = append(c.service, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait returns the spans received once match holds of them, failing after tgtest.Wait.
func (c *collector) wait(t *testing.T, what string, match func([]*tracepb.Span) bool) []*tracepb.Span {
	t.Helper()
	deadline := time.After(tgtest.Wait)
	for {
		c.mu.Lock()
		got, changed := append([]*tracepb.Span(nil), c.spans...), c.changed
		c.mu.Unlock()
		if match(got) {
			return got
		}
		select {
		case <-changed:
		case <-deadline:
			var names []string
			for _, s := range got {
				names = append(names, s.Name)
			}
			t.Fatalf("the collector did not get %s in time; it got %q", what, names)
		}
	}
}

func newHTTPCollector(t *testing.T) *collector {
	c := &collector{changed: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("export to %s as %s, want /v1/traces as application/x-protobuf", r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, _ := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &req); err != nil {
			t.Errorf("export request does not decode: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.add(&req)
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = io.Copy(w, bytes.NewReader(resp))
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	c *collector
}

func (g grpcCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.c.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func newGRPCCollector(t *testing.T) *collector {
	c := &collector{changed: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcCollector{c: c})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	c.URL = "http://" + ln.Addr().String()
	return c
}

func attr(s *tracepb.Span, k string) string {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return anyValue(kv.Value)
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	if s, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
		return s.StringValue
	}
	return ""
}

// A real server process, told by the standard variables where a collector listens,
// sends it the spans of operations and runs, over either protocol; without them it
// sends nothing (the other tests).
func TestTracesReachAnOTLPCollector(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, proto := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(proto, "/", "-"), func(t *testing.T) {
			col := newHTTPCollector
			if proto == "grpc" {
				col = newGRPCCollector
			}
			c := col(t)
			srv := startChild(t, t.TempDir(), freePort(t), "OTEL_EXPORTER_OTLP_ENDPOINT="+c.URL, "OTEL_EXPORTER_OTLP_PROTOCOL="+proto,
				"OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=talkgraph-e2e")
			user := tgtest.Guest(t, srv.URL)
			sid := user.CreateSession(nil)
			ws := user.Connect("graphql-transport-ws")
			_, evs := ws.Stream(sid, user.Cursor(sid))
			_, run := user.Send(sid, "trace me")
			evs.Until("run ends", tgtest.RunEnds(run))
			got := c.wait(t, "the run's span and the mutation's", func(ss []*tracepb.Span) bool {
				var sawRun, sawOp bool
				for _, s := range ss {
					sawRun = sawRun || (s.Name == "run demo" && attr(s, "talkgraph.run.id") == run && attr(s, "talkgraph.session.id") == sid)
					sawOp = sawOp || (s.Name == "mutation" && attr(s, "talkgraph.run.id") == run)
				}
				return sawRun && sawOp
			})
			for _, s := range got {
				if s.Name == "run demo" && (attr(s, "talkgraph.run.status") != "COMPLETED" || attr(s, "gen_ai.request.model") != "demo") {
					t.Errorf("run span attributes: %v", s.Attributes)
				}
			}
			c.mu.Lock()
			names := append([]string(nil), c.service...)
			c.mu.Unlock()
			if len(names) == 0 || names[0] != "talkgraph-e2e" {
				t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", names)
			}
		})
	}
}
