package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/tgtest"
	"github.com/talkgraph/talkgraph/service"
)

// The conversation as a tree, end to end: editMessage, regenerate, selectBranch,
// forkSession, STEER, per-message policies and the visible queue, over HTTP and
// websockets against every store.

const (
	editMutation = `mutation($m: ID!, $c: String!){ editMessage(input: {messageId: $m, content: $c}){
		message { id parentId siblingIds } run { id status } } }`
	regenMutation  = `mutation($m: ID!){ regenerate(input: {messageId: $m}){ run { id status } } }`
	selectMutation = `mutation($m: ID!){ selectBranch(input: {messageId: $m}){ id messages(last: 100){ edges { node { id } } } } }`
	forkMutation   = `mutation($m: ID!, $t: String){ forkSession(input: {messageId: $m, title: $t}){ id title streamCursor
		messages(last: 10){ edges { node { id content runId } } } } }`
	sendPolicyMutation = `mutation($s: ID!, $c: String!, $p: BusyPolicy){ addMessage(input: {sessionId: $s, content: $c, busyPolicy: $p}){
		message { id parentId } run { id status } } }`
	queuedQuery = `query($s: ID!){ session(id: $s){ activeRun { id } queuedRuns { id status } } }`
	cancelRunID = `mutation($s: ID!, $r: ID){ cancelRun(sessionId: $s, runId: $r){ id status } }`
)

type editResult struct {
	EditMessage struct {
		Message struct {
			ID, ParentID string
			SiblingIDs   []string `json:"siblingIds"`
		}
		Run struct{ ID, Status string }
	}
}

func edit(c *tgtest.Client, msgID, content string) editResult {
	c.T.Helper()
	var out editResult
	c.Must(editMutation, map[string]any{"m": msgID, "c": content}, &out)
	return out
}

func regenerate(c *tgtest.Client, msgID string) (runID, status string) {
	c.T.Helper()
	var out struct {
		Regenerate struct{ Run struct{ ID, Status string } }
	}
	c.Must(regenMutation, map[string]any{"m": msgID}, &out)
	return out.Regenerate.Run.ID, out.Regenerate.Run.Status
}

func selectBranch(c *tgtest.Client, msgID string) {
	c.T.Helper()
	c.Must(selectMutation, map[string]any{"m": msgID}, nil)
}

func sendPolicy(c *tgtest.Client, sid, content, policy string) (msgID, runID, status string) {
	c.T.Helper()
	var out struct {
		AddMessage struct {
			Message struct{ ID string }
			Run     struct{ ID, Status string }
		}
	}
	c.Must(sendPolicyMutation, map[string]any{"s": sid, "c": content, "p": policy}, &out)
	return out.AddMessage.Message.ID, out.AddMessage.Run.ID, out.AddMessage.Run.Status
}

