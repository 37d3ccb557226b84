package service_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// The Runner's contract, as the service keeps its side of it.
func TestRunner(t *testing.T) {
	t.Run("the history holds every message of the session: the user's, earlier replies (some INTERRUPTED or FAILED), and QUESTION/ANSWER pairs with the tool calls each assistant message made", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)

		_, r1 := send(t, svc, alice, sess.ID, "one")
		tn := p.next(t)
		tool, err := tn.out.StartTool("call_7", "lookup", `{"q":"x"}`)
		if err != nil {
			t.Fatal(err)
		}
		if err := tool.Finish("found", nil); err != nil {
			t.Fatal(err)
		}
		tn.say(t, "Looked it up.")
		a := tn.ask("Which?", []string{"a", "b"})
		q := first(t, f.until(runIs(r1.ID, service.RunWaitingForInput)), service.EventQuestionAsked, nil).Question
		if _, _, err := svc.Respond(alice, q.ID, "b"); err != nil {
			t.Fatal(err)
		}
		a.wait(t)
		tn.say(t, "Done with b.")
		tn.finish(nil)
		f.until(runEnds(r1.ID))

		send(t, svc, alice, sess.ID, "two")
		tn = p.next(t)
		tn.say(t, "half")
		f.until(is(service.EventMessageChunk))
		_, r3 := send(t, svc, alice, sess.ID, "three") // interrupts two
		tn = p.next(t)
		tn.finish(service.Errorf(service.EINVALID, "cannot"))
		f.until(runEnds(r3.ID))

		send(t, svc, alice, sess.ID, "four")
		hist := p.next(t).req.History
		var got []string
		for _, h := range hist {
			got = append(got, strings.Join([]string{string(h.Role), string(h.Kind), string(h.Status), h.Content}, " "))
		}
		want := []string{
			"USER TEXT COMPLETE one",
			"ASSISTANT TEXT COMPLETE Looked it up.",
			"ASSISTANT QUESTION COMPLETE Which?",
			"USER ANSWER COMPLETE b",
			"ASSISTANT TEXT COMPLETE Done with b.",
			"USER TEXT COMPLETE two",
			"ASSISTANT TEXT INTERRUPTED half",
			"USER TEXT COMPLETE three",
			"ASSISTANT TEXT FAILED ",
			"USER TEXT COMPLETE four",
		}
		if !equalStrings(got, want) {
			t.Fatalf("history\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for i := 1; i < len(hist); i++ {
			if hist[i].Seq <= hist[i-1].Seq {
				t.Errorf("history not oldest first at %d", i)
			}
		}
		if calls := hist[1].ToolCalls; !hist[1].Loaded || len(calls) != 1 || calls[0].CallID != "call_7" || calls[0].Name != "lookup" ||
			calls[0].Result == nil || *calls[0].Result != "found" {
			t.Errorf("the first reply's tool calls %+v (loaded %v)", calls, hist[1].Loaded)
		}
		for _, i := range []int{2, 3} {
			if hist[i].Question == nil || hist[i].Question.ID != q.ID || hist[i].Question.Answer == nil || *hist[i].Question.Answer != "b" {
				t.Errorf("%s message without its answered question: %+v", hist[i].Kind, hist[i].Question)
			}
		}
		if hist[8].Error != "cannot" {
			t.Errorf("the failed reply's error %q", hist[8].Error)
		}
	})

	t.Run("the request names the session, run, user and settings", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		if _, err := svc.UpdateSettings(alice, sess.ID, service.SettingsInput{Temperature: ptr(0.3)}); err != nil {
			t.Fatal(err)
		}
		_, run := send(t, svc, alice, sess.ID, "go")
		req := p.next(t).req
		if req.SessionID != sess.ID || req.RunID != run.ID || req.UserID != "alice" || req.Settings.Agent != "puppet" ||
			req.Settings.Temperature == nil || *req.Settings.Temperature != 0.3 {
			t.Errorf("request %+v", req)
		}
	})

	t.Run("returning nil once stopped is fine: the run stays CANCELLED", func(t *testing.T) {
		p := newPuppet()
		p.stubborn = true
		svc := start(t, withPuppet(p))
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		if _, err := svc.CancelRun(alice, sess.ID); err != nil {
			t.Fatal(err)
		}
		tn.stopped(t)
		tn.finish(nil)
		<-tn.returned
		_, r2 := send(t, svc, alice, sess.ID, "next") // a later event to wait for
		p.next(t).finish(nil)
		evs := f.until(runEnds(r2.ID))
		if n := count(evs, runEnds(run.ID)); n != 1 {
			t.Errorf("the run ended %d times", n)
		}
		if got := getRun(t, svc, alice, run.ID).Status; got != service.RunCancelled {
			t.Errorf("run %s, want CANCELLED", got)
		}
	})

	t.Run("the service never runs two agents at once for one session", func(t *testing.T) {
		l := &lingerRunner{running: map[string]int{}, started: make(chan string, 10), release: make(chan struct{})}
		svc := start(t, setup{agents: map[string]service.Runner{"linger": l}})
		t.Cleanup(func() { close(l.release) })
		sess := newSession(t, svc, alice, "linger", service.BusyInterrupt)
		_, r1 := send(t, svc, alice, sess.ID, "one")
		if got := l.next(t, patience); got != r1.ID {
			t.Fatalf("run %s started", got)
		}
		// The first agent takes its time to stop; the second must not start meanwhile.
		_, r2 := send(t, svc, alice, sess.ID, "two")
		if got := l.next(t, 300*time.Millisecond); got != "" {
			t.Fatalf("run %s started while the interrupted run %s was still in Run", got, r1.ID)
		}
		l.release <- struct{}{} // the first agent returns
		if got := l.next(t, patience); got != r2.ID {
			t.Errorf("run %s started, want %s", got, r2.ID)
		}
	})
}

