package service_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/inmem"
)

// crashLog writes a session's log straight to a store, batch by batch, as a process that
// then crashed left it.
type crashLog struct {
	t     *testing.T
	store service.Store
	sess  *service.TalkSession
	seq   int64
	off   int // the Off of the cursor after the last event
	clock time.Time
}

func newCrashLog(t *testing.T, store service.Store, agent string) *crashLog {
	t.Helper()
	now := time.Now().UTC().Add(-time.Minute)
	sess := &service.TalkSession{ID: uuid.NewString(), UserID: "alice", Title: "before the crash",
		Settings: service.Settings{Agent: agent, BusyPolicy: service.BusyInterrupt}, CreatedAt: now, UpdatedAt: now}
	l := &crashLog{t: t, store: store, sess: sess, clock: now}
	l.write(&service.Batch{SessionID: sess.ID, Create: sess})
	return l
}

func (l *crashLog) now() time.Time {
	l.clock = l.clock.Add(time.Millisecond)
	return l.clock
}

// append writes events as one batch, numbering them after the log.
func (l *crashLog) append(evs ...*service.Event) {
	l.t.Helper()
	for _, ev := range evs {
		l.seq++
		ev.SessionID, ev.Seq = l.sess.ID, l.seq
		if ev.At.IsZero() {
			ev.At = l.now()
		}
		if ev.Type == service.EventMessageAdded {
			ev.Message.Seq = ev.Seq
		}
		l.off = service.CursorOf(ev).Off
	}
	l.write(&service.Batch{SessionID: l.sess.ID, Events: evs})
}

func (l *crashLog) write(b *service.Batch) {
	l.t.Helper()
	if errs := l.store.Append(context.Background(), []*service.Batch{b}); errs[0] != nil {
		l.t.Fatalf("Append: %v", errs[0])
	}
}

// cursor is the position after the last event written.
func (l *crashLog) cursor() string {
	return service.EncodeCursor(l.sess.ID, service.Cursor{Seq: l.seq, Off: l.off})
}

// userMessage writes a user message and its QUEUED run, then marks the run RUNNING.
func (l *crashLog) userMessage(content string) (*service.Message, *service.Run) {
	now := l.now()
	run := &service.Run{ID: uuid.NewString(), SessionID: l.sess.ID, UserID: "alice", Status: service.RunQueued, Agent: l.sess.Settings.Agent, CreatedAt: now}
	m := &service.Message{ID: uuid.NewString(), SessionID: l.sess.ID, Role: service.RoleUser, Kind: service.KindText, Content: content,
		Status: service.MessageComplete, RunID: run.ID, CreatedAt: now}
	added, queued := *m, *run
	l.append(&service.Event{Type: service.EventMessageAdded, Message: &added, At: now}, &service.Event{Type: service.EventRunStatusChanged, Run: &queued})
	m.Seq = added.Seq
	return m, run
}

func (l *crashLog) runStatus(run *service.Run, status service.RunStatus) {
	run.Status = status
	if status == service.RunRunning && run.StartedAt == nil {
		now := l.now()
		run.StartedAt = &now
	}
	snap := *run
	l.append(&service.Event{Type: service.EventRunStatusChanged, Run: &snap})
}

// reply announces an assistant message of run.
func (l *crashLog) reply(run *service.Run) *service.Message {
	m := &service.Message{ID: uuid.NewString(), SessionID: l.sess.ID, Role: service.RoleAssistant, Kind: service.KindText,
		Status: service.MessageStreaming, RunID: run.ID, CreatedAt: l.now()}
	added := *m
	l.append(&service.Event{Type: service.EventMessageAdded, Message: &added})
	m.Seq = added.Seq
	return m
}

// streamingRun writes a user message, its run RUNNING and the reply it was streaming when
// the process died: the deltas, as chunks from offset 0.
func (l *crashLog) streamingRun(content string, deltas ...string) (*service.Message, *service.Run, *service.Message) {
	m, run := l.userMessage(content)
	l.runStatus(run, service.RunRunning)
	reply := l.reply(run)
	l.chunks(service.EventMessageChunk, reply.ID, reply.ID, 0, deltas...)
	return m, run, reply
}

// chunks writes each delta as a chunk batch of the stream key, from offset.
func (l *crashLog) chunks(typ service.EventType, key, messageID string, offset int, deltas ...string) {
	for _, d := range deltas {
		l.append(&service.Event{Type: typ, Key: key, MessageID: messageID, Delta: d, Offset: offset})
		offset += utf8.RuneCountInString(d)
	}
}

