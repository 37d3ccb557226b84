package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service"
)

// TestMain lets the test binary double as the server: with TALKGRAPH_CHILD=1 it runs the
// real server instead of tests (with the arguments in TALKGRAPH_CHILD_ARGS, then those
// after "--" on its own command line), so crash tests can start and kill real processes.
func TestMain(m *testing.M) {
	if os.Getenv("TALKGRAPH_CHILD") == "1" {
		ctx, stop := app.SignalContext()
		defer stop()
		args := strings.Fields(os.Getenv("TALKGRAPH_CHILD_ARGS"))
		if i := slices.Index(os.Args, "--"); i >= 0 {
			args = append(args, os.Args[i+1:]...)
		}
		if err := app.Run(ctx, args, os.Getenv, os.Stderr, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	removeBuilt()
	os.Exit(code)
}

// child is a server process on a data directory.
type child struct {
	t    *testing.T
	cmd  *exec.Cmd
	URL  string
	done chan error
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startChild starts the server in a new process and waits until it is ready.
func startChild(t *testing.T, dataDir string, port int, env ...string) *child {
	t.Helper()
	return startChildArgs(t, dataDir, port, nil, env...)
}

// startChildArgs is startChild with args on the process's command line (after "--").
func startChildArgs(t *testing.T, dataDir string, port int, args []string, env ...string) *child {
	t.Helper()
	c := spawnChildArgs(t, dataDir, port, args, env...)
	deadline := time.Now().Add(tgtest.Wait)
	for {
		resp, err := http.Get(c.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return c
			}
		}
		select {
		case err := <-c.done:
			log, _ := os.ReadFile(filepath.Join(dataDir, "child.log"))
			t.Fatalf("server exited before it was ready: %v\n%s", err, log)
		case <-time.After(20 * time.Millisecond): // the server has no event to wait on yet
		}
		if time.Now().After(deadline) {
			t.Fatal("server not ready in time")
		}
	}
}

// spawnChild starts the server in a new process, its log going to child.log in dataDir.
func spawnChild(t *testing.T, dataDir string, port int, env ...string) *child {
	t.Helper()
	return spawnChildArgs(t, dataDir, port, nil, env...)
}

// spawnChildArgs is spawnChild with args on the process's command line (after "--").
func spawnChildArgs(t *testing.T, dataDir string, port int, args []string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "TALKGRAPH_CHILD=1", "DATA_DIR="+dataDir, fmt.Sprintf("PORT=%d", port), "HOST=127.0.0.1",
		"DEMO_CHUNK_DELAY=3ms", "FLUSH_INTERVAL=10ms", "RATE_LIMIT=1000", "RATE_BURST=1000", "LOG_LEVEL=warn",
		"ANON_RATE_LIMIT=1000", "ANON_RATE_BURST=1000", "GUEST_SIGNIN_RATE=60000", "GUEST_SIGNIN_BURST=1000",
		"MAX_SOCKETS_PER_ADDRESS=100000", "MAX_SUBSCRIPTIONS_PER_ADDRESS=100000", "MAX_BODY_READS_PER_ADDRESS=100000")
	cmd.Env = append(cmd.Env, env...)
	logf, _ := os.OpenFile(filepath.Join(dataDir, "child.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, cmd: cmd, URL: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan error, 1)}
	go func() { c.done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return c
}

func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

func seqOf(t *testing.T, sid, cursor string) int64 {
	c, err := service.DecodeCursor(sid, cursor)
	if err != nil {
		t.Fatalf("cursor %q: %v", cursor, err)
	}
	return c.Seq
}

// TestCrashLosesNothingAcknowledged kills a real server process with SIGKILL at random
// points while it streams replies and waits for answers, restarts it on the same SQLite
// file, and checks what a client sees.
func TestCrashLosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test starts and kills processes")
	}
	const killPoints = 24
	dataDir := t.TempDir()
	port := freePort(t)
	srv := startChild(t, dataDir, port)
	user := tgtest.Guest(t, srv.URL)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	t.Logf("seed time %v", time.Now().UnixNano())

	sid := user.CreateSession(nil)
	acked := map[string]string{} // user message ID → content, for every addMessage that returned
	var seen []tgtest.Event      // everything the client received, across crashes
	cursor := user.Cursor(sid)
	waiting := "" // a question left waiting at a crash

	for point := 0; point < killPoints; point++ {
		ws := user.Connect("graphql-transport-ws")
		_, evs := ws.Stream(sid, cursor)

		if waiting != "" {
			// A question outlives the crash: answering it resumes the run.
			var out struct {
				RespondToQuestion struct{ Run struct{ ID string } }
			}
			user.Must(`mutation($q: ID!){ respondToQuestion(input:{questionId:$q, answer:"after the crash"}){ run { id } } }`, map[string]any{"q": waiting}, &out)
			end := evs.Until("resumed run ends", tgtest.RunEnds(out.RespondToQuestion.Run.ID))
			if end.Run.Status != "COMPLETED" {
				t.Fatalf("point %d: resumed run ended %s", point, end.Run.Status)
			}
			reply := lastAssistant(user.Messages(sid))
			if !strings.Contains(reply.Content, "after the crash") {
				t.Fatalf("point %d: resumed reply %q does not use the answer", point, reply.Content)
			}
			waiting = ""
		}

		// Work: a few messages, some long, some asking; then a kill at a random moment.
		kinds := []string{"long", "long", "ask", "short"}
		for n := 1 + rng.IntN(3); n > 0; n-- {
			content := fmt.Sprintf("point %d message %d: %s", point, n, strings.Repeat("word ", 20+rng.IntN(60)))
			if kinds[rng.IntN(len(kinds))] == "ask" {
				content = fmt.Sprintf("/ask question at point %d?", point)
			}
			msgID, _ := user.Send(sid, content)
			acked[msgID] = content
		}
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond) // the kill point is random on purpose
		srv.kill()
		for {
			ev, ok := evs.TryNext(time.Second)
			if !ok {
				break
			}
			_ = ev
		}
		ws.Close()
		seen = append(seen, evs.All...)
		if len(evs.All) > 0 {
			last := evs.All[len(evs.All)-1].Cursor
			if seqOf(t, sid, last) <= seqOf(t, sid, cursor) {
				t.Fatalf("point %d: cursor went backwards", point)
			}
			cursor = last
		}

		srv = startChild(t, dataDir, port)
		// One read gives the history and the run that may be writing to it: a run that was
		// still queued at the crash starts again and may be streaming already.
		var sess struct {
			Session struct {
				Status          string
				ActiveRun       *struct{ ID string }
				PendingQuestion *struct{ ID string }
				Messages        struct {
					Edges []struct{ Node tgtest.Message }
				}
			}
		}
		user.Must(`query($s: ID!){ session(id:$s){ status activeRun { id } pendingQuestion { id }
			messages(last: 20) { edges { node { id role kind content status runId } } } } }`, map[string]any{"s": sid}, &sess)
		for _, e := range sess.Session.Messages.Edges {
			if m := e.Node; m.Status == "STREAMING" && (sess.Session.ActiveRun == nil || m.RunID != sess.Session.ActiveRun.ID) {
				t.Fatalf("point %d: message %s still STREAMING after restart, and its run is not active", point, m.ID)
			}
		}
		byID := map[string]tgtest.Message{}
		for _, m := range user.Messages(sid) {
			byID[m.ID] = m
		}
		for id, content := range acked {
			if byID[id].Content != content {
				t.Fatalf("point %d: acknowledged message %s lost or changed: %+v", point, id, byID[id])
			}
		}
		if sess.Session.Status == "RUNNING" {
			// A queued run may start again after the restart; stop it so the next point
			// starts from a quiet session.
			user.Cancel(sid)
		}
		if q := sess.Session.PendingQuestion; q != nil {
			waiting = q.ID
		}
	}

	// Resuming from the last cursor continues what was seen with no gap and no duplicate,
	// and every message's deltas, as seen across all the crashes, add up to its content.
	ws := user.Connect("graphql-transport-ws")
	_, rest := ws.Stream(sid, cursor)
	final := user.Cursor(sid)
	for seqOf(t, sid, cursor) < seqOf(t, sid, final) {
		ev := rest.Next()
		cursor = ev.Cursor
	}
	all := append(seen, rest.All...)
	for i := 1; i < len(all); i++ {
		if seqOf(t, sid, all[i].Cursor) <= seqOf(t, sid, all[i-1].Cursor) {
			t.Fatalf("event %d (%s) is not after the one before: duplicate", i, all[i].Typename)
		}
	}
	text := map[string]string{}
	for _, ev := range all {
		if ev.Typename != "MessageChunk" {
			continue
		}
		if got := len([]rune(text[ev.MessageID])); ev.Offset != got {
			t.Fatalf("chunk of %s at offset %d, but %d code points came before it: a gap or a duplicate", ev.MessageID, ev.Offset, got)
		}
		text[ev.MessageID] += ev.Delta
	}
	for _, m := range user.Messages(sid) {
		if m.Role == "ASSISTANT" && m.Kind == "TEXT" && text[m.ID] != m.Content {
			t.Errorf("message %s: deltas %q, content %q", m.ID, text[m.ID], m.Content)
		}
	}
	t.Logf("%d kill points, %d acknowledged messages, %d events", killPoints, len(acked), len(all))
}

func lastAssistant(msgs []tgtest.Message) tgtest.Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "ASSISTANT" && msgs[i].Kind == "TEXT" {
			return msgs[i]
		}
	}
	return tgtest.Message{}
}

