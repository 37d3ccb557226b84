package service_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

func TestAddMessage(t *testing.T) {
	t.Run("stores a user message in the caller's session and starts a run for it", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		msg, run, err := svc.AddMessage(alice, sess.ID, "hello there", "")
		if err != nil {
			t.Fatal(err)
		}
		if msg.SessionID != sess.ID || msg.Role != service.RoleUser || msg.Kind != service.KindText || msg.Content != "hello there" ||
			msg.Status != service.MessageComplete || msg.RunID != run.ID || msg.Seq != 1 {
			t.Errorf("message %+v", msg)
		}
		if run.SessionID != sess.ID || run.UserID != "alice" || run.Agent != "demo" || run.Status != service.RunRunning {
			t.Errorf("run %+v", run)
		}
		evs := f.until(runEnds(run.ID))
		added := first(t, evs, service.EventMessageAdded, nil).Message
		if added.ID != msg.ID || added.Content != "hello there" {
			t.Errorf("the first event adds %+v, want the message", added)
		}
		if got, want := lastEnd(t, evs).Status, service.RunCompleted; got != want {
			t.Errorf("run ended %s, want %s", got, want)
		}
		if got, want := replyOf(t, evs, run.ID).Content, "You said: hello there"; got != want {
			t.Errorf("reply %q, want %q", got, want)
		}
		h := history(t, svc, alice, sess.ID)
		if len(h) != 2 || h[0].ID != msg.ID || h[1].Role != service.RoleAssistant || h[1].Content != "You said: hello there" {
			t.Errorf("history %+v", h)
		}
	})

	t.Run("an untitled session is named after its first message", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		send(t, svc, alice, sess.ID, "  plan   a\ttrip to\nLisbon  ")
		send(t, svc, alice, sess.ID, "second message")
		if got, want := view(t, svc, alice, sess.ID).Title, "plan a trip to Lisbon"; got != want {
			t.Errorf("title %q, want %q", got, want)
		}
		titled, err := svc.CreateTalkSession(alice, "Mine", service.SettingsInput{})
		if err != nil {
			t.Fatal(err)
		}
		send(t, svc, alice, titled.ID, "hello")
		if got := view(t, svc, alice, titled.ID).Title; got != "Mine" {
			t.Errorf("a titled session was renamed to %q", got)
		}
	})

	t.Run("INTERRUPT stops the active run, kept INTERRUPTED with its partial reply", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", service.BusyInterrupt)
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		m1, run1 := send(t, svc, alice, sess.ID, "first")
		tn := p.next(t)
		tn.say(t, "partial ")
		f.until(is(service.EventMessageChunk))
		tn.say(t, "reply") // perhaps not written yet: kept all the same
		m2, run2 := send(t, svc, alice, sess.ID, "second")
		tn.stopped(t)
		evs := f.until(runEnds(run1.ID))
		if got, want := lastEnd(t, evs).Status, service.RunInterrupted; got != want {
			t.Errorf("first run ended %s, want %s", got, want)
		}
		reply := replyOf(t, evs, run1.ID)
		if reply.Status != service.MessageInterrupted || reply.Content != "partial reply" {
			t.Errorf("partial reply %s %q, want INTERRUPTED %q", reply.Status, reply.Content, "partial reply")
		}
		// The new run reads the whole history.
		next := p.next(t)
		if next.req.RunID != run2.ID {
			t.Fatalf("the run that started is %s, want the new one", next.req.RunID)
		}
		var got []string
		for _, h := range next.req.History {
			got = append(got, string(h.Role)+":"+h.Content+":"+string(h.Status))
		}
		want := []string{"USER:first:COMPLETE", "ASSISTANT:partial reply:INTERRUPTED", "USER:second:COMPLETE"}
		if !equalStrings(got, want) {
			t.Errorf("the new run's history %q, want %q", got, want)
		}
		if next.req.History[0].ID != m1.ID || next.req.History[2].ID != m2.ID {
			t.Error("the history holds other messages")
		}
		if got := getRun(t, svc, alice, run1.ID); got.Status != service.RunInterrupted || got.FinishedAt == nil {
			t.Errorf("stored first run %s, finished %v", got.Status, got.FinishedAt)
		}
	})

	t.Run("INTERRUPT withdraws the pending question", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", service.BusyInterrupt)
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run1 := send(t, svc, alice, sess.ID, "first")
		tn := p.next(t)
		asked := tn.ask("Sure?", nil)
		q := first(t, f.until(runIs(run1.ID, service.RunWaitingForInput)), service.EventQuestionAsked, nil).Question
		send(t, svc, alice, sess.ID, "never mind")
		if _, err := asked.wait(t); err == nil {
			t.Error("Ask returned no error once the run was interrupted")
		}
		got, err := svc.Question(alice, q.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Withdrawn || got.Answer != nil {
			t.Errorf("question withdrawn %v, answer %v", got.Withdrawn, got.Answer)
		}
		_, _, err = svc.Respond(alice, q.ID, "yes")
		wantCode(t, "answering the withdrawn question", err, service.ECONFLICT)
		p.next(t) // the new run
	})

	t.Run("INTERRUPT withdraws queued runs, and the new run covers them", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", service.BusyEnqueue)
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run1 := send(t, svc, alice, sess.ID, "one")
		tn := p.next(t)
		_, run2 := send(t, svc, alice, sess.ID, "two")
		_, run3 := send(t, svc, alice, sess.ID, "three")
		policy := service.BusyInterrupt
		if _, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{BusyPolicy: &policy}); err != nil {
			t.Fatal(err)
		}
		_, run4 := send(t, svc, alice, sess.ID, "four")
		tn.stopped(t)
		evs := f.until(runIs(run4.ID, service.RunRunning))
		for _, r := range []*service.Run{run1, run2, run3} {
			if got := getRun(t, svc, alice, r.ID); got.Status != service.RunInterrupted || got.FinishedAt == nil {
				t.Errorf("run %s: %s, finished %v, want INTERRUPTED", r.ID, got.Status, got.FinishedAt)
			}
		}
		for _, r := range []*service.Run{run2, run3} {
			if n := count(evs, runIs(r.ID, service.RunRunning)); n != 0 {
				t.Errorf("a withdrawn queued run started")
			}
		}
		next := p.next(t)
		if next.req.RunID != run4.ID {
			t.Fatalf("run %s started, want the new one", next.req.RunID)
		}
		var users []string
		for _, h := range next.req.History {
			if h.Role == service.RoleUser {
				users = append(users, h.Content)
			}
		}
		if want := []string{"one", "two", "three", "four"}; !equalStrings(users, want) {
			t.Errorf("the new run reads %q, want every message %q", users, want)
		}
		p.idle(t)
	})

	t.Run("ENQUEUE queues the new run, and runs go in order", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", service.BusyEnqueue)
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		var runs []*service.Run
		for i, text := range []string{"one", "two", "three"} {
			_, r := send(t, svc, alice, sess.ID, text)
			want := service.RunQueued
			if i == 0 { // a free slot: it starts in the same write
				want = service.RunRunning
			}
			if r.Status != want {
				t.Errorf("run of %q returned %s, want %s", text, r.Status, want)
			}
			runs = append(runs, r)
		}
		v := view(t, svc, alice, sess.ID)
		if v.Status != service.SessionRunning || v.ActiveRun == nil || v.ActiveRun.ID != runs[0].ID {
			t.Errorf("view: %s, active run %+v, want the first", v.Status, v.ActiveRun)
		}
		for i, r := range runs {
			tn := p.next(t)
			if tn.req.RunID != r.ID {
				t.Fatalf("run %d to start is %s, want %s", i, tn.req.RunID, r.ID)
			}
			if got := getRun(t, svc, alice, runs[len(runs)-1].ID).Status; i < len(runs)-1 && got != service.RunQueued {
				t.Errorf("the last run is %s while run %d works, want QUEUED", got, i)
			}
			tn.say(t, "reply")
			tn.finish(nil)
			if got := lastEnd(t, f.until(runEnds(r.ID))).Status; got != service.RunCompleted {
				t.Errorf("run %d ended %s", i, got)
			}
		}
		p.idle(t)
	})

	t.Run("REJECT refuses with ECONFLICT and stores nothing", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", service.BusyReject)
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run1 := send(t, svc, alice, sess.ID, "first")
		tn := p.next(t)
		f.until(runIs(run1.ID, service.RunRunning))
		before := view(t, svc, alice, sess.ID)
		_, _, err := svc.AddMessage(alice, sess.ID, "second", "key-2")
		wantCode(t, "while busy", err, service.ECONFLICT)
		after := view(t, svc, alice, sess.ID)
		if after.StreamCursor != before.StreamCursor {
			t.Error("the refused message wrote to the log")
		}
		if h := history(t, svc, alice, sess.ID); len(h) != 1 {
			t.Errorf("history has %d messages, want only the first", len(h))
		}
		// The running agent goes on as it was.
		tn.running(t)
		tn.say(t, "done")
		tn.finish(nil)
		if got := lastEnd(t, f.until(runEnds(run1.ID))).Status; got != service.RunCompleted {
			t.Errorf("the running run ended %s", got)
		}
		// Not busy any more: accepted, and the key was not used by the refusal.
		if _, _, err := svc.AddMessage(alice, sess.ID, "second", "key-2"); err != nil {
			t.Errorf("once idle: %v", err)
		}
	})

	t.Run("with an idempotency key, a retry answers the message and run the first call created", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		m1, r1, err := svc.AddMessage(alice, sess.ID, "hello", "k1")
		if err != nil {
			t.Fatal(err)
		}
		m2, r2, err := svc.AddMessage(alice, sess.ID, "hello", "k1")
		if err != nil {
			t.Fatal(err)
		}
		if m2.ID != m1.ID || r2.ID != r1.ID || m2.Seq != m1.Seq {
			t.Errorf("retry answered message %s run %s, want %s %s", m2.ID, r2.ID, m1.ID, r1.ID)
		}
		f.until(runEnds(r1.ID))
		// After the run ended, the retry shows the run as it is now.
		_, r3, err := svc.AddMessage(alice, sess.ID, "hello", "k1")
		if err != nil {
			t.Fatal(err)
		}
		if r3.ID != r1.ID || r3.Status != service.RunCompleted {
			t.Errorf("late retry: run %s %s, want %s COMPLETED", r3.ID, r3.Status, r1.ID)
		}
		if h := history(t, svc, alice, sess.ID); len(h) != 2 {
			t.Errorf("history has %d messages, want the message and one reply", len(h))
		}
		if n := svc.Stats().RunsFinished[service.RunCompleted]; n != 1 {
			t.Errorf("%d runs completed, want 1", n)
		}
	})

	t.Run("a retry is answered even while the agent is busy with REJECT", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", service.BusyReject)
		m1, r1, err := svc.AddMessage(alice, sess.ID, "hello", "k1")
		if err != nil {
			t.Fatal(err)
		}
		tn := p.next(t)
		m2, r2, err := svc.AddMessage(alice, sess.ID, "hello", "k1")
		if err != nil || m2.ID != m1.ID || r2.ID != r1.ID {
			t.Errorf("retry while busy: %v, %v, %v", m2, r2, err)
		}
		tn.running(t)
	})

	t.Run("the same key with other content is ECONFLICT", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		if _, _, err := svc.AddMessage(alice, sess.ID, "hello", "k1"); err != nil {
			t.Fatal(err)
		}
		_, _, err := svc.AddMessage(alice, sess.ID, "goodbye", "k1")
		wantCode(t, "other content", err, service.ECONFLICT)
		if h := history(t, svc, alice, sess.ID); withContent(h, "goodbye") != 0 {
			t.Error("the conflicting message was stored")
		}
	})

	t.Run("the same key in another session is ECONFLICT", func(t *testing.T) {
		svc := start(t, setup{})
		s1 := newSession(t, svc, alice, "", "")
		s2 := newSession(t, svc, alice, "", "")
		if _, _, err := svc.AddMessage(alice, s1.ID, "hello", "k1"); err != nil {
			t.Fatal(err)
		}
		_, _, err := svc.AddMessage(alice, s2.ID, "hello", "k1")
		wantCode(t, "another session", err, service.ECONFLICT)
		if h := history(t, svc, alice, s2.ID); len(h) != 0 {
			t.Errorf("the other session has %d messages", len(h))
		}
	})

	t.Run("keys are the caller's own: another user may use the same key", func(t *testing.T) {
		svc := start(t, setup{})
		s1 := newSession(t, svc, alice, "", "")
		s2 := newSession(t, svc, bob, "", "")
		m1, _, err := svc.AddMessage(alice, s1.ID, "hello", "k1")
		if err != nil {
			t.Fatal(err)
		}
		m2, _, err := svc.AddMessage(bob, s2.ID, "hello", "k1")
		if err != nil {
			t.Fatal(err)
		}
		if m1.ID == m2.ID || m2.SessionID != s2.ID {
			t.Errorf("bob's message %+v", m2)
		}
	})

	t.Run("ENOTFOUND when the session is missing", func(t *testing.T) {
		svc := start(t, setup{})
		_, _, err := svc.AddMessage(alice, missingID, "hello", "")
		wantCode(t, "missing", err, service.ENOTFOUND)
	})

	t.Run("ENOTFOUND when the session is another user's, as when missing", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, _, other := svc.AddMessage(bob, sess.ID, "hello", "")
		_, _, missing := svc.AddMessage(bob, missingID, "hello", "")
		wantCode(t, "another user's", other, service.ENOTFOUND)
		wantSameError(t, other, missing)
		if h := history(t, svc, alice, sess.ID); len(h) != 0 {
			t.Errorf("bob's message was stored in alice's session")
		}
	})

	t.Run("EINVALID for empty or oversized content or key", func(t *testing.T) {
		svc := start(t, setup{config: func(c *service.Config) { c.MaxMessageBytes = 16 }})
		sess := newSession(t, svc, alice, "", "")
		for _, tc := range []struct{ name, id, content, key string }{
			{"empty content", sess.ID, "", ""},
			{"blank content", sess.ID, " \n\t ", ""},
			{"17 bytes", sess.ID, strings.Repeat("é", 8) + "x", ""},
			{"content that is not UTF-8", sess.ID, "hi \xff", ""},
			{"a key of 201 bytes", sess.ID, "hi", strings.Repeat("k", 201)},
			{"a malformed session ID", "session-1", "hi", ""},
		} {
			_, _, err := svc.AddMessage(alice, tc.id, tc.content, tc.key)
			wantCode(t, tc.name, err, service.EINVALID)
		}
		if _, _, err := svc.AddMessage(alice, sess.ID, strings.Repeat("é", 8), strings.Repeat("k", 200)); err != nil {
			t.Errorf("16 bytes and a key of 200: %v", err)
		}
		if h := history(t, svc, alice, sess.ID); len(h) > 2 {
			t.Errorf("refused messages were stored: %d messages", len(h))
		}
	})

	t.Run("ERATELIMIT when too many runs wait", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, setup{agents: map[string]service.Runner{"puppet": p}, config: func(c *service.Config) { c.MaxQueuedRuns = 2 }})
		sess := newSession(t, svc, alice, "puppet", service.BusyEnqueue)
		send(t, svc, alice, sess.ID, "one")
		tn := p.next(t)
		send(t, svc, alice, sess.ID, "two")
		send(t, svc, alice, sess.ID, "three")
		before := view(t, svc, alice, sess.ID).StreamCursor
		_, _, err := svc.AddMessage(alice, sess.ID, "four", "")
		wantCode(t, "a third queued run", err, service.ERATELIMIT)
		if view(t, svc, alice, sess.ID).StreamCursor != before {
			t.Error("the refused message was written")
		}
		tn.running(t)
		tn.finish(nil)
		p.next(t) // "two" starts; one run waits: there is room again
		if _, _, err := svc.AddMessage(alice, sess.ID, "four", ""); err != nil {
			t.Errorf("with room in the queue: %v", err)
		}
	})

	t.Run("EUNAVAILABLE when it cannot be written, and the running agent goes on as it was", func(t *testing.T) {
		store := newFlakyStore()
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		sess := newSession(t, svc, alice, "puppet", service.BusyInterrupt)
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run1 := send(t, svc, alice, sess.ID, "first")
		tn := p.next(t)
		tn.say(t, "partial ")
		f.until(is(service.EventMessageChunk))
		before := view(t, svc, alice, sess.ID).StreamCursor

		store.writesFail.Store(true)
		_, _, err := svc.AddMessage(alice, sess.ID, "second", "k2")
		wantCode(t, "storage failing", err, service.EUNAVAILABLE)
		store.writesFail.Store(false)

		tn.running(t)
		if got := view(t, svc, alice, sess.ID); got.StreamCursor != before || got.ActiveRun == nil || got.ActiveRun.ID != run1.ID {
			t.Errorf("after the failed message: cursor moved %v, active run %+v", got.StreamCursor != before, got.ActiveRun)
		}
		tn.say(t, "reply")
		tn.finish(nil)
		evs := f.until(runEnds(run1.ID))
		if got := lastEnd(t, evs).Status; got != service.RunCompleted {
			t.Errorf("the run ended %s, want COMPLETED", got)
		}
		if got := replyOf(t, evs, run1.ID); got.Content != "partial reply" || got.Status != service.MessageComplete {
			t.Errorf("reply %s %q", got.Status, got.Content)
		}
		h := history(t, svc, alice, sess.ID)
		if len(h) != 2 || withContent(h, "second") != 0 {
			t.Errorf("history after the failed message: %d messages", len(h))
		}
		// Nothing of it exists: not even its idempotency key.
		if _, _, err := svc.AddMessage(alice, sess.ID, "other", "k2"); err != nil {
			t.Errorf("the failed message's key is taken: %v", err)
		}
	})

	t.Run("EUNAVAILABLE after Close", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		svc.Close()
		_, _, err := svc.AddMessage(alice, sess.ID, "hello", "")
		wantCode(t, "after Close", err, service.EUNAVAILABLE)
	})

	t.Run("EUNAUTHORIZED without a user", func(t *testing.T) {
		svc := start(t, setup{})
		sess := newSession(t, svc, alice, "", "")
		_, _, err := svc.AddMessage(nobody, sess.ID, "hello", "")
		wantCode(t, "no user", err, service.EUNAUTHORIZED)
	})
}