func ids(msgs []tgtest.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// checkBranch fails the test unless msgs is a path: each message's parent is the one
// before it, the first has none.
func checkBranch(t *testing.T, msgs []tgtest.Message) {
	t.Helper()
	for i, m := range msgs {
		want := ""
		if i > 0 {
			want = msgs[i-1].ID
		}
		if m.ParentID != want {
			t.Fatalf("message %d (%s %q) has parent %q, want %q; branch %+v", i, m.Role, m.Content, m.ParentID, want, msgs)
		}
	}
}

// rebuildBranch rebuilds the current branch from the events alone, as API.md tells a
// follower to: a message whose parent is the branch's last message extends the branch;
// BranchSelected names the new last message; the branch is the path up from it.
func rebuildBranch(evs []tgtest.Event) []string {
	parent := map[string]string{}
	leaf := ""
	for _, ev := range evs {
		switch ev.Typename {
		case "MessageAdded":
			parent[ev.Message.ID] = ev.Message.ParentID
			if ev.Message.ParentID == leaf {
				leaf = ev.Message.ID
			}
		case "BranchSelected":
			leaf = ev.LeafID
		}
	}
	var path []string
	for id := leaf; id != ""; id = parent[id] {
		path = append(path, id)
	}
	slices.Reverse(path)
	return path
}

// turn sends content and waits for its run to end on evs.
func turn(c *tgtest.Client, evs *tgtest.Events, sid, content string) (msgID, runID string) {
	c.T.Helper()
	msgID, runID = c.Send(sid, content)
	evs.Until("the run's end", tgtest.RunEnds(runID))
	return msgID, runID
}

func TestConversationTree(t *testing.T) {
	for _, store := range allStores {
		t.Run(store, func(t *testing.T) {
			a := startApp(t, store, nil)
			c := guest(t, a)
			sid := c.CreateSession(nil)
			ws := c.Connect("graphql-transport-ws")
			_, evs := ws.Stream(sid, c.Cursor(sid))
			_, tab2 := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))

			u1, _ := turn(c, evs, sid, "one")
			u2, _ := turn(c, evs, sid, "two")
			before := c.Messages(sid)
			if len(before) != 4 {
				t.Fatalf("history %+v, want 4 messages", before)
			}
			checkBranch(t, before)
			a1, a2 := before[1].ID, before[3].ID
			cursorBeforeEdit := c.Cursor(sid)
			seenBefore := len(evs.All)

			// Edit: a new message beside "two", its branch current, a new run.
			e := edit(c, u2, "two, edited")
			if e.EditMessage.Message.ParentID != a1 {
				t.Fatalf("the edit's parent is %q, want the reply before it %q", e.EditMessage.Message.ParentID, a1)
			}
			if want := []string{u2, e.EditMessage.Message.ID}; !slices.Equal(e.EditMessage.Message.SiblingIDs, want) {
				t.Fatalf("siblings %v, want %v", e.EditMessage.Message.SiblingIDs, want)
			}
			evs.Until("the edit's run ends", tgtest.RunEnds(e.EditMessage.Run.ID))
			edited := c.Messages(sid)
			checkBranch(t, edited)
			if len(edited) != 4 || edited[2].ID != e.EditMessage.Message.ID || edited[2].Content != "two, edited" || edited[3].Role != "ASSISTANT" {
				t.Fatalf("after the edit the branch is %+v", edited)
			}
			if !slices.Equal(edited[2].SiblingIDs, []string{u2, e.EditMessage.Message.ID}) {
				t.Fatalf("siblingIds %v", edited[2].SiblingIDs)
			}

			// Regenerate the new reply: a third reply beside it.
			a2e := edited[3].ID
			run, _ := regenerate(c, a2e)
			evs.Until("the regeneration's run ends", tgtest.RunEnds(run))
			regen := c.Messages(sid)
			checkBranch(t, regen)
			if len(regen) != 4 || regen[3].ID == a2e || regen[3].Role != "ASSISTANT" || !slices.Equal(regen[3].SiblingIDs, []string{a2e, regen[3].ID}) {
				t.Fatalf("after regenerate the branch is %+v", regen)
			}

			// Back to the first version: its whole branch, down to its reply.
			selectBranch(c, u2)
			back := c.Messages(sid)
			if !slices.Equal(ids(back), ids(before)) {
				t.Fatalf("selecting the first version gave %v, want %v", ids(back), ids(before))
			}
			// Selecting the edited message continues to the child added last.
			selectBranch(c, e.EditMessage.Message.ID)
			if got := ids(c.Messages(sid)); !slices.Equal(got, ids(regen)) {
				t.Fatalf("selecting the edit gave %v, want %v", got, ids(regen))
			}
			evs.Until("the last BranchSelected", func(ev tgtest.Event) bool {
				return ev.Typename == "BranchSelected" && ev.LeafID == regen[3].ID
			})
			// Selecting the branch that is current writes nothing.
			end := c.Cursor(sid)
			selectBranch(c, e.EditMessage.Message.ID)
			if c.Cursor(sid) != end {
				t.Fatal("selecting the current branch wrote to the log")
			}

			// A follower rebuilds the branch from the events alone, in both tabs.
			if got := rebuildBranch(evs.All); !slices.Equal(got, ids(regen)) {
				t.Fatalf("rebuilt from the events: %v, want %v", got, ids(regen))
			}
			tab2.Until("the last BranchSelected in the other tab", func(ev tgtest.Event) bool {
				return ev.Typename == "BranchSelected" && ev.LeafID == regen[3].ID
			})
			if got := rebuildBranch(tab2.All); !slices.Equal(got, ids(regen)) {
				t.Fatalf("the other tab rebuilt %v, want %v", got, ids(regen))
			}

			// A cursor taken before the edit resumes exactly: what followed it, once.
			_, again := c.Connect("graphql-transport-ws").Stream(sid, cursorBeforeEdit)
			want := evs.All[seenBefore:]
			for i := range want {
				ev := again.Next()
				if ev.Cursor != want[i].Cursor || ev.Typename != want[i].Typename {
					t.Fatalf("resumed event %d: %s %s, want %s %s", i, ev.Typename, ev.Cursor, want[i].Typename, want[i].Cursor)
				}
			}
			if ev, ok := again.TryNext(200 * time.Millisecond); ok {
				t.Fatalf("resuming gave more than was missed: %+v", ev)
			}
			_ = u1
			_ = a2
		})
	}
}

// TestAgentReadsTheCurrentBranch: after an edit the agent's history is the new branch;
// the demo agent's /history says which user messages it got.
func TestAgentReadsTheCurrentBranch(t *testing.T) {
	everyStore(t, func(t *testing.T, store string) {
		_, c, sid, _, evs := watchedSession(t, store)
		turn(c, evs, sid, "alpha")
		u2, _ := turn(c, evs, sid, "beta")
		turn(c, evs, sid, "gamma")
		e := edit(c, u2, "/history")
		evs.Until("the edit's run ends", tgtest.RunEnds(e.EditMessage.Run.ID))
		msgs := c.Messages(sid)
		reply := msgs[len(msgs)-1].Content
		if !strings.Contains(reply, "alpha") || strings.Contains(reply, "beta") || strings.Contains(reply, "gamma") {
			t.Fatalf("the agent read %q; it must see alpha and the edit, not beta or gamma", reply)
		}
	})
}

