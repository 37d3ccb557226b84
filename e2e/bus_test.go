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

// TestReplicaBusTrustsNoOne runs two replicas on one database and the machine's NATS, and
// a NATS client of the test's own beside them, as someone who can reach NATS would: it
// reads nothing a user wrote; the commands it replays or alters, and the events it forges,
// take no effect; and answering in a replica's place makes commands fail, never makes a
// client believe a message was accepted that was not stored.
func TestReplicaBusTrustsNoOne(t *testing.T) {
	t.Parallel()
	rs := newReplicaSet(t, setOptions{n: 2})
	r := rs.reps
	tap := tapNATS(t, rs.nats, "talkgraph.>", "_INBOX.>")
	owner := "talkgraph.cmd." + base64.RawURLEncoding.EncodeToString([]byte(r[0].id))

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
	if len(tap.on(owner)) == 0 || len(tap.on("talkgraph.ev."+sid)) == 0 {
		t.Fatalf("no command to replica 0 and no event of the session went over NATS: the test proves nothing")
	}

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
			if err := tap.nc.Publish("talkgraph.ev."+sid, []byte(forged)); err != nil {
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
