package e2e

import (
	"context"
	"errors"
	"iter"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/talkgraph/talkgraph/client"
	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service"
)

// The Go client (package client) against the whole server: what a script does with it.

func clientContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newGuestClient(t *testing.T, ctx context.Context, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(ctx, url, append(opts, client.AsGuest())...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runEndOf says whether ev is run's last status change.
func runEndOf(ev client.Event, run string) (client.Run, bool) {
	rs, ok := ev.(*client.EventRunStatusChanged)
	if !ok || rs.Run.Id != run {
		return client.Run{}, false
	}
	return rs.Run, rs.Run.FinishedAt != nil
}

// texts puts each message's chunks together, failing the test on a chunk that does not
// start where the text so far ends (a gap or a duplicate).
type texts map[string]string

func (x texts) add(t *testing.T, ev *client.EventMessageChunk) {
	t.Helper()
	if got := len([]rune(x[ev.MessageId])); ev.Offset != got {
		t.Fatalf("chunk of %s at offset %d, but %d characters came before it: a gap or a duplicate", ev.MessageId, ev.Offset, got)
	}
	x[ev.MessageId] += ev.Delta
}

// A script creates a session, sends a message (once, however often it retries with its
// idempotency key), follows the reply, sees the agent's question in the session's pending
// inputs, answers it, and reads the whole conversation back.
func TestClientSendsFollowsAndAnswers(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		a := startApp(t, store, nil)
		ctx := clientContext(t, tgtest.Wait)
		c := newGuestClient(t, ctx, a.URL)
		s, err := c.CreateSession(ctx, &client.CreateTalkSessionInput{Title: new("from Go")})
		if err != nil {
			t.Fatal(err)
		}
		if s.Title != "from Go" || s.Status != client.SessionStatusIdle || s.Settings.Agent != "demo" {
			t.Errorf("new session: %+v", s)
		}
		key := uuid.NewString()
		input := client.AddMessageInput{SessionId: s.Id, Content: "/ask What is your name?", IdempotencyKey: &key}
		sent, err := c.AddMessage(ctx, input)
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.AddMessage(ctx, input) // a retry, as after a lost answer
		if err != nil {
			t.Fatal(err)
		}
		if again.Message.Id != sent.Message.Id || again.Run.Id != sent.Run.Id {
			t.Errorf("the retry made message %s run %s, the first call %s %s", again.Message.Id, again.Run.Id, sent.Message.Id, sent.Run.Id)
		}

		text := texts{}
		var question, final string
	follow:
		for ev, err := range c.Follow(ctx, s.Id, s.StreamCursor) {
			if err != nil {
				t.Fatal(err)
			}
			switch ev := ev.(type) {
			case *client.EventQuestionAsked:
				question = ev.Question.Id
				now, err := c.Session(ctx, s.Id)
				if err != nil {
					t.Fatal(err)
				}
				if now.Status != client.SessionStatusWaitingForInput || len(now.PendingQuestions) != 1 ||
					now.PendingQuestions[0].Id != question || now.ActiveRun == nil || now.ActiveRun.Id != sent.Run.Id {
					t.Errorf("session while the agent asks: %s, pending %+v, active run %+v", now.Status, now.PendingQuestions, now.ActiveRun)
				}
				r, err := c.RespondToQuestion(ctx, question, "Ada")
				if err != nil {
					t.Fatal(err)
				}
				if r.Question.Answer == nil || *r.Question.Answer != "Ada" || r.Run.Id != sent.Run.Id {
					t.Errorf("answer: %+v", r)
				}
				_, err = c.RespondToQuestion(ctx, question, "Bob")
				if client.CodeOf(err) != client.Conflict {
					t.Errorf("answering twice: %v, want CONFLICT", err)
				}
			case *client.EventMessageChunk:
				text.add(t, ev)
			case *client.EventMessageCompleted:
				if ev.Message.Role == client.RoleAssistant && ev.Message.Kind == client.MessageKindText {
					final = ev.Message.Content
				}
			default:
				if run, ended := runEndOf(ev, sent.Run.Id); ended {
					if run.Status != client.RunStatusCompleted {
						t.Fatalf("run ended %s", run.Status)
					}
					break follow
				}
			}
		}
		want := `You answered "Ada". Thank you!`
		if final != want || len(text) != 1 {
			t.Errorf("reply %q, %d streamed; want %q", final, len(text), want)
		}
		for _, streamed := range text {
			if streamed != final {
				t.Errorf("chunks put together %q, the completed message %q", streamed, final)
			}
		}

		msgs, cursor, err := c.Messages(ctx, s.Id)
		if err != nil {
			t.Fatal(err)
		}
		var shape []string
		for _, m := range msgs {
			shape = append(shape, string(m.Role)+" "+string(m.Kind)+" "+m.Content)
		}
		wantShape := []string{"USER TEXT /ask What is your name?", "ASSISTANT QUESTION What is your name?", "USER ANSWER Ada", "ASSISTANT TEXT " + want}
		if strings.Join(shape, "\n") != strings.Join(wantShape, "\n") {
			t.Errorf("history:\n%s\nwant:\n%s", strings.Join(shape, "\n"), strings.Join(wantShape, "\n"))
		}
		if len(msgs) == 4 && (msgs[1].Question == nil || msgs[1].Question.Id != question) {
			t.Errorf("the question's message carries %+v, want question %s", msgs[1].Question, question)
		}
		now, err := c.Session(ctx, s.Id)
		if err != nil {
			t.Fatal(err)
		}
		if cursor != now.StreamCursor || now.Status != client.SessionStatusIdle {
			t.Errorf("after the run: session %s at %s, history read at %s", now.Status, now.StreamCursor, cursor)
		}
	})
}

