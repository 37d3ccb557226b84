package service

import (
	"context"
	"sync"
)

// ErrSessionDeleted ends a subscription whose session was deleted: the subscription is
// over for good.
var ErrSessionDeleted = Errorf(ENOTFOUND, "the session was deleted")

// ErrShutdown ends a subscription because the server is shutting down, after everything
// recorded was delivered: the client should reconnect and resume with its cursor.
var ErrShutdown = Errorf(EUNAVAILABLE, "the server is shutting down")

// Subscription reads one session's log from a position: every event after the cursor it
// was opened with, then live ones as they become durable. It is a reader, not a mailbox:
// a slow client lags behind and catches up from the log, and never holds up the agent or
// other subscribers. It has no goroutine of its own; the transport reads when notified.
type Subscription struct {
	s      *core
	st     *sessionState
	notify func()

	mu     sync.Mutex
	pos    Cursor
	closed bool
}

// Subscribe opens a subscription to the caller's session, positioned after the cursor
// after, or at the end of the log when after is empty. notify is called, on any goroutine
// and with locks held, whenever there may be something new to Read: it must return at once
// and must not call back into the service. Close the subscription when done. ENOTFOUND
// when the session is missing or not the caller's, EINVALID for a bad cursor, ERATELIMIT
// when the server holds too many subscriptions, EUNAVAILABLE when it is shutting down.
func (s *Service) Subscribe(ctx context.Context, sessionID, after string, notify func()) (*Subscription, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	m, _ := s.states.mark(sessionID)
	sess, err := s.session(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	var pos *Cursor
	if after != "" {
		c, err := DecodeCursor(sessionID, after)
		if err != nil {
			return nil, err
		}
		pos = &c
	}
	return s.subscribe(ctx, sess, m, pos, notify)
}

// subscribe opens a subscription to sess, read from the store after the registry's mark m
// (see acquireRead), after position after, or at the end of its log when after is nil;
// whose session it is was checked already.
func (s *core) subscribe(ctx context.Context, sess *TalkSession, m uint32, after *Cursor, notify func()) (*Subscription, error) {
	var pos Cursor
	if after != nil {
		pos = *after
	}
	if s.subs.Add(1) > int64(s.cfg.MaxSubscriptions) {
		s.subs.Add(-1)
		return nil, Errorf(ERATELIMIT, "too many subscriptions on this server")
	}
	st, _ := s.acquireRead(sess, m)
	st.mu.Lock()
	if err := st.readyLocked(ctx); err != nil {
		st.mu.Unlock()
		s.releaseState(st)
		s.subs.Add(-1)
		return nil, err
	}
	refuse := func(err error) (*Subscription, error) {
		s.releaseState(st)
		s.subs.Add(-1)
		return nil, err
	}
	if after == nil {
		pos = st.log.end
	} else if pos.Seq > st.log.end.Seq {
		st.mu.Unlock()
		return refuse(Errorf(EINVALID, "cursor is ahead of the session's log"))
	} else if pos.Off > 0 {
		// The offset must be within the text of the cursor's event: in the tail, or in the
		// store, read without the lock.
		ev, inTail := st.log.at(pos.Seq)
		if !inTail {
			st.mu.Unlock()
			var err error
			if ev, err = s.eventHolding(ctx, st.id, pos.Seq); err != nil {
				return refuse(err)
			}
			st.mu.Lock()
		}
		if !offsetWithin(ev, pos) {
			st.mu.Unlock()
			return refuse(Errorf(EINVALID, "cursor is past the end of its event's text"))
		}
	}
	sub := &Subscription{s: s, st: st, notify: notify, pos: pos}
	st.log.addReader(sub)
	s.peers.follow(st)
	st.mu.Unlock()
	return sub, nil
}

// eventHolding returns the stored event at seq, or the chunk event that replaced it when
// its run of chunks was folded; nil when there is neither.
func (s *core) eventHolding(ctx context.Context, sessionID string, seq int64) (*Event, error) {
	if seq <= 0 {
		return nil, nil
	}
	evs, err := s.store.Events(ctx, sessionID, seq-1, 1)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	if ev := evs[0]; ev.Seq == seq || ev.Type.Chunky() && ev.CoalescedFrom > 0 && ev.CoalescedFrom <= seq {
		return ev, nil
	}
	return nil, nil
}

// offsetWithin reports whether pos.Off is within the text of ev, the event holding
// pos.Seq: 0 for any event, no further than the end of the chunk's text for a chunk, and
// short of the end of a folded run's text for a chunk folded into it (its chunks are never
// empty). The server hands out no other cursor; one past the text would replay nothing at
// an offset the stream never reached.
func offsetWithin(ev *Event, pos Cursor) bool {
	switch {
	case pos.Off == 0:
		return true
	case ev == nil || !ev.Type.Chunky():
		return false
	case ev.Seq == pos.Seq:
		return pos.Off <= CursorOf(ev).Off
	default:
		return pos.Off < CursorOf(ev).Off
	}
}

// Read returns up to max events after the subscription's position, moving past them. It
// returns no events and no error when the subscription has caught up (notify is called when
// that changes), ErrSessionDeleted when the session was deleted, ErrShutdown when the server
// shuts down and everything was delivered, and EUNAVAILABLE while the store cannot be read
// (the position stays; read again later).
func (sub *Subscription) Read(ctx context.Context, max int) ([]*Event, error) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.closed {
		return nil, Errorf(ECONFLICT, "the subscription is closed")
	}
	if max <= 0 {
		max = sub.s.cfg.ReadBatch
	}
	evs, next, ok, err := sub.st.readAfter(ctx, sub.pos, max)
	if !ok {
		return nil, ErrSessionDeleted
	}
	if err != nil {
		return nil, err
	}
	sub.pos = next
	if len(evs) == 0 && sub.s.closed.Load() {
		select {
		case <-sub.s.closing:
			return nil, ErrShutdown
		default:
		}
	}
	return evs, nil
}

