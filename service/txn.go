package service

import "context"

// txn is one write to a session's log being prepared under the session's lock: the events
// to append, numbered after the durable end of the log, and what to do in memory once they
// are durable (done) or when they are not (undo). Nothing in memory changes before the
// write succeeds, so a command that fails leaves the session, its running agent and its
// subscribers as they were.
type txn struct {
	st   *sessionState
	b    Batch
	next int64 // the Seq the next event gets
	// leaf is the current branch's last message as the events so far leave it, known
	// when leafKnown (see add).
	leaf      string
	leafKnown bool
	done      []func()
	undo      []func()
}

// added returns the message that t's MessageAdded of id carries, if t has one.
func (t *txn) added(id string) (*Message, bool) {
	for _, ev := range t.b.Events {
		if ev.Type == EventMessageAdded && ev.Message != nil && ev.Message.ID == id {
			return ev.Message, true
		}
	}
	return nil, false
}

// onCommit registers f to run, under the session's lock, once the write is durable.
func (t *txn) onCommit(f func()) { t.done = append(t.done, f) }

// onAbort registers f to run, under the session's lock, when the write fails.
func (t *txn) onAbort(f func()) { t.undo = append(t.undo, f) }

// add appends events to the write, numbering them. Their payloads must be snapshots that
// nothing changes afterwards.
func (t *txn) add(evs ...*Event) {
	now := t.st.c.now()
	for _, ev := range evs {
		ev.SessionID = t.st.id
		ev.Seq = t.next
		t.next++
		if ev.At.IsZero() {
			ev.At = now
		}
		if m := ev.Message; ev.Type == EventMessageAdded && m != nil {
			m.Seq = ev.Seq
			// A message joins the current branch at its end: its parent is the branch's
			// last message (and it becomes the last, below).
			if !m.OffBranch && m.ParentID == "" {
				m.ParentID = t.leafOf()
			}
		}
		if leaf, moves := ev.movesLeaf(); moves {
			t.leaf, t.leafKnown = leaf, true
		}
		t.b.Events = append(t.b.Events, ev)
	}
}

// leafOf returns the current branch's last message as t's events so far leave it,
// reading the store once when this process does not know it (a session just loaded, or
// whose log was read again).
func (t *txn) leafOf() string {
	s := t.st.c
	if !t.leafKnown {
		if err := t.st.loadLeafLocked(context.Background()); err != nil {
			s.log.Warn("reading the current branch", "session", t.st.id, "err", err)
		}
		t.leaf, t.leafKnown = t.st.log.leaf, true // what it learnt, or "" when it could not
	}
	return t.leaf
}

// prepareLocked makes t's batch ready to be handed over: marked with what the service
// knows of the session now, so that it tells its user what it changes (see Mark), unless
// it writes chunks alone, and its changes derived once.
func (t *txn) prepareLocked() {
	if !t.b.chunksOnly() {
		t.b.Mark = t.st.markLocked(t.b.Events)
	}
	t.b.derive()
}

// markLocked is the Mark of a write of evs to st now: its user, its row, and its status
// before and after, from the runs st holds (its active run and queue) and those evs
// change.
func (st *sessionState) markLocked(evs []*Event) *Mark {
	m := &Mark{UserID: st.userID, Row: st.rowLocked(), At: st.c.now()}
	active := map[string]RunStatus{}
	if ar := st.active; ar != nil {
		active[ar.run.ID] = ar.run.Status
	}
	for _, r := range st.queue {
		active[r.ID] = RunQueued
	}
	m.Before = statusOf(active)
	for _, ev := range evs {
		if r := ev.Run; ev.Type == EventRunStatusChanged && r != nil {
			if r.Status.Final() {
				delete(active, r.ID)
			} else {
				active[r.ID] = r.Status
			}
		}
	}
	m.After = statusOf(active)
	return m
}

// rowLocked returns a copy of st's row, read from the store when this process does not
// know it (its log was read again); a row with only its ID and owner when it cannot be.
func (st *sessionState) rowLocked() *TalkSession {
	if st.sess == nil {
		if sess, err := st.c.store.Session(context.Background(), st.id); err == nil {
			st.setRowLocked(sess)
		}
	}
	if st.sess == nil {
		return &TalkSession{ID: st.id, UserID: st.userID}
	}
	cp := *st.sess
	return &cp
}

// commitLocked writes t and, once it is durable, applies it (see sessionLog.settle and
// settled). When the write fails its undo funcs run and the error is returned, and the
// running agent goes on as it was. st.mu must be held; it stays held throughout.
func (t *txn) commitLocked(ctx context.Context) error {
	s := t.st.c
	if ar := t.st.active; ar != nil && ar.spend != nil && !t.b.Delete {
		// What the run spent rides the session's next write (see budgets.go).
		sp := ar.spend
		ar.spend, t.b.Spend = nil, sp
		t.onAbort(func() { ar.spend = mergeSpend(sp, ar.spend) })
	}
	err := t.st.log.commit(ctx, s.writer, t)
	t.settled(err)
	if err != nil {
		s.log.Warn("write failed", "session", t.st.id, "err", err)
	}
	return err
}

// settled does what follows a write of a session's log beyond the log itself, the same
// for every write (a command's, streamed text's, a deletion): once durable, the service's
// copy of the session's row and its counters follow the events, and the other processes
// sharing the store are told; refused because the log moved on, the replicas check
// whether the session's runs are still this one's.
func (t *txn) settled(err error) {
	s := t.st.c
	st := t.st
	if err == nil {
		s.told(&t.b)
	}
	switch {
	case err == nil && t.b.Delete:
		s.peers.published(st, nil)
	case err == nil && len(t.b.Events) > 0: // nil events would tell the others "deleted"
		st.noteDurableLocked(t.b.Events, t.b.derived)
		s.peers.published(st, t.b.Events)
	case isNotNext(err):
		s.peers.lostTrack(st)
	}
}
