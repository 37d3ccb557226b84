package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/talkgraph/talkgraph/service"
)

// state is what the stored state says about a call's batches, as read under its locks,
// and as the accepted batches change it.
type state struct {
	exists  map[string]bool              // sessions, by ID
	last    map[string]int64             // their last Seq
	epoch   map[string]int64             // their epochs, as read
	mine    map[string]bool              // those whose epoch is the one this store left
	created map[string]bool              // those the accepted batches create
	used    map[[2]string]bool           // idempotency (user, key) pairs taken
	running map[string]map[string]string // admitting user → RUNNING run → its session
	owner   map[[2]string]string         // (table, row ID) → the session that has it
	txid    int64                        // the transaction's ID
}

// readState begins the transaction, takes the locks and reads the state of the batches
// todo, in one round trip.
func readState(ctx context.Context, conn *pgxpool.Conn, preps []*prep, todo []int, known map[string]tail) (*state, error) {
	st := &state{exists: map[string]bool{}, last: map[string]int64{}, epoch: map[string]int64{}, mine: map[string]bool{},
		created: map[string]bool{}, used: map[[2]string]bool{}, running: map[string]map[string]string{}, owner: map[[2]string]string{}}
	var sessions, keyUsers, keys []string
	var lockKeys []int32
	var rows [4][]string // the IDs of the messages, runs, questions and tool calls written
	anyRows := false
	for _, i := range todo {
		p := preps[i]
		b := p.b
		sessions = append(sessions, b.SessionID)
		if r := b.Idempotency; r != nil {
			keyUsers, keys = append(keyUsers, r.UserID), append(keys, r.Key)
		}
		if a := b.Admit; a != nil && st.running[a.UserID] == nil {
			st.running[a.UserID] = map[string]string{}
			lockKeys = append(lockKeys, userLockKey(a.UserID))
		}
		add := func(t int, id string) {
			rows[t] = append(rows[t], id)
			anyRows = true
		}
		for _, m := range p.ch.Messages {
			add(0, m.ID)
		}
		for _, r := range p.ch.Runs {
			add(1, r.ID)
		}
		for _, q := range p.ch.Questions {
			add(2, q.ID)
		}
		for _, tc := range p.ch.ToolCalls {
			add(3, tc.ID)
		}
	}
	slices.Sort(sessions)
	sessions = slices.Compact(sessions)
	slices.Sort(lockKeys)
	lockKeys = slices.Compact(lockKeys)
	users := make([]string, 0, len(st.running))
	for u := range st.running {
		users = append(users, u)
	}

	b := &pgx.Batch{}
	b.Queue(qBegin)
	b.Queue(qPlanSettings)
	// The transaction's ID, to learn whether it committed should the connection break
	// while its COMMIT is under way (see commitOutcome).
	b.Queue(qTxID).QueryRow(func(row pgx.Row) error { return row.Scan(&st.txid) })
	if len(lockKeys) > 0 {
		b.Queue(qLockAdmissions, lockKeys)
	}
	sessionKeys := make([]int32, len(sessions))
	for i, id := range sessions {
		sessionKeys[i] = sessionLockKey(id)
	}
	slices.Sort(sessionKeys)
	b.Queue(qLockSessions, slices.Compact(sessionKeys))
	isKnown := make([]bool, len(sessions))
	knownEpoch, knownLast := make([]int64, len(sessions)), make([]int64, len(sessions))
	for i, id := range sessions {
		if t, ok := known[id]; ok {
			isKnown[i], knownEpoch[i], knownLast[i] = true, t.epoch, t.last
		}
	}
	b.Queue(qSessionStates, sessions, isKnown, knownEpoch, knownLast).Query(func(rows pgx.Rows) error {
		var id string
		var epoch, last int64
		var mine bool
		_, err := pgx.ForEachRow(rows, []any{&id, &epoch, &last, &mine}, func() error {
			st.exists[id], st.last[id], st.epoch[id], st.mine[id] = true, last, epoch, mine
			return nil
		})
		return err
	})
	if len(keys) > 0 {
		b.Queue(qUsedKeys, keyUsers, keys).Query(func(rows pgx.Rows) error {
			var user, key string
			_, err := pgx.ForEachRow(rows, []any{&user, &key}, func() error {
				st.used[[2]string{user, key}] = true
				return nil
			})
			return err
		})
	}
	if len(users) > 0 {
		b.Queue(qRunningRuns, users).Query(func(rows pgx.Rows) error {
			var user, run, session string
			_, err := pgx.ForEachRow(rows, []any{&user, &run, &session}, func() error {
				st.running[user][run] = session
				return nil
			})
			return err
		})
	}
	if anyRows {
		// The rows' IDs alone: each table's primary key finds those that exist, and decide
		// compares their sessions.
		b.Queue(qForeignRows, rows[0], rows[1], rows[2], rows[3]).Query(func(rows pgx.Rows) error {
			var table, id, session string
			_, err := pgx.ForEachRow(rows, []any{&table, &id, &session}, func() error {
				st.owner[[2]string{table, id}] = session
				return nil
			})
			return err
		})
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return st, nil
}

// userLockKey is the key of a user's admission lock.
func userLockKey(userID string) int32 { return lockKey(userID) }

// sessionLockKey is the key of a session's write lock (qLockSessions).
func sessionLockKey(sessionID string) int32 { return lockKey(sessionID) }

func lockKey(id string) int32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int32(h.Sum32())
}

