package service

import (
	"context"
	"slices"
	"sync"
	"time"
)

// sessionLog is one session's log as this process holds it: where its durable end is,
// its latest events, who reads them, and the gate that lets one write of it out at a
// time. It is the only code that changes these; everything else asks it. Its methods are
// called with the session's lock held (sessionState.mu), and every field is guarded by it.
//
// The words used about it:
//   - durable: written by the store. Only durable events are ever shown to a reader, so a
//     crash never takes back what someone was shown.
//   - the end: the position after the last durable event (end.Seq, end.Off).
//   - the tail: the latest durable events, kept for readers; those further behind read
//     the store.
//   - synced: the end was read from the store since the log was made here or lost track
//     of the store's (a write found that another process wrote first). Until then the
//     end may be behind the store's, and a write may be refused with ErrNotNext.
//
// Invariants:
//   - tail holds the events tailStart..end.Seq, in Seq order with no gap; it may be
//     empty, with tailStart == end.Seq+1.
//   - at most one write of the session is out at a time (writing). A write numbers its
//     events from end.Seq+1 (begin), and begin waits for the write out to end first.
//   - a write changes memory only once it is durable (settle): its events join the tail,
//     readers are woken, then its onCommit funcs run, in order. A write that fails
//     changes nothing but what its onAbort funcs put back.
//   - once deleted is set it stays set: readers end, and nothing more is written.
type sessionLog struct {
	id   string
	idle *sync.Cond // signalled when a write ends (writing turns false)

	end       Cursor
	synced    bool
	tail      []*Event
	tailStart int64
	maxTail   int // events the tail keeps at least; it is trimmed at twice that
	subs      []*Subscription
	writing   bool
	deleted   bool

	// leaf is the last message of the session's current branch ("" for none), known
	// when leafKnown: durable events move it (a message added on the branch, a
	// BranchSelected), and it is read from the store again after the end was reset.
	leaf      string
	leafKnown bool

	// flush is the writer's side of the log: when its streamed text goes next.
	flush flushState
}

// flushState is when a session's streamed text is written: the writer takes it in its
// rounds (see writer), at once or once FlushInterval has passed since the last flush.
type flushState struct {
	// listed is set while the session is on the writer's list of text to take at once;
	// at, when set, is when the writer takes it next (FlushInterval after last, or a pause
	// after a failed write): the session waits on the writer's heap until then.
	listed bool
	at     time.Time
	last   time.Time // when streamed text was last taken
	// failingSince is when writes of streamed text began to fail (zero while they work).
	failingSince time.Time
	// out is the write of streamed text that the writer took and is writing, if any.
	out *txn
}

func newSessionLog(id string, lastSeq int64, mu *sync.Mutex, maxTail int) sessionLog {
	return sessionLog{id: id, idle: sync.NewCond(mu), end: Cursor{Seq: lastSeq}, tailStart: lastSeq + 1, maxTail: maxTail}
}

// waitIdle waits until no write of the session is out.
func (l *sessionLog) waitIdle() {
	for l.writing {
		l.idle.Wait()
	}
}

// begin starts a write of the log once no other is out: its events are numbered after
// the end.
func (l *sessionLog) begin(st *sessionState) *txn {
	l.waitIdle()
	return &txn{st: st, b: Batch{SessionID: l.id}, next: l.end.Seq + 1, leaf: l.leaf, leafKnown: l.leafKnown}
}

// commit writes t with w, the log's gate closed meanwhile, and settles it. The session's
// lock stays held throughout, so nothing else changes the session meanwhile.
func (l *sessionLog) commit(ctx context.Context, w *writer, t *txn) error {
	if t.b.Empty() {
		return l.settle(t, nil)
	}
	t.prepareLocked()
	l.writing = true
	err := w.write(ctx, &t.b)
	l.writing = false
	l.idle.Broadcast()
	return l.settle(t, err)
}

