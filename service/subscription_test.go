package service_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// readAll reads a subscription until it has caught up, failing the test on an error.
func readAll(t *testing.T, sub *service.Subscription) []*service.Event {
	t.Helper()
	var out []*service.Event
	for {
		evs, err := sub.Read(alice, 3)
		if err != nil {
			t.Fatalf("Read after %d events: %v", len(out), err)
		}
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
	}
}

// subscribe opens a subscription that is closed when the test ends; notified receives a
// value (when there is room) each time notify is called.
func subscribe(t *testing.T, svc *service.Service, sessionID, after string) (sub *service.Subscription, notified chan struct{}) {
	t.Helper()
	notified = make(chan struct{}, 1)
	sub, err := svc.Subscribe(alice, sessionID, after, func() {
		select {
		case notified <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(sub.Close)
	return sub, notified
}

// texts returns the text of every stream (by key) among evs, checking that each chunk
// continues its stream exactly.
func texts(t *testing.T, start map[string]string, evs []*service.Event) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range start {
		out[k] = v
	}
	for _, ev := range evs {
		if ev.Type.Chunky() {
			out[ev.Key] = continueText(t, out[ev.Key], []*service.Event{ev}, ev.Key)
		}
	}
	return out
}

// others lists the events that are not chunks, by Seq and type.
func others(evs []*service.Event) []string {
	var out []string
	for _, ev := range evs {
		if !ev.Type.Chunky() {
			out = append(out, string(ev.Type)+"@"+strconv.FormatInt(ev.Seq, 10))
		}
	}
	return out
}

func TestSubscribe(t *testing.T) {
	t.Run("opens a subscription positioned after the cursor after: exactly the events after it, with no gap and no duplicate", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		for _, text := range []string{"/tool one two three", "four five six seven"} {
			_, run := send(t, svc, alice, sess.ID, text)
			f.until(runEnds(run.ID))
		}
		all, _ := subscribe(t, svc, sess.ID, sess.StreamCursor)
		log := readAll(t, all)
		full := texts(t, nil, log)
		for i, ev := range log {
			sub, _ := subscribe(t, svc, sess.ID, service.EncodeCursor(sess.ID, service.CursorOf(ev)))
			rest := readAll(t, sub)
			if got, want := others(rest), others(log[i+1:]); !equalStrings(got, want) {
				t.Fatalf("after event %d (%s@%d): events %v, want %v", i, ev.Type, ev.Seq, got, want)
			}
			got := texts(t, texts(t, nil, log[:i+1]), rest)
			for key, text := range full {
				if got[key] != text {
					t.Errorf("after event %d: stream %s reads %q, want %q", i, key, got[key], text)
				}
			}
		}
	})

	t.Run("or at the end of the log when after is empty", func(t *testing.T) {
		svc := start(t, setup{})
		sess, _ := conversation(t, svc, 1)
		sub, _ := subscribe(t, svc, sess.ID, "")
		if evs := readAll(t, sub); len(evs) != 0 {
			t.Errorf("a subscription at the end read %d old events", len(evs))
		}
		last := view(t, svc, alice, sess.ID).LastSeq
		f := follow(t, svc, alice, sess.ID, "")
		_, run := send(t, svc, alice, sess.ID, "next")
		evs := f.until(runEnds(run.ID))
		if evs[0].Seq != last+1 || evs[0].Type != service.EventMessageAdded || evs[0].Message.Content != "next" {
			t.Errorf("first event %s@%d, want the new message at %d", evs[0].Type, evs[0].Seq, last+1)
		}
	})

	t.Run("notify is called whenever there may be something new to Read", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		sub, notified := subscribe(t, svc, sess.ID, "")
		_, run := send(t, svc, alice, sess.ID, "hi")
		var got []*service.Event
		for {
			select {
			case <-notified:
			case <-time.After(patience):
				t.Fatalf("no notification after %s", describe(got))
			}
			evs, err := sub.Read(alice, 0)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, evs...)
			if len(got) > 0 && runEnds(run.ID)(got[len(got)-1]) {
				return
			}
		}
	})

	t.Run("ENOTFOUND when the session is missing or not the caller's", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, other := svc.Subscribe(bob, sess.ID, "", func() {})
		_, missing := svc.Subscribe(bob, missingID, "", func() {})
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
		if n := svc.Stats().Subscriptions; n != 0 {
			t.Errorf("%d subscriptions counted", n)
		}
	})

	t.Run("EINVALID for a bad cursor: malformed, of another session, or ahead of the log", func(t *testing.T) {
		svc := start(t, setup{})
		sess, _ := conversation(t, svc, 1)
		other := newSession(t, svc, alice, "", "")
		last := view(t, svc, alice, sess.ID).LastSeq
		before := svc.Stats().Subscriptions
		for name, cursor := range map[string]string{
			"malformed":            "%%%",
			"a history cursor":     service.EncodeMessageCursor(&service.Message{Seq: 1}),
			"of another session":   service.EncodeCursor(other.ID, service.Cursor{}),
			"ahead of the log":     service.EncodeCursor(sess.ID, service.Cursor{Seq: last + 1}),
			"far ahead of the log": service.EncodeCursor(sess.ID, service.Cursor{Seq: 1 << 40}),
		} {
			_, err := svc.Subscribe(alice, sess.ID, cursor, func() {})
			wantCode(t, name, err, service.EINVALID)
		}
		if n := svc.Stats().Subscriptions; n != before {
			t.Errorf("%d subscriptions counted after refusals, want %d", n, before)
		}
		if _, err := svc.Subscribe(alice, sess.ID, service.EncodeCursor(sess.ID, service.Cursor{Seq: last}), func() {}); err != nil {
			t.Errorf("a cursor at the end: %v", err)
		}
	})

	t.Run("ERATELIMIT when the server holds too many subscriptions", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxSubscriptions = 2 }})
		sess := newSession(t, svc, alice, "", "")
		s1, _ := subscribe(t, svc, sess.ID, "")
		subscribe(t, svc, sess.ID, "")
		_, err := svc.Subscribe(alice, sess.ID, "", func() {})
		wantCode(t, "a third", err, service.ERATELIMIT)
		s1.Close()
		if _, err := svc.Subscribe(alice, sess.ID, "", func() {}); err != nil {
			t.Errorf("after one closed: %v", err)
		}
	})

	t.Run("EUNAVAILABLE when it is shutting down", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		svc.Close()
		_, err := svc.Subscribe(alice, sess.ID, "", func() {})
		wantCode(t, "after Close", err, service.EUNAVAILABLE)
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, err := svc.Subscribe(nobody, sess.ID, "", func() {})
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
}

