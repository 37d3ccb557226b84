package e2e

import (
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/spans"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// tracingModes are a server that does not trace (the default: no provider at all) and one
// that records every span in memory, to tell what tracing costs and that off costs nothing.
func tracingModes(b *testing.B, each func(b *testing.B, c *tgtest.Client)) {
	for _, mode := range []string{"off", "on"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			var tp trace.TracerProvider
			if mode == "on" {
				tp = spans.New(b)
			}
			a := startApp(b, "memory", func(c *app.Config) {
				c.TracerProvider = tp
				c.HTTP.OpsPerSecond, c.HTTP.OpsBurst = 1e9, 1e9
			})
			each(b, guest(b, a))
		})
	}
}

// BenchmarkQuery is one GraphQL query over HTTP. Measured when tracing came in: the server
// before it made 337 allocations (25.5 KB) a query, tracing=off the same 337, tracing=on
// about 355 (30 KB); the times are within the noise of a shared machine.
func BenchmarkQuery(b *testing.B) {
	tracingModes(b, func(b *testing.B, c *tgtest.Client) {
		sid := c.CreateSession(nil)
		vars := map[string]any{"s": sid}
		b.ReportAllocs()
		for b.Loop() {
			c.Must(`query($s: ID!){ session(id: $s){ id status } }`, vars, nil)
		}
	})
}

// BenchmarkRun is a message and its run, from addMessage to the run's end on a websocket.
func BenchmarkRun(b *testing.B) {
	tracingModes(b, func(b *testing.B, c *tgtest.Client) {
		sid := c.CreateSession(nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		b.ReportAllocs()
		for b.Loop() {
			_, run := c.Send(sid, "hi")
			evs.Until("run ends", tgtest.RunEnds(run))
		}
	})
}
