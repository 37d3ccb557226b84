package service_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
	"github.com/talkgraph/talkgraph/service/sqlite"
)

func openStore(b *testing.B, kind string) (service.Store, string) {
	b.Helper()
	if kind == "memory" {
		return inmem.New(), ""
	}
	path := filepath.Join(b.TempDir(), "bench.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return st, path
}

// BenchmarkStreamingThroughput streams b.N chunks, split over several sessions streaming
// at once, through the whole service with the default flush window, into each store.
// Compare chunks/s of sqlite with memory: the durable store's share of the in-memory rate.
func BenchmarkStreamingThroughput(b *testing.B) {
	for _, sessions := range []int{1, 16} {
		for _, kind := range []string{"memory", "sqlite"} {
			b.Run(fmt.Sprintf("sessions=%d/store=%s", sessions, kind), func(b *testing.B) {
				store, _ := openStore(b, kind)
				defer store.Close()
				per := max(b.N/sessions, 1)
				agents := &service.Agents{}
				agents.Register("bench", "", chunkRunner{n: per})
				cfg := service.DefaultConfig()
				cfg.Workers, cfg.RunsPerUser = sessions, sessions
				cfg.MaxReplyBytes = 1 << 30
				svc, err := service.New(context.Background(), store, agents, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
				if err != nil {
					b.Fatal(err)
				}
				defer svc.Close()
				ctx := service.WithUser(context.Background(), "bench")
				sctx, cancel := context.WithCancel(ctx)
				defer cancel()
				ids, watches := watchedSessions(b, sctx, svc, "bench", sessions)
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for i, id := range ids {
					if _, _, err := svc.AddMessage(ctx, id, "go", ""); err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					go func(ch <-chan *service.Event) {
						defer wg.Done()
						for ev := range ch {
							if ev.Type == service.EventRunStatusChanged && ev.Run.Status.Final() {
								if ev.Run.Status != service.RunCompleted {
									b.Errorf("run ended %s: %s", ev.Run.Status, ev.Run.Error)
								}
								return
							}
						}
					}(watches[i])
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(per*sessions)/time.Since(start).Seconds(), "chunks/s")
			})
		}
	}
}

// BenchmarkDatabaseSize streams 1,000 replies of 200 words each into SQLite and reports the
// file's size (with its WAL) after compaction, per 1,000 messages (user message + reply).
func BenchmarkDatabaseSize(b *testing.B) {
	for i := 0; i < b.N; i++ {
		store, path := openStore(b, "sqlite")
		agents := &service.Agents{}
		agents.Register("bench", "", wordsRunner(strings.Split(strings.Repeat("word ", 200), " ")))
		cfg := service.DefaultConfig()
		cfg.FlushInterval = 2 * time.Millisecond
		svc, err := service.New(context.Background(), store, agents, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			b.Fatal(err)
		}
		ctx := service.WithUser(context.Background(), "bench")
		agent := "bench"
		sess, _ := svc.CreateTalkSession(ctx, "", service.SettingsInput{Agent: &agent})
		v, _ := svc.View(ctx, sess.ID)
		sctx, cancel := context.WithCancel(ctx)
		ch, _ := watch(svc, sctx, sess.ID, v.StreamCursor)
		for m := 0; m < 500; m++ {
			_, run, err := svc.AddMessage(ctx, sess.ID, fmt.Sprintf("message %d", m), "")
			if err != nil {
				b.Fatal(err)
			}
			for ev := range ch {
				if ev.Type == service.EventRunStatusChanged && ev.Run.ID == run.ID && ev.Run.Status.Final() {
					break
				}
			}
		}
		cancel()
		svc.Close()
		store.Close()
		var size int64
		for _, p := range []string{path, path + "-wal"} {
			if fi, err := os.Stat(p); err == nil {
				size += fi.Size()
			}
		}
		b.ReportMetric(float64(size)/(1<<20), "MiB/1000msgs")
	}
}

// pacedRunner streams n chunks, one every interval, each carrying the time it was written.
type pacedRunner struct {
	n        int
	interval time.Duration
}

func (r pacedRunner) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for i := 0; i < r.n; i++ {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := out.Text(fmt.Sprintf("%d ", time.Now().UnixNano())); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkPacedStreaming streams from many sessions at once at a model-like pace (a chunk
// every 10 ms per session, i.e. 100 tokens/s) for about two seconds, and reports the chunk
// rate delivered to subscribers and the delay from an agent's Text to a subscriber, for
// each store: what a server under this load sees.
func BenchmarkPacedStreaming(b *testing.B) {
	for _, sessions := range []int{50, 200} {
		for _, kind := range []string{"memory", "sqlite"} {
			b.Run(fmt.Sprintf("sessions=%d/store=%s", sessions, kind), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					pacedOnce(b, kind, sessions)
				}
			})
		}
	}
}

func pacedOnce(b *testing.B, kind string, sessions int) {
	const perSession = 200
	store, _ := openStore(b, kind)
	defer store.Close()
	agents := &service.Agents{}
	agents.Register("paced", "", pacedRunner{n: perSession, interval: 10 * time.Millisecond})
	cfg := service.DefaultConfig()
	cfg.Workers, cfg.RunsPerUser = sessions, sessions
	svc, err := service.New(context.Background(), store, agents, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	ctx := service.WithUser(context.Background(), "bench")
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		chunks int
		delay  time.Duration // summed over chunks
		worst  time.Duration
	}
	results := make(chan result, sessions)
	ids, watches := watchedSessions(b, sctx, svc, "paced", sessions)
	for _, ch := range watches {
		go func() {
			var r result
			for ev := range ch {
				if ev.Type == service.EventMessageChunk {
					now := time.Now()
					for _, f := range strings.Fields(ev.Delta) {
						var ns int64
						fmt.Sscan(f, &ns)
						d := now.Sub(time.Unix(0, ns))
						r.chunks++
						r.delay += d
						r.worst = max(r.worst, d)
					}
				}
				if ev.Type == service.EventRunStatusChanged && ev.Run.Status.Final() {
					break
				}
			}
			results <- r
		}()
	}
	start := time.Now()
	for _, id := range ids {
		if _, _, err := svc.AddMessage(ctx, id, "go", ""); err != nil {
			b.Fatal(err)
		}
	}
	var total result
	for range ids {
		r := <-results
		total.chunks += r.chunks
		total.delay += r.delay
		total.worst = max(total.worst, r.worst)
	}
	elapsed := time.Since(start)
	if total.chunks != sessions*perSession {
		b.Fatalf("%d chunks delivered, want %d", total.chunks, sessions*perSession)
	}
	b.ReportMetric(float64(total.chunks)/elapsed.Seconds(), "chunks/s")
	b.ReportMetric(float64(total.delay.Milliseconds())/float64(total.chunks), "ms-mean-delay")
	b.ReportMetric(float64(total.worst.Milliseconds()), "ms-worst-delay")
}

// watchedSessions creates n sessions of the agent for the user of ctx, each with a
// subscription from its start that lasts as long as ctx.
func watchedSessions(b *testing.B, ctx context.Context, svc *service.Service, agent string, n int) (ids []string, watches []<-chan *service.Event) {
	b.Helper()
	for i := 0; i < n; i++ {
		sess, err := svc.CreateTalkSession(ctx, "", service.SettingsInput{Agent: &agent})
		if err != nil {
			b.Fatal(err)
		}
		v, err := svc.View(ctx, sess.ID)
		if err != nil {
			b.Fatal(err)
		}
		ch, err := watch(svc, ctx, sess.ID, v.StreamCursor)
		if err != nil {
			b.Fatal(err)
		}
		ids, watches = append(ids, sess.ID), append(watches, ch)
	}
	return ids, watches
}
