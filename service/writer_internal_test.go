package service

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
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

// roundStore records each round the writer hands it: the sessions of its batches.
type roundStore struct {
	Store  // nil: the writer calls Append alone
	rounds chan []string
}

func (s *roundStore) Append(_ context.Context, batches []*Batch) []error {
	ids := make([]string, len(batches))
	for i, b := range batches {
		ids[i] = b.SessionID
	}
	s.rounds <- ids
	return make([]error, len(batches))
}

// fixedSource is a session with text to take every time the writer asks.
type fixedSource struct{ id string }

func (f *fixedSource) take(time.Time) (*Batch, bool) { return &Batch{SessionID: f.id}, false }
func (f *fixedSource) written(error)                 {}

func nextRound(t *testing.T, rounds chan []string) []string {
	t.Helper()
	select {
	case r := <-rounds:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no round came")
		return nil
	}
}

// With a round gap, timed text that comes due while the gap runs joins one round: two
// sessions due 250 ms apart are written in one transaction, not two. (The gap is long
// enough that a slow machine still times both inside it.)
func TestRoundGapGathersTimedText(t *testing.T) {
	rs := &roundStore{rounds: make(chan []string, 10)}
	w := newWriter(rs, 128, 2*time.Second)
	defer w.stop()
	w.mark(&fixedSource{"a"}) // a round begins now; the gap runs from here
	if got := nextRound(t, rs.rounds); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first round wrote %v", got)
	}
	now := time.Now()
	w.schedule(&fixedSource{"b"}, now.Add(50*time.Millisecond))
	w.schedule(&fixedSource{"c"}, now.Add(300*time.Millisecond))
	if got := nextRound(t, rs.rounds); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("the timed text went in a round of %v, want b and c together", got)
	}
}

// Commands, and text listed to go at once (a run's first), never wait for the gap.
func TestRoundGapHoldsNoCommandNorFirstText(t *testing.T) {
	rs := &roundStore{rounds: make(chan []string, 10)}
	w := newWriter(rs, 128, time.Hour)
	defer w.stop()
	w.mark(&fixedSource{"a"})
	nextRound(t, rs.rounds) // the gap of an hour runs from here
	w.schedule(&fixedSource{"timed"}, time.Now())

	done := make(chan error, 1)
	go func() { done <- w.write(context.Background(), &Batch{SessionID: "command"}) }()
	if got := nextRound(t, rs.rounds); !slices.Contains(got, "command") {
		t.Fatalf("a round of %v, want the command", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.mark(&fixedSource{"first"})
	if got := nextRound(t, rs.rounds); !slices.Contains(got, "first") {
		t.Fatalf("a round of %v, want the listed text", got)
	}
}

// A round takes the commands of the goroutines that were ready to run when the writer
// woke, not the first one's alone: the writer lets the goroutines waiting for a core go
// first, so that a burst's commands share one transaction. (On one core, each of these
// goroutines queues its command and waits; without the writer's yield, the first wakes
// the writer, which runs next and writes that command alone.)
func TestRoundTakesTheCommandsOfReadyGoroutines(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	rs := &roundStore{rounds: make(chan []string, 100)}
	w := newWriter(rs, 128, 0)
	defer w.stop()
	const n = 20
	for attempt := range 5 {
		errs := make(chan error, n)
		for i := range n {
			go func() { errs <- w.write(context.Background(), &Batch{SessionID: fmt.Sprint(attempt, "-", i)}) }()
		}
		got := nextRound(t, rs.rounds)
		for range n {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		// Most, not all: the scheduler takes a goroutine from its global queue now and
		// then, which may be the writer's.
		if len(got) < n/2 {
			t.Fatalf("attempt %d: the first round wrote %d of the %d commands ready", attempt, len(got), n)
		}
		for len(rs.rounds) > 0 {
			<-rs.rounds
		}
	}
}