func TestTreeRefusals(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		a, c, sid, _, evs := watchedSession(t, store)
		u1, _ := turn(c, evs, sid, "one")
		msgs := c.Messages(sid)
		a1 := msgs[1].ID
		other := guest(t, a)
		doomed := c.CreateSession(nil)
		doomedMsg, _ := c.Send(doomed, "doomed")
		c.Must(`mutation($id: ID!){ deleteTalkSession(id: $id) }`, map[string]any{"id": doomed}, nil)
		elsewhere := c.CreateSession(nil)
		_, run := c.Send(elsewhere, "elsewhere")

		cases := []struct {
			name  string
			who   *tgtest.Client
			query string
			vars  map[string]any
			code  string
		}{
			{"edit an assistant message", c, editMutation, map[string]any{"m": a1, "c": "x"}, "BAD_USER_INPUT"},
			{"edit with empty content", c, editMutation, map[string]any{"m": u1, "c": " "}, "BAD_USER_INPUT"},
			{"regenerate a user message", c, regenMutation, map[string]any{"m": u1}, "BAD_USER_INPUT"},
			{"edit another user's message", other, editMutation, map[string]any{"m": u1, "c": "x"}, "NOT_FOUND"},
			{"regenerate another user's reply", other, regenMutation, map[string]any{"m": a1}, "NOT_FOUND"},
			{"select another user's branch", other, selectMutation, map[string]any{"m": u1}, "NOT_FOUND"},
			{"fork another user's session", other, forkMutation, map[string]any{"m": a1}, "NOT_FOUND"},
			{"fork a deleted session", c, forkMutation, map[string]any{"m": doomedMsg}, "NOT_FOUND"},
			{"a malformed message ID", c, selectMutation, map[string]any{"m": "nope"}, "BAD_USER_INPUT"},
			{"cancel another session's run", c, cancelRunID, map[string]any{"s": sid, "r": run}, "NOT_FOUND"},
		}
		for _, tc := range cases {
			resp := tc.who.Do(tc.query, tc.vars)
			if resp.Code() != tc.code {
				t.Errorf("%s: got %s %+v, want %s", tc.name, resp.Code(), resp.Errors, tc.code)
			}
		}
		if got := c.Messages(sid); !slices.Equal(ids(got), ids(msgs)) || len(got[0].SiblingIDs) != 1 || len(got[1].SiblingIDs) != 1 {
			t.Fatalf("a refused operation changed the history: %+v", got)
		}
		var sessions struct {
			Sessions struct {
				Edges []struct{ Node struct{ ID string } }
			}
		}
		other.Must(`{ sessions { edges { node { id } } } }`, nil, &sessions)
		if len(sessions.Sessions.Edges) != 0 {
			t.Fatalf("a refused fork made a session: %+v", sessions)
		}
	})
}

func TestForkSession(t *testing.T) {
	everyStore(t, func(t *testing.T, store string) {
		_, c, sid, _, evs := watchedSession(t, store)
		turn(c, evs, sid, "one")
		turn(c, evs, sid, "two")
		src := c.Messages(sid)
		var out struct {
			ForkSession struct {
				ID, Title, StreamCursor string
				Messages                struct {
					Edges []struct {
						Node struct {
							ID, Content string
							RunID       *string
						}
					}
				}
			}
		}
		c.Must(forkMutation, map[string]any{"m": src[1].ID, "t": "the fork"}, &out)
		fid := out.ForkSession.ID
		if fid == sid || out.ForkSession.Title != "the fork" {
			t.Fatalf("fork %+v", out.ForkSession)
		}
		// The answer holds the copies, which no run of the new session wrote.
		if e := out.ForkSession.Messages.Edges; len(e) != 2 || e[0].Node.Content != "one" || e[0].Node.RunID != nil || e[1].Node.RunID != nil {
			t.Fatalf("the fork's answer holds %+v", e)
		}
		forked := c.Messages(fid)
		checkBranch(t, forked)
		if len(forked) != 2 || forked[0].Content != "one" || forked[1].Content != src[1].Content || forked[0].ID == src[0].ID {
			t.Fatalf("the fork holds %+v, want copies of %+v", forked, src[:2])
		}
		// Its own history from then on: the source does not change.
		_, fevs := c.Connect("graphql-transport-ws").Stream(fid, out.ForkSession.StreamCursor)
		m3, r3 := c.Send(fid, "three, in the fork")
		// Its streamCursor follows the copies: what comes next is the new message.
		if ev := fevs.Next(); ev.Typename != "MessageAdded" || ev.Message.ID != m3 {
			t.Fatalf("the first event after the fork's streamCursor: %s %+v", ev.Typename, ev.Message)
		}
		fevs.Until("the run's end", tgtest.RunEnds(r3))
		if got := c.Messages(fid); len(got) != 4 || got[2].ParentID != forked[1].ID {
			t.Fatalf("the fork went on as %+v", got)
		}
		if got := c.Messages(sid); !slices.Equal(ids(got), ids(src)) {
			t.Fatalf("forking changed the source: %+v", got)
		}
	})
}

func TestEditsObeyTheBusyPolicy(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		a := startApp(t, store, nil)
		c := guest(t, a)
		for _, policy := range []string{"INTERRUPT", "ENQUEUE", "REJECT"} {
			t.Run(policy, func(t *testing.T) {
				sid := c.CreateSession(map[string]any{"busyPolicy": policy})
				_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
				u1, _ := turn(c, evs, sid, "one")
				_, slow := c.Send(sid, "/slow 30")
				evs.Until("the slow reply's first chunk", func(ev tgtest.Event) bool { return ev.Typename == "MessageChunk" })
				resp := c.Do(editMutation, map[string]any{"m": u1, "c": "one, edited"})
				switch policy {
				case "REJECT":
					if resp.Code() != "CONFLICT" {
						t.Fatalf("REJECT: %s %+v", resp.Code(), resp.Errors)
					}
					c.Cancel(sid)
					evs.Until("the slow run's end", tgtest.RunEnds(slow))
					if n := len(c.Messages(sid)); n != 4 {
						t.Fatalf("a refused edit changed the history: %d messages", n)
					}
					return
				case "INTERRUPT":
					var out editResult
					decode(t, resp, &out)
					ev := evs.Until("the slow run's end", tgtest.RunEnds(slow))
					if ev.Run.Status != "INTERRUPTED" {
						t.Fatalf("the running run ended %s, want INTERRUPTED", ev.Run.Status)
					}
					evs.Until("the edit's run ends", tgtest.RunEnds(out.EditMessage.Run.ID))
					msgs := c.Messages(sid)
					checkBranch(t, msgs)
					if len(msgs) != 2 || msgs[0].Content != "one, edited" {
						t.Fatalf("after the edit: %+v", msgs)
					}
				case "ENQUEUE":
					var out editResult
					decode(t, resp, &out)
					if out.EditMessage.Run.Status != "QUEUED" {
						t.Fatalf("the edit's run is %s, want QUEUED", out.EditMessage.Run.Status)
					}
					// It waits beside the branch: the branch is still the running one.
					if msgs := c.Messages(sid); len(msgs) < 3 || msgs[0].ID != u1 {
						t.Fatalf("while the edit waits the branch is %+v", msgs)
					}
					ev := evs.Until("the slow run's end", tgtest.RunEnds(slow))
					if ev.Run.Status != "COMPLETED" {
						t.Fatalf("the running run ended %s, want COMPLETED", ev.Run.Status)
					}
					evs.Until("the edit's run ends", tgtest.RunEnds(out.EditMessage.Run.ID))
					msgs := c.Messages(sid)
					checkBranch(t, msgs)
					if len(msgs) != 2 || msgs[0].Content != "one, edited" {
						t.Fatalf("after the edit ran: %+v", msgs)
					}
					if got := rebuildBranch(evs.All); !slices.Equal(got, ids(msgs)) {
						t.Fatalf("rebuilt %v, want %v", got, ids(msgs))
					}
				}
			})
		}
	})
}

