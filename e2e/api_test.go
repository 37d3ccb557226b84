package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service"
)

func TestStreamedReplyMatchesStoredMessage(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		_, c, sid, _, evs := watchedSession(t, store)
		_, run := c.Send(sid, "hello there, agent")
		evs.Until("run completes", tgtest.RunEnds(run))

		var reply *tgtest.Message
		for _, ev := range evs.All {
			if ev.Typename == "MessageCompleted" && ev.Message.Role == "ASSISTANT" {
				reply = ev.Message
			}
		}
		if reply == nil {
			t.Fatal("no MessageCompleted for the reply")
		}
		if got, want := tgtest.Text(evs.All)[reply.ID], reply.Content; got != want {
			t.Errorf("concatenated deltas = %q, stored content %q", got, want)
		}
		if !strings.Contains(reply.Content, "hello there, agent") || reply.Status != "COMPLETE" {
			t.Errorf("reply = %+v", reply)
		}
		msgs := c.Messages(sid)
		if len(msgs) != 2 || msgs[0].Role != "USER" || msgs[1].Content != reply.Content {
			t.Errorf("history = %+v", msgs)
		}
		// Every subscriber sees one order: a second socket replaying from the start agrees.
		ws2 := c.Connect("graphql-ws")
		_, replay := ws2.Stream(sid, cursorZero(sid))
		replay.Until("run completes", tgtest.RunEnds(run))
		if got, want := tgtest.Text(replay.All)[reply.ID], reply.Content; got != want {
			t.Errorf("replayed text = %q, want %q", got, want)
		}
	})
}

// cursorZero returns the stream cursor of a session before its first event. Cursors are
// opaque to clients; tests may know their shape.
func cursorZero(sid string) string {
	return service.EncodeCursor(sid, service.Cursor{})
}

func TestUsersCannotSeeEachOthersData(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		a := startApp(t, store, nil)
		alice, bob := guest(t, a), guest(t, a)
		sid := alice.CreateSession(nil)
		ws := alice.Connect("graphql-transport-ws")
		_, evs := ws.Stream(sid, alice.Cursor(sid))
		_, run := alice.Send(sid, "/ask secret?")
		q := evs.Until("question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })
		missing := "00000000-0000-4000-8000-000000000000"

		// Bob sees nothing of Alice's, and her IDs behave like IDs that do not exist.
		var list struct{ Sessions struct{ Edges []any } }
		bob.Must(`{ sessions { edges { cursor } } }`, nil, &list)
		if len(list.Sessions.Edges) != 0 {
			t.Errorf("bob lists %d sessions", len(list.Sessions.Edges))
		}
		for _, id := range []string{sid, missing} {
			var one struct{ Session *struct{ ID string } }
			bob.Must(`query($s: ID!){ session(id: $s){ id } }`, map[string]any{"s": id}, &one)
			if one.Session != nil {
				t.Errorf("bob reads session %s", id)
			}
		}
		ops := []struct {
			name, query string
			vars        func(id string) map[string]any
		}{
			{"addMessage", `mutation($s: ID!){ addMessage(input:{sessionId:$s, content:"hi"}){ run { id } } }`, func(id string) map[string]any { return map[string]any{"s": id} }},
			{"cancelRun", `mutation($s: ID!){ cancelRun(sessionId:$s){ id } }`, func(id string) map[string]any { return map[string]any{"s": id} }},
			{"rename", `mutation($s: ID!){ renameTalkSession(input:{id:$s, title:"x"}){ id } }`, func(id string) map[string]any { return map[string]any{"s": id} }},
			{"delete", `mutation($s: ID!){ deleteTalkSession(id:$s) }`, func(id string) map[string]any { return map[string]any{"s": id} }},
			{"respond", `mutation($q: ID!){ respondToQuestion(input:{questionId:$q, answer:"x"}){ run { id } } }`, func(id string) map[string]any {
				if id == sid {
					return map[string]any{"q": q.Question.ID}
				}
				return map[string]any{"q": id}
			}},
		}
		for _, op := range ops {
			theirs := bob.Do(op.query, op.vars(sid))
			none := bob.Do(op.query, op.vars(missing))
			if theirs.Code() != "NOT_FOUND" || none.Code() != "NOT_FOUND" || theirs.Errors[0].Message != none.Errors[0].Message {
				t.Errorf("%s: on alice's = %+v, on a missing one = %+v", op.name, theirs.Errors, none.Errors)
			}
		}
		bws := bob.Connect("graphql-transport-ws")
		_, bevs := bws.Stream(sid, "")
		if _, ok := bevs.TryNext(tgtest.Wait); ok || len(bevs.Err) == 0 || bevs.Err[0].Code() != "NOT_FOUND" {
			t.Errorf("bob's subscription: errors %+v", bevs.Err)
		}
		// Alice's run was untouched by all of that.
		alice.Must(`mutation($q: ID!){ respondToQuestion(input:{questionId:$q, answer:"blue"}){ run { id } } }`, map[string]any{"q": q.Question.ID}, nil)
		end := evs.Until("run ends", tgtest.RunEnds(run))
		if end.Run.Status != "COMPLETED" {
			t.Errorf("alice's run ended %s", end.Run.Status)
		}
	})
}

