package service_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

type wordsRunner []string

func (w wordsRunner) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	for _, s := range w {
		if err := out.Text(s); err != nil {
			return err
		}
	}
	return nil
}

// lockstepReply sends a message to a new session of svc, whose agent is a lockstepRunner
// stepping on step, and returns the session's ID and what its subscriber saw until the
// run ended: a chunk event for each word.
func lockstepReply(t *testing.T, svc *service.Service, ctx context.Context, step chan<- struct{}) (string, []*service.Event) {
	t.Helper()
	agent := "test"
	sess, err := svc.CreateTalkSession(ctx, "", service.SettingsInput{Agent: &agent})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := svc.View(ctx, sess.ID)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := watch(svc, sctx, sess.ID, v.StreamCursor)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.AddMessage(ctx, sess.ID, "go", ""); err != nil {
		t.Fatal(err)
	}
	live := collect(t, ch, func(ev *service.Event) bool {
		if ev.Type == service.EventMessageChunk {
			step <- struct{}{}
		}
		return runEnded(ev)
	})
	return sess.ID, live
}

// lockstepRunner streams its words one at a time: after each it waits for the test to
// have seen it (a step), so that every word is a chunk event of its own.
type lockstepRunner struct {
	words []string
	step  chan struct{}
}

func (l lockstepRunner) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	for _, w := range l.words {
		if err := out.Text(w); err != nil {
			return err
		}
		select {
		case <-l.step:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func newServiceOn(t *testing.T, store service.Store, r service.Runner, change func(*service.Config)) (*service.Service, context.Context) {
	t.Helper()
	cfg := service.DefaultConfig()
	if change != nil {
		change(&cfg)
	}
	agents := &service.Agents{}
	agents.Register("test", "", r)
	svc, err := service.New(context.Background(), store, agents, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc, service.WithUser(context.Background(), "u1")
}

func collect(t *testing.T, ch <-chan *service.Event, until func(*service.Event) bool) []*service.Event {
	t.Helper()
	var out []*service.Event
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("stream ended")
			}
			out = append(out, ev)
			if until(ev) {
				return out
			}
		case <-timeout:
			t.Fatalf("no end after %d events", len(out))
		}
	}
}

func runEnded(ev *service.Event) bool {
	return ev.Type == service.EventRunStatusChanged && ev.Run.Status.Final()
}

// A cursor taken in the middle of a message's chunks still resumes exactly after the
// message is compacted: the replay gives the rest of the text, at the right offset.
func TestReplayInsideCompactedChunksGivesOnlyTheRest(t *testing.T) {
	words := []string{"héllo ", "wörld ", "this ", "is ", "a ", "test"}
	store := inmem.New()
	step := make(chan struct{}, 1)
	svc, ctx := newServiceOn(t, store, lockstepRunner{words, step}, nil)
	sessID, live := lockstepReply(t, svc, ctx, step)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var chunks []*service.Event
	for _, ev := range live {
		if ev.Type == service.EventMessageChunk {
			chunks = append(chunks, ev)
		}
	}
	if len(chunks) != len(words) {
		t.Fatalf("%d live chunks, want one per word (%d)", len(chunks), len(words))
	}
	full := strings.Join(words, "")
	// A new service on the same store (a restart) replays from the store, where the
	// message's chunks are compacted.
	svc.Close()
	svc, _ = newServiceOn(t, store, wordsRunner(words), nil)
	for i := range chunks {
		// Resume after chunk i: what follows must be exactly the rest of the text.
		after := service.EncodeCursor(sessID, service.CursorOf(chunks[i]))
		rch, err := watch(svc, sctx, sessID, after)
		if err != nil {
			t.Fatal(err)
		}
		got := collect(t, rch, runEnded)
		text := []rune(strings.Join(words[:i+1], ""))
		for _, ev := range got {
			if ev.Type != service.EventMessageChunk {
				continue
			}
			if ev.Offset != len(text) {
				t.Fatalf("after chunk %d: replayed chunk at offset %d, text so far %d", i, ev.Offset, len(text))
			}
			text = append(text, []rune(ev.Delta)...)
		}
		if string(text) != full {
			t.Errorf("after chunk %d: text %q, want %q", i, string(text), full)
		}
	}
	// From the start, the compacted log still yields all the text, in fewer events.
	rch, _ := watch(svc, sctx, sessID, service.EncodeCursor(sessID, service.Cursor{}))
	all := collect(t, rch, runEnded)
	n, text := 0, ""
	for _, ev := range all {
		if ev.Type == service.EventMessageChunk {
			n++
			text += ev.Delta
		}
	}
	if text != full || n != 1 {
		t.Errorf("replay from the start: %d chunk events with %q", n, text)
	}
}

