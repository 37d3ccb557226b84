package nats_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/service"
	tgnats "github.com/talkgraph/talkgraph/service/nats"
	"github.com/talkgraph/talkgraph/service/postgres"
)

// A command captured on NATS and sent again after the replica that took it restarted (a
// new Cluster on the same database, whose memory of the commands it took is empty) is
// dropped as replayed, not done again.
func TestCommandReplayedAfterRestartTakesNoEffect(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	db := testsvc.NewDatabase(t)
	w := tap(t, url, p+".cmd.>")
	a := connect(t, url, p)
	var handled atomic.Int64
	start := func() *tgnats.Cluster { // the replica, on the database the replicas share
		store, err := postgres.Open(t.Context(), db, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		c, err := tgnats.Connect(url, tgnats.Options{Secret: busSecret, Prefix: p, Name: replica, Replays: store, RequestTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Serve(replica, func(context.Context, *service.Command) *service.Reply {
			handled.Add(1)
			return &service.Reply{}
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		return c
	}

	b := start()
	if _, err := a.Send(t.Context(), replica, &service.Command{Op: "addMessage", UserID: "u1", SessionID: "s1", Args: &service.AddMessageArgs{Content: "hello"}}); err != nil {
		t.Fatal(err)
	}
	captured := w.captured(p+".cmd.", 1)[0]
	b.Close()
	b = start()
	defer b.Close()

	if err := w.nc.Publish(captured.Subject, captured.Data); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replayed command dropped or done", func() bool { return b.Dropped()["replayed"] >= 1 || handled.Load() > 1 })
	if n := handled.Load(); n != 1 {
		t.Fatalf("the command was done %d times, want once", n)
	}
	// The restarted replica takes commands: the replay reached one that would have done it.
	if _, err := a.Send(t.Context(), replica, &service.Command{Op: "addMessage", UserID: "u1", SessionID: "s1", Args: &service.AddMessageArgs{Content: "again"}}); err != nil {
		t.Fatalf("a new command to the restarted replica: %v", err)
	}
	if n := handled.Load(); n != 2 {
		t.Errorf("%d commands done, want 2: the first and the new one", n)
	}
}

// guard is a service.ReplayGuard of the test's own: it records what it is asked, and
// answers err when set.
type guard struct {
	err   error
	mu    sync.Mutex
	asked []time.Time // the until of each call
}

func (g *guard) FirstSeen(_ context.Context, _ []byte, until time.Time) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked = append(g.asked, until)
	return g.err == nil, g.err
}

// A command whose ID Replays cannot check (the database does not answer) is not done, and
// its sender is told at once that the replica is unavailable, rather than left to wait
// out its deadline.
func TestCommandRefusedWhenReplaysCannotTell(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	a := connect(t, url, p)
	g := &guard{err: service.Errorf(service.EUNAVAILABLE, "storage is unreachable")}
	b, err := tgnats.Connect(url, tgnats.Options{Secret: busSecret, Prefix: p, Name: replica, Replays: g, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var handled atomic.Int64
	if _, err := b.Serve(replica, func(context.Context, *service.Command) *service.Reply {
		handled.Add(1)
		return &service.Reply{}
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	reply, err := a.Send(t.Context(), replica, &service.Command{Op: "addMessage", UserID: "u1", SessionID: "s1"})
	if err == nil {
		err = replyErr(reply)
	}
	if service.ErrorCode(err) != service.EUNAVAILABLE || !strings.Contains(service.ErrorMessage(err), "storage") {
		t.Errorf("Send = %v; want EUNAVAILABLE saying the replica cannot reach its storage", err)
	}
	if n := handled.Load(); n != 0 {
		t.Errorf("the command was done %d times, want never", n)
	}
}

// replyErr is the error a reply carries.
func replyErr(r *service.Reply) error {
	if r.Code == "" {
		return nil
	}
	return service.Errorf(r.Code, "%s", r.Error)
}

// Replays is asked once about each command taken, to remember it until twice MaxAge after
// it was sent (MaxAge later than a replica could take it as fresh, for a clock that far
// behind); a replay that this process remembers itself is dropped without asking.
func TestReplaysAskedOnceForTwiceMaxAge(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	w := tap(t, url, p+".cmd.>")
	a := connect(t, url, p)
	g := &guard{}
	const maxAge = 30 * time.Second
	b, err := tgnats.Connect(url, tgnats.Options{Secret: busSecret, Prefix: p, Name: replica, Replays: g, MaxAge: maxAge, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Serve(replica, func(context.Context, *service.Command) *service.Reply { return &service.Reply{} }); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if _, err := a.Send(t.Context(), replica, &service.Command{Op: "cancelRun", SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	cmd := w.captured(p+".cmd.", 1)[0]
	if err := w.nc.Publish(cmd.Subject, cmd.Data); err != nil {
		t.Fatal(err)
	}
	dropped(t, b, "replayed", 1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.asked) != 1 {
		t.Fatalf("Replays was asked %d times, want once", len(g.asked))
	}
	if until := g.asked[0]; until.Before(before.Add(2*maxAge)) || until.After(after.Add(2*maxAge)) {
		t.Errorf("the ID is to be remembered until %v after the command was sent, want %v", until.Sub(before), 2*maxAge)
	}
}