// lingerRunner is an agent that takes until it is released to return once stopped; it
// notes runs of one session that were in Run at once.
type lingerRunner struct {
	mu       sync.Mutex
	running  map[string]int // runs in Run, by session
	overlaps int
	started  chan string
	release  chan struct{}
}

func (l *lingerRunner) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	l.mu.Lock()
	l.running[req.SessionID]++
	if l.running[req.SessionID] > 1 {
		l.overlaps++
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.running[req.SessionID]--
		l.mu.Unlock()
	}()
	l.started <- req.RunID
	<-ctx.Done()
	<-l.release
	return ctx.Err()
}

// next returns the next run to start within d, or "" when none did.
func (l *lingerRunner) next(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case id := <-l.started:
		return id
	case <-time.After(d):
		return ""
	}
}

// Runs take slots: at most RunsPerUser of one user's at once, Workers in all; a run that
// waits for an answer holds none.
func TestScheduling(t *testing.T) {
	t.Run("a user's runs beyond RunsPerUser wait, and do not hold up other users", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, setup{agents: map[string]service.Runner{"puppet": p}, config: func(c *service.Config) { c.RunsPerUser = 1 }})
		a1 := newSession(t, svc, alice, "puppet", "")
		a2 := newSession(t, svc, alice, "puppet", "")
		b1 := newSession(t, svc, bob, "puppet", "")
		send(t, svc, alice, a1.ID, "one")
		first := p.next(t)
		_, second := send(t, svc, alice, a2.ID, "two")
		_, third := send(t, svc, bob, b1.ID, "three")
		if tn := p.next(t); tn.req.RunID != third.ID {
			t.Fatalf("run %s started while alice is at her limit, want bob's", tn.req.RunID)
		}
		if v := view(t, svc, alice, a2.ID); v.Status != service.SessionRunning || v.ActiveRun.Status != service.RunQueued {
			t.Errorf("alice's second session: %s, run %s, want its run QUEUED", v.Status, v.ActiveRun.Status)
		}
		first.finish(nil)
		if tn := p.next(t); tn.req.RunID != second.ID {
			t.Errorf("run %s started, want alice's second", tn.req.RunID)
		}
	})

	t.Run("waiting for a person takes no slot", func(t *testing.T) {
		p := newPuppet()
		svc := start(t, setup{agents: map[string]service.Runner{"puppet": p}, config: func(c *service.Config) { c.Workers = 1 }})
		s1 := newSession(t, svc, alice, "puppet", "")
		s2 := newSession(t, svc, bob, "puppet", "")
		f := follow(t, svc, alice, s1.ID, s1.StreamCursor)
		_, r1 := send(t, svc, alice, s1.ID, "one")
		tn := p.next(t)
		if st := svc.Stats(); st.RunsBusy != 1 {
			t.Errorf("%d slots busy while one agent works", st.RunsBusy)
		}
		a := tn.ask("Sure?", nil)
		q := first(t, f.until(runIs(r1.ID, service.RunWaitingForInput)), service.EventQuestionAsked, nil).Question
		_, r2 := send(t, svc, bob, s2.ID, "two")
		other := p.next(t) // the only slot is free while alice's agent waits
		if other.req.RunID != r2.ID {
			t.Fatalf("run %s started", other.req.RunID)
		}
		// The answered run waits for the slot, then goes on.
		if _, _, err := svc.Respond(alice, q.ID, "yes"); err != nil {
			t.Fatal(err)
		}
		other.finish(nil)
		if answer, err := a.wait(t); err != nil || answer != "yes" {
			t.Errorf("Ask returned %q, %v", answer, err)
		}
		tn.finish(nil)
		f.until(runEnds(r1.ID))
	})
}

