package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// eachOfAllStores runs a test against memory, SQLite and PostgreSQL (skipped without it
// outside CI).
func eachOfAllStores(t *testing.T, test func(t *testing.T, store string)) {
	for _, s := range allStores {
		t.Run(s, func(t *testing.T) { test(t, s) })
	}
}

// askAndAnswer has c's session ask a question and answers it, and returns the run.
func askAndAnswer(t *testing.T, c *tgtest.Client, sid string) (run string) {
	t.Helper()
	_, run = c.Send(sid, "/ask what now?")
	qid := ""
	eventually(t, tgtest.Wait, "the question", func() bool {
		var out struct {
			Session struct{ PendingQuestion *struct{ ID string } }
		}
		c.Must(`query($s: ID!) { session(id: $s) { pendingQuestion { id } } }`, map[string]any{"s": sid}, &out)
		if q := out.Session.PendingQuestion; q != nil {
			qid = q.ID
			return true
		}
		return false
	})
	c.Must(`mutation($q: ID!) { respondToQuestion(input: {questionId: $q, answer: "this"}) { run { id } } }`, map[string]any{"q": qid}, nil)
	return run
}

// checkViewerLog fails the test unless evs are consecutive entries of one viewer log,
// each once: their cursors all different and in order of the log.
func checkViewerLog(t *testing.T, evs []tgtest.ViewerEvent) {
	t.Helper()
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.Cursor] {
			t.Fatalf("event %s twice: %s", e, tgtest.Describe(evs))
		}
		seen[e.Cursor] = true
	}
}

func TestViewerEventsTellEverySessionOfTheUserFromAnotherClient(t *testing.T) {
	eachOfAllStores(t, func(t *testing.T, store string) {
		a := startApp(t, store, nil)
		c := guest(t, a)
		other := guest(t, a) // another user, busy at the same time
		viewer := c.Connect("graphql-transport-ws").Viewer(c.EventsCursor())
		otherSid := other.CreateSession(nil)
		other.Send(otherSid, "hello from someone else")

		// Another client of the same user: plain HTTP, as another tab would.
		tab := c.On(a.URL)
		sid := tab.CreateSession(nil)
		viewer.Until("the new session", tgtest.Changed(sid, "IDLE"))
		run := askAndAnswer(t, tab, sid)
		asked := viewer.Until("the question", func(e tgtest.ViewerEvent) bool { return e.Typename == "InputRequested" })
		if asked.SessionID != sid || asked.Question == nil || asked.Question.Prompt != "what now?" {
			t.Errorf("InputRequested = %+v", asked)
		}
		ended := viewer.Until("the run's end", tgtest.Ended(run))
		if ended.Run.Status != "COMPLETED" {
			t.Errorf("RunEnded = %s", ended)
		}
		done := viewer.Until("the session idle and unread", func(e tgtest.ViewerEvent) bool {
			return tgtest.Changed(sid, "IDLE")(e) && e.Session.Unread
		})
		tab.Must(`mutation($s: ID!) { markSessionRead(sessionId: $s) { unread } }`, map[string]any{"s": sid}, nil)
		viewer.Until("read on every tab", func(e tgtest.ViewerEvent) bool { return tgtest.Changed(sid, "IDLE")(e) && !e.Session.Unread })
		tab.Must(`mutation($s: ID!) { deleteTalkSession(id: $s) }`, map[string]any{"s": sid}, nil)
		viewer.Until("the deletion", func(e tgtest.ViewerEvent) bool { return e.Typename == "SessionRemoved" && e.SessionID == sid })

		for _, e := range viewer.All {
			if e.Of() == otherSid {
				t.Fatalf("another user's session in the viewer's events: %s", e)
			}
		}
		checkViewerLog(t, viewer.All)
		if !done.At.After(time.Time{}) || done.Session.StreamCursor == "" {
			t.Errorf("SessionChanged without its time or cursor: %+v", done)
		}
		// What followed live is what the log holds: read again from the start, it is the
		// same, in the same order.
		again := c.Connect("graphql-ws").Viewer(viewer.All[0].Cursor)
		for _, want := range viewer.All[1:] {
			got := again.Until("the replay", func(tgtest.ViewerEvent) bool { return true })
			if got.Cursor != want.Cursor || got.String() != want.String() {
				t.Fatalf("replayed %s (%s), want %s (%s)", got, got.Cursor, want, want.Cursor)
			}
		}
	})
}

