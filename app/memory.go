package app

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// Thousands of subscribers arriving or leaving together (clients reconnecting after a
// restart, a load balancer draining, the end of a day) leave garbage behind: the buffers
// of their setup, or the memory their connections held. Go collects it only when the heap
// doubles again, which an idle server may not do for minutes, and returns it to the
// operating system gradually after that. releaseMemory watches the subscription count and,
// once it has moved by releaseAfter or more since the last release and then stayed put for
// a tick, collects and returns the freed memory at once: one collection now and then, at a
// moment when the server is quiet.
const (
	releaseEvery = 5 * time.Second
	releaseAfter = 1000
)

func releaseMemory(ctx context.Context, svc *service.Service) {
	t := time.NewTicker(releaseEvery)
	defer t.Stop()
	var released, prev int64
	again := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := svc.Subscriptions()
		switch {
		case shouldRelease(released, prev, n):
			debug.FreeOSMemory()
			released, again = n, true
		case again && abs(n-prev) < releaseAfter/10:
			// Once more a tick later: a collection halves the goroutine stacks that the
			// crowd's setup grew (and idle ones need little), and this returns what that
			// freed.
			debug.FreeOSMemory()
			again = false
		default:
			again = false
		}
		prev = n
	}
}

// shouldRelease reports whether to collect now: the subscription count n moved by
// releaseAfter or more since the last release (at released) and stayed put since the last
// tick (at prev).
func shouldRelease(released, prev, n int64) bool {
	return abs(n-released) >= releaseAfter && abs(n-prev) < releaseAfter/10
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