func TestNewMessageInterruptsBusySession(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		_, c, sid, _, evs := watchedSession(t, store)
		_, first := c.Send(sid, "/slow 200")
		evs.Until("a chunk", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" })
		_, second := c.Send(sid, "hello again")

		end := evs.Until("first run ends", tgtest.RunEnds(first))
		if end.Run.Status != "INTERRUPTED" {
			t.Fatalf("first run ended %s, want INTERRUPTED", end.Run.Status)
		}
		end = evs.Until("second run ends", tgtest.RunEnds(second))
		if end.Run.Status != "COMPLETED" {
			t.Fatalf("second run ended %s, want COMPLETED", end.Run.Status)
		}
		msgs := c.Messages(sid)
		if len(msgs) != 4 {
			t.Fatalf("history has %d messages: %+v", len(msgs), msgs)
		}
		partial := msgs[1]
		if partial.Status != "INTERRUPTED" || !strings.HasPrefix(partial.Content, "chunk 1. ") || partial.RunID != first {
			t.Errorf("partial reply = %+v", partial)
		}
		if msgs[2].Content != "hello again" || msgs[3].Status != "COMPLETE" || msgs[3].RunID != second {
			t.Errorf("after the interruption: %+v", msgs[2:])
		}
	})
}

func TestCancelRunStopsSlowRunKeepingPartialReply(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		_, c, sid, _, evs := watchedSession(t, store)
		_, run := c.Send(sid, "/slow 200")
		evs.Until("two chunks", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" && e.Offset > 0 })
		if r := c.Cancel(sid); r == nil || r.ID != run || r.Status != "CANCELLED" {
			t.Fatalf("cancelRun = %+v", r)
		}
		end := evs.Until("run ends", tgtest.RunEnds(run))
		if end.Run.Status != "CANCELLED" {
			t.Errorf("run ended %s", end.Run.Status)
		}
		msgs := c.Messages(sid)
		if len(msgs) != 2 || msgs[1].Status != "INTERRUPTED" || !strings.HasPrefix(msgs[1].Content, "chunk 1. chunk 2.") {
			t.Errorf("history = %+v", msgs)
		}
		if got := tgtest.Text(evs.All)[msgs[1].ID]; got != msgs[1].Content {
			t.Errorf("streamed %q, kept %q", got, msgs[1].Content)
		}
		// Nothing runs any more: cancelling again answers null.
		if r := c.Cancel(sid); r != nil {
			t.Errorf("second cancelRun = %+v, want null", r)
		}
	})
}