// A script approves a tool call with edited arguments (decideToolCall) and rejects
// another with a reason (respondToInputs); the session lists the call while it waits, the
// approved call runs with the edited arguments and the rejected one never runs.
func TestClientDecidesToolCalls(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		a := startApp(t, store, nil)
		ctx := clientContext(t, tgtest.Wait)
		c := newGuestClient(t, ctx, a.URL)
		s, err := c.CreateSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		cursor := s.StreamCursor

		// decide waits for the call /approve makes, checks the session's pending inputs,
		// decides with decide, and returns the reply and the call as it ended.
		run := func(decide func(call client.ToolCall)) (reply string, call client.ToolCall) {
			t.Helper()
			sent, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "/approve as asked"})
			if err != nil {
				t.Fatal(err)
			}
			for ev, err := range c.Follow(ctx, s.Id, cursor) {
				if err != nil {
					t.Fatal(err)
				}
				cursor = ev.GetCursor()
				switch ev := ev.(type) {
				case *client.EventToolApprovalRequested:
					tc := ev.ToolCall
					if tc.Status != client.ToolCallStatusAwaitingApproval || tc.Approval == nil || tc.Approval.RequestedArguments != `{"text":"as asked"}` {
						t.Errorf("call awaiting approval: %+v", tc)
					}
					now, err := c.Session(ctx, s.Id)
					if err != nil {
						t.Fatal(err)
					}
					if now.Status != client.SessionStatusWaitingForInput || len(now.PendingApprovals) != 1 || now.PendingApprovals[0].Id != tc.Id {
						t.Errorf("session while the call waits: %s, pending approvals %+v", now.Status, now.PendingApprovals)
					}
					decide(tc)
				case *client.EventToolCallStarted:
					call = ev.ToolCall
				case *client.EventToolApprovalDecided:
					call = ev.ToolCall
				case *client.EventToolCallFinished:
					call = ev.ToolCall
				case *client.EventMessageCompleted:
					if ev.Message.Role == client.RoleAssistant {
						reply = ev.Message.Content
					}
				default:
					if r, ended := runEndOf(ev, sent.Run.Id); ended {
						if r.Status != client.RunStatusCompleted {
							t.Fatalf("run ended %s", r.Status)
						}
						return reply, call
					}
				}
			}
			t.Fatal("the stream ended before the run")
			return "", client.ToolCall{}
		}

		reply, call := run(func(tc client.ToolCall) {
			d, err := c.DecideToolCall(ctx, client.DecideToolCallInput{ToolCallId: tc.Id, Decision: client.ToolDecisionApprove, Arguments: new(`{"text":"as edited"}`)})
			if err != nil {
				t.Fatal(err)
			}
			if d.ToolCall.Status != client.ToolCallStatusRunning || d.ToolCall.Approval.Decision == nil || *d.ToolCall.Approval.Decision != client.ToolDecisionApprove {
				t.Errorf("approved call: %+v", d.ToolCall)
			}
		})
		if call.Status != client.ToolCallStatusCompleted || call.Result == nil || *call.Result != "as edited" || call.Arguments != `{"text":"as edited"}` {
			t.Errorf("approved call ended %s with result %v, arguments %s", call.Status, call.Result, call.Arguments)
		}
		if reply != "The echo tool printed: as edited" {
			t.Errorf("reply after the approval: %q", reply)
		}

		reply, call = run(func(tc client.ToolCall) {
			r, err := c.RespondToInputs(ctx, client.RespondToInputsInput{SessionId: s.Id,
				Decisions: []client.DecideToolCallInput{{ToolCallId: tc.Id, Decision: client.ToolDecisionReject, Reason: new("not now")}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.ToolCalls) != 1 || r.ToolCalls[0].Status != client.ToolCallStatusRejected {
				t.Errorf("rejected calls: %+v", r.ToolCalls)
			}
		})
		if call.Status != client.ToolCallStatusRejected || call.Output != "" {
			t.Errorf("rejected call: %s, output %q", call.Status, call.Output)
		}
		if !strings.Contains(reply, "not now") {
			t.Errorf("reply after the rejection %q does not give the reason", reply)
		}
	})
}