func TestViewerEventsOverServerSentEventsCarryTheirCursorsAsIDs(t *testing.T) {
	a := startApp(t, "sqlite", nil)
	c := guest(t, a)
	from := c.EventsCursor()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	evs, err := c.SSEStream(ctx, tgtest.ViewerQuery, map[string]any{"a": from})
	if err != nil {
		t.Fatal(err)
	}
	sid := c.CreateSession(nil)
	_, run := c.Send(sid, "hello")
	var ids []string
	deadline := time.After(tgtest.Wait)
	for done := false; !done; {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatal("the stream ended")
			}
			var data struct {
				Data struct{ ViewerEvents tgtest.ViewerEvent }
			}
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				t.Fatal(err)
			}
			if ev.ID != data.Data.ViewerEvents.Cursor {
				t.Fatalf("id: %q, cursor %q", ev.ID, data.Data.ViewerEvents.Cursor)
			}
			ids = append(ids, ev.ID)
			done = tgtest.Ended(run)(data.Data.ViewerEvents)
		case <-deadline:
			t.Fatalf("the run's end did not come; ids %v", ids)
		}
	}
	cancel()
	// A browser's EventSource reconnects with Last-Event-ID: it resumes after that event.
	resumed, err := c.SSEResume(t.Context(), tgtest.ViewerQuery, map[string]any{"a": from}, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range ids[1:] {
		select {
		case ev := <-resumed:
			if ev.ID != want {
				t.Fatalf("resumed at %q, want %q", ev.ID, want)
			}
		case <-time.After(tgtest.Wait):
			t.Fatalf("the resumed stream stopped before %q", want)
		}
	}
}

func TestViewerEventsFollowOnFromTheSessionsQueryWithNoGap(t *testing.T) {
	a := startApp(t, "sqlite", nil)
	c := guest(t, a)
	before := c.CreateSession(nil)
	var out struct {
		Viewer   struct{ EventsCursor string }
		Sessions struct {
			Edges []struct{ Node struct{ ID string } }
		}
	}
	c.Must(`{ viewer { eventsCursor } sessions { edges { node { id unread status } } } }`, nil, &out)
	if len(out.Sessions.Edges) != 1 || out.Sessions.Edges[0].Node.ID != before {
		t.Fatalf("sessions = %+v", out.Sessions)
	}
	after := c.CreateSession(nil)
	viewer := c.Connect("graphql-transport-ws").Viewer(out.Viewer.EventsCursor)
	first := viewer.Until("the session created after the query", func(tgtest.ViewerEvent) bool { return true })
	if first.Of() != after {
		t.Errorf("the first event after the query's cursor is of %s, want the new session %s", first.Of(), after)
	}
}

func TestViewerCursorExpiresPastRetention(t *testing.T) {
	eachOfAllStores(t, func(t *testing.T, store string) {
		a := startApp(t, store, func(c *app.Config) { c.Service.ViewerRetention = time.Second })
		c := guest(t, a)
		from := c.EventsCursor()
		// Two events: a store keeps a user's newest past the retention, never the one
		// before it.
		c.CreateSession(nil)
		c.CreateSession(nil)
		ws := c.Connect("graphql-transport-ws")
		eventually(t, tgtest.Wait, "CURSOR_EXPIRED for a cursor older than the retention", func() bool {
			v := ws.Viewer(from)
			if _, ok := v.TryNext(tgtest.Wait); ok {
				v.Stop() // still kept; a connection holds at most 100 subscriptions
				return false
			}
			errs := v.Err()
			return len(errs) == 1 && errs[0].Code() == "CURSOR_EXPIRED"
		})
		// The cursor of now still works.
		v := ws.Viewer(c.EventsCursor())
		sid := c.CreateSession(nil)
		v.Until("the new session", tgtest.Changed(sid, ""))
		for _, bad := range []string{"not-a-cursor", strings.Repeat("x", 2000)} {
			if e := ws.Viewer(bad); func() bool { _, ok := e.TryNext(tgtest.Wait); return ok }() || len(e.Err()) == 0 || e.Err()[0].Code() != "BAD_USER_INPUT" {
				t.Errorf("cursor %.20q: %+v, want BAD_USER_INPUT", bad, e.Err())
			}
		}
	})
}