func (l *crashLog) tool(run *service.Run, m *service.Message, name string) *service.ToolCall {
	c := &service.ToolCall{ID: uuid.NewString(), CallID: "call_1", RunID: run.ID, SessionID: l.sess.ID, MessageID: m.ID,
		Name: name, Arguments: "{}", Status: service.ToolRunning, StartedAt: l.now()}
	snap := *c
	l.append(&service.Event{Type: service.EventToolCallStarted, ToolCall: &snap})
	return c
}

// question completes m and asks, leaving run WAITING_FOR_INPUT, as Output.Ask does.
func (l *crashLog) question(run *service.Run, m *service.Message, content, prompt string) *service.Question {
	now := l.now()
	q := &service.Question{ID: uuid.NewString(), RunID: run.ID, SessionID: l.sess.ID, Prompt: prompt, AskedAt: now}
	qm := &service.Message{ID: uuid.NewString(), SessionID: l.sess.ID, Role: service.RoleAssistant, Kind: service.KindQuestion,
		Content: prompt, Status: service.MessageComplete, RunID: run.ID, QuestionID: q.ID, CreatedAt: now}
	var evs []*service.Event
	if m != nil {
		done := *m
		done.Content, done.Status = content, service.MessageComplete
		evs = append(evs, &service.Event{Type: service.EventMessageCompleted, Message: &done})
	}
	q1, q2 := *q, *q
	run.Status = service.RunWaitingForInput
	snap := *run
	evs = append(evs, &service.Event{Type: service.EventMessageAdded, Message: qm, Question: &q1},
		&service.Event{Type: service.EventQuestionAsked, Question: &q2},
		&service.Event{Type: service.EventRunStatusChanged, Run: &snap})
	l.append(evs...)
	return q
}