// takeOut hands t, a write of streamed text, to the writer's round: the gate stays closed
// until written settles it.
func (l *sessionLog) takeOut(t *txn) *Batch {
	t.prepareLocked()
	l.writing = true
	l.flush.out = t
	l.flush.last = time.Now()
	return &t.b
}

// written settles the write the writer took (takeOut) with its outcome, and opens the gate.
func (l *sessionLog) written(err error) (*txn, error) {
	t := l.flush.out
	l.flush.out = nil
	l.writing = false
	l.idle.Broadcast()
	if err == nil {
		l.flush.failingSince = time.Time{}
	} else if l.flush.failingSince.IsZero() {
		l.flush.failingSince = time.Now()
	}
	return t, l.settle(t, err)
}

// settle is "write, then apply": once t is durable (err is nil) its events join the log
// (or the session is gone, for a deletion) and its onCommit funcs run; when it failed its
// onAbort funcs run, and a write refused because the log moved on (ErrNotNext) leaves the
// log unsynced, to be read again before the next. It returns err.
func (l *sessionLog) settle(t *txn, err error) error {
	if err != nil {
		for _, f := range t.undo {
			f()
		}
		if isNotNext(err) {
			l.lostSync()
		}
		return err
	}
	if t.b.Delete {
		l.markDeleted()
	} else {
		l.append(t.b.Events)
	}
	for _, f := range t.done {
		f()
	}
	return nil
}

// append makes durable events visible: the end moves past them, the tail keeps them, and
// readers are woken.
func (l *sessionLog) append(evs []*Event) {
	if len(evs) == 0 {
		return
	}
	l.end = CursorOf(evs[len(evs)-1])
	if l.leafKnown {
		l.leaf = leafAfter(l.leaf, evs)
	}
	l.tail = append(l.tail, evs...)
	if len(l.tail) >= 2*l.maxTail {
		// Keep the newest maxTail; readers that fall behind read from the store. Trimming
		// only at twice the size keeps appends amortised O(1).
		l.tail = append(make([]*Event, 0, 2*l.maxTail), l.tail[len(l.tail)-l.maxTail:]...)
	}
	l.tailStart = l.tail[0].Seq
	l.wake()
}

// resetEnd moves the end to end, as the store has it, dropping the tail: what readers
// have not read comes from the store. Readers are woken.
func (l *sessionLog) resetEnd(end Cursor) {
	l.end = end
	l.leaf, l.leafKnown = "", false
	l.tail, l.tailStart = nil, end.Seq+1
	l.wake()
}

// syncedAt records that the store's log ends at end, read just now: the end moves there
// when it is elsewhere (see resetEnd), and the log is synced.
func (l *sessionLog) syncedAt(end Cursor) {
	if end.Seq != l.end.Seq {
		l.resetEnd(end)
	}
	l.synced = true
}

// lostSync records that the store may hold more than the log knows (another process wrote
// to the session): it is read again before the next write.
func (l *sessionLog) lostSync() { l.synced = false }

// learnLeaf records the current branch's last message as the store has it ("" for none).
func (l *sessionLog) learnLeaf(leaf string) { l.leaf, l.leafKnown = leaf, true }

// leafAfter returns the current branch's last message after evs, leaf before them.
func leafAfter(leaf string, evs []*Event) string {
	for _, ev := range evs {
		if next, moves := ev.movesLeaf(); moves {
			leaf = next
		}
	}
	return leaf
}

// movesLeaf is the one rule of what becomes of the current branch's last message (the
// leaf) with an event: a message added on the branch becomes it; a BranchSelected names
// it; no other event moves it.
func (ev *Event) movesLeaf() (leaf string, moves bool) {
	switch {
	case ev.Type == EventMessageAdded && ev.Message != nil && !ev.Message.OffBranch:
		return ev.Message.ID, true
	case ev.Type == EventBranchSelected:
		return ev.Key, true
	}
	return "", false
}

// markDeleted ends the log: the session was deleted, here or elsewhere.
func (l *sessionLog) markDeleted() {
	l.deleted = true
	l.wake()
}