func TestSubscription(t *testing.T) {
	t.Run("reads every event after the cursor, then live ones as they become durable", func(t *testing.T) {
		svc := start(t, setup{})
		sess, h := conversation(t, svc, 1)
		f := follow(t, svc, alice, sess.ID, service.EncodeCursor(sess.ID, service.Cursor{Seq: h[0].Seq}))
		old := f.until(runEnds(h[0].RunID))
		if old[0].Seq != h[0].Seq+1 {
			t.Errorf("the first event read is %s@%d, want the one after the cursor", old[0].Type, old[0].Seq)
		}
		if replyOf(t, old, h[0].RunID).Content != h[1].Content {
			t.Error("the old reply differs")
		}
		_, run := send(t, svc, alice, sess.ID, "again")
		live := f.until(runEnds(run.ID))
		if live[0].Seq <= old[len(old)-1].Seq || live[0].Type != service.EventMessageAdded || live[0].Message.Content != "again" {
			t.Errorf("the first live event %s@%d", live[0].Type, live[0].Seq)
		}
		all := append(old, live...)
		for i := 1; i < len(all); i++ {
			if all[i].Seq <= all[i-1].Seq {
				t.Errorf("event %d has Seq %d after %d", i, all[i].Seq, all[i-1].Seq)
			}
		}
		if got, want := replyOf(t, live, run.ID).Content, "You said: again"; got != want {
			t.Errorf("live reply %q, want %q", got, want)
		}
	})

	t.Run("a client that does not read never holds up the agent or other subscribers, and catches up from the log", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.TailEvents = 2 }})
		sess := newSession(t, svc, alice, "", "")
		idle, _ := subscribe(t, svc, sess.ID, "") // never read until the end
		f := follow(t, svc, alice, sess.ID, "")
		long := strings.Repeat("word ", 300)
		_, run := send(t, svc, alice, sess.ID, long)
		evs := f.until(runEnds(run.ID))
		if got := lastEnd(t, evs).Status; got != service.RunCompleted {
			t.Fatalf("run ended %s", got)
		}
		reply := replyOf(t, evs, run.ID)
		late := readAll(t, idle)
		if got, want := others(late), others(evs); !equalStrings(got, want) {
			t.Errorf("the slow client read %v, want %v", got, want)
		}
		if got := texts(t, nil, late)[reply.ID]; got != reply.Content || got != "You said: "+strings.TrimSpace(long) {
			t.Errorf("the slow client read a reply of %d bytes, want %d", len(got), len(reply.Content))
		}
	})

	t.Run("the text of a message's chunks is its content, in order", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, "")
		long := strings.Repeat("ünï ", 200)
		_, run := send(t, svc, alice, sess.ID, long)
		evs := f.until(runEnds(run.ID))
		reply := replyOf(t, evs, run.ID)
		if got := continueText(t, "", evs, reply.ID); got != reply.Content || got != "You said: "+strings.TrimSpace(long) {
			t.Errorf("chunks make %d bytes, the reply has %d", len(got), len(reply.Content))
		}
		for i := 1; i < len(evs); i++ {
			if evs[i].Seq != evs[i-1].Seq+1 {
				t.Errorf("live events %d and %d have Seq %d and %d", i-1, i, evs[i-1].Seq, evs[i].Seq)
			}
		}
	})
}

