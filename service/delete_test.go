package service_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

func TestDeleteTalkSession(t *testing.T) {
	t.Run("deletes a session and its history", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, "")
		_, run := send(t, svc, alice, sess.ID, "/ask Which colour?")
		evs := f.until(runIs(run.ID, service.RunWaitingForInput))
		q := first(t, evs, service.EventQuestionAsked, nil).Question
		if err := svc.DeleteTalkSession(alice, sess.ID); err != nil {
			t.Fatal(err)
		}
		_, err := svc.View(alice, sess.ID)
		wantCode(t, "View", err, service.ENOTFOUND)
		_, _, _, err = svc.History(alice, sess.ID, nil, nil, "", nil, "")
		wantCode(t, "History", err, service.ENOTFOUND)
		_, err = svc.Run(alice, run.ID)
		wantCode(t, "Run", err, service.ENOTFOUND)
		_, err = svc.Question(alice, q.ID)
		wantCode(t, "Question", err, service.ENOTFOUND)
		_, _, err = svc.Respond(alice, q.ID, "red")
		wantCode(t, "Respond", err, service.ENOTFOUND)
		if list, _, _ := svc.Sessions(alice, nil, ""); len(list) != 0 {
			t.Errorf("Sessions still lists %d", len(list))
		}
		_, _, err = svc.AddMessage(alice, sess.ID, "hello?", "")
		wantCode(t, "AddMessage", err, service.ENOTFOUND)
		wantCode(t, "DeleteTalkSession again", svc.DeleteTalkSession(alice, sess.ID), service.ENOTFOUND)
	})

	t.Run("stopping its run", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		send(t, svc, alice, sess.ID, "hi")
		tn := p.next(t)
		tn.say(t, "partial")
		if err := svc.DeleteTalkSession(alice, sess.ID); err != nil {
			t.Fatal(err)
		}
		tn.stopped(t)
		if err := tn.out.Text("more"); err == nil {
			t.Error("the deleted session's agent could still write")
		}
		if st := svc.Stats(); st.RunsFinished[service.RunCompleted] != 0 {
			t.Errorf("the stopped run counted as completed: %v", st.RunsFinished)
		}
	})

	t.Run("subscriptions to it end", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, "")
		if err := svc.DeleteTalkSession(alice, sess.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := f.rest(); err != service.ErrSessionDeleted {
			t.Errorf("the subscription ended with %v, want ErrSessionDeleted", err)
		}
		_, err := svc.Subscribe(alice, sess.ID, "", func() {})
		wantCode(t, "Subscribe afterwards", err, service.ENOTFOUND)
	})

	t.Run("ENOTFOUND when missing or another user's", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		other := svc.DeleteTalkSession(bob, sess.ID)
		missing := svc.DeleteTalkSession(bob, missingID)
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
		view(t, svc, alice, sess.ID) // still there
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		wantCode(t, "no user", svc.DeleteTalkSession(nobody, sess.ID), service.EUNAUTHORIZED)
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLiveSessions(t *testing.T) {
	t.Run("commands on a session held in memory do not read it from the store, and see it as stored", func(t *testing.T) {
		store := &countingStore{Store: inmem.New()}
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor) // holds the session's state
		_, run := send(t, svc, alice, sess.ID, "/slow 2")
		f.until(runEnds(run.ID))

		store.take()
		renamed, err := svc.RenameTalkSession(alice, sess.ID, "Renamed")
		if err != nil {
			t.Fatal(err)
		}
		_, run = send(t, svc, alice, sess.ID, "again")
		if n := store.take()["Session"]; n != 0 {
			t.Errorf("a rename and a message read the session from the store %d times", n)
		}
		f.until(runEnds(run.ID))

		// Nothing changes: the answer shows the session as the store has it, its
		// updatedAt moved by the last message.
		same, err := svc.RenameTalkSession(alice, sess.ID, "Renamed")
		if err != nil {
			t.Fatal(err)
		}
		stored, err := store.Store.Session(alice, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !same.UpdatedAt.Equal(stored.UpdatedAt) || !same.UpdatedAt.After(renamed.UpdatedAt) || same.Title != stored.Title {
			t.Errorf("no-op rename answered %q updated %v; stored %q updated %v (renamed at %v)",
				same.Title, same.UpdatedAt, stored.Title, stored.UpdatedAt, renamed.UpdatedAt)
		}
	})

	t.Run("a command on a session held nowhere in memory reads its row once", func(t *testing.T) {
		store := &countingStore{Store: inmem.New()}
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		store.take()
		if _, err := svc.RenameTalkSession(alice, sess.ID, "Renamed"); err != nil {
			t.Fatal(err)
		}
		if n := store.take()["Session"]; n != 1 {
			t.Errorf("a rename of a session not in memory read it from the store %d times, want once", n)
		}
		stored, err := store.Store.Session(alice, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stored.Title != "Renamed" {
			t.Errorf("stored title %q", stored.Title)
		}
	})

	t.Run("a subscription whose row was read before a write of this process starts after that write", func(t *testing.T) {
		store := &countingStore{Store: inmem.New()}
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		// Once the subscription has read the row, a rename of the session is done whole:
		// it makes the session's state, writes an event and drops the state. The row read
		// is then older than what this process wrote, and the subscription, made at the
		// end of the log, must start after the rename's event.
		var done atomic.Bool
		store.afterSession = func() {
			if done.CompareAndSwap(false, true) {
				if _, err := svc.RenameTalkSession(alice, sess.ID, "Renamed"); err != nil {
					t.Error(err)
				}
			}
		}
		f := follow(t, svc, alice, sess.ID, "")
		if !done.Load() {
			t.Fatal("the rename was not made during the subscription")
		}
		stored, err := store.Store.Session(alice, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stored.Title != "Renamed" || stored.LastSeq == 0 {
			t.Fatalf("stored %q at Seq %d", stored.Title, stored.LastSeq)
		}
		_, run := send(t, svc, alice, sess.ID, "hello")
		for _, ev := range f.until(runEnds(run.ID)) {
			if ev.Seq <= stored.LastSeq {
				t.Fatalf("a subscription made after event %d was given event %d (%s)", stored.LastSeq, ev.Seq, ev.Type)
			}
		}
	})

	t.Run("another user's session held in memory costs the store reads a missing one does", func(t *testing.T) {
		store := &countingStore{Store: inmem.New()}
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		follow(t, svc, alice, sess.ID, sess.StreamCursor)
		store.take()
		_, _, theirs := svc.AddMessage(bob, sess.ID, "hi", "")
		theirReads := store.take()
		_, _, missing := svc.AddMessage(bob, missingID, "hi", "")
		missingReads := store.take()
		wantCode(t, "another user's", theirs, service.ENOTFOUND)
		wantSameError(t, theirs, missing)
		if fmt.Sprint(theirReads) != fmt.Sprint(missingReads) {
			t.Errorf("reads for another user's session %v, for a missing one %v", theirReads, missingReads)
		}
	})
}
