package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// The replica tests run several real server processes (this test binary as the server, as
// in crash_test.go) on one PostgreSQL database of the test's own and one NATS server: the
// machine's (testsvc: skipped without them, failed under CI=true), or one the test owns
// when it stops it. Each test has its own database, so tests run in parallel.

// lease is RUN_LEASE in these tests: how long a killed replica's runs stay its own.
const lease = 2 * time.Second

// replicaSet is a deployment of replicas.
type replicaSet struct {
	t    *testing.T
	db   string // DATABASE_URL, as the replicas reach it
	nats string // NATS_URL
	env  []string
	reps []*replica
}

// replica is one server process of a set, with what it keeps across restarts: its ID,
// port and data directory.
type replica struct {
	*child
	rs   *replicaSet
	id   string
	port int
	dir  string
}

// setOptions say what differs from the default set: three replicas on the machine's NATS
// and a database of their own, RUN_LEASE=2s.
type setOptions struct {
	n    int
	nats string // NATS_URL; default the machine's
	db   string // DATABASE_URL; default a new database
	env  []string
}

func newReplicaSet(t *testing.T, o setOptions) *replicaSet {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	if o.n == 0 {
		o.n = 3
	}
	if o.db == "" {
		o.db = testsvc.NewDatabase(t)
	}
	if o.nats == "" {
		o.nats = testsvc.NATS(t)
	}
	rs := &replicaSet{t: t, db: o.db, nats: o.nats, env: o.env}
	for i := range o.n {
		r := &replica{rs: rs, id: fmt.Sprintf("replica-%d", i), port: freePort(t), dir: t.TempDir()}
		rs.reps = append(rs.reps, r)
		r.start()
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range rs.reps {
				log, _ := os.ReadFile(filepath.Join(r.dir, "child.log"))
				if len(log) > 6000 {
					log = log[len(log)-6000:]
				}
				t.Logf("log of %s (end):\n%s", r.id, log)
			}
		}
	})
	return rs
}

// start starts the replica's process (again), and waits until it is ready.
func (r *replica) start() {
	r.rs.t.Helper()
	env := append([]string{"DATABASE_URL=" + r.rs.db, "NATS_URL=" + r.rs.nats, "REPLICA_ID=" + r.id,
		"RUN_LEASE=" + lease.String(), "LOG_LEVEL=info", "SHUTDOWN_TIMEOUT=10s"}, r.rs.env...)
	r.child = startChild(r.rs.t, r.dir, r.port, env...)
}

// signal sends sig to the replica's process and waits for it to exit.
func (r *replica) signal(sig syscall.Signal) {
	r.rs.t.Helper()
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.done:
	case <-time.After(tgtest.Wait):
		r.rs.t.Fatalf("%s did not exit after %v", r.id, sig)
	}
}

// log returns what the replica logged so far.
func (r *replica) log() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "child.log"))
	return string(b)
}

// ready reports whether the replica's /readyz answers 200.
func (r *replica) ready() bool {
	resp, err := http.Get(r.URL + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// metric returns the value of a metric without labels on the replica's /metrics.
func (r *replica) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(r.URL + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", r.id, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s of %s: %q", name, r.id, v)
			}
			return f
		}
	}
	t.Fatalf("metric %s missing on %s", name, r.id)
	return 0
}