func TestAnsweredQuestionWakesTheSameRun(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		_, c, sid, _, evs := watchedSession(t, store)
		_, run := c.Send(sid, "/ask favourite colour?")
		q := evs.Until("question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })
		if q.Question.Prompt != "favourite colour?" || q.Question.RunID != run {
			t.Fatalf("question = %+v", q.Question)
		}
		var sess struct {
			Session struct {
				Status          string
				ActiveRun       struct{ ID, Status string }
				PendingQuestion *struct{ ID string }
			}
		}
		c.Must(`query($s: ID!){ session(id: $s){ status activeRun { id status } pendingQuestion { id } } }`, map[string]any{"s": sid}, &sess)
		if sess.Session.Status != "WAITING_FOR_INPUT" || sess.Session.ActiveRun.Status != "WAITING_FOR_INPUT" || sess.Session.PendingQuestion == nil || sess.Session.PendingQuestion.ID != q.Question.ID {
			t.Fatalf("session while waiting = %+v", sess.Session)
		}
		respond := `mutation($q: ID!, $a: String!){ respondToQuestion(input:{questionId:$q, answer:$a}){ question { answer } run { id status } } }`
		var out struct {
			RespondToQuestion struct {
				Question struct{ Answer string }
				Run      struct{ ID, Status string }
			}
		}
		c.Must(respond, map[string]any{"q": q.Question.ID, "a": "teal"}, &out)
		if out.RespondToQuestion.Run.ID != run || out.RespondToQuestion.Question.Answer != "teal" {
			t.Errorf("respond = %+v", out)
		}
		end := evs.Until("run ends", tgtest.RunEnds(run))
		if end.Run.Status != "COMPLETED" {
			t.Fatalf("run ended %s", end.Run.Status)
		}
		msgs := c.Messages(sid)
		kinds := []string{}
		for _, m := range msgs {
			kinds = append(kinds, m.Role+"/"+m.Kind)
		}
		if got, want := strings.Join(kinds, " "), "USER/TEXT ASSISTANT/QUESTION USER/ANSWER ASSISTANT/TEXT"; got != want {
			t.Fatalf("history kinds = %s, want %s", got, want)
		}
		if !strings.Contains(msgs[3].Content, "teal") {
			t.Errorf("reply %q does not use the answer", msgs[3].Content)
		}
		if r := c.Do(respond, map[string]any{"q": q.Question.ID, "a": "red"}); r.Code() != "CONFLICT" {
			t.Errorf("second answer: %+v, want CONFLICT", r.Errors)
		}
	})
}

func TestResumeWithCursorGivesExactlyTheMissedEvents(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		_, c, sid, ws, evs := watchedSession(t, store)
		_, run := c.Send(sid, "/slow 30")
		evs.Until("a few chunks", func(e tgtest.Event) bool { return e.Typename == "MessageChunk" && e.Offset > 20 })
		ws.Close()
		last := evs.All[len(evs.All)-1].Cursor

		// A second observer that never disconnected sees the whole stream.
		ws3 := c.Connect("graphql-transport-ws")
		_, whole := ws3.Stream(sid, cursorZero(sid))

		ws2 := c.Connect("graphql-transport-ws")
		_, rest := ws2.Stream(sid, last)
		rest.Until("run ends", tgtest.RunEnds(run))
		whole.Until("run ends", tgtest.RunEnds(run))

		seen := map[string]bool{}
		for _, ev := range append(append([]tgtest.Event{}, evs.All...), rest.All...) {
			if seen[ev.Cursor] {
				t.Fatalf("event %s %s delivered twice", ev.Typename, ev.Cursor)
			}
			seen[ev.Cursor] = true
		}
		joined := append(append([]tgtest.Event{}, evs.All...), rest.All...)
		if got, want := len(joined), len(whole.All); got != want {
			t.Errorf("before+after disconnect = %d events, an uninterrupted stream = %d", got, want)
		}
		msgs := c.Messages(sid)
		if got, want := tgtest.Text(joined)[msgs[1].ID], msgs[1].Content; got != want {
			t.Errorf("text across the reconnect = %q, want %q", got, want)
		}
	})
}

func TestIdempotencyKeyMakesOneMessageAndOneRun(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		a := startApp(t, store, nil)
		c := guest(t, a)
		sid := c.CreateSession(map[string]any{"busyPolicy": "ENQUEUE"})
		add := `mutation($s: ID!, $k: String){ addMessage(input:{sessionId:$s, content:"once", idempotencyKey:$k}){ message { id } run { id } } }`
		type payload struct {
			AddMessage struct {
				Message struct{ ID string }
				Run     struct{ ID string }
			}
		}
		var one, two payload
		c.Must(add, map[string]any{"s": sid, "k": "key-1"}, &one)
		c.Must(add, map[string]any{"s": sid, "k": "key-1"}, &two)
		if one != two {
			t.Errorf("retry answered %+v, first call %+v", two, one)
		}
		if users := userMessages(c, sid); users != 1 {
			t.Errorf("%d user messages stored, want 1", users)
		}
		// The same key for different content is a conflict, not a silent replay.
		r := c.Do(`mutation($s: ID!){ addMessage(input:{sessionId:$s, content:"other", idempotencyKey:"key-1"}){ run { id } } }`, map[string]any{"s": sid})
		if r.Code() != "CONFLICT" {
			t.Errorf("reused key with other content: %+v", r.Errors)
		}
	})
}

