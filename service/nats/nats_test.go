package nats_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/service"
	tgnats "github.com/talkgraph/talkgraph/service/nats"
)

// These tests connect Clusters to the machine's NATS server (skipped without one, failed
// under CI=true), each test under a subject prefix of its own so that tests running at
// once never hear each other; those that stop the broker own an embedded server.

var prefixes atomic.Int64

// prefix is a subject prefix no other test uses.
func prefix() string {
	return fmt.Sprintf("tgtest%d_%d", time.Now().UnixNano(), prefixes.Add(1))
}

// busSecret is the bus secret of the tests' replicas.
var busSecret = []byte("the tests' bus secret, shared")

// connect connects a Cluster to url under prefix, closed when the test ends.
func connect(t *testing.T, url, prefix string) *tgnats.Cluster {
	t.Helper()
	c, err := tgnats.Connect(url, tgnats.Options{Secret: busSecret, Prefix: prefix, Name: t.Name(), RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(c.Close)
	if err := c.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	return c
}

// pair is two replicas' Clusters on the machine's NATS.
func pair(t *testing.T) (a, b *tgnats.Cluster) {
	url, p := testsvc.NATS(t), prefix()
	return connect(t, url, p), connect(t, url, p)
}

const wait = 10 * time.Second

// replica is the name the tests' replicas serve commands under: a host name, whose dots
// NATS would take for token separators.
const replica = "replica.example.com:8080"

// receive waits for the next value of ch.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("%s: nothing within %v", what, wait)
	}
	var zero T
	return zero
}

func events(session string, from, n int64) []*service.Event {
	var evs []*service.Event
	for seq := from; seq < from+n; seq++ {
		evs = append(evs, &service.Event{SessionID: session, Seq: seq, Type: service.EventMessageChunk, Key: "m", MessageID: "m",
			Delta: fmt.Sprintf("d%d ", seq), Offset: int(seq), At: time.Unix(0, seq).UTC()})
	}
	return evs
}

// TestEventsReachFollowers publishes a session's events on one replica: another that
// follows the session gets them in order and whole, one that follows another session gets
// none of them, a deletion arrives as nil, and nothing arrives once the follower stops.
func TestEventsReachFollowers(t *testing.T) {
	t.Parallel()
	a, b := pair(t)
	got := make(chan []*service.Event, 100)
	stop, err := b.Follow("s1", func(evs []*service.Event) { got <- evs })
	if err != nil {
		t.Fatal(err)
	}
	other := make(chan []*service.Event, 100)
	stopOther, err := b.Follow("s2", func(evs []*service.Event) { other <- evs })
	if err != nil {
		t.Fatal(err)
	}
	defer stopOther()
	if err := b.Flush(); err != nil { // the server knows of the subscriptions
		t.Fatal(err)
	}

	var seq int64 = 1
	for i := range 50 {
		evs := events("s1", seq, int64(1+i%3))
		a.Publish("s1", evs)
		seq += int64(len(evs))
	}
	var next int64 = 1
	for next < seq {
		evs := receive(t, "events of s1", got)
		for _, ev := range evs {
			if ev.Seq != next {
				t.Fatalf("event %d arrived, want %d: out of order or lost", ev.Seq, next)
			}
			if want := fmt.Sprintf("d%d ", ev.Seq); ev.Delta != want || ev.Type != service.EventMessageChunk || ev.SessionID != "s1" || ev.At.UnixNano() != ev.Seq {
				t.Fatalf("event %d arrived as %+v", ev.Seq, ev)
			}
			next++
		}
	}
	a.Publish("s1", nil)
	if evs := receive(t, "the deletion", got); evs != nil {
		t.Fatalf("deletion arrived as %d events, want nil", len(evs))
	}
	select {
	case evs := <-other:
		t.Fatalf("a follower of s2 got %d events of s1", len(evs))
	default:
	}

	stop()
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	a.Publish("s1", events("s1", seq, 1))
	a.Publish("s2", events("s2", 1, 1)) // s2's follower still gets its own: all s1 had to come first
	receive(t, "events of s2", other)
	select {
	case evs := <-got:
		t.Fatalf("a stopped follower got %d events", len(evs))
	default:
	}
}