// wake tells every reader that there may be something to read.
func (l *sessionLog) wake() {
	for _, sub := range l.subs {
		sub.notify()
	}
}

// whole returns the log in memory when the tail holds all of it, from its first event
// to its end; ok is false otherwise.
func (l *sessionLog) whole() (evs []*Event, ok bool) {
	if l.tailStart != 1 || len(l.tail) == 0 || l.tail[len(l.tail)-1].Seq != l.end.Seq {
		return nil, false
	}
	return l.tail, true
}

// since returns the events of the tail from Seq from on, when the tail holds them all
// (from may be end.Seq+1: none).
func (l *sessionLog) since(from int64) ([]*Event, bool) {
	i := from - l.tailStart
	if i < 0 || i > int64(len(l.tail)) {
		return nil, false
	}
	return l.tail[i:], true
}

// read returns up to limit events after pos that the tail holds; fromTail is false when
// the tail does not reach back to pos (read the store, up to end).
func (l *sessionLog) read(pos Cursor, limit int) (evs []*Event, fromTail bool) {
	if pos.Seq < l.tailStart-1 {
		return nil, false
	}
	for i := pos.Seq + 1 - l.tailStart; i < int64(len(l.tail)) && len(evs) < limit; i++ {
		evs = append(evs, l.tail[i])
	}
	return evs, true
}

// at returns the event seq when the tail holds it.
func (l *sessionLog) at(seq int64) (*Event, bool) {
	if i := seq - l.tailStart; seq > 0 && i >= 0 && i < int64(len(l.tail)) {
		return l.tail[i], true
	}
	return nil, false
}

// addReader adds a subscription to the readers woken when the log grows.
func (l *sessionLog) addReader(sub *Subscription) { l.subs = append(l.subs, sub) }

// removeReader removes a subscription, and returns how many readers are left.
func (l *sessionLog) removeReader(sub *Subscription) int {
	if i := slices.Index(l.subs, sub); i >= 0 {
		l.subs[i] = l.subs[len(l.subs)-1]
		l.subs[len(l.subs)-1] = nil
		l.subs = l.subs[:len(l.subs)-1]
	}
	return len(l.subs)
}

// flushSoon has w take the log's streamed text (src's) at once or, with an interval, once
// it has passed since the last flush; nothing when it is listed or timed already.
func (l *sessionLog) flushSoon(w *writer, src textSource, interval time.Duration) {
	f := &l.flush
	if f.listed || !f.at.IsZero() {
		return
	}
	if at := f.last.Add(interval); !f.last.IsZero() && time.Until(at) > 0 {
		l.flushAt(w, src, at)
		return
	}
	l.relist(w, src)
}

// flushAt has w take the log's streamed text at at, unless it is timed already.
func (l *sessionLog) flushAt(w *writer, src textSource, at time.Time) {
	if !l.flush.at.IsZero() {
		return
	}
	l.flush.at = at
	w.schedule(src, at)
}

// relist has w take the log's streamed text in its next round.
func (l *sessionLog) relist(w *writer, src textSource) {
	if l.flush.listed {
		return
	}
	l.flush.listed = true
	w.mark(src)
}

// flushNow makes the log's next streamed text go at once, whatever an earlier flush left
// waiting: a timed item already on the writer's heap is stale from now on.
func (l *sessionLog) flushNow() { l.flush.last, l.flush.at = time.Time{}, time.Time{} }

// due is take's first step (see textSource): it reports whether the writer's item for
// at (zero: its list of text to take at once) still stands, and takes it off the log.
func (l *sessionLog) due(at time.Time) bool {
	f := &l.flush
	if at.IsZero() {
		f.listed = false
		return true
	}
	// Unless the log's time is still this one, the item is stale: a run that started
	// since called the wait off (its first text goes at once).
	if !f.at.Equal(at) {
		return false
	}
	f.at = time.Time{}
	return !f.listed // listed: it goes at once anyway
}