func TestAgentPanicFailsOnlyItsRun(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		_, c, sid, _, evs := watchedSession(t, store)
		_, run := c.Send(sid, "/panic")
		end := evs.Until("run ends", tgtest.RunEnds(run))
		if end.Run.Status != "FAILED" || end.Run.Error == "" || strings.Contains(end.Run.Error, "goroutine") {
			t.Fatalf("panicking run = %+v", end.Run)
		}
		_, next := c.Send(sid, "still there?")
		if end := evs.Until("next run ends", tgtest.RunEnds(next)); end.Run.Status != "COMPLETED" {
			t.Fatalf("next run ended %s", end.Run.Status)
		}
		_, failing := c.Send(sid, "/fail")
		end = evs.Until("failing run ends", tgtest.RunEnds(failing))
		if end.Run.Status != "FAILED" || !strings.Contains(end.Run.Error, "failed") {
			t.Errorf("/fail run = %+v", end.Run)
		}
	})
}

func TestBadInputGetsClearCodeAndStoresNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		a := startApp(t, store, func(c *app.Config) { c.Service.MaxMessageBytes = 100 })
		c := guest(t, a)
		sid := c.CreateSession(nil)
		add := `mutation($s: ID!, $c: String!){ addMessage(input:{sessionId:$s, content:$c}){ run { id } } }`
		cases := []struct {
			name, query string
			vars        map[string]any
			code        string
		}{
			{"empty content", add, map[string]any{"s": sid, "c": ""}, "BAD_USER_INPUT"},
			{"blank content", add, map[string]any{"s": sid, "c": "  \n "}, "BAD_USER_INPUT"},
			{"oversized content", add, map[string]any{"s": sid, "c": strings.Repeat("x", 101)}, "BAD_USER_INPUT"},
			{"malformed session ID", add, map[string]any{"s": "nope", "c": "hi"}, "BAD_USER_INPUT"},
			{"unknown session ID", add, map[string]any{"s": "00000000-0000-4000-8000-000000000001", "c": "hi"}, "NOT_FOUND"},
			{"bad sessions cursor", `{ sessions(after: "zzz") { edges { cursor } } }`, nil, "BAD_USER_INPUT"},
			{"negative page", `{ sessions(first: -1) { edges { cursor } } }`, nil, "BAD_USER_INPUT"},
			{"bad messages cursor", `query($s: ID!){ session(id:$s){ messages(after: "%%%") { edges { cursor } } } }`, map[string]any{"s": sid}, "BAD_USER_INPUT"},
			{"unknown agent", `mutation{ createTalkSession(input:{settings:{agent:"nobody"}}){ id } }`, nil, "BAD_USER_INPUT"},
			{"temperature out of range", `mutation{ createTalkSession(input:{settings:{temperature: 9}}){ id } }`, nil, "BAD_USER_INPUT"},
			{"overlong title", `mutation($t: String){ createTalkSession(input:{title:$t}){ id } }`, map[string]any{"t": strings.Repeat("t", 201)}, "BAD_USER_INPUT"},
			{"empty answer", `mutation{ respondToQuestion(input:{questionId:"00000000-0000-4000-8000-000000000001", answer:""}){ run { id } } }`, nil, "BAD_USER_INPUT"},
			{"unknown question", `mutation{ respondToQuestion(input:{questionId:"00000000-0000-4000-8000-000000000001", answer:"x"}){ run { id } } }`, nil, "NOT_FOUND"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := c.Do(tc.query, tc.vars)
				if r.Code() != tc.code {
					t.Errorf("errors = %+v, want code %s", r.Errors, tc.code)
				}
				if len(r.Errors) > 0 && r.Errors[0].Message == "" {
					t.Error("error without a message")
				}
			})
		}
		ws := c.Connect("graphql-transport-ws")
		for _, cur := range []string{"garbage", cursorZero("00000000-0000-4000-8000-000000000009")} {
			_, evs := ws.Stream(sid, cur)
			if _, ok := evs.TryNext(tgtest.Wait); ok || len(evs.Err) == 0 || evs.Err[0].Code() != "BAD_USER_INPUT" {
				t.Errorf("stream after %q: errors %+v", cur, evs.Err)
			}
		}
		if msgs := c.Messages(sid); len(msgs) != 0 {
			t.Errorf("bad input stored %d messages", len(msgs))
		}
		var list struct{ Sessions struct{ Edges []any } }
		c.Must(`{ sessions { edges { cursor } } }`, nil, &list)
		if len(list.Sessions.Edges) != 1 {
			t.Errorf("bad input created sessions: %d listed", len(list.Sessions.Edges))
		}

	})
}