// withContent counts the messages of a history with the content.
func withContent(h []*service.HistoryMessage, content string) int {
	n := 0
	for _, m := range h {
		if m.Content == content {
			n++
		}
	}
	return n
}

// overlapStore is a store whose reads of the two methods named in pair, once armed, each
// wait for the other to begin (for at most a few seconds, then noting that they did not
// overlap).
type overlapStore struct {
	service.Store
	pair   [2]string
	armed  atomic.Bool
	mu     sync.Mutex
	seen   map[string]bool
	met    chan struct{}
	missed atomic.Bool
}

func newOverlapStore(a, b string) *overlapStore {
	return &overlapStore{Store: inmem.New(), pair: [2]string{a, b}, seen: map[string]bool{}, met: make(chan struct{})}
}

func (o *overlapStore) meet(what string) {
	if !o.armed.Load() || (what != o.pair[0] && what != o.pair[1]) {
		return
	}
	o.mu.Lock()
	if !o.seen[what] {
		o.seen[what] = true
		if len(o.seen) == 2 {
			close(o.met)
		}
	}
	o.mu.Unlock()
	select {
	case <-o.met:
	case <-time.After(5 * time.Second):
		o.missed.Store(true)
	}
}

func (o *overlapStore) Session(ctx context.Context, id string) (*service.TalkSession, error) {
	o.meet("Session")
	return o.Store.Session(ctx, id)
}

