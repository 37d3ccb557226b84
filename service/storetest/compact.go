package storetest

import (
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

func testCompact(t *testing.T, s service.Store) {
	ctx := t.Context()
	l := create(t, s, newSession("s1", "u1", t0))
	m := newMessage("m1", "s1")
	tc := newToolCall("t1", "s1", "m1", t0)
	l.append(added(m), // 1
		chunk("m1", "Hel", 0), chunk("m1", "lo", 3), // 2, 3
		toolStarted(tc),                              // 4
		chunk("m1", ", ", 5), toolOutput(tc, "o", 0), // 5, 6
		chunk("m1", "wor", 7), chunk("m1", "ld", 10), // 7, 8
		completed(m)) // 9
	if err := s.Compact(ctx, []service.Compaction{{SessionID: "s1", Key: "m1", FromSeq: 2}}); err != nil {
		t.Fatal(err)
	}
	evs := wantHelloWorldFolded(t, s, "s1")
	// Compacting again changes nothing; another stream's key leaves these alone.
	if err := s.Compact(ctx, []service.Compaction{{SessionID: "s1", Key: "m1", FromSeq: 2}, {SessionID: "s1", Key: "t1", FromSeq: 2}}); err != nil {
		t.Fatal(err)
	}
	again, _ := s.Events(ctx, "s1", 0, 0)
	wantEqual(t, "events after compacting again", again, evs)
	if got, _ := s.Session(ctx, "s1"); got == nil || got.LastSeq != 9 {
		t.Errorf("LastSeq after compaction = %+v, want 9", got)
	}
}

// testCompactMany folds several sessions' streams in one call: a session that does not
// exist is skipped, and the others are folded as one at a time would fold them.
func testCompactMany(t *testing.T, s service.Store) {
	ctx := t.Context()
	var cs []service.Compaction
	for _, id := range []string{"s1", "s2"} {
		l := create(t, s, newSession(id, "u1", t0))
		m := newMessage(id+"m", id)
		l.append(added(m), chunk(m.ID, "a", 0), chunk(m.ID, "b", 1), chunk(m.ID, "c", 2), completed(m))
		cs = append(cs, service.Compaction{SessionID: "missing", Key: "m", FromSeq: 1}, service.Compaction{SessionID: id, Key: m.ID, FromSeq: 2})
	}
	if err := s.Compact(ctx, cs); err != nil {
		t.Fatalf("Compact with a missing session: %v, want it skipped", err)
	}
	for _, id := range []string{"s1", "s2"} {
		evs, err := s.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		wantEqual(t, id+": seqs after compaction", seqsOf(evs), []int64{1, 4, 5})
		if e := evs[1]; e.Delta != "abc" || e.Offset != 0 || e.CoalescedFrom != 2 {
			t.Errorf("%s: folded chunk %+v, want abc from offset 0, coalesced from 2", id, e)
		}
	}
}

// testCompactPrepared gives Compact the folding the service made of the events it wrote:
// the result is the same as folding what the store reads. A prepared folding whose runs
// the store no longer holds whole (folded before) is not written as it is: here its text
// is wrong, and the events stay as the first folding left them.
func testCompactPrepared(t *testing.T, s service.Store) {
	ctx := t.Context()
	written := func(id string) []*service.Event {
		l := create(t, s, newSession(id, "u1", t0))
		m := newMessage("m"+id, id)
		tc := newToolCall("t"+id, id, m.ID, t0)
		evs := []*service.Event{added(m), // 1
			chunk(m.ID, "Hel", 0), chunk(m.ID, "lo", 3), // 2, 3
			toolStarted(tc),                              // 4
			chunk(m.ID, ", ", 5), toolOutput(tc, "o", 0), // 5, 6
			chunk(m.ID, "wor", 7), chunk(m.ID, "ld", 10), // 7, 8
			completed(m)} // 9
		l.append(evs...)
		return evs
	}
	prepared := func(id string, evs []*service.Event) service.Compaction {
		folded, _ := service.Coalesce(evs[1:], "m"+id)
		return service.Compaction{SessionID: id, Key: "m" + id, FromSeq: 2, Prepared: true, Folded: folded}
	}
	evs := written("s1")
	if err := s.Compact(ctx, []service.Compaction{prepared("s1", evs)}); err != nil {
		t.Fatal(err)
	}
	wantHelloWorldFolded(t, s, "s1")

	// stale is a prepared folding of a stream written to id, which is then folded from
	// what is read; its text is spoilt, to show should it be written.
	stale := func(id string) service.Compaction {
		c := prepared(id, written(id))
		if err := s.Compact(ctx, []service.Compaction{{SessionID: id, Key: "m" + id, FromSeq: 2}}); err != nil {
			t.Fatal(err)
		}
		for i, e := range c.Folded {
			cp := *e
			cp.Delta = strings.Repeat("?", len(e.Delta))
			c.Folded[i] = &cp
		}
		return c
	}
	if err := s.Compact(ctx, []service.Compaction{stale("s2")}); err != nil {
		t.Fatal(err)
	}
	wantHelloWorldFolded(t, s, "s2")

	// Several streams in one call, as the compactor gathers them: prepared and whole,
	// prepared and stale, not prepared, prepared for a session deleted meanwhile. Each
	// ends as folding what is stored would leave it; the deleted one writes nothing.
	whole := prepared("s3", written("s3"))
	spoilt := stale("s4")
	written("s5")
	gone := prepared("s6", written("s6"))
	mustAppend(t, s, &service.Batch{SessionID: "s6", Delete: true})
	if err := s.Compact(ctx, []service.Compaction{whole, spoilt, {SessionID: "s5", Key: "ms5", FromSeq: 2}, gone}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s3", "s4", "s5"} {
		wantHelloWorldFolded(t, s, id)
	}
	if evs, err := s.Events(ctx, "s6", 0, 0); err == nil && len(evs) > 0 {
		t.Errorf("a deleted session has %d events after compaction", len(evs))
	}
}

// wantHelloWorldFolded checks session id's log as the stream "Hello, world" broken by a
// tool call's start and output (see testCompact) is left once folded: seqs 2 and 7 gone,
// "Hello" at 3 from 2 and "world" at 8 from 7. It returns the log.
func wantHelloWorldFolded(t *testing.T, s service.Store, id string) []*service.Event {
	t.Helper()
	evs, err := s.Events(t.Context(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, id+": seqs after compaction", seqsOf(evs), []int64{1, 3, 4, 5, 6, 8, 9})
	byseq := map[int64]*service.Event{}
	for _, e := range evs {
		byseq[e.Seq] = e
	}
	for seq, want := range map[int64][3]any{3: {"Hello", 0, int64(2)}, 5: {", ", 5, int64(0)}, 8: {"world", 7, int64(7)}} {
		e := byseq[seq]
		if got := [3]any{e.Delta, e.Offset, e.CoalescedFrom}; got != want {
			t.Errorf("%s: event %d: delta, offset, coalesced from = %v, want %v", id, seq, got, want)
		}
	}
	return evs
}
