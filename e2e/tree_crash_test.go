package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// TestCrashRightAfterEdit kills the server (SIGKILL) as soon as editMessage was
// answered: after the restart the new branch is current and its run is there and ends,
// whether the edit switched at once (the agent was idle: its run, running when the
// process died, ends INTERRUPTED as every such run does, unless it was done already) or
// waited (ENQUEUE while the agent worked: the branch switches when its run starts, after
// the restart, and it runs to its end).
func TestCrashRightAfterEdit(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test starts and kills processes")
	}
	for _, tc := range []struct {
		name, policy string
		busy         bool
	}{
		{"idle", "INTERRUPT", false},
		{"waiting behind a run", "ENQUEUE", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			port := freePort(t)
			srv := startChild(t, dataDir, port)
			c := tgtest.Guest(t, srv.URL)
			sid := c.CreateSession(map[string]any{"busyPolicy": tc.policy})
			_, evs := c.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
			u1, _ := turn(c, evs, sid, "one")
			if tc.busy {
				c.Send(sid, "/slow 30")
				evs.Until("the slow reply's first chunk", func(ev tgtest.Event) bool { return ev.Typename == "MessageChunk" })
			}
			before := c.Cursor(sid)
			e := edit(c, u1, "one, edited")
			srv.kill()
			defer func() {
				if t.Failed() {
					log, _ := os.ReadFile(filepath.Join(dataDir, "child.log"))
					t.Logf("log:\n%s", log)
				}
			}()

			startChild(t, dataDir, port)
			var run struct{ Run struct{ ID, Status string } }
			c.Must(`query($r: ID!){ run(id: $r){ id status } }`, map[string]any{"r": e.EditMessage.Run.ID}, &run)
			if run.Run.ID != e.EditMessage.Run.ID {
				t.Fatalf("the edit's run is gone after the crash: %+v", run)
			}
			_, after := c.Connect("graphql-transport-ws").Stream(sid, before)
			end := after.Until("the edit's run ends", tgtest.RunEnds(e.EditMessage.Run.ID))
			if end.Run.Status != "COMPLETED" && (tc.busy || end.Run.Status != "INTERRUPTED") {
				t.Fatalf("the edit's run ended %s: %s", end.Run.Status, end.Run.Error)
			}
			msgs := c.Messages(sid)
			checkBranch(t, msgs)
			if len(msgs) < 1 || msgs[0].ID != e.EditMessage.Message.ID || msgs[0].Content != "one, edited" ||
				end.Run.Status == "COMPLETED" && (len(msgs) != 2 || msgs[1].Role != "ASSISTANT") {
				t.Fatalf("after the restart the branch is %+v (the run %s)", msgs, end.Run.Status)
			}
			if !slices.Equal(msgs[0].SiblingIDs, []string{u1, e.EditMessage.Message.ID}) {
				t.Fatalf("siblings %v", msgs[0].SiblingIDs)
			}
		})
	}
}

// TestReplicasTree: an edit, a regeneration and a branch switch made through one replica
// are followed on another (its subscribers rebuild the branch from the events) and read
// on a third.
func TestReplicasTree(t *testing.T) {
	t.Parallel()
	rs := newReplicaSet(t, setOptions{})
	r := rs.reps
	c := tgtest.Guest(t, r[0].URL)
	on1, on2 := c.On(r[1].URL), c.On(r[2].URL)
	sid := c.CreateSession(nil)
	_, evs := on1.Connect("graphql-transport-ws").Stream(sid, c.Cursor(sid))
	u1, _ := turn(c, evs, sid, "one")
	turn(c, evs, sid, "two")

	e := edit(c, u1, "one, edited")
	evs.Until("the edit's run ends", tgtest.RunEnds(e.EditMessage.Run.ID))
	msgs := on2.Messages(sid)
	checkBranch(t, msgs)
	if len(msgs) != 2 || msgs[0].ID != e.EditMessage.Message.ID {
		t.Fatalf("read on a third replica after the edit: %+v", msgs)
	}
	untilBranch(t, evs, ids(msgs))

	regen, _ := regenerate(on2, msgs[1].ID)
	evs.Until("the regeneration's run ends", tgtest.RunEnds(regen))
	selectBranch(on1, u1)
	want := ids(c.Messages(sid))
	if len(want) != 4 || want[0] != u1 {
		t.Fatalf("after selecting the first version: %v", want)
	}
	deadline := time.Now().Add(tgtest.Wait)
	for !slices.Equal(rebuildBranch(evs.All), want) {
		if _, ok := evs.TryNext(time.Until(deadline)); !ok {
			t.Fatalf("the follower on replica 1 rebuilds %v, want %v", rebuildBranch(evs.All), want)
		}
	}
}