func TestRunHistory(t *testing.T) {
	t.Run("a run starts with the whole history as the store has it, read from memory when the session's log is all there", func(t *testing.T) {
		store := &countingStore{Store: inmem.New()}
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)

		// Each run starts without reading messages, questions or tool calls, and its agent
		// gets what History (read from the store) shows at that moment.
		started := func(content string) (*turn, *service.Run) {
			t.Helper()
			store.take()
			_, run := send(t, svc, alice, sess.ID, content)
			tn := p.next(t)
			for _, m := range []string{"Messages", "Questions", "ToolCalls"} {
				if n := store.take()[m]; n > 0 {
					t.Errorf("starting the run after %q read the store's %s %d times", content, m, n)
				}
			}
			sameHistory(t, tn.req.History, history(t, svc, alice, sess.ID))
			return tn, run
		}

		// A turn with text, a tool call and an answered question.
		tn, run := started("first")
		tn.say(t, "Looking. ")
		tool, err := tn.out.StartTool("call-1", "search", `{"q":"x"}`)
		if err != nil {
			t.Fatal(err)
		}
		if err := tool.Output("found it"); err != nil {
			t.Fatal(err)
		}
		if err := tool.Finish("x is 1", nil); err != nil {
			t.Fatal(err)
		}
		a := tn.ask("Colour?", []string{"red", "blue"})
		q := first(t, f.until(runIs(run.ID, service.RunWaitingForInput)), service.EventQuestionAsked, nil).Question
		if _, _, err := svc.Respond(alice, q.ID, "blue"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.wait(t); err != nil {
			t.Fatal(err)
		}
		tn.say(t, "Blue it is.")
		tn.finish(nil)
		f.until(runEnds(run.ID))

		// A turn interrupted while it waits for an answer: its question is withdrawn.
		tn, run = started("second")
		tn.say(t, "One more thing: ")
		a = tn.ask("Size?", nil)
		f.until(runIs(run.ID, service.RunWaitingForInput))
		tn3, _ := started("third")
		tn.stopped(t)
		a.wait(t)
		tn.finish(nil)
		f.until(runEnds(run.ID))
		withdrawn := false
		for _, h := range tn3.req.History {
			if h.Question != nil && h.Question.Prompt == "Size?" {
				withdrawn = h.Question.Withdrawn
			}
		}
		if !withdrawn {
			t.Error("the interrupted run's question is not withdrawn in the next run's history")
		}
		tn3.finish(nil)
	})

	t.Run("a run of a session whose log is not all in memory reads its history from the store", func(t *testing.T) {
		store := inmem.New()
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "first")
		tn := p.next(t)
		tn.say(t, "An answer.")
		tn.finish(nil)
		f.until(runEnds(run.ID))
		svc.Close()

		// A new service over the same store knows nothing of the session's log.
		counting := &countingStore{Store: store}
		p2 := newPuppet()
		svc2, _ := startService(t, setup{store: counting, agents: map[string]service.Runner{"puppet": p2}})
		counting.take()
		send(t, svc2, alice, sess.ID, "second")
		tn = p2.next(t)
		if counting.take()["Messages"] == 0 {
			t.Error("the run's history was not read from the store")
		}
		sameHistory(t, tn.req.History, history(t, svc2, alice, sess.ID))
		if n := len(tn.req.History); n != 3 {
			t.Errorf("history of %d messages, want 3", n)
		}
		tn.finish(nil)
	})
}

// sameHistory reports an error when an agent's history differs from the one History gave.
func sameHistory(t *testing.T, got []service.HistoryMessage, want []*service.HistoryMessage) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(g) != string(w) {
		t.Errorf("the agent's history\n%s\nis not the stored one\n%s", g, w)
	}
}
