package service

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// writer is the one goroutine that writes to the store. Each round it takes the commands
// waiting to be written (up to RoundCommands, oldest first) and the streamed text of every
// session listed for it, and hands them to Store.Append at once: one transaction for all.
// While a round is being written, the next one gathers, so a busy server makes fewer,
// larger commits and a quiet one writes at once. The bound on commands keeps a crowd's
// first ones from waiting for a round of all the others: a thousand messages at once are
// written in rounds of a hundred or so, each answered, its runs started and their first
// text gathered for the next round while that one is written.
//
// Streamed text is never shown before it is durable: the writer takes a session's pending
// text (textSource.take), writes it, and only then tells the session (written), which
// appends its chunk events to the log subscribers read. When the write fails the text goes
// back to wait for a later round, so nothing is lost and nothing is shown out of order.
//
// The writer knows sessions only as textSources, and the store only for Append and Ping.
type writer struct {
	store         Store
	roundCommands int
	roundGap      time.Duration // see Config.RoundGap

	mu     sync.Mutex
	reqs   []*writeReq
	listed []textSource
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

// textSource is a session whose streamed text the writer writes in its rounds (a
// *sessionState). Both methods take the session's lock themselves.
type textSource interface {
	// take takes the text waiting to be written, as one batch whose write nothing else
	// overtakes, unless a command holds the session (busy: the writer lists it again). at
	// is the time the session was timed for on the writer's heap, zero when it was listed
	// to go at once; a stale item takes nothing. b is nil when there is nothing to take.
	take(at time.Time) (b *Batch, busy bool)
	// written is told the outcome of writing the batch take returned.
	written(err error)
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

func newWriter(store Store, roundCommands int, roundGap time.Duration) *writer {
	w := &writer{store: store, roundCommands: roundCommands, roundGap: roundGap, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
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
// lock with its log's gate closed (see sessionLog.commit), so no round takes that
// session's streamed text meanwhile.
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
	h.err = w.store.Ping(ctx)
	if h.err != nil && ErrorCode(h.err) != EUNAVAILABLE {
		h.err = Errorf(EUNAVAILABLE, "storage is unavailable: %v", h.err)
	}
	h.checked = time.Now()
	return h.err
}

// schedule has the writer take src's text at at (see sessionLog.flushAt).
func (w *writer) schedule(src textSource, at time.Time) {
	w.mu.Lock()
	w.later.push(laterItem{at: at, src: src})
	first := w.later[0].src == src
	w.mu.Unlock()
	if first { // the writer sleeps until an earlier time: wake it to sleep less
		w.signal()
	}
}

// mark has the writer take src's text in its next round (see sessionLog.relist).
func (w *writer) mark(src textSource) {
	w.mu.Lock()
	w.listed = append(w.listed, src)
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

func (w *writer) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var began time.Time // when the last round began
	for {
		select {
		case <-w.wake:
		case <-timer.C:
		case <-w.quit:
			w.round(true) // every command queued before stop, whatever RoundCommands says
			return
		}
		urgent := w.urgent()
		if hold := w.hold(began, urgent); hold > 0 {
			timer.Reset(hold) // a command or text listed meanwhile wakes the writer at once
			continue
		}
		w.gather(urgent)
		began = time.Now()
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

// hold is how long the next round waits for RoundGap to pass since the last one began:
// zero when a command or text to go at once waits (urgent of them), or the gap has passed.
func (w *writer) hold(began time.Time, urgent int) time.Duration {
	if w.roundGap <= 0 || urgent > 0 {
		return 0
	}
	return max(time.Until(began.Add(w.roundGap)), 0)
}

// gatherYields bounds how many times gather lets other goroutines go first.
const gatherYields = 8

// gather lets the goroutines waiting for a core run before a round is taken, for as long
// as they add commands or text to go at once (at most gatherYields times, and not once a
// round's worth of commands waits). Under load a burst's commands then share a
// transaction, where the writer, woken by the first and run next, would write that one
// alone and the rest in rounds as small. On a quiet server nothing waits for a core and
// the yields come back at once. It stops after two yields that added nothing: now and
// then the scheduler takes the writer back before the goroutines queued ahead of it. n is
// what waits as it begins.
func (w *writer) gather(n int) {
	still := 0
	for range gatherYields {
		if n == 0 || (w.roundCommands > 0 && n >= w.roundCommands) {
			return
		}
		runtime.Gosched()
		m := w.urgent()
		if m == n {
			if still++; still == 2 {
				return
			}
		} else {
			still = 0
		}
		n = m
	}
}

// urgent counts the commands and listed text waiting for the next round.
func (w *writer) urgent() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.reqs) + len(w.listed)
}

// round writes one round: the commands waiting (up to RoundCommands; all of them when
// all, at stop), and the text of the sessions listed and of those whose time has come.
// (At stop no text waits for its time: Close wrote the runs' text as it ended or sealed
// them.) progress is false when there was work but none could be taken.
func (w *writer) round(all bool) (progress bool) {
	now := time.Now()
	w.mu.Lock()
	reqs, listed := w.reqs, w.listed
	w.reqs, w.listed = nil, nil
	if n := w.roundCommands; !all && n > 0 && len(reqs) > n {
		w.reqs = append(w.reqs, reqs[n:]...) // the next round's, still first in line
		reqs = reqs[:n:n]
		defer w.signal()
	}
	var due []laterItem
	for len(w.later) > 0 && !w.later[0].at.After(now) {
		due = append(due, w.later.pop())
	}
	w.mu.Unlock()
	if len(reqs) == 0 && len(listed) == 0 && len(due) == 0 {
		return true
	}

	batches := make([]*Batch, 0, len(reqs)+len(listed)+len(due))
	for _, r := range reqs {
		batches = append(batches, r.b)
	}
	var flushes, again []textSource
	var later []laterItem
	for _, src := range listed {
		b, busy := src.take(time.Time{})
		switch {
		case busy: // a command holds it; its own write takes the text
			again = append(again, src)
		case b != nil:
			flushes, batches = append(flushes, src), append(batches, b)
		}
	}
	for _, it := range due {
		b, busy := it.src.take(it.at)
		switch {
		case busy:
			later = append(later, it)
		case b != nil:
			flushes, batches = append(flushes, it.src), append(batches, b)
		}
	}
	if len(again) > 0 || len(later) > 0 {
		w.mu.Lock()
		w.listed = append(w.listed, again...)
		for _, it := range later {
			w.later.push(it)
		}
		w.mu.Unlock()
		w.signal()
	}
	if len(batches) == 0 {
		return len(again) == 0 && len(later) == 0
	}

	start := time.Now()
	w.inRound.Store(start.UnixNano())
	errs := w.store.Append(context.Background(), batches)
	w.inRound.Store(0)
	w.busy.Add(int64(time.Since(start)))
	w.rounds.Add(1)
	w.batches.Add(int64(len(batches)))
	for i, err := range errs {
		if err != nil {
			w.failed.Add(1)
		}
		if i < len(reqs) {
			reqs[i].err <- err
		} else {
			flushes[i-len(reqs)].written(err)
		}
	}
	return true
}

// laterItem is a session waiting on the writer's heap until at.
type laterItem struct {
	at  time.Time
	src textSource
}

// laterQueue is a min-heap of laterItems by time, typed so that neither push nor pop
// boxes an item (container/heap's would, for every flush that waits).
type laterQueue []laterItem

func (q *laterQueue) push(it laterItem) {
	*q = append(*q, it)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h[i].at.Before(h[parent].at) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

// pop takes the earliest item; the queue must not be empty.
func (q *laterQueue) pop() laterItem {
	h := *q
	top, last := h[0], len(h)-1
	h[0] = h[last]
	h[last] = laterItem{}
	h = h[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].at.Before(h[least].at) {
			least = l
		}
		if r < len(h) && h[r].at.Before(h[least].at) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
	return top
}
