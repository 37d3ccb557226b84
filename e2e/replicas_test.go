package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	env  []string
}

// setOptions say what differs from the default set: three replicas on the machine's NATS
// and a database of their own, RUN_LEASE=2s.
type setOptions struct {
	n    int
	nats string // NATS_URL; default the machine's
	db   string // DATABASE_URL; default a new database
	env  []string
	// each adds to the environment of replica i (a variable set twice takes the last value).
	each map[int][]string
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
	// The sets of parallel tests share the machine's NATS server. Each has a bus secret of
	// its own (kept in its database), and so subjects of its own; it names its replicas
	// apart besides, so that their logs and rows tell which set they are of.
	set := testsvc.DatabaseName(t, o.db)
	for i := range o.n {
		r := &replica{rs: rs, id: fmt.Sprintf("%s-replica-%d", set, i), port: freePort(t), dir: t.TempDir(), env: o.each[i]}
		rs.reps = append(rs.reps, r)
		r.start()
	}
	t.Cleanup(func() {
		if t.Failed() {
			rs.dumpRuns()
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

// dumpRuns logs the runs that are not over and the replicas' leases, as the database
// has them, for a failed test.
func (rs *replicaSet) dumpRuns() {
	u, err := url.Parse(rs.db)
	if err != nil {
		return
	}
	admin, err := url.Parse(testsvc.AdminURL())
	if err != nil {
		return
	}
	u.Host = admin.Host // not through a test's proxy
	conn, err := pgx.Connect(context.Background(), u.String())
	if err != nil {
		rs.t.Logf("runs: %v", err)
		return
	}
	defer conn.Close(context.Background())
	for _, q := range []string{`SELECT 'run ' || id || ' session ' || session_id || ' ' || status || ' owner ' || owner FROM runs WHERE status NOT IN ('COMPLETED','CANCELLED','INTERRUPTED','FAILED') ORDER BY created_at`,
		`SELECT 'replica ' || id || ' until ' || until FROM replicas`} {
		rows, err := conn.Query(context.Background(), q)
		if err != nil {
			rs.t.Logf("%s: %v", q, err)
			continue
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		rs.t.Logf("database: %q %v", lines, err)
	}
}

// owner returns the replica that owns run, as the database has it.
func (rs *replicaSet) owner(t *testing.T, run string) string {
	t.Helper()
	var owner string
	rs.queryRow(t, `SELECT owner FROM runs WHERE id = $1`, []any{run}, &owner)
	return owner
}

// lastSeq returns the Seq of the session's last stored event, as the database has it.
func (rs *replicaSet) lastSeq(t *testing.T, sid string) int64 {
	t.Helper()
	var seq int64
	rs.queryRow(t, `SELECT coalesce(max(seq), 0) FROM events WHERE session_id = $1`, []any{sid}, &seq)
	return seq
}

// queryRow scans the one row q returns into dest, read from the set's database directly
// (not through a test's proxy).
func (rs *replicaSet) queryRow(t *testing.T, q string, args []any, dest ...any) {
	t.Helper()
	u, err := url.Parse(rs.db)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := url.Parse(testsvc.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = admin.Host
	conn, err := pgx.Connect(t.Context(), u.String())
	if err != nil {
		t.Fatalf("the database: %v", err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(t.Context(), q, args...).Scan(dest...); err != nil {
		t.Fatalf("%s %v: %v", q, args, err)
	}
}

// start starts the replica's process (again), and waits until it is ready.
func (r *replica) start() {
	r.rs.t.Helper()
	env := append([]string{"DATABASE_URL=" + r.rs.db, "NATS_URL=" + r.rs.nats, "REPLICA_ID=" + r.id,
		"RUN_LEASE=" + lease.String(), "LOG_LEVEL=info", "SHUTDOWN_TIMEOUT=10s"}, r.rs.env...)
	env = append(env, r.env...)
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

// logLines returns the replica logs' lines that contain every one of words.
func logLines(rs []*replica, words ...string) []string {
	var out []string
	for _, r := range rs {
		for _, line := range strings.Split(r.log(), "\n") {
			ok := true
			for _, w := range words {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				out = append(out, line)
			}
		}
	}
	return out
}

// takeoverWait is how long a client retries a command while a dead replica's runs are
// taken over: the lease and the time to notice, plus one whole request timeout (10 s): a
// command sent while the survivor adopts the run may wait that out on a loaded machine
// (under -race with the suite running beside it), and the client then tries again.
const takeoverWait = lease + 15*time.Second

// untilOK repeats op while it answers UNAVAILABLE (what a client does while a replica's
// runs are being taken over), for up to d; it returns the last answer and how long it
// took.
func untilOK(t *testing.T, d time.Duration, op func() *tgtest.Response) (*tgtest.Response, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		res := op()
		if res.Code() != "UNAVAILABLE" || time.Since(start) > d {
			return res, time.Since(start)
		}
		time.Sleep(50 * time.Millisecond) // a client's pause before it tries again
	}
}

// TestReplicasSIGKILL kills the replica running two sessions' agents, one streaming and
// one waiting for an answer: a survivor ends the streaming run INTERRUPTED within the lease
// (plus the time to notice), keeping its text, and says so in its log and metrics; the
// session stays usable; the answer, given on a survivor, resumes the waiting run there.
func TestReplicasSIGKILL(t *testing.T) {
	t.Parallel()
	rs := newReplicaSet(t, setOptions{})
	r := rs.reps
	c := tgtest.Guest(t, r[0].URL)
	streaming, asking := c.CreateSession(nil), c.CreateSession(nil)
	on1 := c.On(r[1].URL)
	ws := on1.Connect("graphql-transport-ws")
	_, s1 := ws.Stream(streaming, c.Cursor(streaming))
	_, s2 := ws.Stream(asking, c.Cursor(asking))
	_, slow := c.Send(streaming, "/slow 300") // taken, and run, by replica 0
	_, ask := c.Send(asking, "/ask still there?")
	s1.Until("text", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
	q := s2.Until("the question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })

	killed := time.Now()
	r[0].kill()
	end := s1.Until("the killed replica's run to end", tgtest.RunEnds(slow))
	took := time.Since(killed)
	t.Logf("a survivor ended the killed replica's run %s %v after SIGKILL (RUN_LEASE %v)", end.Run.Status, took, lease)
	if end.Run.Status != "INTERRUPTED" {
		t.Errorf("run ended %s, want INTERRUPTED", end.Run.Status)
	}
	if took > lease+2*time.Second {
		t.Errorf("takeover took %v, more than the lease (%v) plus 2s", took, lease)
	}
	text := checkStream(t, streaming, s1.All)
	msgs := on1.Messages(streaming)
	if reply := msgs[len(msgs)-1]; reply.Status != "INTERRUPTED" || !strings.HasPrefix(reply.Content, "chunk 1.") || text[reply.ID] != reply.Content {
		t.Errorf("the killed run's reply: %+v, streamed %q", reply, text[reply.ID])
	}
	_, again := c.On(r[2].URL).Send(streaming, "still usable?")
	if end := s1.Until("the next run", tgtest.RunEnds(again)); end.Run.Status != "COMPLETED" {
		t.Errorf("next run ended %s", end.Run.Status)
	}

	res, waited := untilOK(t, takeoverWait, func() *tgtest.Response {
		return c.On(r[2].URL).Do(`mutation($q: ID!){ respondToQuestion(input:{questionId:$q, answer:"after the kill"}){ run { id } } }`,
			map[string]any{"q": q.Question.ID})
	})
	if len(res.Errors) > 0 {
		t.Fatalf("answer on a survivor: %+v", res.Errors)
	}
	t.Logf("the answer on a survivor was taken %v after SIGKILL (%v of it retrying)", time.Since(killed), waited)
	if end := s2.Until("the resumed run", tgtest.RunEnds(ask)); end.Run.Status != "COMPLETED" {
		t.Fatalf("resumed run ended %s", end.Run.Status)
	}
	if reply := lastAssistant(on1.Messages(asking)); !strings.Contains(reply.Content, "after the kill") {
		t.Errorf("resumed reply %q does not use the answer", reply.Content)
	}

	// Every takeover has its log line, and the survivors count them.
	for _, run := range []string{slow, ask} {
		if lines := logLines(r[1:], `"msg":"took over a run"`, run); len(lines) != 1 {
			t.Errorf("log lines of the takeover of %s: %q", run, lines)
		}
	}
	if n := r[1].metric(t, "talkgraph_runs_taken_over_total") + r[2].metric(t, "talkgraph_runs_taken_over_total"); n != 2 {
		t.Errorf("talkgraph_runs_taken_over_total adds up to %v on the survivors, want 2", n)
	}
	for _, rep := range r[1:] {
		rep.metric(t, "talkgraph_runs_owned")
		rep.metric(t, "talkgraph_broker_reconnects_total")
	}

	// The killed replica comes back under its name and serves again.
	r[0].start()
	_, back := c.Send(streaming, "back again")
	if end := s1.Until("a run on the restarted replica", tgtest.RunEnds(back)); end.Run.Status != "COMPLETED" {
		t.Errorf("run through the restarted replica ended %s", end.Run.Status)
	}
}

// TestReplicasSIGTERM stops a replica gracefully while it runs an agent, has one waiting
// for an answer and a run queued behind another: the others take them over at once, not
// after the lease (a minute here).
func TestReplicasSIGTERM(t *testing.T) {
	t.Parallel()
	rs := newReplicaSet(t, setOptions{env: []string{"RUN_LEASE=60s"}})
	r := rs.reps
	c := tgtest.Guest(t, r[0].URL)
	streaming, asking := c.CreateSession(nil), c.CreateSession(nil)
	queued := c.CreateSession(map[string]any{"busyPolicy": "ENQUEUE"})
	on1 := c.On(r[1].URL)
	ws := on1.Connect("graphql-transport-ws")
	_, s1 := ws.Stream(streaming, c.Cursor(streaming))
	_, s2 := ws.Stream(asking, c.Cursor(asking))
	_, s3 := ws.Stream(queued, c.Cursor(queued))
	_, slow := c.Send(streaming, "/slow 300")
	_, ask := c.Send(asking, "/ask still there?")
	_, first := c.Send(queued, "/slow 300")
	s1.Until("text", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
	q := s2.Until("the question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })
	// The queued message is sent once the run before it works (a run reads the history as
	// it is when it starts).
	s3.Until("text", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
	_, second := c.Send(queued, "waiting my turn")

	stopped := time.Now()
	r[0].signal(syscall.SIGTERM)
	t.Logf("replica 0 exited %v after SIGTERM", time.Since(stopped))
	if end := s1.Until("the running run's end", tgtest.RunEnds(slow)); end.Run.Status != "INTERRUPTED" {
		t.Errorf("running run ended %s at SIGTERM", end.Run.Status)
	}
	if end := s3.Until("the running run's end", tgtest.RunEnds(first)); end.Run.Status != "INTERRUPTED" {
		t.Errorf("running run ended %s at SIGTERM", end.Run.Status)
	}
	if end := s3.Until("the queued run's end", tgtest.RunEnds(second)); end.Run.Status != "COMPLETED" {
		t.Errorf("queued run ended %s on a survivor", end.Run.Status)
	}
	res, waited := untilOK(t, 10*time.Second, func() *tgtest.Response {
		return on1.Do(`mutation($q: ID!){ respondToQuestion(input:{questionId:$q, answer:"handed over"}){ run { id } } }`,
			map[string]any{"q": q.Question.ID})
	})
	if len(res.Errors) > 0 {
		t.Fatalf("answer on a survivor: %+v", res.Errors)
	}
	if end := s2.Until("the resumed run", tgtest.RunEnds(ask)); end.Run.Status != "COMPLETED" {
		t.Fatalf("resumed run ended %s", end.Run.Status)
	}
	took := time.Since(stopped)
	t.Logf("every run handed over and done %v after SIGTERM (the answer retried for %v)", took, waited)
	if took > 10*time.Second {
		t.Errorf("the handover took %v: it should not wait for the lease", took)
	}
}

// load sends messages to sessions through every replica in turn, one sender per session,
// until stopped, and records those acknowledged.
type load struct {
	c     *tgtest.Client
	rs    []*replica
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked map[string]ackedMessage // by message ID
	codes map[string]int          // refusals, by code
	more  chan struct{}           // buffered(1): a message was acknowledged
}

type ackedMessage struct{ session, content string }

func startLoad(c *tgtest.Client, rs []*replica, sids []string) *load {
	l := &load{c: c, rs: rs, stop: make(chan struct{}), acked: map[string]ackedMessage{}, codes: map[string]int{}, more: make(chan struct{}, 1)}
	for i, sid := range sids {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(40 * time.Millisecond) // the pace of the load
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				content := fmt.Sprintf("load %d.%d: a few words to echo", i, n)
				res, err := sendWith(l.c.On(l.rs[(i+n)%len(l.rs)].URL), sid, content, "")
				l.mu.Lock()
				switch {
				case err != nil:
					l.codes["(no answer)"]++
				case len(res.Errors) > 0:
					l.codes[res.Code()]++
				default:
					var out added
					if json.Unmarshal(res.Data, &out) == nil && out.AddMessage.Message.ID != "" {
						l.acked[out.AddMessage.Message.ID] = ackedMessage{sid, content}
						select {
						case l.more <- struct{}{}:
						default:
						}
					}
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// count returns the number of messages acknowledged so far.
func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// await waits until n more messages than now are acknowledged.
func (l *load) await(t *testing.T, n int) {
	t.Helper()
	want := l.count() + n
	deadline := time.After(tgtest.Wait)
	for l.count() < want {
		select {
		case <-l.more:
		case <-deadline:
			t.Fatalf("the load acknowledged %d messages, waited for %d", l.count(), want)
		}
	}
}

// end stops the senders and checks, through c, that every acknowledged message is in its
// session's history as it was sent.
func (l *load) end(t *testing.T, c *tgtest.Client) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	bySession := map[string]map[string]string{}
	for id, m := range l.acked {
		if bySession[m.session] == nil {
			stored := map[string]string{}
			for _, msg := range c.Messages(m.session) {
				stored[msg.ID] = msg.Content
			}
			bySession[m.session] = stored
		}
		if got, ok := bySession[m.session][id]; !ok || got != m.content {
			t.Errorf("acknowledged message %s (%q) lost or changed: %q", id, m.content, got)
		}
	}
	t.Logf("%d messages acknowledged and kept; refused: %v", len(l.acked), l.codes)
	if len(l.acked) == 0 {
		t.Error("no message was acknowledged: the load did nothing")
	}
}

// TestReplicasKillAll kills every replica with SIGKILL while messages are being sent
// through all of them, and starts them again: every message acknowledged is there, no
// reply is left streaming, and the sessions work.
func TestReplicasKillAll(t *testing.T) {
	t.Parallel()
	rs := newReplicaSet(t, setOptions{})
	r := rs.reps
	c := tgtest.Guest(t, r[0].URL)
	var sids []string
	for range 4 {
		sids = append(sids, c.CreateSession(nil))
	}
	l := startLoad(c, r, sids)
	l.await(t, 40)
	for _, rep := range r {
		_ = rep.cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, rep := range r {
		<-rep.done
	}
	close(l.stop)
	l.wg.Wait()
	l.stop = make(chan struct{}) // end closes it again
	for _, rep := range r {
		rep.start()
	}
	l.end(t, c)
	for i, sid := range sids {
		on := c.On(r[i%3].URL)
		st := stateOf(on, sid)
		for _, m := range on.Messages(sid) {
			if m.Status == "STREAMING" && (st.ActiveRun == nil || m.RunID != st.ActiveRun.ID) {
				t.Errorf("session %d: message %s still STREAMING, its run not active: %+v", i, m.ID, st)
			}
		}
		_, evs := on.Connect("graphql-transport-ws").Stream(sid, on.Cursor(sid))
		_, run := on.Send(sid, "after the restart")
		if end := evs.Until("a run after the restart", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
			t.Errorf("session %d: run after the restart ended %s", i, end.Run.Status)
		}
	}
}

// pgProxy forwards TCP connections to PostgreSQL and can cut them: the way these tests
// take the database away from the replicas and give it back, without restarting the
// machine's PostgreSQL, which other tests use at the same time.
type pgProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *pgProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(in)
		}
	}()
	return p
}

func (p *pgProxy) forward(in net.Conn) {
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		in.Close()
		return
	}
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	p.conns[in], p.conns[out] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(out, in); out.Close(); in.Close() }()
	_, _ = io.Copy(in, out)
	in.Close()
	out.Close()
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// cut closes every connection and refuses new ones until restore.
func (p *pgProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *pgProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// via returns dbURL with its host replaced by the proxy's address.
func (p *pgProxy) via(t *testing.T, dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// streamAcross starts a long reply in a session through replica 0 and follows it on the
// others; done checks, once it ended, that each follower saw it whole, with no gap and no
// duplicate.
func streamAcross(t *testing.T, c *tgtest.Client, r []*replica) (done func()) {
	t.Helper()
	sid := c.CreateSession(nil)
	cursor := c.Cursor(sid)
	var streams []*tgtest.Events
	for _, rep := range r[1:] {
		_, evs := c.On(rep.URL).Connect("graphql-transport-ws").Stream(sid, cursor)
		streams = append(streams, evs)
	}
	_, run := c.On(r[0].URL).Send(sid, "/slow 40")
	streams[0].Until("text", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
	return func() {
		t.Helper()
		for i, evs := range streams {
			if end := evs.Until("the long reply's end", tgtest.RunEnds(run)); end.Run.Status != "COMPLETED" {
				t.Errorf("the long reply ended %s", end.Run.Status)
			}
			text := checkStream(t, sid, evs.All)
			reply := lastAssistant(c.Messages(sid))
			if text[reply.ID] != reply.Content || !strings.HasSuffix(reply.Content, "chunk 40. ") {
				t.Errorf("follower on replica %d: deltas %q, content %q", i+1, text[reply.ID], reply.Content)
			}
		}
	}
}

// TestReplicasPostgresOutage takes PostgreSQL away from three replicas under load, twice:
// its connections terminated on the server (pg_terminate_backend, as a restart of
// PostgreSQL does), then a TCP proxy between the replicas and PostgreSQL cutting every
// connection and refusing new ones for a while. While it is away /readyz is red and
// operations answer UNAVAILABLE; once it is back /readyz is green, no acknowledged
// message is lost, and a reply streamed meanwhile reaches followers on other replicas
// whole. The machine's PostgreSQL itself is never restarted: other tests use it.
func TestReplicasPostgresOutage(t *testing.T) {
	t.Parallel()
	db := testsvc.NewDatabase(t)
	target, err := url.Parse(testsvc.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, target.Host)
	// A lease longer than the outage: the replicas keep their runs through it.
	rs := newReplicaSet(t, setOptions{db: proxy.via(t, db), env: []string{"RUN_LEASE=15s"}})
	r := rs.reps
	c := tgtest.Guest(t, r[0].URL)
	var sids []string
	for range 3 {
		sids = append(sids, c.CreateSession(nil))
	}
	// A session the load leaves alone, for the commands sent while PostgreSQL is away: a
	// session whose write was cut in the middle of its commit answers only once the
	// storage can tell whether that write went through (see docs/ARCHITECTURE.md).
	quiet := c.CreateSession(nil)
	streamed := streamAcross(t, c, r)
	l := startLoad(c, r, sids)

	admin := testsvc.Admin(t)
	name := testsvc.DatabaseName(t, db)
	for range 5 {
		var n int
		if err := admin.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("no connection of the replicas to terminate")
		}
		l.await(t, 5)
	}
	t.Logf("%d messages acknowledged through 5 terminations of every connection", l.count())

	awayAndBack(t, c, r, quiet, "PostgreSQL", proxy.cut, proxy.restore)
	l.await(t, 10)
	l.end(t, c)
	streamed()
}

// awayAndBack takes a service (what) away from the replicas with away, checks that every
// replica's /readyz goes red and that addMessage on session sid answers UNAVAILABLE on
// each, brings the service back with back and waits for every /readyz to go green.
func awayAndBack(t *testing.T, c *tgtest.Client, r []*replica, sid, what string, away, back func()) {
	t.Helper()
	away()
	gone := time.Now()
	for _, rep := range r {
		eventually(t, 10*time.Second, rep.id+"'s /readyz to go red", func() bool { return !rep.ready() })
	}
	for _, rep := range r {
		if res := c.On(rep.URL).Do(`mutation($s: ID!){ addMessage(input:{sessionId:$s, content:"while away"}){ run { id } } }`,
			map[string]any{"s": sid}); res.Code() != "UNAVAILABLE" {
			t.Errorf("addMessage on %s while %s is away: %+v, want UNAVAILABLE", rep.id, what, res)
		}
	}
	back()
	t.Logf("%s was away for %v", what, time.Since(gone))
	for _, rep := range r {
		eventually(t, 15*time.Second, rep.id+"'s /readyz to go green", rep.ready)
	}
}

// TestReplicasNATSOutage stops the NATS server under three replicas under load and starts
// it again: meanwhile /readyz is red and operations answer UNAVAILABLE; once it is back
// /readyz is green, the reconnection is counted, no acknowledged message is lost, and a
// reply streamed meanwhile reaches followers on other replicas whole.
func TestReplicasNATSOutage(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartNATS(t)
	rs := newReplicaSet(t, setOptions{nats: srv.URL})
	r := rs.reps
	c := tgtest.Guest(t, r[0].URL)
	var sids []string
	for range 3 {
		sids = append(sids, c.CreateSession(nil))
	}
	streamed := streamAcross(t, c, r)
	l := startLoad(c, r, sids)
	l.await(t, 10)

	awayAndBack(t, c, r, sids[0], "NATS", srv.Stop, srv.Start)
	for _, rep := range r {
		if n := rep.metric(t, "talkgraph_broker_reconnects_total"); n < 1 {
			t.Errorf("%s counted %v reconnections", rep.id, n)
		}
	}
	l.await(t, 10)
	l.end(t, c)
	streamed()
}

// TestReplicasLeaseLost cuts PostgreSQL away from the replica running an agent (through a
// TCP proxy of its own; the other replica reaches PostgreSQL directly) for longer than its
// lease: the other takes the run over and ends it INTERRUPTED, and when the first reaches
// PostgreSQL again it learns that it lost the run and stops its agent without writing. The
// run ends once, its stream has no gap and no duplicate, and the session works afterwards.
// behindProxy is two replicas, the first reaching PostgreSQL or NATS through a proxy the
// test cuts, and a long reply that replica 0 runs, followed on replica 1 until its first
// text.
type behindProxy struct {
	rs     *replicaSet
	proxy  *pgProxy
	c, on1 *tgtest.Client
	sid    string
	run    string
	evs    *tgtest.Events
}

// streamBehindProxy starts the set of behindProxy: variable (DATABASE_URL or NATS_URL) of
// replica 0 is rawURL reached through the proxy, o says the rest, and the reply is
// "/slow words".
func streamBehindProxy(t *testing.T, o setOptions, variable, rawURL string, words int) *behindProxy {
	t.Helper()
	target, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	b := &behindProxy{proxy: startProxy(t, target.Host)}
	o.n, o.each = 2, map[int][]string{0: {variable + "=" + b.proxy.via(t, rawURL)}}
	b.rs = newReplicaSet(t, o)
	r := b.rs.reps
	b.c = tgtest.Guest(t, r[0].URL)
	b.sid = b.c.CreateSession(nil)
	b.on1 = b.c.On(r[1].URL)
	_, b.evs = b.on1.Connect("graphql-transport-ws").Stream(b.sid, b.c.Cursor(b.sid))
	_, b.run = b.c.Send(b.sid, "/slow "+strconv.Itoa(words)) // run by replica 0
	b.evs.Until("text", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
	return b
}

func TestReplicasLeaseLost(t *testing.T) {
	t.Parallel()
	db := testsvc.NewDatabase(t)
	b := streamBehindProxy(t, setOptions{db: db}, "DATABASE_URL", db, 100)
	r, proxy, c, on1, sid, run, evs := b.rs.reps, b.proxy, b.c, b.on1, b.sid, b.run, b.evs

	proxy.cut()
	cut := time.Now()
	end := evs.Until("the run's end", tgtest.RunEnds(run))
	t.Logf("the other replica ended the run %s %v after replica 0 lost PostgreSQL", end.Run.Status, time.Since(cut))
	if end.Run.Status != "INTERRUPTED" {
		t.Errorf("the run ended %s, want INTERRUPTED", end.Run.Status)
	}
	proxy.restore()
	eventually(t, 15*time.Second, "replica 0 to drop the run", func() bool {
		return len(logLines(r[:1], "another replica took this run over", run)) > 0
	})
	// Nothing the first replica's agent said after the takeover reaches the log.
	_, next := on1.Send(sid, "after the outage")
	if end := evs.Until("the next run", tgtest.RunEnds(next)); end.Run.Status != "COMPLETED" {
		t.Errorf("next run ended %s", end.Run.Status)
	}
	text := checkStream(t, sid, evs.All)
	for _, m := range on1.Messages(sid) {
		if m.Role == "ASSISTANT" && (text[m.ID] != m.Content || m.Status == "STREAMING") {
			t.Errorf("reply %+v, streamed %q", m, text[m.ID])
		}
	}
	for _, ev := range evs.All {
		if ev.Typename == "RunStatusChanged" && ev.Run.ID == run && ev != end && tgtest.RunEnds(run)(ev) {
			t.Errorf("the run ended twice: %s and %s", ev.Run.Status, end.Run.Status)
		}
	}
	if st := stateOf(c, sid); st.ActiveRun != nil {
		t.Errorf("a run is still active: %+v", st)
	}
}

// TestReplicasTakeOverWhatWasNeverPublished kills a replica whose last events were stored
// but never reached the broker (its connection to NATS was cut first, so they waited in
// its client's buffer): the replica that takes the run over, and that followed the session
// for a subscriber, reads the log from the store rather than trusting what it heard. It
// ends the run INTERRUPTED, and its subscriber gets every event, those never published
// included, with no gap.
func TestReplicasTakeOverWhatWasNeverPublished(t *testing.T) {
	t.Parallel()
	nats := testsvc.NATS(t)
	b := streamBehindProxy(t, setOptions{nats: nats}, "NATS_URL", nats, 300)
	rs, r, proxy, on1, sid, run, evs := b.rs, b.rs.reps, b.proxy, b.on1, b.sid, b.run, b.evs

	proxy.cut()
	cut := rs.lastSeq(t, sid)
	// Replica 0 goes on storing its reply; nothing of it from now on reaches replica 1.
	var unheard int64
	eventually(t, 15*time.Second, "replica 0 to store events after it lost NATS", func() bool {
		unheard = rs.lastSeq(t, sid)
		return unheard >= cut+3
	})
	r[0].kill()

	end := evs.Until("the run's end", tgtest.RunEnds(run))
	if end.Run.Status != "INTERRUPTED" {
		t.Errorf("the run ended %s, want INTERRUPTED", end.Run.Status)
	}
	if got := seqOf(t, sid, end.Cursor); got <= unheard {
		t.Errorf("the run's end is at Seq %d, not after the %d events replica 0 stored", got, unheard)
	}
	text := checkStream(t, sid, evs.All)
	reply := lastAssistant(on1.Messages(sid))
	if reply.Status != "INTERRUPTED" || text[reply.ID] != reply.Content {
		t.Errorf("the reply %+v, streamed %q", reply, text[reply.ID])
	}
	var chunks int
	for _, ev := range evs.All {
		if ev.Typename == "MessageChunk" && seqOf(t, sid, ev.Cursor) > cut {
			chunks++
		}
	}
	if chunks == 0 {
		t.Errorf("the subscriber got none of the chunks stored after replica 0 lost NATS (Seq %d to %d)", cut+1, unheard)
	}
	if _, next := on1.Send(sid, "after the takeover"); evs.Until("the next run", tgtest.RunEnds(next)).Run.Status != "COMPLETED" {
		t.Errorf("the session is not usable after the takeover")
	}
}