// TestSteering: STEER hands a message to the running agent between two /slow chunks;
// the history shows where it entered; with nothing running it is ENQUEUE.
// TestSteerRacingTheEndOfItsRun has the steers that race the end of their run.
func TestSteering(t *testing.T) {
	everyStore(t, func(t *testing.T, store string) {
		_, c, sid, _, evs := watchedSession(t, store)
		_, slow := c.Send(sid, "/slow 30")
		evs.Until("the first chunk", func(ev tgtest.Event) bool { return ev.Typename == "MessageChunk" })
		steerID, run, status := sendPolicy(c, sid, "go left", "STEER")
		if run != slow || status != "RUNNING" {
			t.Fatalf("the steer's run is %s %s, want the running run %s", run, status, slow)
		}
		evs.Until("the agent takes the steer", func(ev tgtest.Event) bool {
			return ev.Typename == "MessageChunk" && strings.Contains(ev.Delta, "[steered: go left]")
		})
		c.Cancel(sid)
		evs.Until("the run's end", tgtest.RunEnds(slow))
		msgs := c.Messages(sid)
		checkBranch(t, msgs)
		i := slices.IndexFunc(msgs, func(m tgtest.Message) bool { return m.ID == steerID })
		if i != 2 || msgs[1].Role != "ASSISTANT" || len(msgs) != 4 || !strings.HasPrefix(msgs[3].Content, " [steered: go left] ") {
			t.Fatalf("the history does not show where the steer entered: %+v", msgs)
		}
		if msgs[1].Status != "COMPLETE" || !strings.HasPrefix(msgs[1].Content, "chunk 1.") {
			t.Fatalf("the reply before the steer: %+v", msgs[1])
		}

		// Nothing runs: STEER starts a run as ENQUEUE does.
		_, idleRun, _ := sendPolicy(c, sid, "hello", "STEER")
		if idleRun == slow {
			t.Fatal("a steer with nothing running went to the old run")
		}
		evs.Until("the new run's end", tgtest.RunEnds(idleRun))
	})
}

// TestSteerRacingTheEndOfItsRun: a steer sent as its run ends is never lost, and the
// right run answers it: the run it steered, when it came before that run's last step
// (its text after the steer starts with " [steered: …] "); else the next run, which
// replies to it alone. The first round steers before the step, the second between the
// step and the end; the others send the steer as the run is let go to its step or to its
// end, and whichever wins the race, the steer is answered once.
func TestSteerRacingTheEndOfItsRun(t *testing.T) {
	everyStore(t, func(t *testing.T, store string) {
		g, c, sid, evs := gatedSession(t, store, nil)
		outcomes := map[string]int{}
		for i := range 10 {
			content := fmt.Sprintf("steer %d", i)
			_, r := c.Send(sid, "/gate")
			evs.Until("the run's start", chunk("started. "))
			var steer tgtest.Response
			switch i {
			case 0: // before the step: the run takes it
				steer = *c.Do(sendPolicyMutation, map[string]any{"s": sid, "c": content, "p": "STEER"})
				g.release(t)
				g.release(t)
			case 1: // after the step, before the end: the next run answers it
				g.release(t)
				evs.Until("the run's step", chunk("checked. "))
				steer = *c.Do(sendPolicyMutation, map[string]any{"s": sid, "c": content, "p": "STEER"})
				g.release(t)
			default: // sent as the run is let go: to its step (even rounds), to its end (odd)
				if i%2 == 1 {
					g.release(t)
					evs.Until("the run's step", chunk("checked. "))
				}
				sent := make(chan error, 1)
				go func() {
					r, err := c.Try(sendPolicyMutation, map[string]any{"s": sid, "c": content, "p": "STEER"})
					if err == nil {
						steer = *r
					}
					sent <- err
				}()
				g.release(t)
				select {
				case err := <-sent:
					if err != nil {
						t.Fatalf("%s: %v", content, err)
					}
				case <-time.After(tgtest.Wait):
					t.Fatalf("%s: no answer within %v", content, tgtest.Wait)
				}
				if i%2 == 0 {
					g.release(t)
				}
			}
			var sent struct {
				AddMessage struct {
					Message struct{ ID string }
					Run     struct{ ID string }
				}
			}
			decode(t, &steer, &sent)
			if end := evs.Until("the run's end", tgtest.RunEnds(r)); end.Run.Status != "COMPLETED" {
				t.Fatalf("%s: the run ended %s", content, end.Run.Status)
			}
			waitIdle(t, c, sid)

			msgs := c.Messages(sid)
			checkBranch(t, msgs)
			k := slices.IndexFunc(msgs, func(m tgtest.Message) bool { return m.ID == sent.AddMessage.Message.ID })
			if k < 0 || k == len(msgs)-1 {
				t.Fatalf("%s is not on the branch with a message after it:\n%s", content, show(msgs))
			}
			m, reply := msgs[k], msgs[k+1]
			if m.RunID != sent.AddMessage.Run.ID {
				t.Fatalf("%s was answered with run %s and is stored with run %s", content, sent.AddMessage.Run.ID, m.RunID)
			}
			var outcome string
			switch {
			case m.RunID == r && reply.RunID == r && strings.HasPrefix(reply.Content, " [steered: "+content+"] "):
				outcome = "taken by its run"
			case m.RunID == r && reply.RunID != r && reply.Content == "re: "+content:
				outcome = "left to the next run"
			case m.RunID != r && reply.RunID == m.RunID && reply.Content == "re: "+content:
				outcome = "after the run's end"
			default:
				t.Fatalf("%s (run %s, steering %s) is answered by %+v: not the right run", content, m.RunID, r, reply)
			}
			if reply.Role != "ASSISTANT" || reply.Status != "COMPLETE" {
				t.Fatalf("%s: the reply after it is %+v", content, reply)
			}
			answers := 0
			for _, later := range msgs {
				if later.Role == "ASSISTANT" && strings.Contains(later.Content, content) {
					answers++
				}
			}
			if answers != 1 {
				t.Fatalf("%s is answered %d times:\n%s", content, answers, show(msgs))
			}
			switch i {
			case 0:
				if outcome != "taken by its run" {
					t.Fatalf("%s, sent before the run's step: %s", content, outcome)
				}
			case 1:
				if outcome != "left to the next run" {
					t.Fatalf("%s, sent after the run's step: %s", content, outcome)
				}
			default:
				outcomes[outcome]++
			}
		}
		t.Logf("steers racing the end of their run: %v", outcomes)
	})
}