// following follows a session with the client in a goroutine, so that a test can act
// (restart the server, send messages) while it waits for events.
type following struct {
	t      *testing.T
	events chan client.Event
	err    chan error
	seen   []client.Event
}

func followInBackground(t *testing.T, ctx context.Context, c *client.Client, sessionID, after string) *following {
	ctx, cancel := context.WithCancel(ctx)
	f := &following{t: t, events: make(chan client.Event, 100000), err: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range c.Follow(ctx, sessionID, after) {
			if err != nil {
				f.err <- err
				return
			}
			f.events <- ev
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// until returns the first event that matches, failing the test after tgtest.Wait.
func (f *following) until(what string, match func(client.Event) bool) client.Event {
	f.t.Helper()
	timeout := time.NewTimer(tgtest.Wait)
	defer timeout.Stop()
	for {
		select {
		case ev := <-f.events:
			f.seen = append(f.seen, ev)
			if match(ev) {
				return ev
			}
		case err := <-f.err:
			f.t.Fatalf("waiting for %s: the stream ended: %v", what, err)
		case <-timeout.C:
			f.t.Fatalf("waiting for %s: nothing within %v (%d events seen)", what, tgtest.Wait, len(f.seen))
		}
	}
}

// stop stops the server process the way a process manager does (SIGTERM) and waits
// until it has exited.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	<-c.done
}

// Follow goes on across a graceful restart of the server (the socket closed with 1001)
// and a crash (no close frame), each in the middle of a reply: it reconnects, resumes
// after the last event it delivered, and the caller sees every event once, in order, as
// a fresh subscription from the start sees them.
func TestClientFollowResumesAcrossServerRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops server processes")
	}
	dataDir, port := t.TempDir(), freePort(t)
	srv := startChild(t, dataDir, port)
	ctx := clientContext(t, 2*time.Minute)
	var mu sync.Mutex
	var reconnects []error
	c := newGuestClient(t, ctx, srv.URL, client.OnReconnect(func(err error, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		reconnects = append(reconnects, err)
	}))
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := followInBackground(t, ctx, c, s.Id, s.StreamCursor)
	send := func(content string) string {
		t.Helper()
		sent, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: content})
		if err != nil {
			t.Fatal(err)
		}
		return sent.Run.Id
	}
	chunks := func(n int) func(client.Event) bool {
		return func(ev client.Event) bool {
			ch, ok := ev.(*client.EventMessageChunk)
			return ok && ch.Offset >= n
		}
	}
	ends := func(run string) func(client.Event) bool {
		return func(ev client.Event) bool { _, ended := runEndOf(ev, run); return ended }
	}
	closedWith := func(code int) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, err := range reconnects {
			var e *client.Error
			if errors.As(err, &e) && e.CloseCode == code {
				return true
			}
		}
		return false
	}

	// A graceful restart while a reply streams.
	first := send("/slow 40")
	f.until("some of the first reply", chunks(30))
	srv.stop()
	srv = startChild(t, dataDir, port)
	f.until("the first run's end", ends(first))
	if !closedWith(1001) {
		t.Errorf("reconnections after the graceful stop: %v, want one after 1001", reconnects)
	}

	// A crash while a reply streams.
	second := send("/slow 40")
	f.until("some of the second reply", chunks(30))
	srv.kill()
	startChild(t, dataDir, port) // stopped when the test ends
	f.until("the second run's end", ends(second))
	if !closedWith(1006) {
		t.Errorf("reconnections after the crash: %v, want one after the socket broke (1006)", reconnects)
	}

	// And a reply after both.
	third := send("after the restarts")
	f.until("the third run's end", ends(third))
	seen := f.seen

	// Every event once, in order, every delta where the text so far ends, and each
	// message's text as it completed.
	type pos struct {
		seq int64
		off int
	}
	var last pos
	text := texts{}
	finals := map[string]string{}
	for i, ev := range seen {
		cur, err := service.DecodeCursor(s.Id, ev.GetCursor())
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if p := (pos{cur.Seq, cur.Off}); i > 0 && (p.seq < last.seq || p.seq == last.seq && p.off <= last.off) {
			t.Fatalf("event %d (%T) at %v, not after the one before at %v: a duplicate", i, ev, p, last)
		} else {
			last = p
		}
		switch ev := ev.(type) {
		case *client.EventMessageChunk:
			text.add(t, ev)
		case *client.EventMessageCompleted:
			finals[ev.Message.Id] = ev.Message.Content
		}
	}
	if len(finals) != 3 {
		t.Errorf("%d replies completed, want 3", len(finals))
	}
	for id, streamed := range text {
		if finals[id] != streamed {
			t.Errorf("message %s: the chunks seen make %q, it completed as %q", id, streamed, finals[id])
		}
	}

	// A subscription from the start after everything sees the same events (a replay
	// folds chunks, so their text is compared) and nothing more: nothing was missed.
	replay := map[string]string{}
	var others, seenOthers []string
	for _, ev := range seen {
		if _, ok := ev.(*client.EventMessageChunk); !ok {
			seenOthers = append(seenOthers, ev.GetCursor())
		}
	}
	for ev, err := range c.Follow(ctx, s.Id, s.StreamCursor) {
		if err != nil {
			t.Fatal(err)
		}
		if ch, ok := ev.(*client.EventMessageChunk); ok {
			replay[ch.MessageId] += ch.Delta
		} else {
			others = append(others, ev.GetCursor())
		}
		if ev.GetCursor() == seen[len(seen)-1].GetCursor() {
			break
		}
	}
	if strings.Join(others, " ") != strings.Join(seenOthers, " ") {
		t.Errorf("the follower across restarts saw %d events besides chunks, a replay from the start %d", len(seenOthers), len(others))
	}
	for id, streamed := range text {
		if replay[id] != streamed {
			t.Errorf("message %s: replayed %q, followed %q", id, replay[id], streamed)
		}
	}
}