// TestGracefulShutdownKeepsPartialRepliesAndWaitingQuestions sends SIGTERM to a real server
// while one session streams and another waits for an answer.
func TestGracefulShutdownKeepsPartialRepliesAndWaitingQuestions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dataDir := t.TempDir()
	port := freePort(t)
	srv := startChild(t, dataDir, port)
	c := tgtest.Guest(t, srv.URL)
	streaming, asking := c.CreateSession(nil), c.CreateSession(nil)
	ws := c.Connect("graphql-transport-ws")
	_, s1 := ws.Stream(streaming, c.Cursor(streaming))
	_, s2 := ws.Stream(asking, c.Cursor(asking))
	_, slowRun := c.Send(streaming, "/slow 500")
	_, askRun := c.Send(asking, "/ask still there?")
	s1.Until("text", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
	s2.Until("question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })

	start := time.Now()
	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	if end := s1.Until("run ends", tgtest.RunEnds(slowRun)); end.Run.Status != "INTERRUPTED" {
		t.Errorf("streaming run ended %s at shutdown", end.Run.Status)
	}
	select {
	case <-ws.Closed:
	case <-time.After(tgtest.Wait):
		t.Error("websocket not closed at shutdown")
	}
	select {
	case err := <-srv.done:
		if err != nil {
			t.Errorf("exit: %v", err)
		}
	case <-time.After(tgtest.Wait):
		t.Fatal("server did not exit")
	}
	t.Logf("shut down in %v", time.Since(start))

	startChild(t, dataDir, port)
	msgs := c.Messages(streaming)
	if len(msgs) != 2 || msgs[1].Status != "INTERRUPTED" || !strings.HasPrefix(msgs[1].Content, "chunk 1.") {
		t.Errorf("after restart: %+v", msgs)
	}
	var sess struct {
		Session struct {
			Status          string
			PendingQuestion *struct{ ID string }
		}
	}
	c.Must(`query($s: ID!){ session(id:$s){ status pendingQuestion { id } } }`, map[string]any{"s": asking}, &sess)
	if sess.Session.Status != "WAITING_FOR_INPUT" || sess.Session.PendingQuestion == nil {
		t.Fatalf("waiting session after restart: %+v", sess.Session)
	}
	ws2 := c.Connect("graphql-transport-ws")
	_, s3 := ws2.Stream(asking, c.Cursor(asking))
	c.Must(`mutation($q: ID!){ respondToQuestion(input:{questionId:$q, answer:"yes"}){ run { id } } }`, map[string]any{"q": sess.Session.PendingQuestion.ID}, nil)
	if end := s3.Until("resumed run ends", tgtest.RunEnds(askRun)); end.Run.Status != "COMPLETED" {
		t.Errorf("resumed run ended %s", end.Run.Status)
	}

}