// waitIdle waits until the session has no active run and none queued.
func waitIdle(t *testing.T, c *tgtest.Client, sid string) {
	t.Helper()
	if !becomesIdle(c, sid) {
		t.Fatalf("the session did not go idle within %v", tgtest.Wait)
	}
}

// becomesIdle reports whether the session has no active run and none queued, now or
// within tgtest.Wait.
func becomesIdle(c *tgtest.Client, sid string) bool {
	c.T.Helper()
	deadline := time.Now().Add(tgtest.Wait)
	for {
		var out struct {
			Session struct {
				Status     string
				QueuedRuns []struct{ ID string }
			}
		}
		c.Must(`query($s: ID!){ session(id: $s){ status queuedRuns { id } } }`, map[string]any{"s": sid}, &out)
		if out.Session.Status == "IDLE" && len(out.Session.QueuedRuns) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // a state, not an event: polled, as waitFor does
	}
}

// TestQueueIsVisibleAndEditable: queued runs are listed oldest first and can be
// cancelled before they start, their message staying on the branch; a per-message
// policy overrides the session's.
func TestQueueIsVisibleAndEditable(t *testing.T) {
	eachStore(t, func(t *testing.T, store string) {
		_, c, sid, _, evs := watchedSession(t, store) // INTERRUPT by default
		_, slow := c.Send(sid, "/slow 40")
		evs.Until("a chunk", func(ev tgtest.Event) bool { return ev.Typename == "MessageChunk" })
		m1, q1, s1 := sendPolicy(c, sid, "first in line", "ENQUEUE")
		_, q2, s2 := sendPolicy(c, sid, "second in line", "ENQUEUE")
		if s1 != "QUEUED" || s2 != "QUEUED" {
			t.Fatalf("queued runs are %s and %s", s1, s2)
		}
		var out struct {
			Session struct {
				ActiveRun  struct{ ID string }
				QueuedRuns []struct{ ID, Status string }
			}
		}
		c.Must(queuedQuery, map[string]any{"s": sid}, &out)
		if out.Session.ActiveRun.ID != slow || len(out.Session.QueuedRuns) != 2 || out.Session.QueuedRuns[0].ID != q1 || out.Session.QueuedRuns[1].ID != q2 {
			t.Fatalf("the queue shows %+v", out.Session)
		}
		var cancelled struct{ CancelRun struct{ ID, Status string } }
		c.Must(cancelRunID, map[string]any{"s": sid, "r": q1}, &cancelled)
		if cancelled.CancelRun.ID != q1 || cancelled.CancelRun.Status != "CANCELLED" {
			t.Fatalf("cancelling the queued run: %+v", cancelled)
		}
		c.Must(queuedQuery, map[string]any{"s": sid}, &out)
		if len(out.Session.QueuedRuns) != 1 || out.Session.QueuedRuns[0].ID != q2 {
			t.Fatalf("after the cancel the queue shows %+v", out.Session.QueuedRuns)
		}
		if ev := evs.Until("the slow run's end", tgtest.RunEnds(slow)); ev.Run.Status != "COMPLETED" {
			t.Fatalf("the per-message ENQUEUE interrupted the run: %s", ev.Run.Status)
		}
		evs.Until("the second's run ends", tgtest.RunEnds(q2))
		for _, ev := range evs.All {
			if ev.Typename == "RunStatusChanged" && ev.Run.ID == q1 && ev.Run.Status != "QUEUED" && ev.Run.Status != "CANCELLED" {
				t.Fatalf("the cancelled run went %s", ev.Run.Status)
			}
		}
		msgs := c.Messages(sid)
		checkBranch(t, msgs)
		if !slices.ContainsFunc(msgs, func(m tgtest.Message) bool { return m.ID == m1 }) {
			t.Fatalf("the cancelled run's message left the branch: %+v", msgs)
		}
		// A cancelled run is over: cancelling it again finds nothing running.
		resp := c.Do(cancelRunID, map[string]any{"s": sid, "r": q1})
		if len(resp.Errors) > 0 || string(resp.Data) != `{"cancelRun":null}` {
			t.Fatalf("cancelling an ended run: %s %+v", resp.Data, resp.Errors)
		}
	})
}

