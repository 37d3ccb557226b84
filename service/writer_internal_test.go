package service

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The writer's heap gives its items back earliest first, whatever order they came in.
func TestLaterQueuePopsEarliestFirst(t *testing.T) {
	var q laterQueue
	base := time.Now()
	var want []time.Time
	for range 200 {
		at := base.Add(time.Duration(rand.IntN(1000)) * time.Millisecond)
		want = append(want, at)
		q.push(laterItem{at: at})
	}
	slices.SortFunc(want, func(a, b time.Time) int { return a.Compare(b) })
	for i, w := range want {
		if got := q.pop().at; !got.Equal(w) {
			t.Fatalf("item %d popped at %v, want %v", i, got, w)
		}
	}
	if len(q) != 0 {
		t.Errorf("%d items left", len(q))
	}
}
