package sqlite_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/sqlite"
)

// TestCompactLetsAppendInBetweenItsTransactions: a compaction of many streams commits in
// slices, and a round of the writer that comes meanwhile is written between two of them
// rather than after the last.
func TestCompactLetsAppendInBetweenItsTransactions(t *testing.T) {
	ctx := t.Context()
	s := mustOpen(t, tempPath(t), sqlite.Options{CompactHold: time.Nanosecond})
	const streams = 3
	var cs []service.Compaction
	for i := range streams {
		id := fmt.Sprintf("s%d", i)
		if err := create(s, id); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= 4; seq++ {
			b := chunkBatch(id, seq, "ab")
			b.Events[0].Offset = int(seq-1) * 2
			if err := appendOne(s, b); err != nil {
				t.Fatal(err)
			}
		}
		cs = append(cs, service.Compaction{SessionID: id, Key: "m1", FromSeq: 1})
	}
	if err := create(s, "other"); err != nil {
		t.Fatal(err)
	}

	var slices []int
	appended := make(chan error, 1)
	sqlite.OnCompactSlice(s, func(done, left int) {
		slices = append(slices, done)
		if len(slices) == 1 {
			// The compaction is not over: an Append must not wait for it to end.
			go func() { appended <- appendOne(s, chunkBatch("other", 1, "x")) }()
			select {
			case err := <-appended:
				if err != nil {
					t.Errorf("Append between two slices of a compaction: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("Append did not get in between two slices of a compaction (%d streams left)", left)
			}
		}
	})
	if err := s.Compact(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if len(slices) != streams {
		t.Errorf("Compact of %d streams with CompactHold 1ns wrote %d transactions (%v), want one per stream", streams, len(slices), slices)
	}
	for _, c := range cs {
		evs, err := s.Events(ctx, c.SessionID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || evs[0].Seq != 4 || evs[0].Delta != "abababab" || evs[0].CoalescedFrom != 1 {
			t.Errorf("%s after compaction: %+v, want one chunk at 4 with abababab from 1", c.SessionID, evs)
		}
	}
}