// TestTreeRaces: an edit and a regenerate at once both start their runs, the later one
// ends the earlier (or finds it done) and its reply ends the branch, which the events
// rebuild; a cancel of a queued run racing its start cancels it exactly once, and it never
// runs after being reported cancelled.
func TestTreeRaces(t *testing.T) {
	for _, store := range allStores {
		t.Run(store, func(t *testing.T) {
			a, g := startGated(t, store)
			c := guest(t, a)
			sid := c.CreateSession(nil) // the demo agent, INTERRUPT
			_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
			u1, _ := turn(c, evs, sid, "one")
			for k := range 5 {
				msgs := c.Messages(sid)
				reply := msgs[len(msgs)-1].ID
				var editOut, regenOut *tgtest.Response
				var editErr, regenErr error
				var wg sync.WaitGroup
				wg.Add(2)
				go func() {
					defer wg.Done()
					editOut, editErr = c.Try(editMutation, map[string]any{"m": u1, "c": fmt.Sprintf("edited %d", k)})
				}()
				go func() { defer wg.Done(); regenOut, regenErr = c.Try(regenMutation, map[string]any{"m": reply}) }()
				wg.Wait()
				if editErr != nil || regenErr != nil {
					t.Fatalf("round %d: the edit: %v; the regeneration: %v", k, editErr, regenErr)
				}
				if len(editOut.Errors) > 0 || len(regenOut.Errors) > 0 {
					t.Fatalf("round %d: each of an edit and a regeneration at once starts a run; the edit got %+v, the regeneration %+v", k, editOut.Errors, regenOut.Errors)
				}
				var e editResult
				var rg struct {
					Regenerate struct{ Run struct{ ID string } }
				}
				decode(t, editOut, &e)
				decode(t, regenOut, &rg)
				editRun, regenRun := e.EditMessage.Run.ID, rg.Regenerate.Run.ID
				ended := untilEnded(t, evs, editRun, regenRun)
				// The later of the two is the one whose run the log shows last.
				first := slices.IndexFunc(evs.All, func(ev tgtest.Event) bool {
					return ev.Typename == "RunStatusChanged" && (ev.Run.ID == editRun || ev.Run.ID == regenRun)
				})
				earlier, later := evs.All[first].Run.ID, editRun
				if earlier == editRun {
					later = regenRun
				}
				if ended[later] != "COMPLETED" || (ended[earlier] != "COMPLETED" && ended[earlier] != "INTERRUPTED") {
					t.Fatalf("round %d: the earlier run ended %s, the later %s", k, ended[earlier], ended[later])
				}
				waitIdle(t, c, sid)
				msgs = c.Messages(sid)
				checkBranch(t, msgs)
				if last := msgs[len(msgs)-1]; last.Role != "ASSISTANT" || last.RunID != later || last.Status != "COMPLETE" {
					t.Fatalf("round %d: the branch ends with %+v, want the later run's reply (%s)", k, last, later)
				}
			}
			msgs := c.Messages(sid)
			untilBranch(t, evs, ids(msgs))

			// A queued run cancelled as it starts. The first round cancels it while the
			// run before it still works, the second once it has started; the others send
			// the cancel as the run before it is let go to its end.
			sq := c.CreateSession(map[string]any{"agent": "gate", "busyPolicy": "ENQUEUE"})
			_, qevs := c.Connect("graphql-transport-ws").Stream(sq, c.Cursor(sq))
			var queuedRuns []string
			started := map[bool]int{}
			for i := range 10 {
				_, first := c.Send(sq, "/gate")
				qevs.Until("the first run's start", chunk("started. "))
				_, queued, status := sendPolicy(c, sq, "/hold", "ENQUEUE")
				if status != "QUEUED" {
					t.Fatalf("round %d: the second run is %s, want QUEUED", i, status)
				}
				queuedRuns = append(queuedRuns, queued)
				var cancelled *tgtest.Response
				switch i {
				case 0:
					cancelled = c.Do(cancelRunID, map[string]any{"s": sq, "r": queued})
					g.release(t)
					g.release(t)
				case 1:
					g.release(t)
					g.release(t)
					qevs.Until("the queued run's start", func(ev tgtest.Event) bool {
						return ev.Typename == "RunStatusChanged" && ev.Run.ID == queued && ev.Run.Status == "RUNNING"
					})
					cancelled = c.Do(cancelRunID, map[string]any{"s": sq, "r": queued})
				default:
					done := make(chan error, 1)
					go func() {
						var err error
						cancelled, err = c.Try(cancelRunID, map[string]any{"s": sq, "r": queued})
						done <- err
					}()
					g.release(t)
					g.release(t)
					select {
					case err := <-done:
						if err != nil {
							t.Fatalf("round %d: the cancel: %v", i, err)
						}
					case <-time.After(tgtest.Wait):
						t.Fatalf("round %d: the cancel got no answer within %v", i, tgtest.Wait)
					}
				}
				var out struct{ CancelRun *struct{ ID, Status string } }
				decode(t, cancelled, &out)
				if out.CancelRun == nil || out.CancelRun.ID != queued || out.CancelRun.Status != "CANCELLED" {
					t.Fatalf("round %d: cancelling the queued run answered %s", i, cancelled.Data)
				}
				ended := untilEnded(t, qevs, first, queued)
				if ended[first] != "COMPLETED" || ended[queued] != "CANCELLED" {
					t.Fatalf("round %d: the first run ended %s, the cancelled one %s", i, ended[first], ended[queued])
				}
				if !becomesIdle(c, sq) {
					checkCancelled(t, qevs.All, g, queued) // says what went on, if the cancelled run did
					t.Fatalf("round %d: the session did not go idle within %v", i, tgtest.Wait)
				}
				ran := checkCancelled(t, qevs.All, g, queued)
				if (i == 0 && ran) || (i == 1 && !ran) {
					t.Fatalf("round %d: the queued run started: %v", i, ran)
				}
				if i > 1 {
					started[ran]++
				}
			}
			// Nothing cancelled starts later: one more turn, then every run's events again.
			turn(c, qevs, sq, "last")
			for _, q := range queuedRuns {
				checkCancelled(t, qevs.All, g, q)
			}
			t.Logf("cancels racing the start of a queued run: %d landed before it started, %d after", started[false], started[true])
		})
	}
}

