package service

import (
	"context"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file is the viewer's stream: one log per user of what all their sessions do (see
// telling.go for what goes in it), read by ViewerSubscriptions, which are readers with a
// position like a session's Subscription: no goroutine, no mailbox. A write that tells a
// user something wakes that user's subscriptions here, and the other replicas' through
// the Cluster; each reads the store after its position.

// EncodeViewerCursor returns the cursor after event seq of userID's viewer log:
// base64url of "v:<seq>:<user>".
func EncodeViewerCursor(userID string, seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("v:" + strconv.FormatInt(seq, 10) + ":" + userID))
}

// DecodeViewerCursor parses a cursor of userID's viewer log; EINVALID when it is malformed
// or another user's.
func DecodeViewerCursor(userID, s string) (int64, error) {
	bad := Errorf(EINVALID, "invalid cursor")
	if len(s) > 1024 { // before decoding: a header (Last-Event-ID) may hold a megabyte
		return 0, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, bad
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[0] != "v" {
		return 0, bad
	}
	seq, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || seq < 0 {
		return 0, bad
	}
	if parts[2] != userID {
		return 0, Errorf(EINVALID, "cursor belongs to another user")
	}
	return seq, nil
}

// ErrCursorExpired refuses a viewer cursor whose log no longer holds what follows it.
var ErrCursorExpired = Errorf(ECURSOREXPIRED, "the cursor is older than the events kept; read your sessions again")

// EventsCursor returns the cursor of the caller's viewer log as it ends now: read it
// before the sessions, then follow with SubscribeViewer after it, and nothing is missed.
func (s *Service) EventsCursor(ctx context.Context) (string, error) {
	u, err := user(ctx)
	if err != nil {
		return "", err
	}
	seq, err := s.store.ViewerSeq(ctx, u)
	if err != nil {
		return "", err
	}
	return EncodeViewerCursor(u, seq), nil
}

// ViewerSubscription reads the caller's viewer log from a position: every event after
// the cursor it was opened with, then new ones as they are written, whichever session,
// process or replica wrote them. It has no goroutine; the transport reads when notified.
type ViewerSubscription struct {
	s      *Service
	user   string
	notify func()

	mu     sync.Mutex
	pos    int64
	closed bool
}

// SubscribeViewer opens a subscription to the caller's viewer log, after the cursor after
// or at its end when after is empty. notify is as Subscribe's. EINVALID for a malformed
// cursor, another user's or one ahead of the log; ECURSOREXPIRED for one whose next
// events were pruned; ERATELIMIT when the server holds too many subscriptions;
// EUNAVAILABLE when it shuts down or the store cannot be read.
func (s *Service) SubscribeViewer(ctx context.Context, after string, notify func()) (*ViewerSubscription, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	var pos int64
	if after != "" {
		if pos, err = DecodeViewerCursor(u, after); err != nil {
			return nil, err
		}
	}
	last, err := s.store.ViewerSeq(ctx, u)
	if err != nil {
		return nil, err
	}
	switch {
	case after == "":
		pos = last
	case pos > last:
		return nil, Errorf(EINVALID, "cursor is ahead of your events")
	case pos < last:
		next, err := s.store.ViewerEvents(ctx, u, pos, 1)
		if err != nil {
			return nil, err
		}
		if len(next) == 0 || next[0].Seq != pos+1 {
			return nil, ErrCursorExpired
		}
	}
	if s.subs.Add(1) > int64(s.cfg.MaxSubscriptions) {
		s.subs.Add(-1)
		return nil, Errorf(ERATELIMIT, "too many subscriptions on this server")
	}
	sub := &ViewerSubscription{s: s, user: u, notify: notify, pos: pos}
	s.viewers.add(sub, s.peers)
	return sub, nil
}

// Read returns up to max events after the subscription's position, moving past them. It
// returns none and no error when it has caught up (notify is called when that changes),
// ECURSOREXPIRED when the events after its position were pruned meanwhile, ErrShutdown
// when the server shuts down and everything was delivered, and EUNAVAILABLE while the
// store cannot be read (the position stays).
func (sub *ViewerSubscription) Read(ctx context.Context, max int) ([]*ViewerEvent, error) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.closed {
		return nil, Errorf(ECONFLICT, "the subscription is closed")
	}
	if max <= 0 {
		max = sub.s.cfg.ReadBatch
	}
	evs, err := sub.s.store.ViewerEvents(ctx, sub.user, sub.pos, max)
	if err != nil {
		return nil, err
	}
	if len(evs) > 0 {
		if evs[0].Seq != sub.pos+1 {
			return nil, ErrCursorExpired
		}
		sub.pos = evs[len(evs)-1].Seq
		return evs, nil
	}
	select {
	case <-sub.s.closing:
		return nil, ErrShutdown
	default:
	}
	return nil, nil
}

