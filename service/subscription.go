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
	s      *Service
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
	sess, err := s.session(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	var pos Cursor
	if after != "" {
		if pos, err = DecodeCursor(sessionID, after); err != nil {
			return nil, err
		}
	}
	if s.subs.Add(1) > int64(s.cfg.MaxSubscriptions) {
		s.subs.Add(-1)
		return nil, Errorf(ERATELIMIT, "too many subscriptions on this server")
	}
	st := s.acquireState(sess)
	st.mu.Lock()
	if err := s.readyLocked(ctx, st); err != nil {
		st.mu.Unlock()
		s.releaseState(st)
		s.subs.Add(-1)
		return nil, err
	}
	if after == "" {
		pos = st.log.end
	} else if pos.Seq > st.log.end.Seq {
		st.mu.Unlock()
		s.releaseState(st)
		s.subs.Add(-1)
		return nil, Errorf(EINVALID, "cursor is ahead of the session's log")
	}
	sub := &Subscription{s: s, st: st, notify: notify, pos: pos}
	st.log.addReader(sub)
	s.peers.follow(st)
	st.mu.Unlock()
	return sub, nil
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
	evs, next, ok, err := sub.s.readAfter(ctx, sub.st, sub.pos, max)
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
func (s *Service) readAfter(ctx context.Context, st *sessionState, pos Cursor, limit int) (evs []*Event, next Cursor, ok bool, err error) {
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
	for _, ev := range stored {
		if ev.Seq > last {
			break // written since the end was read: the tail has it next time
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