// show lists messages one a line, for a failure's message.
func show(msgs []tgtest.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "\t%s %s %s (run %s): %q\n", m.ID, m.Role, m.Status, m.RunID, m.Content)
	}
	return b.String()
}

// untilEnded reads evs until each of runs has ended, and returns how each ended.
func untilEnded(t *testing.T, evs *tgtest.Events, runs ...string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(tgtest.Wait)
	for {
		ended := map[string]string{}
		for _, ev := range evs.All {
			for _, r := range runs {
				if tgtest.RunEnds(r)(ev) {
					ended[r] = ev.Run.Status
				}
			}
		}
		if len(ended) == len(runs) {
			return ended
		}
		if _, ok := evs.TryNext(time.Until(deadline)); !ok {
			t.Fatalf("waiting for the ends of runs %v: only %v within %v", runs, ended, tgtest.Wait)
		}
	}
}

// checkCancelled fails the test unless the run ended CANCELLED exactly once and nothing
// of it followed: no status, no message, no text, and its agent started at most once,
// only when the run went RUNNING before it was cancelled. It reports whether it started.
func checkCancelled(t *testing.T, evs []tgtest.Event, g *gate, run string) (started bool) {
	t.Helper()
	var statuses []string
	mine := map[string]bool{} // the run's messages
	end := -1
	for i, ev := range evs {
		of := false
		switch ev.Typename {
		case "RunStatusChanged":
			if of = ev.Run.ID == run; of {
				statuses = append(statuses, ev.Run.Status)
			}
		case "MessageAdded", "MessageCompleted":
			if of = ev.Message.RunID == run; of {
				mine[ev.Message.ID] = true
			}
		case "MessageChunk":
			of = mine[ev.MessageID]
		}
		if of && end >= 0 {
			t.Fatalf("run %s went on after it was cancelled: %+v (statuses %q)", run, ev, statuses)
		}
		if ev.Typename == "RunStatusChanged" && ev.Run.ID == run && ev.Run.Status == "CANCELLED" {
			end = i
		}
	}
	started = slices.Contains(statuses, "RUNNING")
	if n := len(statuses); n == 0 || statuses[n-1] != "CANCELLED" || slices.Index(statuses, "CANCELLED") != n-1 {
		t.Fatalf("run %s went %q, want it to end CANCELLED once", run, statuses)
	}
	if n := g.starts(run); n > 1 || (n == 1 && !started) {
		t.Fatalf("run %s (%q) had its agent started %d times", run, statuses, n)
	}
	return started
}

// gate is an agent a test drives, for runs that must end when the test says. A run for
// "/gate" writes "started. ", waits for the test to let it go (release), takes what was
// steered to it once, writes "checked. ", waits again, writes "done. " and ends. A run for
// "/hold" writes "held. " and ends only when stopped. It answers any other message at once
// with "re: " and the message. It counts how often each run's agent starts.
type gate struct {
	open chan struct{}

	mu      sync.Mutex
	started map[string]int
}

func newGate() *gate { return &gate{open: make(chan struct{}), started: map[string]int{}} }

// TakesSteers implements service.Steerable.
func (g *gate) TakesSteers() bool { return true }