func (o *overlapStore) Idempotency(ctx context.Context, userID, key string) (*service.IdempotencyRecord, error) {
	o.meet("Idempotency")
	return o.Store.Idempotency(ctx, userID, key)
}

func (o *overlapStore) Messages(ctx context.Context, sessionID string, page service.MessagePage) ([]*service.Message, error) {
	o.meet("Messages")
	return o.Store.Messages(ctx, sessionID, page)
}

func TestAddMessageReadsTogether(t *testing.T) {
	t.Run("a message's idempotency key is read while its session is, not after", func(t *testing.T) {
		store := newOverlapStore("Session", "Idempotency")
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		store.armed.Store(true)
		msg, _, err := svc.AddMessage(alice, sess.ID, "hello", "key-1")
		store.armed.Store(false)
		if err != nil {
			t.Fatal(err)
		}
		if store.missed.Load() {
			t.Errorf("the session and the idempotency key were read one after the other (seen: %v)", store.seen)
		}
		again, _, err := svc.AddMessage(alice, sess.ID, "hello", "key-1")
		if err != nil {
			t.Fatal(err)
		}
		if again.ID != msg.ID {
			t.Errorf("the retry answered message %s, want %s", again.ID, msg.ID)
		}
	})
	t.Run("the current branch's last message is read while the session is, not after", func(t *testing.T) {
		// One service writes a turn; a second on the same store, which holds nothing of
		// the session in memory, adds the next message to it.
		store := newOverlapStore("Session", "Messages")
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "one")
		reply := replyOf(t, f.until(runEnds(run.ID)), run.ID)
		other, _ := startService(t, setup{store: store})
		store.armed.Store(true)
		second, _ := send(t, other, alice, sess.ID, "two")
		store.armed.Store(false)
		if store.missed.Load() {
			t.Errorf("the session and its last message were read one after the other (seen: %v)", store.seen)
		}
		if second.ParentID != reply.ID {
			t.Errorf("the second message's parent is %q, want the reply %s", second.ParentID, reply.ID)
		}
	})
}

