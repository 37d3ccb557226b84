package service

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// writer is the one goroutine that writes to the store. Each round it takes the commands
// waiting to be written (up to RoundCommands, oldest first) and every session with
// streamed text to flush, and hands them to Store.Append at once: one transaction for all.
// While a round is being written, the next one gathers, so a busy server makes fewer,
// larger commits and a quiet one writes at once. The bound on commands keeps a crowd's
// first ones from waiting for a round of all the others: a thousand messages at once are
// written in rounds of a hundred or so, each answered, its runs started and their first
// text gathered for the next round while that one is written.
//
// Streamed text is never shown before it is durable: the writer takes a run's pending
// text, writes it, and only then appends its chunk events to the log subscribers read.
// When the write fails the text goes back to wait for the next round (after a pause that
// grows while the storage keeps failing), so nothing is lost and nothing is shown out of
// order.
type writer struct {
	s *Service

	mu    sync.Mutex
	reqs  []*writeReq
	dirty []*sessionState
	// later holds the sessions whose text waits for its time (FlushInterval since the last
	// flush, or a pause after a failed write), earliest first: the writer's own clock, so
	// that a thousand streams cost no timer and no goroutine per flush.
	later   laterQueue
	wake    chan struct{} // buffered(1): there is work
	quit    chan struct{}
	done    chan struct{}
	stopped bool

	rounds, batches, failed atomic.Int64
	busy                    atomic.Int64 // nanoseconds spent in Append

	// inRound is when the round being written began (unix nanoseconds; 0 between rounds);
	// health is the storage's answer to the last check (see write).
	inRound atomic.Int64
	health  struct {
		mu      sync.Mutex
		checked time.Time
		err     error
	}
}

// slowRound is how long a command waits for its round before it asks whether the storage
// answers, and healthEvery how long the answer stands for those waiting.
// A failed check stands healthStands for the commands that come meanwhile; a check waits
// healthTimeout for the store's answer.
const (
	slowRound     = 250 * time.Millisecond
	healthEvery   = 100 * time.Millisecond
	healthStands  = time.Second
	healthTimeout = 500 * time.Millisecond
)

// writeReq is a command's batch waiting for its round.
type writeReq struct {
	b   *Batch
	err chan error // buffered(1)
}

// WriterStats counts the writer's work.
type WriterStats struct {
	Rounds  int64         // transactions
	Batches int64         // session batches written in them
	Failed  int64         // batches that failed
	Busy    time.Duration // time spent writing
	Waiting int           // commands waiting for a round now
}

func newWriter(s *Service) *writer {
	w := &writer{s: s, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *writer) stats() WriterStats {
	w.mu.Lock()
	waiting := len(w.reqs)
	w.mu.Unlock()
	return WriterStats{Rounds: w.rounds.Load(), Batches: w.batches.Load(), Failed: w.failed.Load(),
		Busy: time.Duration(w.busy.Load()), Waiting: waiting}
}

func (w *writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// write writes b in the next round and returns its outcome. The caller holds b's session
// lock with writing set, so no round takes that session's streamed text meanwhile.
//
// A command still waiting for its round after slowRound, behind a round that is out, asks
// whether the storage answers; when it does not, the command leaves the queue and is
// refused with EUNAVAILABLE (it changed nothing). The round may be waiting to learn whether
// its commit went through, which can take until the storage is back.
func (w *writer) write(ctx context.Context, b *Batch) error {
	if w.inRound.Load() != 0 {
		// The storage did not answer a moment ago, and the round is still out: refuse at
		// once, rather than hold the session's lock while asking again.
		if err := w.lastHealth(); err != nil {
			return err
		}
	}
	req := &writeReq{b: b, err: make(chan error, 1)}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return Errorf(EUNAVAILABLE, "the server is shutting down")
	}
	w.reqs = append(w.reqs, req)
	w.mu.Unlock()
	w.signal()
	t := time.NewTimer(slowRound)
	defer t.Stop()
	for {
		select {
		case err := <-req.err: // the round finishes whatever the caller's context does
			return err
		case <-t.C:
			if w.inRound.Load() != 0 {
				if err := w.healthy(ctx); err != nil && w.withdraw(req) {
					return err
				}
			}
			t.Reset(healthEvery)
		}
	}
}

// withdraw takes req out of the queue; false when a round has taken it already.
func (w *writer) withdraw(req *writeReq) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, r := range w.reqs {
		if r == req {
			w.reqs = append(w.reqs[:i], w.reqs[i+1:]...)
			return true
		}
	}
	return false
}

// lastHealth returns the error of the last check of the storage when it failed less than
// healthStands ago.
func (w *writer) lastHealth() error {
	h := &w.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil && time.Since(h.checked) < healthStands {
		return h.err
	}
	return nil
}

// healthy returns the store's Ping, checked at most every healthEvery.
func (w *writer) healthy(ctx context.Context) error {
	h := &w.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.checked) < healthEvery {
		return h.err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healthTimeout)
	defer cancel()
	h.err = w.s.store.Ping(ctx)
	if h.err != nil && ErrorCode(h.err) != EUNAVAILABLE {
		h.err = Errorf(EUNAVAILABLE, "storage is unavailable: %v", h.err)
	}
	h.checked = time.Now()
	return h.err
}

// flushSoon puts st on the list of sessions whose streamed text the next round writes, at
// once or, with a FlushInterval, once it has passed since the last flush. st.mu must be
// held.
func (w *writer) flushSoon(st *sessionState) {
	if st.dirty || !st.flushAt.IsZero() {
		return
	}
	if at := st.lastFlush.Add(w.s.cfg.FlushInterval); !st.lastFlush.IsZero() && time.Until(at) > 0 {
		w.schedule(st, at)
		return
	}
	w.markLocked(st)
}