func TestRecoveryAfterACrash(t *testing.T) {
	t.Run("a RUNNING run ends INTERRUPTED with exactly the durable text, and its agent is not run again", func(t *testing.T) {
		store := inmem.New()
		l := newCrashLog(t, store, "puppet")
		m1, run, reply := l.streamingRun("tell me", "Hello ")
		mid := l.cursor() // a client saw this much
		l.chunks(service.EventMessageChunk, reply.ID, reply.ID, 6, "wör", "ld")
		crashed := l.cursor()

		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		if got := getRun(t, svc, alice, run.ID); got.Status != service.RunInterrupted || got.FinishedAt == nil {
			t.Errorf("run %s, finished %v; want INTERRUPTED", got.Status, got.FinishedAt)
		}
		h := history(t, svc, alice, l.sess.ID)
		if len(h) != 2 || h[1].ID != reply.ID || h[1].Content != "Hello wörld" || h[1].Status != service.MessageInterrupted {
			t.Fatalf("history after recovery: %+v", h)
		}
		sub, _ := subscribe(t, svc, l.sess.ID, crashed)
		evs := readAll(t, sub)
		if len(evs) != 2 || evs[0].Type != service.EventMessageCompleted || evs[0].Message.Content != "Hello wörld" || !runEnds(run.ID)(evs[1]) {
			t.Errorf("recovery wrote %s, want the message completed and the run ended", describe(evs))
		}
		// A client that had seen part of the text gets exactly the rest.
		sub, _ = subscribe(t, svc, l.sess.ID, mid)
		if got := continueText(t, "Hello ", readAll(t, sub), reply.ID); got != "Hello wörld" {
			t.Errorf("a client resuming inside the text reads %q", got)
		}
		p.idle(t)
		if v := view(t, svc, alice, l.sess.ID); v.Status != service.SessionIdle {
			t.Errorf("session %s after recovery", v.Status)
		}
		// The session goes on, on the whole history.
		send(t, svc, alice, l.sess.ID, "again")
		hist := p.next(t).req.History
		if len(hist) != 3 || hist[0].ID != m1.ID || hist[1].Content != "Hello wörld" || hist[1].Status != service.MessageInterrupted {
			t.Errorf("the next run's history %+v", hist)
		}
	})

	t.Run("a RUNNING run's running tool call ends FAILED, never run again, with its durable output", func(t *testing.T) {
		store := inmem.New()
		l := newCrashLog(t, store, "demo")
		_, run, reply := l.streamingRun("go", "Running: ")
		call := l.tool(run, reply, "shell")
		l.chunks(service.EventToolCallOutput, call.ID, reply.ID, 0, "line 1\n", "line 2\n")
		svc, _ := startService(t, setup{store: store})
		calls, err := svc.ToolCalls(alice, l.sess.ID, reply.ID)
		if err != nil || len(calls) != 1 {
			t.Fatalf("tool calls %v, %v", calls, err)
		}
		if c := calls[0]; c.Status != service.ToolFailed || c.Output != "line 1\nline 2\n" || c.FinishedAt == nil ||
			c.Error == nil || !strings.Contains(*c.Error, "not run again") {
			t.Errorf("tool call %s with output %q, error %v", c.Status, c.Output, c.Error)
		}
		if h := history(t, svc, alice, l.sess.ID); h[1].Content != "Running: " || h[1].Status != service.MessageInterrupted {
			t.Errorf("reply %s %q", h[1].Status, h[1].Content)
		}
	})

	t.Run("a RUNNING run that wrote nothing ends INTERRUPTED without a message", func(t *testing.T) {
		store := inmem.New()
		l := newCrashLog(t, store, "demo")
		_, run := l.userMessage("go")
		l.runStatus(run, service.RunRunning)
		svc, _ := startService(t, setup{store: store})
		if got := getRun(t, svc, alice, run.ID).Status; got != service.RunInterrupted {
			t.Errorf("run %s", got)
		}
		if h := history(t, svc, alice, l.sess.ID); len(h) != 1 {
			t.Errorf("%d messages, want only the user's", len(h))
		}
	})

	t.Run("a WAITING_FOR_INPUT run stays answerable and resumes on the answer", func(t *testing.T) {
		store := inmem.New()
		l := newCrashLog(t, store, "demo")
		_, run := l.userMessage("/ask Favourite colour?")
		l.runStatus(run, service.RunRunning)
		q := l.question(run, nil, "", "Favourite colour?")
		svc, _ := startService(t, setup{store: store})
		v := view(t, svc, alice, l.sess.ID)
		if v.Status != service.SessionWaitingForInput || v.ActiveRun == nil || v.ActiveRun.ID != run.ID || v.PendingQuestion == nil || v.PendingQuestion.ID != q.ID {
			t.Fatalf("after recovery: %s, run %+v, question %+v", v.Status, v.ActiveRun, v.PendingQuestion)
		}
		f := follow(t, svc, alice, l.sess.ID, "")
		if _, _, err := svc.Respond(alice, q.ID, "blue"); err != nil {
			t.Fatal(err)
		}
		evs := f.until(runEnds(run.ID))
		if got := lastEnd(t, evs).Status; got != service.RunCompleted {
			t.Errorf("run ended %s", got)
		}
		if got, want := replyOf(t, evs, run.ID).Content, `You answered "blue". Thank you!`; got != want {
			t.Errorf("reply %q, want %q", got, want)
		}
	})

	t.Run("the resumed run gets the history as its checkpoint, and a tool call running when the question was asked gets the answer as its result", func(t *testing.T) {
		store := inmem.New()
		l := newCrashLog(t, store, "puppet")
		_, run, reply := l.streamingRun("deploy", "Asking. ")
		call := l.tool(run, reply, "ask_user")
		q := l.question(run, reply, "Asking. ", "Which region?")
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		f := follow(t, svc, alice, l.sess.ID, "")
		if _, _, err := svc.Respond(alice, q.ID, "eu-west"); err != nil {
			t.Fatal(err)
		}
		tn := p.next(t)
		if tn.req.RunID != run.ID {
			t.Fatalf("run %s started, want the waiting one", tn.req.RunID)
		}
		var got []string
		for _, h := range tn.req.History {
			got = append(got, string(h.Kind)+":"+h.Content)
		}
		if want := []string{"TEXT:deploy", "TEXT:Asking. ", "QUESTION:Which region?", "ANSWER:eu-west"}; !equalStrings(got, want) {
			t.Fatalf("history %q, want %q", got, want)
		}
		calls := tn.req.History[1].ToolCalls
		if len(calls) != 1 || calls[0].ID != call.ID || calls[0].Status != service.ToolCompleted || calls[0].Result == nil || *calls[0].Result != "eu-west" {
			t.Errorf("the question's tool call %+v", calls)
		}
		tn.say(t, "Deploying to eu-west.")
		tn.finish(nil)
		evs := f.until(runEnds(run.ID))
		if got := lastEnd(t, evs).Status; got != service.RunCompleted {
			t.Errorf("the resumed run ended %s", got)
		}
		if got := replyOf(t, evs, run.ID).Content; got != "Deploying to eu-west." {
			t.Errorf("the resumed run's reply %q", got)
		}
	})

	t.Run("a recovered waiting run can be cancelled, withdrawing its question", func(t *testing.T) {
		store := inmem.New()
		l := newCrashLog(t, store, "demo")
		_, run := l.userMessage("/ask ok?")
		l.runStatus(run, service.RunRunning)
		q := l.question(run, nil, "", "ok?")
		svc, _ := startService(t, setup{store: store})
		r, err := svc.CancelRun(alice, l.sess.ID)
		if err != nil || r == nil || r.ID != run.ID || r.Status != service.RunCancelled {
			t.Fatalf("CancelRun: %+v, %v", r, err)
		}
		if stored, _ := svc.Question(alice, q.ID); !stored.Withdrawn {
			t.Error("the question was not withdrawn")
		}
		_, _, err = svc.Respond(alice, q.ID, "yes")
		wantCode(t, "answering afterwards", err, service.ECONFLICT)
	})

	t.Run("a new message interrupts a recovered waiting run", func(t *testing.T) {
		store := inmem.New()
		l := newCrashLog(t, store, "demo")
		_, run := l.userMessage("/ask ok?")
		l.runStatus(run, service.RunRunning)
		q := l.question(run, nil, "", "ok?")
		svc, _ := startService(t, setup{store: store})
		f := follow(t, svc, alice, l.sess.ID, "")
		_, r2 := send(t, svc, alice, l.sess.ID, "forget it")
		evs := f.until(runEnds(r2.ID))
		if got := getRun(t, svc, alice, run.ID).Status; got != service.RunInterrupted {
			t.Errorf("the waiting run is %s", got)
		}
		if stored, _ := svc.Question(alice, q.ID); !stored.Withdrawn {
			t.Error("the question was not withdrawn")
		}
		if got := replyOf(t, evs, r2.ID).Content; got != "You said: forget it" {
			t.Errorf("reply %q", got)
		}
	})

	t.Run("a QUEUED run behind a waiting one starts once that one ends", func(t *testing.T) {
		store := inmem.New()
		l := newCrashLog(t, store, "demo")
		_, r1 := l.userMessage("/ask ok?")
		l.runStatus(r1, service.RunRunning)
		q := l.question(r1, nil, "", "ok?")
		_, r2 := l.userMessage("two")
		svc, _ := startService(t, setup{store: store})
		if got := getRun(t, svc, alice, r2.ID).Status; got != service.RunQueued {
			t.Errorf("the queued run is %s while the first waits", got)
		}
		f := follow(t, svc, alice, l.sess.ID, "")
		if _, _, err := svc.Respond(alice, q.ID, "yes"); err != nil {
			t.Fatal(err)
		}
		evs := f.until(runEnds(r2.ID))
		if got := lastEnd(t, evs).Status; got != service.RunCompleted || count(evs, runIs(r1.ID, service.RunCompleted)) != 1 {
			t.Errorf("events %s, want both runs completed", describe(evs))
		}
	})

	t.Run("QUEUED runs start, in order", func(t *testing.T) {
		store := inmem.New()
		l := newCrashLog(t, store, "demo")
		_, r1 := l.userMessage("one")
		_, r2 := l.userMessage("two")
		crashed := l.cursor()
		svc, _ := startService(t, setup{store: store})
		f := follow(t, svc, alice, l.sess.ID, crashed)
		evs := f.until(runEnds(r2.ID))
		if got := count(evs, runIs(r1.ID, service.RunCompleted)); got != 1 {
			t.Fatalf("the first queued run did not complete before the second: %s", describe(evs))
		}
		ended := first(t, evs, service.EventRunStatusChanged, runEnds(r1.ID)).Seq
		started := first(t, evs, service.EventRunStatusChanged, runIs(r2.ID, service.RunRunning)).Seq
		if started < ended {
			t.Error("the second run started before the first ended")
		}
		// Each run reads the whole history; the demo answers the last message.
		if got := replyOf(t, evs, r2.ID).Content; got != "You said: two" {
			t.Errorf("second reply %q", got)
		}
	})
}

