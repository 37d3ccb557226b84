package app

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// Thousands of subscribers arriving or leaving together (clients reconnecting after a
// restart, a load balancer draining, the end of a day) leave garbage behind: the buffers
// of their setup, or the memory their connections held. Go collects it only when the heap
// doubles again, which an idle server may not do for minutes, and returns it to the
// operating system gradually after that. releaseMemory looks at the subscription count
// every second and, once it has moved by releaseAfter or more since the last release and
// then stayed put for a second, collects and returns the freed memory at once (when the
// crowd left, it has the store give back its caches first: SQLite's page caches): one
// collection now and then, at a moment when the server is quiet, a second or two after
// the crowd, so that the memory a crowd's setup left is back before anyone looks.
//
// Every sweepEvery, and before each release, it runs the sweeps: the caches that remember
// users and sessions (rate limits, storage footprints) forget those gone long enough, so
// that what a crowd that left had them remember is garbage by the time of the release.
const (
	lookEvery    = time.Second
	sweepEvery   = 5 * time.Second
	releaseAfter = 1000
)

func releaseMemory(ctx context.Context, log *slog.Logger, svc *service.Service, sweeps ...func()) {
	t := time.NewTicker(lookEvery)
	defer t.Stop()
	var j janitor
	var swept time.Time
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-t.C:
		}
		release, left := j.tick(svc.Subscriptions())
		if release || now.Sub(swept) >= sweepEvery {
			for _, sweep := range sweeps {
				sweep()
			}
			swept = now
		}
		if left {
			// The store waits for its connections to be free: not for long, since reads
			// wait for those it holds meanwhile.
			rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			if err := svc.ReleaseMemory(rctx); err != nil && ctx.Err() == nil {
				log.Debug("the store kept its caches", "err", err)
			}
			cancel()
		}
		if release {
			debug.FreeOSMemory()
		}
	}
}

// janitor decides, tick by tick, when to release.
type janitor struct {
	released, prev int64 // the count at the last release, and at the last tick
	again          bool  // released at the last tick
}

// tick takes the subscription count n and reports whether to release now: once the count
// moved and stayed put (see shouldRelease), and once more the tick after if it still
// stays: a collection halves the goroutine stacks that the crowd's setup grew (idle ones
// need little), and the second release returns what that freed. left is true at the first
// of them when the count fell: a crowd left, and the store's caches can go too (a crowd
// that arrived is using them).
func (j *janitor) tick(n int64) (release, left bool) {
	switch {
	case shouldRelease(j.released, j.prev, n):
		left = n < j.released
		release, j.released, j.again = true, n, true
	case j.again && abs(n-j.prev) < releaseAfter/10:
		release, j.again = true, false
	default:
		j.again = false
	}
	j.prev = n
	return release, left
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