// TestCommandsReachTheServingReplica sends commands from one replica to another by its
// name: the command arrives whole with its user, the reply comes back with its error code,
// and a name nobody serves answers ErrNoServer at once.
func TestCommandsReachTheServingReplica(t *testing.T) {
	t.Parallel()
	a, b := pair(t)
	ctx := t.Context()

	start := time.Now()
	if _, err := a.Send(ctx, replica, &service.Command{Op: "cancelRun", SessionID: "s1"}); err != service.ErrNoServer {
		t.Fatalf("Send to a replica nobody serves: %v, want ErrNoServer", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("ErrNoServer took %v: NATS's no-responders answer should be at once", d)
	}

	got := make(chan *service.Command, 10)
	stop, err := b.Serve(replica, func(ctx context.Context, cmd *service.Command) *service.Reply {
		got <- cmd
		if cmd.Op == "fail" {
			return &service.Reply{Code: service.ECONFLICT, Error: "the agent is still working"}
		}
		return &service.Reply{Run: &service.Run{ID: "r1", SessionID: cmd.SessionID, Status: service.RunCancelled}}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	title := "a title ✓"
	sent := &service.Command{Op: "updateTalkSessionSettings", UserID: "u1", Guest: true, SessionID: "s1",
		Args: &service.SessionArgs{Title: title, Settings: service.SettingsInput{SystemPrompt: &title}}}
	reply, err := a.Send(ctx, replica, sent)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if reply.Code != "" || reply.Run == nil || reply.Run.ID != "r1" || reply.Run.Status != service.RunCancelled {
		t.Fatalf("reply %+v", reply)
	}
	cmd := receive(t, "the command", got)
	args, ok := cmd.Args.(*service.SessionArgs)
	if cmd.Op != sent.Op || cmd.UserID != "u1" || !cmd.Guest || cmd.SessionID != "s1" || !ok ||
		args.Settings.SystemPrompt == nil || *args.Settings.SystemPrompt != title || args.Title != title {
		t.Fatalf("command arrived as %+v (%+v)", cmd, cmd.Args)
	}
	reply, err = a.Send(ctx, replica, &service.Command{Op: "fail", SessionID: "s1"})
	if err != nil || reply.Code != service.ECONFLICT || reply.Error != "the agent is still working" {
		t.Fatalf("a refused command: %+v, %v", reply, err)
	}

	// Another replica's commands do not reach this one.
	if _, err := a.Send(ctx, "another.example.com:8080", &service.Command{Op: "cancelRun", SessionID: "s1"}); err != service.ErrNoServer {
		t.Fatalf("Send to another replica: %v, want ErrNoServer", err)
	}

	stop()
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Send(ctx, replica, &service.Command{Op: "cancelRun", SessionID: "s1"}); err != service.ErrNoServer {
		t.Fatalf("Send once the server stopped: %v, want ErrNoServer", err)
	}
}

// TestCommandDoneOnce has two processes serve one replica's name at once, as when one
// restarts while the other stops: a command is done by one of them, never both.
func TestCommandDoneOnce(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	a, b, c := connect(t, url, p), connect(t, url, p), connect(t, url, p)
	var done atomic.Int64
	handle := func(context.Context, *service.Command) *service.Reply {
		done.Add(1)
		return &service.Reply{}
	}
	for _, srv := range []*tgnats.Cluster{b, c} {
		stop, err := srv.Serve(replica, handle)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if err := srv.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	const n = 20
	for range n {
		if _, err := a.Send(t.Context(), replica, &service.Command{Op: "x", SessionID: "s1"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := done.Load(); got != n {
		t.Fatalf("%d commands were done %d times", n, got)
	}
}

// TestCommandsInFlightWhenServingStops keeps commands flowing to a replica while it
// stops serving (it shuts down): each one is answered, either done or refused with
// ErrNoServer (which the sender may retry elsewhere); none is dropped unanswered, which
// would leave its sender waiting out its deadline.
func TestCommandsInFlightWhenServingStops(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	a := connect(t, url, p)
	b, err := tgnats.Connect(url, tgnats.Options{Secret: busSecret, Prefix: p, Name: t.Name(), RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for round := range 5 {
		stop, err := b.Serve(replica, func(context.Context, *service.Command) *service.Reply { return &service.Reply{} })
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var done, refused atomic.Int64
		for range 8 {
			wg.Go(func() {
				for {
					ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
					_, err := a.Send(ctx, replica, &service.Command{Op: "x", SessionID: "s1"})
					cancel()
					switch {
					case err == nil:
						done.Add(1)
					case err == service.ErrNoServer:
						refused.Add(1)
						return
					default:
						t.Errorf("round %d: a command sent while serving stopped: %v", round, err)
						return
					}
				}
			})
		}
		waitFor(t, "commands flowing", func() bool { return done.Load() > 50 })
		stop()
		wg.Wait()
		if refused.Load() != 8 {
			t.Fatalf("round %d: %d senders ended refused, want 8", round, refused.Load())
		}
	}
}

// TestSendTimesOut sends a command to a replica that takes longer than the caller's
// deadline: EUNAVAILABLE when the deadline passes, not a hang.
func TestSendTimesOut(t *testing.T) {
	t.Parallel()
	a, b := pair(t)
	release := make(chan struct{})
	defer close(release)
	stop, err := b.Serve(replica, func(context.Context, *service.Command) *service.Reply {
		<-release
		return &service.Reply{}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = a.Send(ctx, replica, &service.Command{Op: "x", SessionID: "s1"})
	if service.ErrorCode(err) != service.EUNAVAILABLE {
		t.Fatalf("Send to a replica that does not answer: %v, want EUNAVAILABLE", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Send gave up after %v, its deadline was 300ms", d)
	}
}

// TestAnnounce tells the others that a replica leaves.
func TestAnnounce(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	a, b, c := connect(t, url, p), connect(t, url, p), connect(t, url, p)
	left := make(chan string, 10)
	b.OnLeft(func(id string) { left <- "b:" + id })
	c.OnLeft(func(id string) { left <- "c:" + id })
	a.Announce("replica-a")
	got := map[string]bool{receive(t, "a departure", left): true, receive(t, "a departure", left): true}
	if !got["b:replica-a"] || !got["c:replica-a"] {
		t.Fatalf("departures heard: %v", got)
	}
}

// TestBrokerRestart stops the NATS server under two connected replicas and starts it
// again: Ready fails while it is away and Send fails at once with EUNAVAILABLE (it does
// not wait out a deadline); when it is back Ready is nil, OnReconnect is called, the
// reconnection is counted, and following and serving work again without being asked.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartNATS(t)
	p := prefix()
	a, b := connect(t, srv.URL, p), connect(t, srv.URL, p)
	var mu sync.Mutex
	reconnected := map[*tgnats.Cluster]chan struct{}{a: make(chan struct{}, 10), b: make(chan struct{}, 10)}
	for c, ch := range reconnected {
		c.OnReconnect(func() { ch <- struct{}{} })
	}
	got := make(chan []*service.Event, 100)
	if _, err := b.Follow("s1", func(evs []*service.Event) { got <- evs }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Serve(replica, func(context.Context, *service.Command) *service.Reply { return &service.Reply{} }); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(); err != nil {
		t.Fatalf("Ready while connected: %v", err)
	}

	for round := range 2 {
		srv.Stop()
		waitFor(t, "Ready to fail", func() bool { return a.Ready() != nil && b.Ready() != nil })
		if code := service.ErrorCode(a.Ready()); code != service.EUNAVAILABLE {
			t.Errorf("Ready while the broker is away: %v", a.Ready())
		}
		start := time.Now()
		if _, err := a.Send(t.Context(), replica, &service.Command{Op: "x", SessionID: "s1"}); service.ErrorCode(err) != service.EUNAVAILABLE || err == service.ErrNoServer {
			t.Errorf("Send while the broker is away: %v, want EUNAVAILABLE", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Send while the broker is away took %v", d)
		}
		a.Publish("s1", events("s1", 1, 1)) // lost, and nothing blocks

		srv.Start()
		mu.Lock()
		for _, ch := range reconnected {
			receive(t, "OnReconnect", ch)
		}
		mu.Unlock()
		if err := a.Ready(); err != nil {
			t.Fatalf("Ready once reconnected: %v", err)
		}
		if n := a.Reconnects(); n != int64(round+1) {
			t.Errorf("Reconnects = %d after %d restarts", n, round+1)
		}
		if err := b.Flush(); err != nil { // b's subscriptions are back on the server
			t.Fatal(err)
		}
		// Events published while the broker was away may arrive late or not at all; what
		// counts is that new ones arrive.
		seq := int64(10 * (round + 1))
		a.Publish("s1", events("s1", seq, 1))
		for {
			evs := receive(t, "events after the restart", got)
			if evs[0].Seq == seq {
				break
			}
		}
		if _, err := a.Send(t.Context(), replica, &service.Command{Op: "x", SessionID: "s1"}); err != nil {
			t.Fatalf("Send after the restart: %v", err)
		}
	}
}

// TestConnectWhileBrokerAway starts a replica while its NATS server is down: Connect
// succeeds (the replica starts, not ready), and the connection is made once the server
// comes up.
func TestConnectWhileBrokerAway(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartNATS(t)
	srv.Stop()
	c, err := tgnats.Connect(srv.URL, tgnats.Options{Secret: busSecret, Prefix: prefix()})
	if err != nil {
		t.Fatalf("Connect while the server is away: %v", err)
	}
	defer c.Close()
	if c.Ready() == nil {
		t.Fatal("Ready while the server was never reached")
	}
	srv.Start()
	waitFor(t, "the first connection", func() bool { return c.Ready() == nil })
}

// waitFor polls cond (the state of a connection has no event to wait on) until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(wait); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %v", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