func TestUntitledSessionIsNamedAfterItsFirstMessage(t *testing.T) {
	a := startApp(t, "memory", nil)
	c := guest(t, a)
	var out struct{ CreateTalkSession struct{ ID, Title string } }
	c.Must(`mutation{ createTalkSession { id title } }`, nil, &out)
	sid := out.CreateTalkSession.ID
	ws := c.Connect("graphql-transport-ws")
	_, evs := ws.Stream(sid, c.Cursor(sid))
	c.Send(sid, "plan a   trip to Lisbon")
	evs.Until("SessionUpdated", func(e tgtest.Event) bool { return e.Typename == "SessionUpdated" })
	var got struct{ Session struct{ Title string } }
	c.Must(`query($s: ID!){ session(id: $s){ title } }`, map[string]any{"s": sid}, &got)
	if got.Session.Title != "plan a trip to Lisbon" {
		t.Errorf("title = %q", got.Session.Title)
	}
}

func TestNewMessageOrStopWithdrawsAPendingQuestion(t *testing.T) {
	_, c, sid, _, evs := watchedSession(t, "memory")
	respond := `mutation($q: ID!){ respondToQuestion(input:{questionId:$q, answer:"late"}){ run { id } } }`
	pending := `query($s: ID!){ session(id: $s){ status pendingQuestion { id } } }`
	type view struct {
		Session struct {
			Status          string
			PendingQuestion *struct{ ID string }
		}
	}

	// A new message interrupts the waiting run and withdraws its question.
	_, asking := c.Send(sid, "/ask first?")
	q := evs.Until("question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })
	_, next := c.Send(sid, "never mind")
	if e := evs.Until("asking run ends", tgtest.RunEnds(asking)); e.Run.Status != "INTERRUPTED" {
		t.Errorf("waiting run ended %s, want INTERRUPTED", e.Run.Status)
	}
	evs.Until("next run ends", tgtest.RunEnds(next))
	var v view
	c.Must(pending, map[string]any{"s": sid}, &v)
	if v.Session.PendingQuestion != nil || v.Session.Status != "IDLE" {
		t.Errorf("after the interruption: %+v", v.Session)
	}
	if r := c.Do(respond, map[string]any{"q": q.Question.ID}); r.Code() != "CONFLICT" {
		t.Errorf("answering a withdrawn question: %+v", r.Errors)
	}

	// Stop ends a run blocked waiting for an answer.
	_, asking = c.Send(sid, "/ask second?")
	q = evs.Until("question", func(e tgtest.Event) bool { return e.Typename == "QuestionAsked" })
	c.Cancel(sid)
	if e := evs.Until("run ends", tgtest.RunEnds(asking)); e.Run.Status != "CANCELLED" {
		t.Errorf("stopped waiting run ended %s", e.Run.Status)
	}
	if r := c.Do(respond, map[string]any{"q": q.Question.ID}); r.Code() != "CONFLICT" {
		t.Errorf("answering after stop: %+v", r.Errors)
	}
}

// A run can be read back by its ID, with why it failed and what it cost; another user's
// run is null, like a missing one.
func TestRunQueryShowsErrorAndUsage(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		_, c, sid, _, evs := watchedSession(t, store)
		const q = `query($r: ID!){ run(id: $r){ id status error agent usage { inputTokens outputTokens } } }`
		type runOut struct {
			Run *struct {
				ID, Status, Agent string
				Error             *string
				Usage             *struct{ InputTokens, OutputTokens int }
			}
		}
		_, ok := c.Send(sid, "three words here")
		evs.Until("run completes", tgtest.RunEnds(ok))
		var out runOut
		c.Must(q, map[string]any{"r": ok}, &out)
		if out.Run == nil || out.Run.Status != "COMPLETED" || out.Run.Agent != "demo" || out.Run.Error != nil {
			t.Fatalf("completed run = %+v", out.Run)
		}
		// "You said: three words here": five words out; the history's three words in.
		if u := out.Run.Usage; u == nil || u.InputTokens != 3 || u.OutputTokens != 5 {
			t.Errorf("usage = %+v, want 3 in, 5 out", u)
		}

		_, failed := c.Send(sid, "/fail")
		evs.Until("run fails", tgtest.RunEnds(failed))
		c.Must(q, map[string]any{"r": failed}, &out)
		if out.Run == nil || out.Run.Status != "FAILED" || out.Run.Error == nil || !strings.Contains(*out.Run.Error, "failed, as you asked") {
			t.Errorf("failed run = %+v", out.Run)
		}
		var hist struct {
			Session struct {
				Messages struct {
					Edges []struct {
						Node struct {
							Status string
							Error  *string
						}
					}
				}
			}
		}
		c.Must(`query($s: ID!){ session(id: $s){ messages(last: 1){ edges { node { status error } } } } }`, map[string]any{"s": sid}, &hist)
		if e := hist.Session.Messages.Edges; len(e) != 1 || e[0].Node.Status != "FAILED" || e[0].Node.Error == nil || *e[0].Node.Error != *out.Run.Error {
			t.Errorf("failed message in the history = %+v, want FAILED with the run's error", e)
		}

		stranger := tgtest.Guest(t, c.Base)
		var none runOut
		stranger.Must(q, map[string]any{"r": ok}, &none)
		if none.Run != nil {
			t.Errorf("another user's run = %+v, want null", none.Run)
		}
	})
}