// Close ends the subscription; Read fails afterwards. It is safe to call more than once.
func (sub *Subscription) Close() {
	sub.mu.Lock()
	if sub.closed {
		sub.mu.Unlock()
		return
	}
	sub.closed = true
	sub.mu.Unlock()
	st := sub.st
	st.mu.Lock()
	if st.log.removeReader(sub) == 0 {
		sub.s.peers.unfollow(st)
	}
	st.mu.Unlock()
	sub.s.releaseState(st)
	sub.s.subs.Add(-1)
}

// readAfter returns up to limit events of st's log after position pos and the position
// after the last of them: from the tail when it reaches back to pos, else from the store
// up to the end as it stood. ok is false once the session is deleted.
func (st *sessionState) readAfter(ctx context.Context, pos Cursor, limit int) (evs []*Event, next Cursor, ok bool, err error) {
	s := st.c
	st.mu.Lock()
	deleted, last := st.log.deleted, st.log.end.Seq
	if !deleted {
		var fromTail bool
		if evs, fromTail = st.log.read(pos, limit); fromTail {
			st.mu.Unlock()
			next = pos
			if len(evs) > 0 {
				next = CursorOf(evs[len(evs)-1])
			}
			return evs, next, true, nil
		}
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
	next = pos
	for _, ev := range stored {
		if ev.Seq > last {
			break // written since the end was read: the tail has it next time
		}
		if ev.Type.Chunky() && ev.CoalescedFrom > 0 && ev.CoalescedFrom <= pos.Seq && pos.Off > ev.Offset {
			// pos is inside the run of chunks this event replaced: give only the text after it.
			// Subscribe refuses a cursor at or past its end, which would leave an empty delta;
			// should one come, the event is passed over, never sent empty.
			if pos.Off >= CursorOf(ev).Off {
				next = CursorOf(ev)
				continue
			}
			cp := *ev
			cp.Delta = runeSlice(ev.Delta, pos.Off-ev.Offset)
			cp.Offset = pos.Off
			ev = &cp
		}
		evs = append(evs, ev)
		next = CursorOf(ev)
	}
	if len(evs) == 0 && next != pos {
		return st.readAfter(ctx, next, limit) // only passed over: read on from there
	}
	return evs, next, true, nil
}
