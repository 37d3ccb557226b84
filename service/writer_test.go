package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// The writer's promises: streamed text is never shown before it is durable, and a failed
// write is written again later, so nothing is lost and nothing is shown out of order.
func TestStreamedText(t *testing.T) {
	t.Run("is never shown before it is durable", func(t *testing.T) {
		store := newFlakyStore()
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		f.until(runIs(run.ID, service.RunRunning))
		sub, _ := subscribe(t, svc, sess.ID, "")

		store.writesFail.Store(true)
		tn.say(t, "one ")
		if got := store.refusedChunks(t); got != "one " {
			t.Errorf("the refused write carried %q", got)
		}
		tn.say(t, "two ")
		for { // a retry of "one " alone may come first
			if got := store.refusedChunks(t); got == "one two " {
				break
			} else if got != "one " {
				t.Fatalf("a refused write carried %q", got)
			}
		}
		if evs, err := sub.Read(alice, 0); len(evs) != 0 || err != nil {
			t.Errorf("a subscriber read %s (%v) while nothing could be written", describe(evs), err)
		}
		h := history(t, svc, alice, sess.ID)
		if len(h) != 1 {
			t.Errorf("the history shows %d messages while the reply could not be written", len(h))
		}
		if v := view(t, svc, alice, sess.ID); v.StreamCursor != f.cursor(sess.ID) {
			t.Error("the view's cursor moved past what was written")
		}
		store.writesFail.Store(false)
		tn.finish(nil)
		f.until(runEnds(run.ID))
	})

	t.Run("a failed write is written again later: all the text, in order, exactly once", func(t *testing.T) {
		store := newFlakyStore()
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "zero ")
		evs := f.until(is(service.EventMessageChunk))

		store.writesFail.Store(true)
		tn.say(t, "one ")
		store.refusedChunks(t)
		tn.say(t, "two ")
		store.refusedChunks(t)
		store.writesFail.Store(false)

		tn.say(t, "three")
		tn.finish(nil)
		evs = append(evs, f.until(runEnds(run.ID))...)
		reply := replyOf(t, evs, run.ID)
		want := "zero one two three"
		if got := continueText(t, "", evs, reply.ID); got != want {
			t.Errorf("streamed %q, want %q", got, want)
		}
		if reply.Content != want || reply.Status != service.MessageComplete {
			t.Errorf("reply %s %q, want COMPLETE %q", reply.Status, reply.Content, want)
		}
		if got := lastEnd(t, evs).Status; got != service.RunCompleted {
			t.Errorf("run ended %s", got)
		}
		// A reader from the start, from the store, reads the same once.
		all, _ := subscribe(t, svc, sess.ID, sess.StreamCursor)
		if got := continueText(t, "", readAll(t, all), reply.ID); got != want {
			t.Errorf("a replay reads %q", got)
		}
	})

	t.Run("a tool's output is kept and written again the same way", func(t *testing.T) {
		store := newFlakyStore()
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tool, err := tn.out.StartTool("", "files", "")
		if err != nil {
			t.Fatal(err)
		}
		store.writesFail.Store(true)
		tool.Output("a\n")
		waitRefused(t, store, service.EventToolCallOutput)
		store.writesFail.Store(false)
		tool.Output("b\n")
		tool.Finish("ok", nil)
		tn.finish(nil)
		evs := f.until(runEnds(run.ID))
		if got := continueText(t, "", evs, tool.ID()); got != "a\nb\n" {
			t.Errorf("streamed output %q", got)
		}
		if c := first(t, evs, service.EventToolCallFinished, nil).ToolCall; c.Output != "a\nb\n" {
			t.Errorf("finished with output %q", c.Output)
		}
	})

	t.Run("when writes keep failing for longer than WriteRetry, the agent is stopped and its run fails, keeping its text", func(t *testing.T) {
		store := newFlakyStore()
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p},
			config: func(c *service.Config) { c.WriteRetry = 30 * time.Millisecond }})
		sess := newSession(t, svc, alice, "puppet", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "go")
		tn := p.next(t)
		tn.say(t, "saved ")
		f.until(is(service.EventMessageChunk))
		store.writesFail.Store(true)
		tn.say(t, "unsaved")
		tn.stopped(t)
		err := tn.out.Text("more")
		wantCode(t, "Text once the writes gave up", err, service.EUNAVAILABLE)
		store.writesFail.Store(false)
		evs := f.until(runEnds(run.ID))
		end := lastEnd(t, evs)
		if end.Status != service.RunFailed || !strings.Contains(end.Error, "could not be saved") {
			t.Errorf("run ended %s with %q", end.Status, end.Error)
		}
		reply := replyOf(t, evs, run.ID)
		if reply.Status != service.MessageFailed || reply.Content != "saved unsaved" || reply.Error != end.Error {
			t.Errorf("reply %s %q (error %q)", reply.Status, reply.Content, reply.Error)
		}
		if got := continueText(t, "saved ", evs, reply.ID); got != "saved unsaved" {
			t.Errorf("streamed %q", got)
		}
	})
}