func TestNewServiceAfterClose(t *testing.T) {
	t.Run("a subscription resumed on the new service with its cursor goes on with no gap and no duplicate", func(t *testing.T) {
		store := inmem.New()
		svc, _ := startService(t, setup{store: store})
		sess := newSession(t, svc, alice, "", "")
		f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
		_, run := send(t, svc, alice, sess.ID, "one")
		old := f.until(runEnds(run.ID))
		svc.Close()
		if _, err := f.rest(); err != service.ErrShutdown {
			t.Fatalf("the subscription ended with %v", err)
		}
		cursor := f.cursor(sess.ID)

		next, _ := startService(t, setup{store: store})
		f2 := follow(t, next, alice, sess.ID, cursor)
		_, run2 := send(t, next, alice, sess.ID, "two")
		evs := f2.until(runEnds(run2.ID))
		if evs[0].Seq != old[len(old)-1].Seq+1 || evs[0].Type != service.EventMessageAdded {
			t.Errorf("the first event on the new service %s@%d, want the next", evs[0].Type, evs[0].Seq)
		}
		if h := history(t, next, alice, sess.ID); len(h) != 4 || h[1].Content != "You said: one" || h[3].Content != "You said: two" {
			t.Errorf("history %+v", h)
		}
	})

	t.Run("nothing is recovered from a clean stop but what Close left: runs already ended stay ended", func(t *testing.T) {
		store := inmem.New()
		p := newPuppet()
		svc, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p}})
		sess := newSession(t, svc, alice, "puppet", "")
		_, run := send(t, svc, alice, sess.ID, "go")
		p.next(t).say(t, "partial")
		svc.Close()
		p2 := newPuppet()
		next, _ := startService(t, setup{store: store, agents: map[string]service.Runner{"puppet": p2}})
		p2.idle(t)
		if got := getRun(t, next, alice, run.ID).Status; got != service.RunInterrupted {
			t.Errorf("run %s", got)
		}
		if h := history(t, next, alice, sess.ID); len(h) != 2 || h[1].Content != "partial" || h[1].Status != service.MessageInterrupted {
			t.Errorf("history %+v", h)
		}
	})
}