// examples/client, built as a program, runs against a real server: it sends its message,
// asks the agent's question on its terminal, answers with the line it reads, and prints
// the reply.
func TestClientExampleProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a program")
	}
	bin := filepath.Join(t.TempDir(), "client")
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/client").CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/client: %v\n%s", err, out)
	}
	a := startApp(t, "memory", nil)
	ctx := clientContext(t, tgtest.Wait)
	cmd := exec.CommandContext(ctx, bin, "-server", a.URL, "/ask What is your name?")
	cmd.Stdin = strings.NewReader("Ada\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("examples/client: %v\n%s", err, out)
	}
	want := "What is your name?\n> You answered \"Ada\". Thank you!\n"
	if string(out) != want {
		t.Errorf("examples/client printed:\n%s\nwant:\n%s", out, want)
	}
}

// TestClientTree: the Go client edits, regenerates, selects branches, forks, queues
// with a per-message policy and cancels a queued run, and follows BranchSelected.
func TestClientTree(t *testing.T) {
	a := startApp(t, "sqlite", nil)
	ctx := clientContext(t, 2*tgtest.Wait)
	c := newGuestClient(t, ctx, a.URL)
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	next, stop := iter.Pull2(c.Follow(ctx, s.Id, s.StreamCursor))
	defer stop()
	var leaf string
	until := func(what string, done func(client.Event) bool) {
		t.Helper()
		for {
			ev, err, ok := next()
			if !ok || err != nil {
				t.Fatalf("following, waiting for %s: %v", what, err)
			}
			if b, ok := ev.(*client.EventBranchSelected); ok {
				leaf = b.LeafId
			}
			if done(ev) {
				return
			}
		}
	}
	runEnds := func(run string) func(client.Event) bool {
		return func(ev client.Event) bool { _, end := runEndOf(ev, run); return end }
	}
	sent, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "one"})
	if err != nil {
		t.Fatal(err)
	}
	until("the first run's end", runEnds(sent.Run.Id))

	edited, err := c.EditMessage(ctx, sent.Message.Id, "one, edited")
	if err != nil {
		t.Fatal(err)
	}
	if edited.Message.ParentId != nil {
		t.Fatalf("the edit of a first message has parent %v", *edited.Message.ParentId)
	}
	until("the edit's run end", runEnds(edited.Run.Id))
	if leaf != edited.Message.Id {
		t.Fatalf("BranchSelected named %q, want the edit %s", leaf, edited.Message.Id)
	}
	msgs, _, err := c.Messages(ctx, s.Id)
	if err != nil || len(msgs) != 2 || msgs[0].Id != edited.Message.Id || msgs[1].ParentId == nil || *msgs[1].ParentId != edited.Message.Id {
		t.Fatalf("the branch after the edit: %+v %v", msgs, err)
	}
	run, err := c.Regenerate(ctx, msgs[1].Id)
	if err != nil {
		t.Fatal(err)
	}
	until("the regeneration's end", runEnds(run.Id))
	if _, err := c.SelectBranch(ctx, sent.Message.Id); err != nil {
		t.Fatal(err)
	}
	until("the switch back", func(ev client.Event) bool { _, ok := ev.(*client.EventBranchSelected); return ok })
	back, _, err := c.Messages(ctx, s.Id)
	if err != nil || len(back) != 2 || back[0].Id != sent.Message.Id || leaf != back[1].Id {
		t.Fatalf("the first version's branch: %+v %v (BranchSelected named %s)", back, err, leaf)
	}
	fork, err := c.ForkSession(ctx, back[1].Id, "forked from Go")
	if err != nil || fork.Title != "forked from Go" || fork.Id == s.Id {
		t.Fatalf("fork %+v %v", fork, err)
	}

	// A queued message, cancelled before it starts.
	slow, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "/slow 30"})
	if err != nil {
		t.Fatal(err)
	}
	queue := client.BusyPolicyEnqueue
	queued, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "later", BusyPolicy: &queue})
	if err != nil || queued.Run.Status != client.RunStatusQueued {
		t.Fatalf("queued %+v %v", queued, err)
	}
	now, err := c.Session(ctx, s.Id)
	if err != nil || len(now.QueuedRuns) != 1 || now.QueuedRuns[0].Id != queued.Run.Id {
		t.Fatalf("the queue: %+v %v", now, err)
	}
	cancelled, err := c.StopRun(ctx, s.Id, queued.Run.Id)
	if err != nil || cancelled == nil || cancelled.Status != client.RunStatusCancelled {
		t.Fatalf("cancelling the queued run: %+v %v", cancelled, err)
	}
	if _, err := c.CancelRun(ctx, s.Id); err != nil {
		t.Fatal(err)
	}
	until("the slow run's end", runEnds(slow.Run.Id))
}
