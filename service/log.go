package service

import (
	"context"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// sessionState is the service's in-memory view of one session: the lock that serialises
// its writes, the tail of its event log that live subscribers read, and its runs. It exists
// while the session has subscribers or runs, and is dropped when it has neither.
type sessionState struct {
	id     string
	userID string

	mu      sync.Mutex
	refs    int // subscribers + runs + operations in flight
	deleted bool
	lastSeq int64
	lastOff int // the Off of the cursor after the last event
	// tail holds the latest events in Seq order, with no gap; tail[0].Seq == tailStart.
	tail      []*Event
	tailStart int64
	notify    chan struct{} // closed and replaced whenever events are appended

	active *activeRun // the run that owns the session (running, waiting or starting)
	queue  []*Run     // QUEUED runs behind it (busy policy ENQUEUE), oldest first
}

// acquireState returns the state of a session, loading it on first use, and holds a
// reference until releaseState.
func (s *Service) acquireState(ctx context.Context, sess *TalkSession) *sessionState {
	s.statesMu.Lock()
	defer s.statesMu.Unlock()
	st := s.states[sess.ID]
	if st == nil {
		st = &sessionState{
			id: sess.ID, userID: sess.UserID,
			lastSeq: sess.LastSeq, tailStart: sess.LastSeq + 1,
			notify: make(chan struct{}),
		}
		s.states[sess.ID] = st
	}
	st.refs++
	return st
}

func (s *Service) releaseState(st *sessionState) {
	s.statesMu.Lock()
	defer s.statesMu.Unlock()
	st.refs--
	if st.refs == 0 && s.states[st.id] == st {
		delete(s.states, st.id)
	}
}

// commitLocked applies b through the store, with its events numbered after the session's
// last, then makes the events visible to subscribers. st.mu must be held.
func (s *Service) commitLocked(ctx context.Context, st *sessionState, b *Batch) error {
	if b.Empty() {
		return nil
	}
	b.SessionID = st.id
	seq := st.lastSeq
	for _, ev := range b.Events {
		seq++
		ev.Seq = seq
		ev.SessionID = st.id
		if ev.At.IsZero() {
			ev.At = s.now()
		}
		if ev.Type == EventMessageAdded && ev.Message != nil && ev.Message.Seq == 0 {
			ev.Message.Seq = seq
		}
	}
	// A message row added in this batch takes the Seq of its MessageAdded event.
	for _, m := range b.Messages {
		if m.Seq == 0 {
			for _, ev := range b.Events {
				if ev.Type == EventMessageAdded && ev.Message != nil && ev.Message.ID == m.ID {
					m.Seq = ev.Seq
				}
			}
		}
	}
	if b.Session != nil {
		b.Session.LastSeq = seq
	}
	err := s.store.Apply(ctx, b)
	s.noteWrite(err)
	if err != nil {
		s.log.Error("store apply", "session", st.id, "err", err)
		return err
	}
	if len(b.Events) == 0 {
		return nil
	}
	st.lastSeq = seq
	st.lastOff = CursorOf(b.Events[len(b.Events)-1]).Off
	st.tail = append(st.tail, b.Events...)
	if len(st.tail) >= 2*s.cfg.TailEvents {
		// Keep the newest TailEvents; readers that fall behind read from the store. Trimming
		// only at twice the size keeps appends amortised O(1).
		st.tail = append(make([]*Event, 0, 2*s.cfg.TailEvents), st.tail[len(st.tail)-s.cfg.TailEvents:]...)
	}
	st.tailStart = st.tail[0].Seq
	for _, ev := range b.Events {
		if ev.Type.Chunky() {
			s.stats.chunks.Add(1)
		}
	}
	close(st.notify)
	st.notify = make(chan struct{})
	return nil
}

// readAfter returns up to limit events after position pos, the position after the last of
// them, and a channel that is closed when more may be there. ok is false once the session
// is deleted.
func (s *Service) readAfter(ctx context.Context, st *sessionState, pos Cursor, limit int) (evs []*Event, next Cursor, wake <-chan struct{}, ok bool, err error) {
	st.mu.Lock()
	wake, deleted, last, tailStart := st.notify, st.deleted, st.lastSeq, st.tailStart
	if !deleted && pos.Seq >= tailStart-1 {
		// Served from memory: the tail holds every event after pos.
		for i := pos.Seq + 1 - tailStart; i < int64(len(st.tail)) && len(evs) < limit; i++ {
			evs = append(evs, st.tail[i])
		}
		st.mu.Unlock()
		if len(evs) > 0 {
			next = CursorOf(evs[len(evs)-1])
		} else {
			next = pos
		}
		return evs, next, wake, true, nil
	}
	st.mu.Unlock()
	if deleted {
		return nil, pos, wake, false, nil
	}
	if pos.Seq >= last {
		return nil, pos, wake, true, nil
	}
	stored, err := s.store.Events(ctx, st.id, pos.Seq, limit)
	if err != nil {
		return nil, pos, wake, true, err
	}
	for _, ev := range stored {
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
	return evs, next, wake, true, nil
}

// compact folds the chunk events of a finished stream (a message's text or a tool's
// output) into one event per unbroken run of them, so the log does not keep a row per
// chunk. A run of chunks with no other event between them becomes one chunk at the Seq of
// its last, carrying all their text and CoalescedFrom = the Seq of its first; a reader whose
// cursor falls inside the run is given just the text after it (see readAfter).
func (s *Service) compactLocked(ctx context.Context, st *sessionState, key string, fromSeq int64) {
	if fromSeq <= 0 {
		return
	}
	evs, err := s.store.Events(ctx, st.id, fromSeq-1, s.cfg.CompactScanLimit)
	if err != nil {
		s.log.Warn("compaction read", "session", st.id, "err", err)
		return
	}
	b := &Batch{}
	var group []*Event
	flush := func() {
		if len(group) > 1 {
			first, last := group[0], group[len(group)-1]
			merged := *last
			merged.Offset = first.Offset
			var text strings.Builder
			for _, g := range group {
				text.WriteString(g.Delta)
			}
			merged.Delta = text.String()
			merged.CoalescedFrom = first.Seq
			if first.CoalescedFrom > 0 {
				merged.CoalescedFrom = first.CoalescedFrom
			}
			b.Rewrite = append(b.Rewrite, &merged)
			for _, g := range group[:len(group)-1] {
				b.DropEvents = append(b.DropEvents, g.Seq)
			}
		}
		group = group[:0]
	}
	for _, ev := range evs {
		if ev.Type.Chunky() && ev.Key == key {
			group = append(group, ev)
			continue
		}
		flush()
	}
	flush()
	if b.Empty() {
		return
	}
	b.SessionID = st.id
	if err := s.store.Apply(ctx, b); err != nil {
		s.log.Warn("compaction", "session", st.id, "err", err)
	}
}

// Subscribe streams the session's events: those after the cursor after (when not empty),
// then live ones. The channel is closed when ctx ends or the session is deleted; a slow
// reader lags behind and catches up from the log, it never holds anyone up. Returns
// ENOTFOUND when the session is missing or not the caller's, EINVALID for a bad cursor.
func (s *Service) Subscribe(ctx context.Context, sessionID, after string) (<-chan *Event, error) {
	sess, err := s.session(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if s.subs.Add(1) > int64(s.cfg.MaxSubscriptions) {
		s.subs.Add(-1)
		return nil, Errorf(ERATELIMIT, "too many subscriptions on this server")
	}
	st := s.acquireState(ctx, sess)
	st.mu.Lock()
	pos := Cursor{Seq: st.lastSeq, Off: st.lastOff}
	st.mu.Unlock()
	if after != "" {
		c, err := DecodeCursor(sessionID, after)
		if err == nil && c.Seq > pos.Seq {
			err = Errorf(EINVALID, "cursor is ahead of the session's log")
		}
		if err != nil {
			s.releaseState(st)
			s.subs.Add(-1)
			return nil, err
		}
		pos = c
	}
	out := make(chan *Event)
	s.subsDone.Add(1)
	go func() {
		defer s.subsDone.Done()
		defer close(out)
		defer s.subs.Add(-1)
		defer s.releaseState(st)
		for {
			evs, next, wake, ok, err := s.readAfter(ctx, st, pos, s.cfg.ReadBatch)
			if !ok {
				return
			}
			if err != nil {
				s.log.Warn("subscription read", "session", st.id, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(200 * time.Millisecond): // storage hiccup: try again
					continue
				}
			}
			for _, ev := range evs {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			pos = next
			if len(evs) > 0 {
				continue
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			case <-s.closing:
				return
			}
		}
	}()
	return out, nil
}

func runeLen(s string) int { return utf8.RuneCountInString(s) }