// What one user keeps is bounded: past the sessions or bytes a user may keep, creating or
// writing answers RATE_LIMITED with a reason, and deleting a session makes room again.
func TestPerUserStorageQuota(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		a := startApp(t, store, func(c *app.Config) {
			c.Service.MaxSessionsPerUser = 2
			c.Service.MaxUserBytes = 400
		})
		c := guest(t, a)
		s1 := c.CreateSession(nil)
		s2 := c.CreateSession(nil)
		r := c.Do(`mutation{ createTalkSession(input:{title:"third"}){ id } }`, nil)
		if r.Code() != "RATE_LIMITED" || !strings.Contains(r.Errors[0].Message, "sessions") {
			t.Fatalf("a third session: %+v, want RATE_LIMITED about sessions", r.Errors)
		}
		const add = `mutation($s: ID!, $c: String!){ addMessage(input:{sessionId:$s, content:$c}){ message { id } } }`
		if r := c.Do(add, map[string]any{"s": s1, "c": strings.Repeat("a", 300)}); len(r.Errors) > 0 {
			t.Fatalf("a message within the quota: %+v", r.Errors)
		}
		r = c.Do(add, map[string]any{"s": s2, "c": strings.Repeat("b", 300)})
		if r.Code() != "RATE_LIMITED" || !strings.Contains(r.Errors[0].Message, "MiB") {
			t.Fatalf("a message past the quota: %+v, want RATE_LIMITED about size", r.Errors)
		}
		// Another user is not held back.
		other := guest(t, a)
		sid := other.CreateSession(nil)
		// Rewriting a system prompt over and over counts too: each version stays in the
		// session's log (the review grew the database by 640 KB/s this way).
		const set = `mutation($s: ID!, $p: String!){ updateTalkSessionSettings(input:{id:$s, settings:{systemPrompt:$p}}){ id } }`
		for i := 0; ; i++ {
			r := other.Do(set, map[string]any{"s": sid, "p": fmt.Sprintf("%d %s", i, strings.Repeat("p", 100))})
			if len(r.Errors) == 0 {
				if i > 4 {
					t.Fatalf("%d rewrites of a 100-byte prompt within a quota of 400 bytes", i+1)
				}
				continue
			}
			wantCode(t, "a rewrite past the quota", r, "RATE_LIMITED", "MiB")
			break
		}
		c.Must(`mutation($s: ID!){ deleteTalkSession(id: $s) }`, map[string]any{"s": s1}, nil)
		if r := c.Do(`mutation{ createTalkSession(input:{title:"again"}){ id } }`, nil); len(r.Errors) > 0 {
			t.Fatalf("no room after deleting a session: %+v", r.Errors)
		}
	})
}