func TestCursorsAreCheckedAndOpaque(t *testing.T) {
	c := service.Cursor{Seq: 42, Off: 7}
	enc := service.EncodeCursor("s1", c)
	if got, err := service.DecodeCursor("s1", enc); err != nil || got != c {
		t.Errorf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{"", "!!", enc[:len(enc)-2], service.EncodeCursor("s2", c)} {
		if _, err := service.DecodeCursor("s1", bad); service.ErrorCode(err) != service.EINVALID {
			t.Errorf("DecodeCursor(%q) = %v, want EINVALID", bad, err)
		}
	}
}

// compactionLog is a store that records the Compact calls it gets.
type compactionLog struct {
	service.Store
	mu    sync.Mutex
	calls [][]service.Compaction
}

func (c *compactionLog) Compact(ctx context.Context, cs []service.Compaction) error {
	c.mu.Lock()
	c.calls = append(c.calls, slices.Clone(cs))
	c.mu.Unlock()
	return c.Store.Compact(ctx, cs)
}

// TestCompactionGathersFinishedReplies has replies finish within the compactor's
// gathering time: their chunks are folded in one Compact call, once the gathering is
// over (here: when the service closes), and every reply is folded.
func TestCompactionGathersFinishedReplies(t *testing.T) {
	store := &compactionLog{Store: inmem.New()}
	words := []string{"one ", "two ", "three"}
	svc, ctx := newServiceOn(t, store, wordsRunner(words), func(c *service.Config) { c.CompactAfter = time.Hour })
	agent := "test"
	const n = 20
	var ids []string
	for range n {
		sess, err := svc.CreateTalkSession(ctx, "", service.SettingsInput{Agent: &agent})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := svc.View(ctx, sess.ID)
		f := follow(t, svc, ctx, sess.ID, v.StreamCursor)
		_, run := send(t, svc, ctx, sess.ID, "go")
		f.until(runEnds(run.ID))
		ids = append(ids, sess.ID)
	}
	store.mu.Lock()
	early := len(store.calls)
	store.mu.Unlock()
	if early != 0 {
		t.Fatalf("%d Compact calls before the gathering was over", early)
	}
	svc.Close()
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.calls) != 1 || len(store.calls[0]) != n {
		t.Fatalf("Compact calls %v, want one with the %d replies", store.calls, n)
	}
	for _, id := range ids {
		evs, err := store.Events(context.Background(), id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if c := count(evs, is(service.EventMessageChunk)); c != 1 {
			t.Errorf("session %s: %d chunk events after compaction, want the reply's %d folded into 1", id, c, len(words))
		}
	}
}

// TestFinishedReplyIsFoldedFromTheLogInMemory: when a reply ends, the service folds its
// chunks from the events it holds in memory and hands the folding to the store with the
// compaction (Prepared), the same folding the store would make from what it holds;
// whether the store is this process's alone or shared with other replicas (whose tail
// holds only what was made durable, in order, too).
func TestFinishedReplyIsFoldedFromTheLogInMemory(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "sole writer", true: "shared store"}[shared], func(t *testing.T) {
			store := &compactionLog{Store: inmem.New()}
			var on service.Store = store
			if shared {
				on = sharedStore{store}
			}
			finishedReplyIsPrepared(t, store, on)
		})
	}
}

func finishedReplyIsPrepared(t *testing.T, store *compactionLog, on service.Store) {
	step := make(chan struct{}, 1)
	words := lockstepRunner{[]string{"one ", "two ", "three ", "four ", "five"}, step} // a chunk each
	svc, ctx := newServiceOn(t, on, words, func(c *service.Config) { c.CompactAfter = time.Hour })
	sessID, _ := lockstepReply(t, svc, ctx, step)
	stored, err := store.Events(context.Background(), sessID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	svc.Close()

	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.calls) != 1 || len(store.calls[0]) != 1 {
		t.Fatalf("Compact calls %v, want one with the reply", store.calls)
	}
	c := store.calls[0][0]
	if !c.Prepared {
		t.Fatalf("compaction %+v is not prepared", c)
	}
	want, _ := service.Coalesce(stored[c.FromSeq-1:], c.Key)
	if len(want) == 0 {
		t.Fatalf("the reply was stored in one chunk (%d events): nothing to fold", len(stored))
	}
	if len(c.Folded) != len(want) {
		t.Fatalf("prepared folding has %d events, folding what is stored gives %d", len(c.Folded), len(want))
	}
	for i, e := range c.Folded {
		w := want[i]
		if e.Seq != w.Seq || e.Delta != w.Delta || e.Offset != w.Offset || e.CoalescedFrom != w.CoalescedFrom {
			t.Errorf("prepared folded event %+v, want %+v", e, w)
		}
	}
}
