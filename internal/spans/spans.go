// Package spans records the spans a test makes, with the OpenTelemetry SDK's in-memory
// exporter, and lets the test wait for one with a deadline.
package spans

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Recorder is a TracerProvider whose ended spans are kept in memory.
type Recorder struct {
	*sdktrace.TracerProvider
	mem   *tracetest.InMemoryExporter
	mu    sync.Mutex
	ended chan struct{} // closed and replaced whenever a span ends
}

// New returns a Recorder that samples every span; it is shut down when t ends.
func New(t testing.TB) *Recorder {
	r := &Recorder{mem: tracetest.NewInMemoryExporter(), ended: make(chan struct{})}
	r.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSyncer(notifier{r}))
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return r
}

type notifier struct{ r *Recorder }

func (n notifier) ExportSpans(ctx context.Context, s []sdktrace.ReadOnlySpan) error {
	err := n.r.mem.ExportSpans(ctx, s)
	n.r.mu.Lock()
	close(n.r.ended)
	n.r.ended = make(chan struct{})
	n.r.mu.Unlock()
	return err
}

func (n notifier) Shutdown(context.Context) error { return nil }

// Spans returns the spans ended so far.
func (r *Recorder) Spans() tracetest.SpanStubs { return r.mem.GetSpans() }

// Wait returns the ended spans once match holds of them, failing t after 10 seconds.
func (r *Recorder) Wait(t testing.TB, what string, match func(tracetest.SpanStubs) bool) tracetest.SpanStubs {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ended := r.ended
		r.mu.Unlock()
		got := r.Spans()
		if match(got) {
			return got
		}
		select {
		case <-ended:
		case <-deadline.C:
			t.Fatalf("no %s within 10s; spans: %s", what, Describe(got))
		}
	}
}

// Named returns the ended spans whose name is name.
func Named(ss tracetest.SpanStubs, name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range ss {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// WaitNamed waits until n spans named name have ended and returns them.
func (r *Recorder) WaitNamed(t testing.TB, name string, n int) tracetest.SpanStubs {
	t.Helper()
	got := r.Wait(t, fmt.Sprintf("%d span(s) %q", n, name), func(ss tracetest.SpanStubs) bool { return len(Named(ss, name)) >= n })
	return Named(got, name)
}

// Attr returns the value of a span's attribute k as a string ("" when absent).
func Attr(s tracetest.SpanStub, k attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// Describe lists spans by name with their attributes, for failure messages.
func Describe(ss tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "\n  %s %v", s.Name, s.Attributes)
	}
	return b.String()
}