// Run implements service.Runner.
func (g *gate) Run(ctx context.Context, req service.RunRequest, out service.Output) error {
	g.mu.Lock()
	g.started[req.RunID]++
	g.mu.Unlock()
	last := ""
	for _, m := range req.History {
		if m.Role == service.RoleUser && m.Kind == service.KindText {
			last = m.Content
		}
	}
	wait := func() error {
		select {
		case <-g.open:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	switch last {
	case "/gate":
		if err := out.Text("started. "); err != nil {
			return err
		}
		if err := wait(); err != nil {
			return err
		}
		steers, err := out.Steers()
		if err != nil {
			return err
		}
		for _, m := range steers {
			if err := out.Text(" [steered: " + m.Content + "] "); err != nil {
				return err
			}
		}
		if err := out.Text("checked. "); err != nil {
			return err
		}
		if err := wait(); err != nil {
			return err
		}
		return out.Text("done. ")
	case "/hold":
		if err := out.Text("held. "); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}
	return out.Text("re: " + last)
}

// release lets one waiting "/gate" run go on.
func (g *gate) release(t *testing.T) {
	t.Helper()
	select {
	case g.open <- struct{}{}:
	case <-time.After(tgtest.Wait):
		t.Fatalf("no run waited at the gate within %v", tgtest.Wait)
	}
}

// starts returns how often run's agent started.
func (g *gate) starts(run string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started[run]
}

// startGated starts a server on store with the gate agent beside the demo agent.
func startGated(t *testing.T, store string) (*testApp, *gate) {
	t.Helper()
	g := newGate()
	a := startApp(t, store, func(cfg *app.Config) {
		cfg.Agents = func(a *service.Agents) { a.Register("gate", "a run that ends when the test says", g) }
	})
	return a, g
}

// gatedSession starts a server on store with the gate agent, and creates a session of
// the gate agent's with settings added, followed over graphql-transport-ws.
func gatedSession(t *testing.T, store string, settings map[string]any) (*gate, *tgtest.Client, string, *tgtest.Events) {
	t.Helper()
	a, g := startGated(t, store)
	c := guest(t, a)
	all := map[string]any{"agent": "gate"}
	for k, v := range settings {
		all[k] = v
	}
	sid := c.CreateSession(all)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	return g, c, sid, evs
}

// chunk matches a chunk of text delta.
func chunk(delta string) func(tgtest.Event) bool {
	return func(ev tgtest.Event) bool { return ev.Typename == "MessageChunk" && ev.Delta == delta }
}

func decode(t *testing.T, resp *tgtest.Response, out any) {
	t.Helper()
	if len(resp.Errors) > 0 {
		t.Fatalf("errors: %+v", resp.Errors)
	}
	if err := json.Unmarshal(resp.Data, out); err != nil {
		t.Fatalf("decoding %s: %v", resp.Data, err)
	}
}

// untilBranch reads evs until the branch they rebuild is want.
func untilBranch(t *testing.T, evs *tgtest.Events, want []string) {
	t.Helper()
	deadline := time.Now().Add(tgtest.Wait)
	for !slices.Equal(rebuildBranch(evs.All), want) {
		if _, ok := evs.TryNext(time.Until(deadline)); !ok {
			t.Fatalf("the events rebuild %v, want %v", rebuildBranch(evs.All), want)
		}
	}
}

// TestTreeLimits: versions of a message, messages of a session and a fork's size have
// limits with settings, refused with a clear error and nothing changed; the storage
// quota counts every branch.
func TestTreeLimits(t *testing.T) {
	a := startApp(t, "sqlite", func(cfg *app.Config) {
		cfg.Service.MaxBranches = 3
		cfg.Service.MaxSessionMessages = 12
		cfg.Service.MaxForkMessages = 3
		cfg.Service.MaxUserBytes = 400
	})
	c := guest(t, a)
	sid := c.CreateSession(nil)
	_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	u1, _ := turn(c, evs, sid, "one")
	for i := range 2 {
		e := edit(c, u1, fmt.Sprintf("version %d", i+2))
		evs.Until("the edit's run ends", tgtest.RunEnds(e.EditMessage.Run.ID))
	}
	before := c.Messages(sid)
	resp := c.Do(editMutation, map[string]any{"m": u1, "c": "a fourth version"})
	if resp.Code() != "RATE_LIMITED" || !strings.Contains(resp.Errors[0].Message, "3 versions") {
		t.Fatalf("a fourth version: %s %+v", resp.Code(), resp.Errors)
	}
	resp = c.Do(regenMutation, map[string]any{"m": before[1].ID})
	if resp.Code() != "" {
		t.Fatalf("a second version of the reply: %+v", resp.Errors)
	}
	waitIdle(t, c, sid)
	resp = c.Do(forkMutation, map[string]any{"m": c.Messages(sid)[1].ID})
	if resp.Code() != "" {
		t.Fatalf("a fork of two messages: %+v", resp.Errors)
	}
	turn(c, evs, sid, "two")
	long := c.Messages(sid)
	resp = c.Do(forkMutation, map[string]any{"m": long[len(long)-1].ID})
	if resp.Code() != "BAD_USER_INPUT" || !strings.Contains(resp.Errors[0].Message, "at most 3 messages") {
		t.Fatalf("a fork of %d messages: %s %+v", len(long), resp.Code(), resp.Errors)
	}
	// Three versions of "one" with their replies, a regenerated reply, "two" and its
	// reply: 9 messages. "three" makes 11 with its reply; "four" with its reply would
	// make 13: refused.
	turn(c, evs, sid, "three")
	resp = c.Do(sendPolicyMutation, map[string]any{"s": sid, "c": "four", "p": nil})
	if resp.Code() != "RATE_LIMITED" || !strings.Contains(resp.Errors[0].Message, "messages, the most it can") {
		t.Fatalf("a message beyond the session's limit: %s %+v", resp.Code(), resp.Errors)
	}

	// The quota: every version counts. 400 bytes, and each edit adds its text.
	q := c.CreateSession(nil)
	_, qevs := c.Connect("graphql-transport-ws").Stream(q, c.Cursor(q))
	big := strings.Repeat("x", 200)
	m, _ := turn(c, qevs, q, big)
	resp = c.Do(editMutation, map[string]any{"m": m, "c": big + "y"})
	if resp.Code() != "RATE_LIMITED" || !strings.Contains(resp.Errors[0].Message, "keeps at most") {
		t.Fatalf("an edit beyond the storage quota: %s %+v", resp.Code(), resp.Errors)
	}
}

// everyStore runs a test against every store, PostgreSQL included (skipped without one,
// failed under CI).
func everyStore(t *testing.T, test func(t *testing.T, store string)) {
	for _, s := range allStores {
		t.Run(s, func(t *testing.T) { test(t, s) })
	}
}
