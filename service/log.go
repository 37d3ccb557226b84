package service

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"
)

// txn is one write to a session's log being prepared under the session's lock: the events
// to append, numbered after the durable end of the log, and what to do in memory once they
// are durable (done) or when they are not (undo). Nothing in memory changes before the
// write succeeds, so a command that fails leaves the session, its running agent and its
// subscribers as they were.
type txn struct {
	st   *sessionState
	b    Batch
	next int64 // the Seq the next event gets
	done []func()
	undo []func()
}

// begin starts a write to st once no other write of it is in flight; st.mu must be held,
// and stays held until the write is committed.
func (s *Service) begin(st *sessionState) *txn {
	s.waitWriteLocked(st)
	return &txn{st: st, b: Batch{SessionID: st.id}, next: st.lastSeq + 1}
}

// add appends events to the write, numbering them. Their payloads must be snapshots that
// nothing changes afterwards.
func (s *Service) add(t *txn, evs ...*Event) {
	now := s.now()
	for _, ev := range evs {
		ev.SessionID = t.st.id
		ev.Seq = t.next
		t.next++
		if ev.At.IsZero() {
			ev.At = now
		}
		if ev.Type == EventMessageAdded && ev.Message != nil {
			ev.Message.Seq = ev.Seq
		}
		t.b.Events = append(t.b.Events, ev)
	}
}

// onCommit registers f to run, under the session's lock, once the write is durable.
func (t *txn) onCommit(f func()) { t.done = append(t.done, f) }

// onAbort registers f to run, under the session's lock, when the write fails.
func (t *txn) onAbort(f func()) { t.undo = append(t.undo, f) }

// commitLocked writes t through the writer and, once it is durable, applies it in memory:
// its events join the log that subscribers read, and its done funcs run in order. When the
// write fails its undo funcs run and the error is returned. st.mu must be held; it stays
// held throughout, so nothing else changes the session meanwhile.
func (s *Service) commitLocked(ctx context.Context, t *txn) error {
	st := t.st
	if t.b.Empty() {
		for _, f := range t.done {
			f()
		}
		return nil
	}
	st.writing = true
	err := s.writer.write(ctx, &t.b)
	st.writing = false
	st.idle.Broadcast()
	if err != nil {
		for _, f := range t.undo {
			f()
		}
		if errors.Is(err, ErrNotNext) {
			// The log moved on without this replica: read it again before the next write.
			st.synced = false
			s.reconcileSoon(st)
		}
		s.log.Warn("write failed", "session", st.id, "err", err)
		return err
	}
	s.appendLocked(st, t.b.Events)
	s.publish(st, t.b.Events)
	for _, f := range t.done {
		f()
	}
	return nil
}

// textStream is text an agent streams (a message's text or a tool's output): what is
// durable, what the writer has taken and is writing, and what waits to be taken.
type textStream struct {
	written  strings.Builder
	inflight string
	pending  strings.Builder
	wlen     int // code points written
	length   int // code points in all
	bytes    int // bytes in all
}

func (t *textStream) add(delta string) {
	t.pending.WriteString(delta)
	t.length += utf8.RuneCountInString(delta)
	t.bytes += len(delta)
}

// take moves the pending text in flight and returns it with its offset in code points; ok
// is false when nothing was pending. The caller then calls commit or abort.
func (t *textStream) take() (delta string, offset int, ok bool) {
	if t.pending.Len() == 0 {
		return "", 0, false
	}
	t.inflight = t.pending.String()
	t.pending.Reset()
	return t.inflight, t.wlen, true
}

// commit makes the text in flight written.
func (t *textStream) commit() {
	t.written.WriteString(t.inflight)
	t.wlen += utf8.RuneCountInString(t.inflight)
	t.inflight = ""
}

// abort puts the text in flight back before the pending text.
func (t *textStream) abort() {
	if t.inflight == "" {
		return
	}
	rest := t.pending.String()
	t.pending.Reset()
	t.pending.WriteString(t.inflight)
	t.pending.WriteString(rest)
	t.inflight = ""
}

// all returns every character streamed so far, written or not.
func (t *textStream) all() string {
	return t.written.String() + t.inflight + t.pending.String()
}

// chunk adds to t a chunk event with the stream's pending text, if any, committed or put
// back with t. key and messageID are the event's; tool says which kind of stream it is.
func (s *Service) chunk(t *txn, ts *textStream, typ EventType, key, messageID string) {
	delta, off, ok := ts.take()
	if !ok {
		return
	}
	s.add(t, &Event{Type: typ, Key: key, MessageID: messageID, Delta: delta, Offset: off})
	t.onCommit(ts.commit)
	t.onAbort(ts.abort)
}