// waitRefused waits until the store has refused a write with an event of the type.
func waitRefused(t *testing.T, store *flakyStore, typ service.EventType) {
	t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case bs := <-store.refused:
			for _, b := range bs {
				for _, ev := range b.Events {
					if ev.Type == typ {
						return
					}
				}
			}
		case <-timeout:
			t.Fatalf("no write with a %s was tried", typ)
		}
	}
}

// FlushInterval spaces the writes of one run's text, but a run's first text goes at once,
// the session's earlier runs notwithstanding.
func TestFlushInterval(t *testing.T) {
	p := newPuppet()
	svc := start(t, setup{agents: map[string]service.Runner{"puppet": p},
		config: func(c *service.Config) { c.FlushInterval = time.Hour }})
	sess := newSession(t, svc, alice, "puppet", "")
	f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
	for _, content := range []string{"first", "second"} {
		_, run := send(t, svc, alice, sess.ID, content)
		tn := p.next(t)
		tn.say(t, content+" reply ")
		// Within patience, not within the hour: the first text of the run went at once.
		evs := f.until(is(service.EventMessageChunk))
		if c := evs[len(evs)-1]; c.Delta != content+" reply " {
			t.Errorf("run %q: first chunk %q", content, c.Delta)
		}
		// Later text waits for the interval, or for the run's end, which writes it in
		// the same write as the reply's completion.
		tn.say(t, "later")
		tn.finish(nil)
		evs = f.until(runEnds(run.ID))
		for i, e := range evs {
			if e.Type == service.EventMessageChunk && (i+1 == len(evs) || evs[i+1].Type != service.EventMessageCompleted) {
				t.Errorf("run %q: text written before the interval passed or the run ended: %s", content, describe(evs))
			}
		}
		if reply := replyOf(t, evs, run.ID); reply.Content != content+" reply later" {
			t.Errorf("run %q: reply %q", content, reply.Content)
		}
	}
}

// Text that waits for FlushInterval is written once it has passed, while the run goes on:
// the writer keeps the time of every session that waits.
func TestTextWaitingForTheIntervalIsWrittenWhenItPasses(t *testing.T) {
	p := newPuppet()
	svc := start(t, setup{agents: map[string]service.Runner{"puppet": p},
		config: func(c *service.Config) { c.FlushInterval = 20 * time.Millisecond }})
	sess := newSession(t, svc, alice, "puppet", "")
	f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
	_, run := send(t, svc, alice, sess.ID, "hello")
	tn := p.next(t)
	for i, word := range []string{"one ", "two ", "three"} {
		tn.say(t, word)
		evs := f.until(is(service.EventMessageChunk))
		for _, e := range evs {
			if e.Type == service.EventRunStatusChanged && e.Run.ID == run.ID && e.Run.FinishedAt != nil {
				t.Fatalf("word %d: the run ended before its text was written: %s", i, describe(evs))
			}
		}
		if c := evs[len(evs)-1]; c.Delta != word {
			t.Errorf("word %d: chunk %q, want %q", i, c.Delta, word)
		}
	}
	tn.finish(nil)
	if reply := replyOf(t, f.until(runEnds(run.ID)), run.ID); reply.Content != "one two three" {
		t.Errorf("reply %q", reply.Content)
	}
}