// decide goes through the batches todo in order, as if each were written in turn: it sets
// errs for those the state refuses, and returns the others in rounds, each round writing
// each session at most once (the first write of every session, then the second, …).
func (st *state) decide(preps []*prep, todo []int, errs []error) (rounds [][]int) {
	times := map[string]int{} // batches of each session accepted so far
	for _, i := range todo {
		p := preps[i]
		b, id := p.b, p.b.SessionID
		if err := st.refuses(p); err != nil {
			errs[i] = err
			continue
		}
		// Accepted: the state moves on as the batch says.
		switch {
		case b.Delete:
			st.exists[id], st.last[id], st.created[id] = false, 0, false
			for _, runs := range st.running {
				maps.DeleteFunc(runs, func(_, session string) bool { return session == id })
			}
		case b.Create != nil:
			st.exists[id], st.last[id], st.created[id] = true, 0, true
		}
		if n := len(b.Events); n > 0 {
			st.last[id] = b.Events[n-1].Seq
		}
		if r := b.Idempotency; r != nil {
			st.used[[2]string{r.UserID, r.Key}] = true
		}
		p.eachRow(func(table, rowID string) { st.owner[[2]string{table, rowID}] = id })
		for _, r := range p.ch.Runs {
			for _, runs := range st.running {
				delete(runs, r.ID)
			}
			if runs := st.running[r.UserID]; runs != nil && r.Status == service.RunRunning {
				runs[r.ID] = id
			}
		}
		n := times[id]
		times[id]++
		if n == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[n] = append(rounds[n], i)
	}
	return rounds
}

// refuses returns why the state refuses p's batch, in the order the SQLite store finds
// out: the session's existence for a creation or deletion, the idempotency key, the
// admission, the log, the rows of other sessions.
func (st *state) refuses(p *prep) error {
	b, id := p.b, p.b.SessionID
	if b.Delete {
		if !st.exists[id] {
			return service.Errorf(service.ENOTFOUND, "session %s not found", id)
		}
		return nil
	}
	if b.Create != nil && st.exists[id] {
		return service.Errorf(service.ECONFLICT, "session %s already exists", id)
	}
	if r := b.Idempotency; r != nil && st.used[[2]string{r.UserID, r.Key}] {
		return service.Errorf(service.ECONFLICT, "idempotency key %q was already used", r.Key)
	}
	if a := b.Admit; a != nil {
		running := 0
		for run := range st.running[a.UserID] {
			if run != a.RunID {
				running++
			}
		}
		if running >= a.Limit {
			return service.Errorf(service.ERATELIMIT, "the user has %d runs running, at most %d", running, a.Limit)
		}
	}
	if len(b.Events) > 0 {
		last := st.last[id]
		switch {
		case b.Create != nil:
			last = 0
		case !st.exists[id]:
			return service.Errorf(service.ENOTFOUND, "session %s not found", id)
		}
		if b.Events[0].Seq != last+1 {
			return fmt.Errorf("events beginning at %d do not follow the session's log ending at %d: %w", b.Events[0].Seq, last, service.ErrNotNext)
		}
	}
	if b.Spend != nil && b.Create == nil && !st.exists[id] {
		return service.Errorf(service.ENOTFOUND, "session %s not found", id)
	}
	var err error
	p.eachRow(func(table, rowID string) {
		if owner, ok := st.owner[[2]string{table, rowID}]; ok && owner != id && err == nil {
			err = fmt.Errorf("postgres: append to session %s: %w", id, &rowError{table, rowID, id})
		}
	})
	return err
}

// epochs returns, for the sessions the accepted batches (rounds) write and leave
// standing, the epochs the transaction sets (those whose epoch was not the one this store
// left, and those it creates) and what the store knows of each once it commits.
func (st *state) epochs(preps []*prep, rounds [][]int) (*epochs, map[string]tail) {
	ep := &epochs{}
	known := map[string]tail{}
	for _, round := range rounds {
		for _, i := range round {
			id := preps[i].b.SessionID
			if _, done := known[id]; done || !st.exists[id] {
				continue
			}
			epoch := st.epoch[id]
			switch {
			case st.created[id]:
				// Its row is inserted with its epoch: no second version of it.
				epoch = newEpoch()
				if ep.created == nil {
					ep.created = map[string]int64{}
				}
				ep.created[id] = epoch
			case !st.mine[id]:
				epoch = newEpoch()
				ep.ids, ep.values = append(ep.ids, id), append(ep.values, epoch)
			}
			known[id] = tail{epoch: epoch, last: st.last[id]}
		}
	}
	return ep, known
}