func TestViewerEventsAcrossASIGKILLRestart(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			env := []string{"DATABASE_URL=sqlite://" + filepath.Join(dir, "t.db")}
			if store == "postgres" {
				// The same replica again: it takes back its earlier life's runs.
				env = []string{"DATABASE_URL=" + testsvc.NewDatabase(t), "REPLICA_ID=viewer-" + filepath.Base(dir)}
			}
			port := freePort(t)
			srv := startChild(t, dir, port, env...)
			c := tgtest.Guest(t, srv.URL)
			start := c.EventsCursor()
			viewer := c.Connect("graphql-transport-ws").Viewer(start)
			s1 := c.CreateSession(nil)
			_, r1 := c.Send(s1, "before the crash")
			viewer.Until("the first run's end", tgtest.Ended(r1))
			seen := viewer.All[len(viewer.All)-1].Cursor
			// What happens after the last event the client saw, then the crash.
			s2 := c.CreateSession(nil)
			c.Send(s2, "/slow 1000")
			srv.kill()

			startChild(t, dir, port, env...) // the same port, data and database: c reaches it
			_, r3 := c.Send(s1, "after the restart")
			resumed := c.Connect("graphql-transport-ws").Viewer(seen)
			resumed.Until("the run after the restart", tgtest.Ended(r3))
			whole := c.Connect("graphql-ws").Viewer(start)
			for range len(viewer.All) + len(resumed.All) {
				if _, ok := whole.TryNext(tgtest.Wait); !ok {
					t.Fatalf("the log from the start ended early: %s", tgtest.Describe(whole.All))
				}
			}
			want := append(append([]tgtest.ViewerEvent{}, viewer.All...), resumed.All...)
			if tgtest.Describe(whole.All) != tgtest.Describe(want) {
				t.Fatalf("before the crash and resumed after it:\n%s\nthe log from the start:\n%s", tgtest.Describe(want), tgtest.Describe(whole.All))
			}
			checkViewerLog(t, want)
			var s2ended bool
			for _, e := range resumed.All {
				s2ended = s2ended || (e.Typename == "RunEnded" && e.Run.SessionID == s2 && e.Run.Status == "INTERRUPTED")
			}
			if !s2ended {
				t.Errorf("the run the crash interrupted is not among the events after the cursor: %s", tgtest.Describe(resumed.All))
			}
		})
	}
}

func TestViewerEventsFromAnotherReplica(t *testing.T) {
	rs := newReplicaSet(t, setOptions{n: 2})
	c := tgtest.Guest(t, rs.reps[0].URL)
	viewer := c.Connect("graphql-transport-ws").Viewer(c.EventsCursor())
	there := c.On(rs.reps[1].URL)
	var runs []string
	for i := range 3 {
		sid := there.CreateSession(nil)
		_, run := there.Send(sid, fmt.Sprintf("hello %d", i))
		runs = append(runs, run)
	}
	// The runs end in any order: wait until every one's end was told.
	ended := map[string]bool{}
	viewer.Until("every run's end on the other replica", func(e tgtest.ViewerEvent) bool {
		if e.Typename == "RunEnded" {
			ended[e.Run.ID] = true
		}
		return ended[runs[0]] && ended[runs[1]] && ended[runs[2]]
	})
	checkViewerLog(t, viewer.All)
	whole := c.On(rs.reps[1].URL).Connect("graphql-transport-ws").Viewer(viewer.All[0].Cursor)
	for range len(viewer.All) - 1 {
		if _, ok := whole.TryNext(tgtest.Wait); !ok {
			t.Fatalf("replayed on the other replica: %s", tgtest.Describe(whole.All))
		}
	}
	if tgtest.Describe(whole.All) != tgtest.Describe(viewer.All[1:]) {
		t.Errorf("live on replica 0:\n%s\nreplayed on replica 1:\n%s", tgtest.Describe(viewer.All[1:]), tgtest.Describe(whole.All))
	}
}