// gatedStore holds every Append until the test lets it go, and tells how many batches
// each was given, as it begins.
type gatedStore struct {
	service.Store
	rounds chan int
	next   chan struct{}
}

func (g *gatedStore) Append(ctx context.Context, batches []*service.Batch) []error {
	g.rounds <- len(batches)
	<-g.next
	return g.Store.Append(ctx, batches)
}

// A round takes at most RoundCommands commands, the oldest first; the others wait for the
// next rounds, which follow at once, and every command is written.
func TestRoundTakesAtMostRoundCommands(t *testing.T) {
	const most, crowd = 4, 10
	g := &gatedStore{Store: inmem.New(), rounds: make(chan int, 100), next: make(chan struct{})}
	svc := start(t, setup{store: g, config: func(c *service.Config) { c.RoundCommands = most }})
	done := make(chan error, crowd+1)
	create := func(i int) {
		_, err := svc.CreateTalkSession(alice, fmt.Sprintf("s%d", i), service.SettingsInput{})
		done <- err
	}
	go create(0)
	if n := <-g.rounds; n != 1 { // the writer is now in the store with one command
		t.Fatalf("first round: %d batches, want 1", n)
	}
	var wg sync.WaitGroup
	for i := 1; i <= crowd; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); create(i) }()
	}
	// The crowd waits for the round that is out.
	waitForCommandsWaiting(t, svc, crowd)
	var sizes []int
	for written := 0; written < crowd; {
		g.next <- struct{}{} // let the round that is out go
		n := <-g.rounds
		sizes = append(sizes, n)
		written += n
	}
	g.next <- struct{}{}
	close(g.next) // later rounds (none expected) go at once
	if want := []int{most, most, crowd - 2*most}; fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("rounds of %v batches, want %v", sizes, want)
	}
	wg.Wait()
	for range crowd + 1 {
		if err := <-done; err != nil {
			t.Errorf("CreateTalkSession: %v", err)
		}
	}
	if w := svc.Stats().Writes.Waiting; w != 0 {
		t.Errorf("%d commands still waiting", w)
	}
}

// Commands waiting when the service stops are all written, however many rounds the bound
// would have made of them: each was accepted into the queue and is answered.
func TestCommandsWaitingAtStopAreAllWritten(t *testing.T) {
	const most, crowd = 2, 8
	g := &gatedStore{Store: inmem.New(), rounds: make(chan int, 100), next: make(chan struct{})}
	svc, err := tryStart(setup{store: g, config: func(c *service.Config) { c.RoundCommands = most }})
	if err != nil {
		t.Fatal(err)
	}
	type created struct {
		v   *service.SessionView
		err error
	}
	done := make(chan created, crowd+1)
	create := func(i int) {
		v, err := svc.CreateTalkSession(alice, fmt.Sprintf("s%d", i), service.SettingsInput{})
		done <- created{v, err}
	}
	go create(0)
	<-g.rounds // the writer is in the store with the first
	for i := 1; i <= crowd; i++ {
		go create(i)
	}
	waitForCommandsWaiting(t, svc, crowd)
	closed := make(chan struct{})
	go func() { svc.Close(); close(closed) }()
	close(g.next) // every round goes now, the first included
	timeout := time.After(patience)
	for range crowd + 1 {
		select {
		case c := <-done:
			if c.err != nil {
				t.Errorf("CreateTalkSession: %v", c.err)
				continue
			}
			if _, err := g.Store.Session(context.Background(), c.v.ID); err != nil {
				t.Errorf("session %s was answered but not stored: %v", c.v.ID, err)
			}
		case <-timeout:
			t.Fatal("a command waiting at stop was never answered")
		}
	}
	select {
	case <-closed:
	case <-timeout:
		t.Fatal("Close did not return")
	}
}

// waitForCommandsWaiting polls the writer's stats until n commands wait for a round, or
// fails the test after patience.
func waitForCommandsWaiting(t *testing.T, svc *service.Service, n int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for svc.Stats().Writes.Waiting < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d commands waiting, want %d", svc.Stats().Writes.Waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
}