// A SessionUpdated event shows the session as the event left it, even when replayed after
// later changes; an update that changes nothing writes nothing; a tool call the agent gave
// no ID of its own has callId null, and a withdrawn question says so.
func TestSessionUpdatedIsASnapshotAndEmptyUpdatesWriteNothing(t *testing.T) {
	a := startApp(t, "sqlite", nil)
	c := guest(t, a)
	sid := c.CreateSession(nil)
	from := c.Cursor(sid)
	const rename = `mutation($s: ID!, $t: String!){ renameTalkSession(input: {id: $s, title: $t}){ title updatedAt streamCursor } }`
	var first, second, again struct {
		RenameTalkSession struct{ Title, UpdatedAt, StreamCursor string }
	}
	c.Must(rename, map[string]any{"s": sid, "t": "first"}, &first)
	c.Must(rename, map[string]any{"s": sid, "t": "second"}, &second)
	c.Must(rename, map[string]any{"s": sid, "t": "second"}, &again)
	if again.RenameTalkSession != second.RenameTalkSession {
		t.Errorf("renaming to the same title: %+v, then %+v", second.RenameTalkSession, again.RenameTalkSession)
	}
	if got := c.Cursor(sid); got != second.RenameTalkSession.StreamCursor {
		t.Errorf("the log moved on a rename that changed nothing: %s, want %s", got, second.RenameTalkSession.StreamCursor)
	}

	// Replayed from the start, the first SessionUpdated still says "first".
	ws := c.Connect("graphql-transport-ws")
	_, frames := ws.Subscribe(`subscription($s: ID!, $a: String){ messageStream(sessionId: $s, after: $a){
		__typename cursor ... on SessionUpdated { session { title streamCursor } } } }`, map[string]any{"s": sid, "a": from})
	var titles []string
	for len(titles) < 2 {
		select {
		case f, ok := <-frames:
			if !ok || f.Complete || len(f.Errors) > 0 {
				t.Fatalf("stream ended: %+v", f)
			}
			var p struct {
				MessageStream struct {
					Typename string `json:"__typename"`
					Cursor   string
					Session  *struct{ Title, StreamCursor string }
				}
			}
			if err := json.Unmarshal(f.Data, &p); err != nil {
				t.Fatal(err)
			}
			if ev := p.MessageStream; ev.Typename == "SessionUpdated" {
				titles = append(titles, ev.Session.Title)
				if ev.Session.StreamCursor != ev.Cursor {
					t.Errorf("SessionUpdated at %s shows streamCursor %s", ev.Cursor, ev.Session.StreamCursor)
				}
			}
		case <-time.After(tgtest.Wait):
			t.Fatalf("no SessionUpdated within %v; got %q", tgtest.Wait, titles)
		}
	}
	if titles[0] != "first" || titles[1] != "second" {
		t.Errorf("replayed titles %q, want [first second]", titles)
	}

	// The demo agent's tool call has no ID of the agent's own.
	_, evs := ws.Stream(sid, c.Cursor(sid))
	_, run := c.Send(sid, "/tool hello")
	evs.Until("run ends", tgtest.RunEnds(run))
	var out struct {
		Session struct {
			Messages struct {
				Edges []struct {
					Node struct {
						ToolCalls []struct {
							CallID *string
							Name   string
						}
					}
				}
			}
		}
	}
	c.Must(`query($s: ID!){ session(id: $s){ messages(last: 5){ edges { node { toolCalls { callId name } } } } } }`, map[string]any{"s": sid}, &out)
	calls := 0
	for _, e := range out.Session.Messages.Edges {
		for _, tc := range e.Node.ToolCalls {
			calls++
			if tc.CallID != nil {
				t.Errorf("tool call %s: callId %q, want null", tc.Name, *tc.CallID)
			}
		}
	}
	if calls == 0 {
		t.Error("no tool call in the history")
	}
}