// retryLater puts st back on the list after a pause, once a write of its text failed.
// st.mu must be held.
func (w *writer) retryLater(st *sessionState, pause time.Duration) {
	if st.flushAt.IsZero() {
		w.schedule(st, time.Now().Add(pause))
	}
}

// schedule has the writer put st on its list at at. st.mu must be held.
func (w *writer) schedule(st *sessionState, at time.Time) {
	st.flushAt = at
	w.mu.Lock()
	heap.Push(&w.later, laterItem{at: at, st: st})
	first := w.later[0].st == st
	w.mu.Unlock()
	if first { // the writer sleeps until an earlier time: wake it to sleep less
		w.signal()
	}
}

func (w *writer) markLocked(st *sessionState) {
	if st.dirty {
		return
	}
	st.dirty = true
	w.mu.Lock()
	w.dirty = append(w.dirty, st)
	w.mu.Unlock()
	w.signal()
}

// stop writes what is waiting and ends the writer; later writes fail with EUNAVAILABLE.
func (w *writer) stop() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		<-w.done
		return
	}
	w.stopped = true
	w.mu.Unlock()
	close(w.quit)
	<-w.done
}

// flush is one session's streamed text taken for a round.
type flush struct {
	t *txn
}

func (w *writer) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-w.wake:
		case <-timer.C:
		case <-w.quit:
			w.round(true) // every command queued before stop, whatever RoundCommands says
			return
		}
		if progress := w.round(false); !progress {
			// Every session on the list was busy with a command: give them a moment.
			t := time.NewTimer(time.Millisecond)
			select {
			case <-t.C:
			case <-w.quit:
				t.Stop()
			}
		}
		w.mu.Lock()
		var next time.Time
		if len(w.later) > 0 {
			next = w.later[0].at
		}
		w.mu.Unlock()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
	}
}

// round writes one round: the commands waiting (up to RoundCommands; all of them when
// all, at stop), and the text of the sessions on the list and of those whose time has
// come. (At stop no text waits for its time: Close wrote the runs' text as it ended or
// sealed them.) progress is false when there was work but none could be taken.
func (w *writer) round(all bool) (progress bool) {
	now := time.Now()
	w.mu.Lock()
	reqs, dirty := w.reqs, w.dirty
	w.reqs, w.dirty = nil, nil
	if n := w.s.cfg.RoundCommands; !all && n > 0 && len(reqs) > n {
		w.reqs = append(w.reqs, reqs[n:]...) // the next round's, still first in line
		reqs = reqs[:n:n]
		defer w.signal()
	}
	var due []laterItem
	for len(w.later) > 0 && !w.later[0].at.After(now) {
		due = append(due, heap.Pop(&w.later).(laterItem))
	}
	w.mu.Unlock()
	if len(reqs) == 0 && len(dirty) == 0 && len(due) == 0 {
		return true
	}

	var flushes []flush
	var again []*sessionState
	var later []laterItem
	take := func(st *sessionState) {
		if st.writing {
			w.markLocked(st)
			return
		}
		if t := w.s.takeTextLocked(st); t != nil {
			st.writing = true
			flushes = append(flushes, flush{t: t})
		}
	}
	for _, st := range dirty {
		if !st.mu.TryLock() { // a command holds it; its own write takes the text
			again = append(again, st)
			continue
		}
		st.dirty = false
		take(st)
		st.mu.Unlock()
	}
	for _, it := range due {
		st := it.st
		if !st.mu.TryLock() {
			later = append(later, it)
			continue
		}
		// Unless the session's time is still this one, the item is stale: a run that
		// started since called the wait off (its first text goes at once).
		if st.flushAt.Equal(it.at) {
			st.flushAt = time.Time{}
			if !st.dirty {
				take(st)
			}
		}
		st.mu.Unlock()
	}
	if len(again) > 0 || len(later) > 0 {
		w.mu.Lock()
		w.dirty = append(w.dirty, again...)
		for _, it := range later {
			heap.Push(&w.later, it)
		}
		w.mu.Unlock()
		w.signal()
	}
	if len(reqs) == 0 && len(flushes) == 0 {
		return len(again) == 0 && len(later) == 0
	}

	batches := make([]*Batch, 0, len(reqs)+len(flushes))
	for _, r := range reqs {
		batches = append(batches, r.b)
	}
	for _, f := range flushes {
		batches = append(batches, &f.t.b)
	}
	start := time.Now()
	w.inRound.Store(start.UnixNano())
	errs := w.s.store.Append(context.Background(), batches)
	w.inRound.Store(0)
	w.busy.Add(int64(time.Since(start)))
	w.rounds.Add(1)
	w.batches.Add(int64(len(batches)))
	for i, r := range reqs {
		if errs[i] != nil {
			w.failed.Add(1)
		}
		r.err <- errs[i]
	}
	for i, f := range flushes {
		err := errs[len(reqs)+i]
		if err != nil {
			w.failed.Add(1)
		}
		w.s.flushed(f.t, err)
	}
	return true
}

// laterItem is a session waiting on the writer's list until at.
type laterItem struct {
	at time.Time
	st *sessionState
}

// laterQueue is a min-heap of laterItems by time (container/heap).
type laterQueue []laterItem

func (q laterQueue) Len() int           { return len(q) }
func (q laterQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q laterQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *laterQueue) Push(x any)        { *q = append(*q, x.(laterItem)) }
func (q *laterQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = laterItem{}
	*q = old[:len(old)-1]
	return it
}
