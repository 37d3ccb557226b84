package sqlite

import (
	"context"
	"database/sql"
	"runtime"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// Compact implements service.Store. A stream the service prepared is written as it was
// folded once each of its runs is found whole (runsWhole); any other is folded from what
// is read, only what folding needs, on the read connections. It then writes the streams'
// folding in transactions of CompactHold at most: each commits what it folded and lets the
// writer's rounds in before the next, so that the streams still going wait for one slice
// of a large compaction, not for all of it. Each stream is folded in one transaction,
// dropping its folded runs with one statement each: a run's events are consecutive in the
// log, so the range of Seqs from its first to its last holds nothing else. A session
// deleted in between loses its rows anyway, and Append only adds events after the folded
// ones.
func (s *Store) Compact(ctx context.Context, cs []service.Compaction) error {
	if err := s.check(); err != nil {
		return err
	}
	var todo []folding
	for _, c := range cs {
		folded := c.Folded
		whole, err := s.runsWhole(ctx, c)
		if err != nil {
			return err
		}
		if !whole {
			evs, err := getAll(ctx, s, "events", scanChunk, qChunks, c.SessionID, c.FromSeq)
			if err != nil {
				return err
			}
			folded, _ = service.Coalesce(evs, c.Key)
		}
		if len(folded) > 0 {
			todo = append(todo, folding{c, folded})
		}
	}
	for len(todo) > 0 {
		n, err := s.foldSome(ctx, todo)
		if err != nil {
			return err
		}
		todo = todo[n:]
		if s.compactSliced != nil {
			s.compactSliced(n, len(todo))
		}
		if len(todo) > 0 {
			// The writer may be waiting for the connection: let it take it first, rather
			// than take it straight back (a sync.Mutex lets a running goroutine barge in).
			runtime.Gosched()
		}
	}
	return nil
}

// runsWhole reports whether c's prepared folding can be written as it is: the file holds
// every Seq of each folded run (one count on the log's key per run, where reading the
// events back costs a row lookup each). This store is the only one the service writes, so
// a run whose Seqs are all there holds the events the service folded; one that lost some
// (a session deleted, folded before) is folded from what is read.
func (s *Store) runsWhole(ctx context.Context, c service.Compaction) (bool, error) {
	if !c.PreparedInRange() {
		return false, nil
	}
	if err := s.check(); err != nil {
		return false, err
	}
	for _, e := range c.Folded {
		first := e.CoalescedFrom
		var n int64
		err := s.stmt(qCountEvents).QueryRowContext(context.WithoutCancel(ctx), c.SessionID, first, e.Seq).Scan(&n)
		if err != nil {
			return false, s.fail("events", err)
		}
		if n != e.Seq-first+1 {
			return false, nil
		}
	}
	return true, nil
}

// folding is one stream's chunk events as Compact folds them.
type folding struct {
	c      service.Compaction
	folded []*service.Event
}

// foldSome writes the folding of todo's first streams in one transaction, as many as it
// can in s.hold (at least one), and answers how many.
func (s *Store) foldSome(ctx context.Context, todo []folding) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	start := time.Now()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.fail("compact", err)
	}
	defer tx.Rollback()
	w := &txWriter{s: s, ctx: ctx, tx: tx, prepared: map[string]*sql.Stmt{}}
	n := 0
	for n < len(todo) && (n == 0 || time.Since(start) < s.hold) {
		f := todo[n]
		for _, e := range f.folded {
			// CoalescedFrom is where this run begins (or began, when folded before).
			from := e.CoalescedFrom
			if _, err := w.exec(qDropEvents, f.c.SessionID, max(from, f.c.FromSeq), e.Seq); err != nil {
				return 0, s.fail("compact", err)
			}
			if _, err := w.exec(qRewriteEvent, f.c.SessionID, e.Seq, e.Delta, e.Offset, e.CoalescedFrom); err != nil {
				return 0, s.fail("compact", err)
			}
		}
		n++
	}
	if err := tx.Commit(); err != nil {
		return 0, s.fail("compact", err)
	}
	return n, nil
}
