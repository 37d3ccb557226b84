package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// natsTap is a client of the replicas' NATS server that is not a replica: what anyone who
// can reach NATS sees and can send.
type natsTap struct {
	t    *testing.T
	nc   *nats.Conn
	mu   sync.Mutex
	msgs []*nats.Msg
}

func tapNATS(t *testing.T, url string, subjects ...string) *natsTap {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := &natsTap{t: t, nc: nc}
	for _, s := range subjects {
		if _, err := nc.Subscribe(s, func(m *nats.Msg) {
			w.mu.Lock()
			w.msgs = append(w.msgs, m)
			w.mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// on returns the messages seen so far on subjects that start with prefix.
func (w *natsTap) on(prefix string) []*nats.Msg {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*nats.Msg
	for _, m := range w.msgs {
		if strings.HasPrefix(m.Subject, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// onlySubject returns the one subject of msgs, failing the test when there is none or
// more than one.
func onlySubject(t *testing.T, what string, msgs []*nats.Msg) string {
	t.Helper()
	if len(msgs) == 0 {
		t.Fatalf("no %s went over NATS: the test proves nothing", what)
	}
	for _, m := range msgs {
		if m.Subject != msgs[0].Subject {
			t.Fatalf("%s went on two subjects, %s and %s", what, msgs[0].Subject, m.Subject)
		}
	}
	return msgs[0].Subject
}

// TestReplicaBusTrustsNoOne runs two replicas on one database and a NATS server of the
// test's own, and a NATS client beside them, as someone who can reach NATS would: it
// reads nothing a user wrote, and no subject names a session or a replica; the commands
// it replays or alters, and the events it forges, take no effect; and answering in a
// replica's place makes commands fail, never makes a client believe a message was
// accepted that was not stored.
func TestReplicaBusTrustsNoOne(t *testing.T) {
	t.Parallel()
	// A server of its own: everything on it is this set's.
	rs := newReplicaSet(t, setOptions{n: 2, nats: testsvc.StartNATS(t).URL})
	r := rs.reps
	tap := tapNATS(t, rs.nats, "talkgraph.>", "_INBOX.>")

	c0 := tgtest.Guest(t, r[0].URL)
	c1 := c0.On(r[1].URL)
	sid := c0.CreateSession(map[string]any{"busyPolicy": "ENQUEUE"})
	_, evs := c1.Connect("graphql-transport-ws").Stream(sid, c1.Cursor(sid))

	// A run on replica 0; a message through replica 1 crosses to it as a command, and the
	// reply's events cross back to the subscriber on replica 1.
	_, slow := c0.Send(sid, "/slow 5")
	secret := fmt.Sprintf("my password is hunter2-%d", time.Now().UnixNano())
	_, run := c1.Send(sid, secret)
	evs.Until("the first run's end", tgtest.RunEnds(slow))
	evs.Until("the reply to the secret", tgtest.RunEnds(run))
	owner := onlySubject(t, "command to replica 0", tap.on("talkgraph.cmd."))
	session := onlySubject(t, "event of the session", tap.on("talkgraph.ev."))

	t.Run("reads nothing a user wrote", func(t *testing.T) {
		tap.mu.Lock()
		defer tap.mu.Unlock()
		for _, m := range tap.msgs {
			for _, plain := range []string{"hunter2", sid, "addMessage", "MessageChunk", `"content"`} {
				if bytes.Contains(m.Data, []byte(plain)) {
					t.Errorf("a message on %s shows %q", m.Subject, plain)
				}
			}
		}
	})

	t.Run("no subject names the session or a replica", func(t *testing.T) {
		names := []string{sid}
		for _, rep := range r {
			names = append(names, rep.id, base64.RawURLEncoding.EncodeToString([]byte(rep.id)))
		}
		tap.mu.Lock()
		defer tap.mu.Unlock()
		told := map[string]bool{}
		for _, m := range tap.msgs {
			for _, name := range names {
				if strings.Contains(m.Subject, name) && !told[m.Subject] {
					told[m.Subject] = true
					t.Errorf("the subject %s names %q", m.Subject, name)
				}
			}
		}
	})

	t.Run("replayed and altered commands take no effect", func(t *testing.T) {
		before := len(c0.Messages(sid))
		replayed := r[0].metric(t, `talkgraph_bus_dropped_total{reason="replayed"}`)
		unopenable := r[0].metric(t, `talkgraph_bus_dropped_total{reason="unopenable"}`)
		cmds := tap.on(owner)
		for _, m := range cmds {
			if err := tap.nc.Publish(m.Subject, m.Data); err != nil {
				t.Fatal(err)
			}
			altered := bytes.Clone(m.Data)
			altered[len(altered)/2] ^= 1
			if err := tap.nc.Publish(m.Subject, altered); err != nil {
				t.Fatal(err)
			}
		}
		n := float64(len(cmds))
		eventually(t, tgtest.Wait, "the replayed and altered commands to be dropped", func() bool {
			return r[0].metric(t, `talkgraph_bus_dropped_total{reason="replayed"}`) >= replayed+n &&
				r[0].metric(t, `talkgraph_bus_dropped_total{reason="unopenable"}`) >= unopenable+n
		})
		if after := len(c0.Messages(sid)); after != before {
			t.Errorf("the history went from %d to %d messages after replaying commands", before, after)
		}
	})

	t.Run("forged events do not reach subscribers", func(t *testing.T) {
		unopenable := r[1].metric(t, `talkgraph_bus_dropped_total{reason="unopenable"}`)
		next := seqOf(t, sid, evs.All[len(evs.All)-1].Cursor) + 1
		for _, seq := range []int64{next, next + 1, next + 1000} { // the log's next events, and far ahead
			forged := fmt.Sprintf(`[{"SessionID":%q,"Seq":%d,"Type":"MessageChunk","Key":"m","MessageID":"m","Delta":"forged text","Offset":0}]`, sid, seq)
			if err := tap.nc.Publish(session, []byte(forged)); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, tgtest.Wait, "the forged events to be dropped", func() bool {
			return r[1].metric(t, `talkgraph_bus_dropped_total{reason="unopenable"}`) >= unopenable+3
		})
		_, run := c0.Send(sid, "after the forgery")
		evs.Until("the next reply", tgtest.RunEnds(run))
		for _, ev := range evs.All {
			if strings.Contains(ev.Delta, "forged") {
				t.Fatalf("the subscriber on replica 1 got a forged chunk: %+v", ev)
			}
		}
	})

	t.Run("answering in a replica's place makes no acknowledged message vanish", func(t *testing.T) {
		replies := tap.on("_INBOX.")
		if len(replies) == 0 {
			t.Fatal("no reply was seen on NATS")
		}
		genuine := replies[len(replies)-1].Data // an "accepted", of an earlier request
		var answered atomic.Int64
		sub, err := tap.nc.QueueSubscribe(owner, "runners", func(m *nats.Msg) {
			answered.Add(1)
			_ = m.Respond(genuine)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := tap.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		_, slow := c0.Send(sid, "/slow 100") // replica 0 runs the session's agent: messages through 1 go to it
		evs.Until("the slow run's text", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" && e.Offset > 0 })
		unopenable := r[1].metric(t, `talkgraph_bus_dropped_total{reason="unopenable"}`)
		// The queue group hands each command to replica 0 or to the impostor: ten
		// messages, and more until the impostor has answered one (fewer than the 20 a
		// session queues).
		accepted := map[string]string{} // message ID: what was sent
		failed := 0
		for i := 0; i < 10 || answered.Load() == 0; i++ {
			if i == 19 {
				t.Fatalf("the impostor answered none of %d commands: the test proves nothing", i)
			}
			content := fmt.Sprintf("message %d", i)
			res, err := sendWith(c1, sid, content, "")
			if err != nil {
				t.Fatalf("%s through replica 1: %v", content, err)
			}
			if len(res.Errors) > 0 {
				if res.Code() != "UNAVAILABLE" {
					t.Errorf("%s refused with %s, want UNAVAILABLE: %+v", content, res.Code(), res.Errors)
				}
				failed++
				continue
			}
			id := decodeAdded(t, res).AddMessage.Message.ID
			if earlier, ok := accepted[id]; ok {
				t.Errorf("%s was acknowledged as %s, the ID of %s", content, id, earlier)
			}
			accepted[id] = content
		}
		// Every answer of the impostor was dropped by replica 1, and made its command fail.
		n := answered.Load()
		if got := r[1].metric(t, `talkgraph_bus_dropped_total{reason="unopenable"}`) - unopenable; got != float64(n) || failed != int(n) {
			t.Errorf("the impostor answered %d commands; replica 1 dropped %v answers as unopenable and %d messages failed", n, got, failed)
		}
		c0.Cancel(sid)
		evs.Until("the slow run's end", tgtest.RunEnds(slow))
		stored := map[string]string{}
		for _, m := range c0.Messages(sid) {
			stored[m.ID] = m.Content
		}
		for id, content := range accepted {
			if got, ok := stored[id]; !ok || got != content {
				t.Errorf("%s was acknowledged through replica 1 as %s, which is stored as %q (stored: %v)", content, id, got, ok)
			}
		}
		t.Logf("with an impostor in replica 0's queue group: %d of %d messages accepted, %d refused", len(accepted), len(accepted)+failed, failed)
	})
}

// TestReplicaBusCommandReplayedAfterRestartTakesNoEffect captures a message's command on
// NATS as it crosses from the replica a client called to the one running the session's
// agent, restarts that replica (killed, then started again under its ID: it takes its
// runs back, and serves the session again, with no memory of the commands it took), and
// sends the captured command again while it is fresh: the message is not stored a second
// time, and the replica counts a replay.
func TestReplicaBusCommandReplayedAfterRestartTakesNoEffect(t *testing.T) {
	t.Parallel()
	// A NATS server of its own: the only command on it is the one captured. A lease longer
	// than the test: replica 0's runs stay its own while it is down, and come back to it.
	rs := newReplicaSet(t, setOptions{n: 2, nats: testsvc.StartNATS(t).URL, env: []string{"RUN_LEASE=5m"}})
	r := rs.reps
	tap := tapNATS(t, rs.nats, "talkgraph.cmd.>")
	c0 := tgtest.Guest(t, r[0].URL)
	c1 := c0.On(r[1].URL)
	sid := c0.CreateSession(map[string]any{"busyPolicy": "ENQUEUE"})
	_, evs := c1.Connect("graphql-transport-ws").Stream(sid, c1.Cursor(sid))
	c0.Send(sid, "/ask What is your name?") // replica 0 runs the agent, which waits
	evs.Until("the question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })

	const once = "a message to store once"
	stored := func() int {
		n := 0
		for _, m := range c1.Messages(sid) {
			if m.Content == once {
				n++
			}
		}
		return n
	}
	c1.Send(sid, once) // crosses to replica 0, and waits its turn there
	cmds := tap.on("talkgraph.cmd.")
	if len(cmds) != 1 || stored() != 1 {
		t.Fatalf("%d commands crossed NATS and the message is stored %d times, want 1 and 1", len(cmds), stored())
	}
	captured, at := cmds[0], time.Now()

	r[0].kill()
	r[0].start()
	if lines := logLines(r[:1], "took back a run of this replica's earlier life", sid); len(lines) == 0 {
		t.Fatal("the restarted replica did not take the session's runs back: a replay would find nothing to do there, and the test proves nothing")
	}
	if d := time.Since(at); d > 45*time.Second {
		t.Fatalf("the restart took %v: the replay would be stale, and the test proves nothing", d)
	}
	if err := tap.nc.Publish(captured.Subject, captured.Data); err != nil {
		t.Fatal(err)
	}
	replayed := `talkgraph_bus_dropped_total{reason="replayed"}`
	eventually(t, tgtest.Wait, "the replayed command to be dropped or done", func() bool {
		return r[0].metric(t, replayed) >= 1 || stored() > 1
	})
	if n := stored(); n != 1 {
		t.Errorf("the message is stored %d times after its command was replayed, want once", n)
	}
	if n := r[0].metric(t, replayed); n != 1 {
		t.Errorf("the restarted replica counted %v replays, want 1", n)
	}
}
