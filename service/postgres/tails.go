package postgres

import (
	"math/rand/v2"
	"sync"

	"github.com/jackc/pgx/v5"
)

// A write must know where each session's log ends, as the database has it: another
// replica may have written since (a run taken over, a stale owner still writing). Reading
// it is a probe of the log's last key per session per round, the costliest of Append's
// reads. So each session's row carries an epoch, and the store remembers, for the
// sessions it wrote, the epoch it left and the Seq its last write ended at (tails). A
// transaction that finds the epoch it left, under the session's write lock, knows that no
// one else wrote since: any other writer finds an epoch it did not leave, probes the log,
// and sets a new epoch of its own (random, so that no writer finds its own again by
// chance) in the same transaction as its write. Whatever goes wrong (a refusal, a rollback,
// an outcome unknown) the store forgets what it knew of the sessions involved.

// tail is what the store knows of a session it wrote: the epoch it left, and its last Seq.
type tail struct{ epoch, last int64 }

// tails holds the sessions' tails this store knows; bounded, it forgets all when full.
type tails struct {
	mu sync.Mutex
	m  map[string]tail
}

// maxTails bounds tails: past it, every session is probed once more.
const maxTails = 200_000

// take returns what the store knows of the sessions ids and forgets it: it stands again
// only once the transaction that reads it commits (set).
func (t *tails) take(ids []string) map[string]tail {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]tail, len(ids))
	for _, id := range ids {
		if v, ok := t.m[id]; ok {
			out[id] = v
			delete(t.m, id)
		}
	}
	return out
}

// set records what a committed transaction left: the end of each session it wrote.
func (t *tails) set(known map[string]tail) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil || len(t.m)+len(known) > maxTails {
		t.m = make(map[string]tail, len(known))
	}
	for id, v := range known {
		t.m[id] = v
	}
}

// newEpoch returns an epoch for a session a transaction writes without having found its
// own: never 0, the epoch of a row no one wrote with one.
func newEpoch() int64 { return rand.Int64N(1<<62) + 1 }

// epochs is what a transaction changes of its sessions' epochs: those of the sessions it
// creates go in their inserted rows (queueWrites), the others in one update (queue).
type epochs struct {
	ids     []string
	values  []int64
	created map[string]int64
}

// queue queues the statement that sets the new epochs, after the transaction's writes.
func (e *epochs) queue(wb *pgx.Batch) {
	if len(e.ids) > 0 {
		wb.Queue(qSetEpochs, e.ids, e.values)
	}
}
