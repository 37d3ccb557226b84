package sqlite_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/sqlite"
)

// How much memory the release gives back is the load generator's to measure (its idle
// scenario); this build of SQLite keeps no count of its own.
func TestReleaseMemoryForgetsCachesButNotTheLog(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, tempPath(t), sqlite.Options{})
	// A crowd: sessions written in rounds and each read back, which fills the writer's
	// page cache and the readers'.
	const sessions = 2000
	text := strings.Repeat("word ", 100)
	for i := 0; i < sessions; i += 100 {
		var batch []*service.Batch
		for j := i; j < i+100; j++ {
			id := fmt.Sprint("s", j)
			b := chunkBatch(id, 1, text)
			b.Create = newSession(id)
			batch = append(batch, b)
		}
		if err := errors.Join(s.Append(ctx, batch)...); err != nil {
			t.Fatal(err)
		}
	}
	for i := range sessions {
		if _, err := s.Events(ctx, fmt.Sprint("s", i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ReleaseMemory(ctx); err != nil {
		t.Fatal(err)
	}

	// What the caches held is read again: the logs go on where they ended, and only there.
	if err := appendOne(s, chunkBatch("s7", 2, "more")); err != nil {
		t.Errorf("appending at the log's end after the release: %v", err)
	}
	if err := appendOne(s, chunkBatch("s8", 3, "gap")); !errors.Is(err, service.ErrNotNext) {
		t.Errorf("appending past the log's end after the release: %v, want ErrNotNext", err)
	}
	evs, err := s.Events(ctx, "s7", 0, 0)
	if err != nil || len(evs) != 2 || evs[1].Delta != "more" {
		t.Errorf("s7's log after the release: %d events, %v", len(evs), err)
	}
}