// Cursor returns the cursor of event e of the subscription's log.
func (sub *ViewerSubscription) Cursor(e *ViewerEvent) string {
	return EncodeViewerCursor(sub.user, e.Seq)
}

// Close ends the subscription; Read fails afterwards. It is safe to call more than once.
func (sub *ViewerSubscription) Close() {
	sub.mu.Lock()
	if sub.closed {
		sub.mu.Unlock()
		return
	}
	sub.closed = true
	sub.mu.Unlock()
	sub.s.viewers.remove(sub)
	sub.s.subs.Add(-1)
}

// viewerHub is the viewer subscriptions open here, by user: whom to wake when a write
// tells a user something. Its lock is a leaf: wake is called with a session's lock held,
// and calls notify functions, which must not call back.
type viewerHub struct {
	mu    sync.Mutex
	users map[string]*viewerReaders
}

// viewerReaders are one user's viewer subscriptions here, and how this replica stops
// hearing of the others' writes for that user.
type viewerReaders struct {
	subs     []*ViewerSubscription
	unfollow func()
}

// add registers sub, and has p follow its user's writes on other replicas while it has
// subscriptions here.
func (h *viewerHub) add(sub *ViewerSubscription, p peers) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.users == nil {
		h.users = map[string]*viewerReaders{}
	}
	r := h.users[sub.user]
	if r == nil {
		r = &viewerReaders{}
		h.users[sub.user] = r
		user := sub.user
		r.unfollow = p.followViewer(user, func() { h.wake(user) })
	}
	r.subs = append(r.subs, sub)
}

// remove unregisters sub.
func (h *viewerHub) remove(sub *ViewerSubscription) {
	h.mu.Lock()
	r := h.users[sub.user]
	var stop func()
	if r != nil {
		r.subs = slices.DeleteFunc(r.subs, func(o *ViewerSubscription) bool { return o == sub })
		if len(r.subs) == 0 {
			delete(h.users, sub.user)
			stop = r.unfollow
		}
	}
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// wake tells user's subscriptions here that there may be something to read.
func (h *viewerHub) wake(user string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.users[user]; r != nil {
		for _, sub := range r.subs {
			sub.notify()
		}
	}
}

// wakeAll tells every subscription here that there may be something to read: at
// shutdown, and after the broker was out of reach.
func (h *viewerHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.users {
		for _, sub := range r.subs {
			sub.notify()
		}
	}
}

// told is told that b, written, told its user something: their viewer subscriptions
// here and on the other replicas are woken, and the webhook deliveries it made are
// attempted.
func (s *core) told(b *Batch) {
	viewer, hooks := b.told()
	if len(viewer) > 0 {
		s.viewers.wake(b.Mark.UserID)
		s.peers.toldViewer(b.Mark.UserID)
	}
	if len(hooks) > 0 {
		s.hooks.poke()
	}
}

// pruneViewer deletes, now and then until the service closes, the viewer events older
// than ViewerRetention and the webhook deliveries that ended longer than
// DeliveryRetention ago.
func (s *core) pruneViewer() {
	every := min(max(s.cfg.ViewerRetention/10, time.Second), 10*time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.closing:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := s.store.PruneViewerEvents(ctx, s.now().Add(-s.cfg.ViewerRetention)); err != nil {
			s.log.Warn("pruning viewer events", "err", err)
		}
		if _, err := s.store.PruneDeliveries(ctx, s.now().Add(-s.cfg.DeliveryRetention)); err != nil {
			s.log.Warn("pruning webhook deliveries", "err", err)
		}
		cancel()
	}
}
