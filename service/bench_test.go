package service_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// chunkRunner streams n chunks as fast as the service takes them.
type chunkRunner struct{ n int }

func (r chunkRunner) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	for i := 0; i < r.n; i++ {
		if err := out.Text("word "); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkChunkFanout measures the hot path: a chunk going from a runner through the
// event log to N subscribers. ns/op is per chunk, with every subscriber having read it.
// flush=0 writes each chunk as its own event; flush=default batches as the server does.
func BenchmarkChunkFanout(b *testing.B) {
	for _, flush := range []string{"each", "batched"} {
		for _, subs := range []int{1, 10, 100, 1000} {
			b.Run(fmt.Sprintf("flush=%s/subs=%d", flush, subs), func(b *testing.B) {
				benchFanout(b, flush == "each", subs)
			})
		}
	}
}

func benchFanout(b *testing.B, each bool, subs int) {
	cfg := service.DefaultConfig()
	if each {
		cfg.FlushInterval = 0
	}
	cfg.TailEvents = 4096
	cfg.MaxReplyBytes = 1 << 30
	agents := &service.Agents{}
	agents.Register("bench", "", chunkRunner{n: b.N})
	svc, err := service.New(context.Background(), inmem.New(), agents, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	ctx := service.WithUser(context.Background(), "bench-user")
	agent := "bench"
	sess, err := svc.CreateTalkSession(ctx, "bench", service.SettingsInput{Agent: &agent})
	if err != nil {
		b.Fatal(err)
	}
	view, _ := svc.View(ctx, sess.ID)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan int, subs)
	for i := 0; i < subs; i++ {
		ch, err := watch(svc, sctx, sess.ID, view.StreamCursor)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			text := 0
			for ev := range ch {
				if ev.Type == service.EventMessageChunk {
					text += len([]rune(ev.Delta))
				}
				if ev.Type == service.EventRunStatusChanged && ev.Run.Status.Final() {
					break
				}
			}
			done <- text
		}()
	}
	b.ReportAllocs()
	b.ResetTimer()
	if _, _, err := svc.AddMessage(ctx, sess.ID, "go", ""); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < subs; i++ {
		if got := <-done; got != 5*b.N {
			b.Fatalf("a subscriber read %d code points, want %d", got, 5*b.N)
		}
	}
	b.StopTimer()
}