// readAfter returns up to limit events after position pos and the position after the
// last of them. ok is false once the session is deleted.
func (s *Service) readAfter(ctx context.Context, st *sessionState, pos Cursor, limit int) (evs []*Event, next Cursor, ok bool, err error) {
	st.mu.Lock()
	deleted, last, tailStart := st.deleted, st.lastSeq, st.tailStart
	if !deleted && pos.Seq >= tailStart-1 {
		// Served from memory: the tail holds every event after pos.
		for i := pos.Seq + 1 - tailStart; i < int64(len(st.tail)) && len(evs) < limit; i++ {
			evs = append(evs, st.tail[i])
		}
		st.mu.Unlock()
		next = pos
		if len(evs) > 0 {
			next = CursorOf(evs[len(evs)-1])
		}
		return evs, next, true, nil
	}
	st.mu.Unlock()
	if deleted {
		return nil, pos, false, nil
	}
	if pos.Seq >= last {
		return nil, pos, true, nil
	}
	stored, err := s.store.Events(ctx, st.id, pos.Seq, min(limit, int(last-pos.Seq)))
	if err != nil {
		return nil, pos, true, err
	}
	for _, ev := range stored {
		if ev.Seq > last {
			break // written since the state was read: the tail has it next time
		}
		if ev.Type.Chunky() && ev.CoalescedFrom > 0 && ev.CoalescedFrom <= pos.Seq && pos.Off > ev.Offset {
			// pos is inside the run of chunks this event replaced: give only the text after it.
			cp := *ev
			cp.Delta = runeSlice(ev.Delta, pos.Off-ev.Offset)
			cp.Offset = pos.Off
			ev = &cp
		}
		evs = append(evs, ev)
	}
	next = pos
	if len(evs) > 0 {
		next = CursorOf(evs[len(evs)-1])
	}
	return evs, next, true, nil
}

// Compaction names one finished stream whose chunk events Store.Compact folds: those of
// session SessionID with Event.Key == Key, from Seq FromSeq on.
type Compaction struct {
	SessionID, Key string
	FromSeq        int64
	// Prepared says that Folded is the folding the service made itself from the events it
	// wrote (Coalesce of the session's log from FromSeq, as it held it in memory), which
	// may be empty. A store that is the only one written by this service and finds every
	// folded run whole (each Seq from the run's first, its CoalescedFrom, to its last
	// present) may write Folded without reading the events back; otherwise it folds from
	// what it reads, as without Prepared.
	Prepared bool
	Folded   []*Event
}

// compactSoon asks the compactor to fold a finished stream's chunk events (see
// Store.Compact). Compaction only keeps the log small, so a request is dropped, with a
// note in the log, when too many wait. st.mu must be held: when the session's tail still
// holds the stream whole, and no other replica writes to the log, the folding is made
// from it here, so that the store need not read the events back.
func (s *Service) compactSoon(st *sessionState, key string, fromSeq int64) {
	if fromSeq <= 0 {
		return
	}
	c := Compaction{SessionID: st.id, Key: key, FromSeq: fromSeq}
	if i := fromSeq - st.tailStart; s.coord == nil && st.synced && i >= 0 && i <= int64(len(st.tail)) {
		c.Folded, _ = Coalesce(st.tail[i:], key)
		c.Prepared = true
	}
	select {
	case s.compactions <- c:
	default:
		s.log.Debug("compaction skipped: too many waiting", "session", st.id)
	}
}

// maxCompactBatch is how many finished streams the compactor folds at most in one go.
const maxCompactBatch = 1024

// compactor folds finished streams off the paths that answer clients. Compaction only
// keeps the log small, so it can wait: the compactor gathers the streams that finish
// over Config.CompactAfter and folds them in one go, so that replies ending together (a
// burst) cost the store one transaction after the busiest moment rather than one each
// during it. At shutdown it folds what waits.
func (s *Service) compactor() {
	defer close(s.compactorDone)
	do := func(batch []Compaction) {
		if len(batch) == 0 {
			return
		}
		if err := s.store.Compact(context.Background(), batch); err != nil {
			s.log.Warn("compaction", "streams", len(batch), "err", err)
		}
	}
	take := func(batch []Compaction) []Compaction {
		for len(batch) < maxCompactBatch {
			select {
			case c := <-s.compactions:
				batch = append(batch, c)
			default:
				return batch
			}
		}
		return batch
	}
	gather := time.NewTimer(s.cfg.CompactAfter)
	gather.Stop()
	for {
		var batch []Compaction
		select {
		case c := <-s.compactions:
			batch = append(batch, c)
		case <-s.compactorQuit:
			for batch = take(nil); len(batch) > 0; batch = take(nil) {
				do(batch)
			}
			return
		}
		gather.Reset(s.cfg.CompactAfter)
		select {
		case <-gather.C:
		case <-s.compactorQuit:
			gather.Stop()
		}
		do(take(batch))
	}
}
