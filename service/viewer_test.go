package service_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// viewerReader follows a user's viewer log as a transport does: it reads when notified.
type viewerReader struct {
	t    *testing.T
	sub  *service.ViewerSubscription
	wake chan struct{}
	got  []*service.ViewerEvent
}

func followViewer(t *testing.T, svc *service.Service, ctx context.Context, after string) *viewerReader {
	t.Helper()
	r := &viewerReader{t: t, wake: make(chan struct{}, 1)}
	sub, err := svc.SubscribeViewer(ctx, after, func() {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("SubscribeViewer: %v", err)
	}
	r.sub = sub
	t.Cleanup(sub.Close)
	return r
}

// until reads until done says the events so far are enough, or fails the test.
func (r *viewerReader) until(what string, done func([]*service.ViewerEvent) bool) []*service.ViewerEvent {
	r.t.Helper()
	deadline := time.After(patience)
	for {
		evs, err := r.sub.Read(context.Background(), 0)
		if err != nil {
			r.t.Fatalf("Read: %v", err)
		}
		r.got = append(r.got, evs...)
		if done(r.got) {
			return r.got
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-r.wake:
		case <-deadline:
			r.t.Fatalf("waiting for %s; got %s", what, describeViewer(r.got))
		}
	}
}

func describeViewer(evs []*service.ViewerEvent) string {
	var parts []string
	for _, e := range evs {
		s := fmt.Sprintf("%d %s", e.Seq, e.Type)
		switch {
		case e.Session != nil:
			s += fmt.Sprintf(" %s unread=%v", e.Status, e.Session.Unread)
		case e.Run != nil:
			s += " " + string(e.Run.Status)
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// changedTo reports whether evs hold a SessionChanged of session id with status st and
// unread flag unread.
func changedTo(id string, st service.SessionStatus, unread bool) func([]*service.ViewerEvent) bool {
	return func(evs []*service.ViewerEvent) bool {
		return slices.ContainsFunc(evs, func(e *service.ViewerEvent) bool {
			return e.Type == service.ViewerSessionChanged && e.SessionID == id && e.Status == st && e.Session.Unread == unread
		})
	}
}

func TestViewerEventsTellEverySessionOfTheUserAndNoOtherUsers(t *testing.T) {
	svc := start(t, setup{})
	r := followViewer(t, svc, alice, "")
	other := followViewer(t, svc, bob, "")
	a := newSession(t, svc, alice, "", "")
	b := newSession(t, svc, alice, "", "")
	newSession(t, svc, bob, "", "")
	send(t, svc, alice, b.ID, "hello there")
	evs := r.until("b idle and unread", changedTo(b.ID, service.SessionIdle, true))
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("seqs not 1, 2, 3…: %s", describeViewer(evs))
		}
		if e.SessionID != a.ID && e.SessionID != b.ID {
			t.Fatalf("an event of another session: %s", describeViewer(evs))
		}
	}
	if !slices.ContainsFunc(evs, func(e *service.ViewerEvent) bool {
		return e.Type == service.ViewerRunEnded && e.Run.Status == service.RunCompleted
	}) || !changedTo(b.ID, service.SessionRunning, false)(evs) || !changedTo(a.ID, service.SessionIdle, false)(evs) {
		t.Errorf("missing a creation, the run's start or its end: %s", describeViewer(evs))
	}
	bobs := other.until("bob's creation", func(evs []*service.ViewerEvent) bool { return len(evs) >= 1 })
	if len(bobs) != 1 {
		t.Errorf("bob got %s", describeViewer(bobs))
	}
}

func TestViewerEventsResumeAfterACursorExactly(t *testing.T) {
	svc := start(t, setup{})
	start, err := svc.EventsCursor(alice)
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, svc, alice, "", "")
	send(t, svc, alice, s.ID, "/ask what now?")
	all := followViewer(t, svc, alice, start).until("the question", func(evs []*service.ViewerEvent) bool {
		return slices.ContainsFunc(evs, func(e *service.ViewerEvent) bool { return e.Type == service.ViewerInputRequested })
	})
	if all[0].Seq != 1 {
		t.Fatalf("from the cursor of now: %s", describeViewer(all))
	}
	mid := all[1]
	again := followViewer(t, svc, alice, service.EncodeViewerCursor("alice", mid.Seq)).until("the rest", func(evs []*service.ViewerEvent) bool {
		return len(evs) >= len(all)-2
	})
	if describeViewer(again) != describeViewer(all[2:]) {
		t.Errorf("after %d: %s, want %s", mid.Seq, describeViewer(again), describeViewer(all[2:]))
	}
	if _, err := svc.SubscribeViewer(bob, service.EncodeViewerCursor("alice", 1), func() {}); service.ErrorCode(err) != service.EINVALID {
		t.Errorf("another user's cursor: %v, want EINVALID", err)
	}
	if _, err := svc.SubscribeViewer(alice, "garbage", func() {}); service.ErrorCode(err) != service.EINVALID {
		t.Errorf("a malformed cursor: %v, want EINVALID", err)
	}
}

func TestViewerCursorExpiresWithTheEventsAfterIt(t *testing.T) {
	svc, store := startService(t, setup{})
	from, _ := svc.EventsCursor(alice)
	newSession(t, svc, alice, "", "")
	newSession(t, svc, alice, "", "")
	if _, err := store.PruneViewerEvents(context.Background(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SubscribeViewer(alice, from, func() {}); service.ErrorCode(err) != service.ECURSOREXPIRED {
		t.Errorf("a cursor before the pruned events: %v, want ECURSOREXPIRED", err)
	}
	now, _ := svc.EventsCursor(alice)
	if _, err := svc.SubscribeViewer(alice, now, func() {}); err != nil {
		t.Errorf("the cursor of now: %v", err)
	}
}

// TestViewerSubscriptionBehindWhatIsPrunedIsTold: a subscription admitted while the events
// after its cursor were still kept, whose events are all pruned before its first read,
// ends with ECURSOREXPIRED at that read rather than taking the log for caught up and
// waiting for ever (the store keeps a user's newest event, so the gap shows).
func TestViewerSubscriptionBehindWhatIsPrunedIsTold(t *testing.T) {
	svc, store := startService(t, setup{})
	from, _ := svc.EventsCursor(alice)
	newSession(t, svc, alice, "", "")
	newSession(t, svc, alice, "", "")
	sub, err := svc.SubscribeViewer(alice, from, func() {})
	if err != nil {
		t.Fatalf("SubscribeViewer while the events are kept: %v", err)
	}
	defer sub.Close()
	if _, err := store.PruneViewerEvents(context.Background(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	evs, err := sub.Read(context.Background(), 0)
	if service.ErrorCode(err) != service.ECURSOREXPIRED {
		t.Errorf("the first read after everything was pruned: %s, %v; want ECURSOREXPIRED", describeViewer(evs), err)
	}
}

func TestMarkSessionReadClearsUnreadOnceAndTells(t *testing.T) {
	svc := start(t, setup{})
	s := newSession(t, svc, alice, "", "")
	r := followViewer(t, svc, alice, "")
	send(t, svc, alice, s.ID, "hello")
	r.until("unread", changedTo(s.ID, service.SessionIdle, true))
	if v := view(t, svc, alice, s.ID); !v.Unread {
		t.Fatalf("the session is not unread after a reply")
	}
	v, err := svc.MarkSessionRead(alice, s.ID)
	if err != nil || v.Unread {
		t.Fatalf("MarkSessionRead = unread %v, %v", v != nil && v.Unread, err)
	}
	r.until("read", changedTo(s.ID, service.SessionIdle, false))
	n := len(r.got)
	if _, err := svc.MarkSessionRead(alice, s.ID); err != nil {
		t.Fatal(err)
	}
	if evs, _ := r.sub.Read(context.Background(), 0); len(evs) != 0 || view(t, svc, alice, s.ID).LastSeq != v.LastSeq {
		t.Errorf("a session read again wrote %d events (had %d)", len(evs), n)
	}
	if _, err := svc.MarkSessionRead(bob, s.ID); service.ErrorCode(err) != service.ENOTFOUND {
		t.Errorf("bob marks alice's session: %v, want ENOTFOUND", err)
	}
}

func TestViewerEventsTellNothingOfChunks(t *testing.T) {
	svc := start(t, setup{})
	s := newSession(t, svc, alice, "", "")
	r := followViewer(t, svc, alice, "")
	send(t, svc, alice, s.ID, strings.Repeat("word ", 200))
	evs := r.until("the end", changedTo(s.ID, service.SessionIdle, true))
	// RUNNING (with the message), the run's end and IDLE: nothing for 200 words.
	if len(evs) > 4 {
		t.Errorf("%d events for one reply: %s", len(evs), describeViewer(evs))
	}
}

func TestViewerEventsTellAStatusChangeAlone(t *testing.T) {
	svc := start(t, setup{})
	s := newSession(t, svc, alice, "", "")
	r := followViewer(t, svc, alice, "")
	send(t, svc, alice, s.ID, "/slow 100")
	r.until("running", changedTo(s.ID, service.SessionRunning, false))
	if _, err := svc.CancelRun(alice, s.ID); err != nil {
		t.Fatal(err)
	}
	// Stopped: idle, with neither a message of the user's nor anything unread.
	r.until("idle", changedTo(s.ID, service.SessionIdle, false))
}