// A run that waits for a decision when its process stops is brought back by the next one
// without its agent: the reply it was writing (which holds the call waiting) ends there,
// COMPLETE with its durable text, and when the decision wakes the run its agent writes a
// reply of its own. Nothing is left STREAMING, whether the run then completes or is
// stopped.
func TestRecoveredWaitingRunLeavesNothingStreaming(t *testing.T) {
	for _, end := range []string{"approved", "stopped"} {
		t.Run(end, func(t *testing.T) {
			store := inmem.New()
			svc, _ := startService(t, setup{store: store})
			sess := newSession(t, svc, alice, "", "")
			f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
			_, run := send(t, svc, alice, sess.ID, "/approve kept once")
			asked := first(t, f.until(is(service.EventToolApprovalRequested)), service.EventToolApprovalRequested, nil)
			svc.Close()

			next, _ := startService(t, setup{store: store})
			v := view(t, next, alice, sess.ID)
			if len(v.PendingApprovals) != 1 || v.PendingApprovals[0].ID != asked.ToolCall.ID {
				t.Fatalf("after the restart the session waits on %+v", v.PendingApprovals)
			}
			for _, h := range history(t, next, alice, sess.ID) {
				if h.Status == service.MessageStreaming {
					t.Errorf("after the restart, before any decision, %s message %q is STREAMING", h.Role, h.Content)
				}
			}
			f2 := follow(t, next, alice, sess.ID, v.StreamCursor)
			if end == "approved" {
				if _, _, err := next.DecideToolCall(alice, service.Decision{ToolCallID: asked.ToolCall.ID, Decision: service.DecisionApprove}); err != nil {
					t.Fatal(err)
				}
			} else if _, err := next.CancelRun(alice, sess.ID); err != nil {
				t.Fatal(err)
			}
			f2.until(runEnds(run.ID))
			h := history(t, next, alice, sess.ID)
			for _, m := range h {
				if m.Status == service.MessageStreaming {
					t.Errorf("after the run's end %s message %q is STREAMING", m.Role, m.Content)
				}
			}
			if end == "approved" && h[len(h)-1].Content != "The echo tool printed: kept once" {
				t.Errorf("the woken run's reply: %+v", h[len(h)-1])
			}
			if s := view(t, next, alice, sess.ID).Status; s != service.SessionIdle {
				t.Errorf("session %s after the run", s)
			}
		})
	}
}