// Every assistant message that ends gets a MessageCompleted over the socket, before its
// run's end, whatever ends it: a reply that completes, one interrupted by a newer message,
// one stopped, a run that fails before writing anything and one that fails halfway.
func TestEveryEndedMessageIsCompleted(t *testing.T) {
	halfway := service.RunnerFunc(func(ctx context.Context, req service.RunRequest, out service.Output) error {
		if err := out.Text("so far "); err != nil {
			return err
		}
		return service.Errorf(service.EUNAVAILABLE, "the agent gave up halfway")
	})
	eachStore(t, func(t *testing.T, store string) {
		a := startApp(t, store, func(c *app.Config) {
			c.Agents = func(a *service.Agents) { a.Register("halfway", "fails after some text", halfway) }
		})
		c := guest(t, a)
		ws := c.Connect("graphql-transport-ws")
		demo, halfwaySession := c.CreateSession(nil), c.CreateSession(map[string]any{"agent": "halfway"})
		_, evs := ws.Stream(demo, c.Cursor(demo))
		_, evs2 := ws.Stream(halfwaySession, c.Cursor(halfwaySession))

		// completed checks that run's one assistant message was completed with status,
		// content and error, before the run's end, which had runStatus.
		completed := func(evs *tgtest.Events, run, runStatus, status, content, errMsg string) {
			t.Helper()
			end := evs.Until("run "+run+" ends", tgtest.RunEnds(run))
			if end.Run.Status != runStatus {
				t.Errorf("run ended %s, want %s", end.Run.Status, runStatus)
			}
			var added, done []*tgtest.Message
			for _, ev := range evs.All {
				if ev.Message == nil || ev.Message.RunID != run || ev.Message.Role != "ASSISTANT" {
					continue
				}
				switch ev.Typename {
				case "MessageAdded":
					added = append(added, ev.Message)
				case "MessageCompleted":
					done = append(done, ev.Message)
				}
			}
			if len(added) != 1 || len(done) != 1 || added[0].ID != done[0].ID {
				t.Fatalf("run %s (%s): %d messages added, %d completed, want the same one", run, runStatus, len(added), len(done))
			}
			m := done[0]
			if m.Status != status || !strings.HasPrefix(m.Content, content) || m.Error != errMsg {
				t.Errorf("run %s (%s): MessageCompleted %s %q error %q, want %s %q… error %q", run, runStatus, m.Status, m.Content, m.Error, status, content, errMsg)
			}
		}
		firstChunk := func(evs *tgtest.Events, run string) {
			t.Helper()
			evs.Until("a chunk of "+run, func(ev tgtest.Event) bool {
				return ev.Typename == "MessageChunk" && len(evs.All) > 0 && messageOfRun(evs.All, ev.MessageID) == run
			})
		}

		_, run := c.Send(demo, "hi")
		completed(evs, run, "COMPLETED", "COMPLETE", "You said: hi", "")

		_, run = c.Send(demo, "/slow 1000")
		firstChunk(evs, run)
		_, next := c.Send(demo, "newer")
		completed(evs, run, "INTERRUPTED", "INTERRUPTED", "chunk 1.", "")
		completed(evs, next, "COMPLETED", "COMPLETE", "You said: newer", "")

		_, run = c.Send(demo, "/slow 1000")
		firstChunk(evs, run)
		c.Cancel(demo)
		completed(evs, run, "CANCELLED", "INTERRUPTED", "chunk 1.", "")

		_, run = c.Send(demo, "/fail")
		completed(evs, run, "FAILED", "FAILED", "", "The demo agent failed, as you asked.")

		_, run = c.Send(halfwaySession, "go")
		completed(evs2, run, "FAILED", "FAILED", "so far ", "the agent gave up halfway")
	})
}

// messageOfRun returns the run of the message id, from its MessageAdded among evs.
func messageOfRun(evs []tgtest.Event, id string) string {
	for _, ev := range evs {
		if ev.Typename == "MessageAdded" && ev.Message.ID == id {
			return ev.Message.RunID
		}
	}
	return ""
}