func TestSubscriptionRead(t *testing.T) {
	t.Run("returns up to max events after the subscription's position, moving past them", func(t *testing.T) {
		svc := start(t, setup{})
		sess, _ := conversation(t, svc, 1)
		sub, _ := subscribe(t, svc, sess.ID, sess.StreamCursor)
		a, err := sub.Read(alice, 2)
		if err != nil || len(a) != 2 || a[0].Seq != 1 || a[1].Seq != 2 {
			t.Fatalf("first Read: %s, %v", describe(a), err)
		}
		b, err := sub.Read(alice, 2)
		if err != nil || len(b) == 0 || b[0].Seq != 3 {
			t.Errorf("second Read: %s, %v", describe(b), err)
		}
	})

	t.Run("no events and no error when caught up; notify is called when that changes", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		sub, notified := subscribe(t, svc, sess.ID, "")
		if evs, err := sub.Read(alice, 0); len(evs) != 0 || err != nil {
			t.Errorf("caught up: %s, %v", describe(evs), err)
		}
		if _, err := svc.RenameTalkSession(alice, sess.ID, "x"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-notified:
		case <-time.After(patience):
			t.Fatal("not notified")
		}
		if evs, err := sub.Read(alice, 0); len(evs) != 1 || evs[0].Type != service.EventSessionUpdated || err != nil {
			t.Errorf("after the rename: %s, %v", describe(evs), err)
		}
	})

	t.Run("ErrSessionDeleted when the session was deleted", func(t *testing.T) {
		svc := start(t, setup{})
		sess, _ := conversation(t, svc, 1)
		sub, notified := subscribe(t, svc, sess.ID, sess.StreamCursor)
		svc.DeleteTalkSession(alice, sess.ID)
		<-notified
		if _, err := sub.Read(alice, 0); err != service.ErrSessionDeleted {
			t.Errorf("Read: %v, want ErrSessionDeleted", err)
		}
	})

	t.Run("ErrShutdown when the server shuts down, once everything recorded was delivered", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		sub, _ := subscribe(t, svc, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "partial")
		svc.Close()
		var evs []*service.Event
		for {
			got, err := sub.Read(alice, 2)
			if err == service.ErrShutdown {
				break
			}
			if err != nil || len(got) == 0 {
				t.Fatalf("Read after Close: %s, %v; want events, then ErrShutdown", describe(got), err)
			}
			evs = append(evs, got...)
		}
		end := lastEnd(t, evs)
		if end.ID != run.ID || end.Status != service.RunInterrupted || !runEnds(run.ID)(evs[len(evs)-1]) {
			t.Errorf("the last events %s, want the run INTERRUPTED", describe(evs))
		}
		if m := replyOf(t, evs, run.ID); m.Content != "partial" || continueText(t, "", evs, m.ID) != "partial" {
			t.Errorf("reply %q", m.Content)
		}
		if _, err := sub.Read(alice, 0); err != service.ErrShutdown {
			t.Errorf("Read again: %v, want ErrShutdown", err)
		}
	})

	t.Run("EUNAVAILABLE while the store cannot be read; the position stays, and a later Read goes on", func(t *testing.T) {
		store := newFlakyStore()
		svc, _ := startService(t, setup{store: store, config: func(c *service.Config) { c.TailEvents = 1 }})
		sess, _ := conversation(t, svc, 1)
		sub, _ := subscribe(t, svc, sess.ID, sess.StreamCursor)
		store.readsFail.Store(true)
		_, err := sub.Read(alice, 0)
		wantCode(t, "store failing", err, service.EUNAVAILABLE)
		store.readsFail.Store(false)
		evs := readAll(t, sub)
		if len(evs) == 0 || evs[0].Seq != 1 {
			t.Errorf("after the failure: %s, want the log from the start", describe(evs))
		}
	})
}

func TestSubscriptionClose(t *testing.T) {
	t.Run("ends the subscription; Read fails afterwards", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		sub, _ := subscribe(t, svc, sess.ID, "")
		sub.Close()
		_, err := sub.Read(alice, 0)
		wantCode(t, "Read after Close", err, service.ECONFLICT)
	})

	t.Run("it is safe to call more than once", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		s1, _ := subscribe(t, svc, sess.ID, "")
		subscribe(t, svc, sess.ID, "")
		if n := svc.Stats().Subscriptions; n != 2 {
			t.Fatalf("%d subscriptions", n)
		}
		s1.Close()
		s1.Close()
		if n := svc.Stats().Subscriptions; n != 1 {
			t.Errorf("%d subscriptions after closing one twice, want 1", n)
		}
	})
}