type retryMark struct{}

// lateKeyStore holds back the Session read of a request marked with retryMark until
// written is closed, and closes keyRead once that request's Idempotency read returned.
type lateKeyStore struct {
	service.Store
	keyRead, written chan struct{}
	once             sync.Once
}

func (l *lateKeyStore) Session(ctx context.Context, id string) (*service.TalkSession, error) {
	if ctx.Value(retryMark{}) != nil {
		select {
		case <-l.written:
		case <-time.After(10 * time.Second):
		}
	}
	return l.Store.Session(ctx, id)
}

func (l *lateKeyStore) Idempotency(ctx context.Context, userID, key string) (*service.IdempotencyRecord, error) {
	rec, err := l.Store.Idempotency(ctx, userID, key)
	if ctx.Value(retryMark{}) != nil {
		l.once.Do(func() { close(l.keyRead) })
	}
	return rec, err
}

func TestAddMessageKeyWrittenMeanwhile(t *testing.T) {
	t.Run("a retry whose key is written after it was read is answered what the first created, not refused", func(t *testing.T) {
		p := newPuppet()
		store := &lateKeyStore{Store: inmem.New(), keyRead: make(chan struct{}), written: make(chan struct{})}
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		sess := newSession(t, svc, alice, "puppet", service.BusyReject)
		type answer struct {
			m   *service.Message
			err error
		}
		retried := make(chan answer, 1)
		go func() {
			m, _, err := svc.AddMessage(context.WithValue(alice, retryMark{}, true), sess.ID, "hello", "k1")
			retried <- answer{m, err}
		}()
		select {
		case <-store.keyRead: // the retry found no key, and waits to read the session
		case <-time.After(10 * time.Second):
			t.Fatal("the retry never read its key")
		}
		m1, _, err := svc.AddMessage(alice, sess.ID, "hello", "k1")
		if err != nil {
			t.Fatal(err)
		}
		tn := p.next(t) // the agent is busy: REJECT would refuse another message
		close(store.written)
		a := <-retried
		if a.err != nil || a.m.ID != m1.ID {
			t.Errorf("the retry answered %v, %v; want message %s", a.m, a.err, m1.ID)
		}
		tn.running(t)
	})
}
