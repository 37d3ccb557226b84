package sqlite_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/sqlite"
)

// Batches applied at the same moment share a commit; one that fails must fail alone and
// write nothing, while the others are written whole.
func TestConcurrentBatchesFailAlone(t *testing.T) {
	s := mustOpen(t, tempPath(t), sqlite.Options{})
	ctx := context.Background()
	now := time.Now().UTC()
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		sess := &service.TalkSession{ID: ids[i], UserID: "u", Settings: service.Settings{Agent: "demo", BusyPolicy: service.BusyInterrupt}, CreatedAt: now, UpdatedAt: now}
		if err := s.Apply(ctx, &service.Batch{SessionID: ids[i], Session: sess}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Apply(ctx, &service.Batch{SessionID: ids[0], Idempotency: &service.IdempotencyRecord{UserID: "u", Key: "taken", SessionID: ids[0], CreatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 5; round++ {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				b := &service.Batch{SessionID: ids[i], Events: []*service.Event{{Type: service.EventMessageChunk, Key: "m", MessageID: "m", Delta: "x", At: now}}}
				if i == round { // this one reuses a key: the whole batch must be refused
					b.Idempotency = &service.IdempotencyRecord{UserID: "u", Key: "taken", SessionID: ids[i], CreatedAt: now}
				}
				errs[i] = s.Apply(ctx, b)
			}(i)
		}
		wg.Wait()
		for i, err := range errs {
			want := ""
			if i == round {
				want = service.ECONFLICT
			}
			if got := service.ErrorCode(err); got != want {
				t.Fatalf("round %d, batch %d: code %q (%v), want %q", round, i, got, err, want)
			}
		}
	}
	for i, id := range ids {
		evs, err := s.Events(ctx, id, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		want := 5
		if i < 5 {
			want = 4 // its refused batch wrote nothing
		}
		if len(evs) != want {
			t.Errorf("session %d has %d events, want %d", i, len(evs), want)
		}
	}
}