// eventually polls cond until it holds, failing after d. Only for states that send no
// event to wait on (a probe's answer).
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("waiting for %s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// checkStream checks events of one session read across subscriptions (resumed after
// each other's last cursor): each after the one before (no duplicate), and each stream's
// chunks following on from the text before them (no gap). It returns each message's
// text as the deltas make it.
func checkStream(t *testing.T, sid string, evs []tgtest.Event) map[string]string {
	t.Helper()
	text := map[string]string{}
	for i, ev := range evs {
		if i > 0 && seqOf(t, sid, ev.Cursor) <= seqOf(t, sid, evs[i-1].Cursor) {
			t.Fatalf("event %d (%s, cursor %s) is not after the one before: a duplicate", i, ev.Typename, ev.Cursor)
		}
		if ev.Typename != "MessageChunk" {
			continue
		}
		if got := len([]rune(text[ev.MessageID])); ev.Offset != got {
			t.Fatalf("chunk of %s at offset %d, but %d code points came before it: a gap or a duplicate", ev.MessageID, ev.Offset, got)
		}
		text[ev.MessageID] += ev.Delta
	}
	return text
}

// shownSession reads what a session shows now.
type shownSession struct {
	Status          string
	ActiveRun       *struct{ ID, Status string }
	PendingQuestion *struct{ ID string }
}

func stateOf(c *tgtest.Client, sid string) shownSession {
	c.T.Helper()
	var out struct{ Session shownSession }
	c.Must(`query($s: ID!){ session(id:$s){ status activeRun { id status } pendingQuestion { id } } }`, map[string]any{"s": sid}, &out)
	return out.Session
}

// sendWith adds a message with an idempotency key; it returns the response.
func sendWith(c *tgtest.Client, sid, content, key string) (*tgtest.Response, error) {
	return c.Try(`mutation($s: ID!, $c: String!, $k: String){ addMessage(input: {sessionId: $s, content: $c, idempotencyKey: $k}){ message { id } run { id status } } }`,
		map[string]any{"s": sid, "c": content, "k": key})
}

type added struct {
	AddMessage struct {
		Message struct{ ID string }
		Run     struct{ ID, Status string }
	}
}

func decodeAdded(t *testing.T, r *tgtest.Response) added {
	t.Helper()
	var out added
	if err := json.Unmarshal(r.Data, &out); err != nil {
		t.Fatalf("addMessage answer %s: %v", r.Data, err)
	}
	return out
}

// answer responds to a question and returns the run's status as answered.
func answer(c *tgtest.Client, qid, text string) *tgtest.Response {
	c.T.Helper()
	return c.Do(`mutation($q: ID!, $a: String!){ respondToQuestion(input:{questionId:$q, answer:$a}){ run { id status } } }`,
		map[string]any{"q": qid, "a": text})
}

// TestReplicas runs the operations of the API across three replicas on one database: each
// subtest is a user of its own, and they run at once.
func TestReplicas(t *testing.T) {
	rs := newReplicaSet(t, setOptions{})
	r := rs.reps

	t.Run("SessionEverywhere", func(t *testing.T) {
		t.Parallel()
		// A token signed on one replica works on all: the generated secret is shared
		// through the database (AUTH_SECRET is not set).
		c0 := tgtest.Guest(t, r[1].URL).On(r[0].URL)
		c1, c2 := c0.On(r[1].URL), c0.On(r[2].URL)
		sid := c0.CreateSession(nil)
		c1.Must(`mutation($s: ID!){ renameTalkSession(input:{id:$s, title:"renamed on 1"}){ id } }`, map[string]any{"s": sid}, nil)
		var got struct{ Session struct{ Title string } }
		c2.Must(`query($s: ID!){ session(id:$s){ title } }`, map[string]any{"s": sid}, &got)
		if got.Session.Title != "renamed on 1" {
			t.Errorf("title on replica 2: %q", got.Session.Title)
		}
		ws := c1.Connect("graphql-transport-ws")
		_, evs := ws.Stream(sid, c1.Cursor(sid))
		_, run := c2.Send(sid, "hello from replica two")
		evs.Until("the reply", tgtest.RunEnds(run))
		msgs := c0.Messages(sid)
		if len(msgs) != 2 || msgs[0].Content != "hello from replica two" || msgs[1].Status != "COMPLETE" {
			t.Fatalf("history on replica 0: %+v", msgs)
		}
		var list struct {
			Sessions struct {
				Edges []struct{ Node struct{ ID string } }
			}
		}
		c2.Must(`{ sessions(first: 10){ edges { node { id } } } }`, nil, &list)
		if len(list.Sessions.Edges) != 1 || list.Sessions.Edges[0].Node.ID != sid {
			t.Errorf("sessions on replica 2: %+v", list)
		}
		c0.Must(`mutation($s: ID!){ deleteTalkSession(id:$s) }`, map[string]any{"s": sid}, nil)
		if _, ok := evs.TryNext(tgtest.Wait); ok || !evs.Done {
			t.Errorf("the subscription on replica 1 did not end when replica 0 deleted the session")
		}
		if r := c1.Do(`query($s: ID!){ session(id:$s){ id } }`, map[string]any{"s": sid}); string(r.Data) != `{"session":null}` {
			t.Errorf("deleted session on replica 1: %+v", r)
		}
	})

	t.Run("ReplyStreamsToOtherReplicas", func(t *testing.T) {
		t.Parallel()
		c0 := tgtest.Guest(t, r[0].URL)
		c1, c2 := c0.On(r[1].URL), c0.On(r[2].URL)
		sid := c0.CreateSession(nil)
		cursor := c0.Cursor(sid)
		_, evs1 := c1.Connect("graphql-transport-ws").Stream(sid, cursor)
		_, evs2 := c2.Connect("graphql-ws").Stream(sid, cursor)
		words := make([]string, 120)
		for i := range words {
			words[i] = fmt.Sprintf("wörd%d", i)
		}
		_, run := c0.Send(sid, strings.Join(words, " "))
		for i, evs := range []*tgtest.Events{evs1, evs2} {
			end := evs.Until("the reply's end", tgtest.RunEnds(run))
			if end.Run.Status != "COMPLETED" {
				t.Fatalf("run ended %s", end.Run.Status)
			}
			text := checkStream(t, sid, evs.All)
			reply := lastAssistant(c0.Messages(sid))
			if text[reply.ID] != reply.Content || !strings.Contains(reply.Content, "wörd119") {
				t.Errorf("subscriber on replica %d: deltas %q, content %q", i+1, text[reply.ID], reply.Content)
			}
		}
	})

	t.Run("StopThroughAnyReplica", func(t *testing.T) {
		t.Parallel()
		c := tgtest.Guest(t, r[0].URL)
		sid := c.CreateSession(nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		var worst time.Duration
		for i := range r {
			for _, j := range []int{(i + 1) % 3, (i + 2) % 3} {
				_, run := c.On(r[i].URL).Send(sid, "/slow 300")
				evs.Until("the run's text", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
				start := time.Now()
				stopped := c.On(r[j].URL).Cancel(sid)
				if stopped == nil || stopped.ID != run || stopped.Status != "CANCELLED" {
					t.Fatalf("stop through replica %d of a run taken by replica %d: %+v", j, i, stopped)
				}
				if end := evs.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "CANCELLED" {
					t.Fatalf("run ended %s", end.Run.Status)
				}
				d := time.Since(start)
				worst = max(worst, d)
				if d > 2*time.Second {
					t.Errorf("stop through replica %d of a run on replica %d took %v", j, i, d)
				}
			}
		}
		t.Logf("slowest stop across replicas: %v", worst)
	})

	t.Run("AnswerThroughAnyReplica", func(t *testing.T) {
		t.Parallel()
		c := tgtest.Guest(t, r[0].URL)
		sid := c.CreateSession(nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		for i := range r {
			j := (i + 1) % 3
			_, run := c.On(r[i].URL).Send(sid, fmt.Sprintf("/ask which replica, %d?", i))
			q := evs.Until("the question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })
			name := fmt.Sprintf("answered on %d", j)
			if res := answer(c.On(r[j].URL), q.Question.ID, name); len(res.Errors) > 0 {
				t.Fatalf("answer through replica %d: %+v", j, res.Errors)
			}
			if end := evs.Until("the run's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
				t.Fatalf("answered run ended %s", end.Run.Status)
			}
			if reply := lastAssistant(c.Messages(sid)); !strings.Contains(reply.Content, name) {
				t.Fatalf("reply %q does not use the answer %q", reply.Content, name)
			}
		}
	})

	t.Run("InterruptThroughAnyReplica", func(t *testing.T) {
		t.Parallel()
		c := tgtest.Guest(t, r[0].URL)
		sid := c.CreateSession(nil)
		_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
		for i := range r {
			j := (i + 2) % 3
			_, slow := c.On(r[i].URL).Send(sid, "/slow 300")
			evs.Until("the run's text", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
			_, next := c.On(r[j].URL).Send(sid, fmt.Sprintf("interrupting from %d", j))
			if end := evs.Until("the interrupted run's end", tgtest.RunEnds(slow)); end.Run.Status != "INTERRUPTED" {
				t.Fatalf("run ended %s, want INTERRUPTED", end.Run.Status)
			}
			if end := evs.Until("the new run's end", tgtest.RunEnds(next)); end.Run.Status != "COMPLETED" {
				t.Fatalf("new run ended %s", end.Run.Status)
			}
		}
		text := checkStream(t, sid, evs.All)
		n := 0
		for _, m := range c.Messages(sid) {
			if m.Role != "ASSISTANT" {
				continue
			}
			if text[m.ID] != m.Content {
				t.Errorf("message %s: deltas %q, content %q", m.ID, text[m.ID], m.Content)
			}
			if m.Status == "INTERRUPTED" {
				n++
				if !strings.HasPrefix(m.Content, "chunk 1.") {
					t.Errorf("interrupted reply %q lost its text", m.Content)
				}
			}
		}
		if n != 3 {
			t.Errorf("%d interrupted replies, want 3", n)
		}
	})

	t.Run("ResumeOnAnotherReplica", func(t *testing.T) {
		t.Parallel()
		c := tgtest.Guest(t, r[0].URL)
		sid := c.CreateSession(nil)
		start := c.Cursor(sid)
		ws := c.On(r[1].URL).Connect("graphql-transport-ws")
		_, first := ws.Stream(sid, start)
		_, run := c.Send(sid, "/slow 20")
		for n := 0; n < 3; {
			if first.Next().Typename == "MessageChunk" {
				n++
			}
		}
		ws.Close()
		// More is written while nobody follows; the stream resumes on replica 2.
		_, rest := c.On(r[2].URL).Connect("graphql-transport-ws").Stream(sid, first.All[len(first.All)-1].Cursor)
		rest.Until("the run's end", tgtest.RunEnds(run))
		all := append(append([]tgtest.Event{}, first.All...), rest.All...)
		text := checkStream(t, sid, all)
		reply := lastAssistant(c.Messages(sid))
		if text[reply.ID] != reply.Content || !strings.HasSuffix(reply.Content, "chunk 20. ") {
			t.Fatalf("resumed: deltas %q, content %q", text[reply.ID], reply.Content)
		}
		// The whole stream again, from the start, on replica 0: the same events.
		_, again := c.Connect("graphql-transport-ws").Stream(sid, start)
		again.Until("the run's end", tgtest.RunEnds(run))
		if text := checkStream(t, sid, again.All); text[reply.ID] != reply.Content {
			t.Fatalf("replayed: deltas %q, content %q", text[reply.ID], reply.Content)
		}
	})

	t.Run("IdempotencyKeys", func(t *testing.T) {
		t.Parallel()
		c := tgtest.Guest(t, r[0].URL)
		sid := c.CreateSession(nil)
		for round := range 3 {
			key := fmt.Sprintf("key-%d", round)
			content := fmt.Sprintf("once only, round %d", round)
			var wg sync.WaitGroup
			res := make([]*tgtest.Response, 3)
			errs := make([]error, 3)
			for i := range r {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res[i], errs[i] = sendWith(c.On(r[i].URL), sid, content, key)
				}()
			}
			wg.Wait()
			var first added
			for i := range r {
				if errs[i] != nil || len(res[i].Errors) > 0 {
					t.Fatalf("round %d: replica %d: %v %+v", round, i, errs[i], res[i])
				}
				a := decodeAdded(t, res[i])
				if i == 0 {
					first = a
				} else if a.AddMessage.Message.ID != first.AddMessage.Message.ID || a.AddMessage.Run.ID != first.AddMessage.Run.ID {
					t.Fatalf("round %d: replica %d answered %+v, replica 0 %+v", round, i, a, first)
				}
			}
			n := 0
			for _, m := range c.Messages(sid) {
				if m.Content == content {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("round %d: the message is in the history %d times", round, n)
			}
			if res, err := sendWith(c.On(r[2].URL), sid, "another text", key); err != nil || res.Code() != "CONFLICT" {
				t.Fatalf("the key with another message: %v %+v, want CONFLICT", err, res)
			}
		}
	})

	t.Run("BusyPolicy", func(t *testing.T) {
		t.Parallel()
		c := tgtest.Guest(t, r[0].URL)
		reject := c.CreateSession(map[string]any{"busyPolicy": "REJECT"})
		_, slow := c.Send(reject, "/slow 300")
		for _, rep := range r[1:] {
			if res := c.On(rep.URL).Do(`mutation($s: ID!){ addMessage(input:{sessionId:$s, content:"no"}){ run { id } } }`,
				map[string]any{"s": reject}); res.Code() != "CONFLICT" {
				t.Errorf("REJECT through %s: %+v, want CONFLICT", rep.id, res)
			}
		}
		if st := stateOf(c, reject); st.ActiveRun == nil || st.ActiveRun.ID != slow {
			t.Errorf("the running run after refused messages: %+v", st)
		}
		c.On(r[2].URL).Cancel(reject)

		queue := c.CreateSession(map[string]any{"busyPolicy": "ENQUEUE"})
		_, evs := c.On(r[2].URL).Connect("graphql-transport-ws").Stream(queue, c.Cursor(queue))
		var runs []string
		for i := range r {
			_, run := c.On(r[i].URL).Send(queue, fmt.Sprintf("/slow %d", 3-i))
			runs = append(runs, run)
		}
		var ended []string
		for len(ended) < len(runs) {
			ev := evs.Next()
			if ev.Typename != "RunStatusChanged" {
				continue
			}
			switch want := runs[len(ended)]; {
			case ev.Run.Status == "RUNNING" && ev.Run.ID != want:
				t.Fatalf("run %s started before run %s ended", ev.Run.ID, want)
			case tgtest.RunEnds(ev.Run.ID)(ev):
				if ev.Run.ID != want || ev.Run.Status != "COMPLETED" {
					t.Fatalf("run %s ended %s, want %s to end COMPLETED first", ev.Run.ID, ev.Run.Status, want)
				}
				ended = append(ended, ev.Run.ID)
			}
		}
		if fmt.Sprint(ended) != fmt.Sprint(runs) {
			t.Fatalf("runs ended in the order %v, sent %v", ended, runs)
		}
	})

	t.Run("RunsPerUser", func(t *testing.T) {
		t.Parallel()
		// RUNS_PER_USER is 2: the third run, taken by a third replica, waits for a slot.
		c := tgtest.Guest(t, r[0].URL)
		var sids, runs []string
		var streams []*tgtest.Events
		for i := range r {
			sid := c.CreateSession(nil)
			_, evs := c.On(r[(i+1)%3].URL).Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
			sids, streams = append(sids, sid), append(streams, evs)
			res, err := sendWith(c.On(r[i].URL), sid, "/slow 300", "")
			if err != nil || len(res.Errors) > 0 {
				t.Fatalf("message %d through %s: %v %+v", i, r[i].id, err, res)
			}
			a := decodeAdded(t, res)
			runs = append(runs, a.AddMessage.Run.ID)
			if want := map[bool]string{true: "RUNNING", false: "QUEUED"}[i < 2]; a.AddMessage.Run.Status != want {
				t.Fatalf("run %d through %s is %s, want %s", i, r[i].id, a.AddMessage.Run.Status, want)
			}
		}
		if st := stateOf(c, sids[2]); st.ActiveRun == nil || st.ActiveRun.Status != "QUEUED" {
			t.Fatalf("third session: %+v", st)
		}
		c.On(r[1].URL).Cancel(sids[0])
		streams[2].Until("the third run to start", func(e tgtest.Event) bool {
			return e.Typename == "RunStatusChanged" && e.Run.ID == runs[2] && e.Run.Status == "RUNNING"
		})
		for _, sid := range sids[1:] {
			c.Cancel(sid)
		}
	})

	t.Run("RefusesToStartWithoutNATS", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TALKGRAPH_CHILD=1", "DATA_DIR="+dir, fmt.Sprintf("PORT=%d", freePort(t)), "HOST=127.0.0.1",
			"DATABASE_URL="+rs.db, "REPLICA_ID=lonely")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("a replica without NATS_URL beside live ones: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "NATS_URL") {
			t.Fatalf("its message does not say what to set:\n%s", out)
		}
	})
}
