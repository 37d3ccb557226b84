package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// The conversation as a tree: what Store says of parents, the current branch, switches,
// children, counts and a session's runs.

var treeTests = []struct {
	name string
	fn   func(t *testing.T, s service.Store)
}{
	{"Tree/Messages is the current branch, as MessageAdded and Switches leave it", testTreeBranch},
	{"Tree/a switch and a snapshot in one batch: the snapshot does not move the message", testTreeSwitchWithSnapshot},
	{"Tree/the last switch of each message holds, in a batch and across batches", testTreeSwitchesNet},
	{"Tree/Message reads a message off the branch, saying so", testTreeMessageOffBranch},
	{"Tree/Children by Seq, up to a limit; first messages under \"\"", testTreeChildren},
	{"Tree/CountMessages counts every branch", testTreeCount},
	{"Tree/SessionRuns of one session in the given statuses, oldest first", testTreeSessionRuns},
	{"Tree/BranchSelected's switch round-trips in the log, and ReplyTo in runs", testTreeRoundTrip},
}

// child returns a message of sessionID with the given parent.
func child(id, sessionID, parent string, role service.Role) *service.Message {
	m := newMessage(id, sessionID)
	m.ParentID, m.Role = parent, role
	return m
}

func switched(leaf string, off, on []string) *service.Event {
	return &service.Event{Type: service.EventBranchSelected, At: at(time.Minute), Key: leaf,
		Branch: &service.BranchSwitch{Off: off, On: on}}
}

func branchIDs(t *testing.T, s service.Store, sid string) []string {
	t.Helper()
	ms, err := s.Messages(context.Background(), sid, service.MessagePage{})
	if err != nil {
		t.Fatal(err)
	}
	return messageIDs(ms)
}

func testTreeBranch(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", at(0)))
	u1 := child("u1", "s1", "", service.RoleUser)
	a1 := child("a1", "s1", "u1", service.RoleAssistant)
	u2 := child("u2", "s1", "a1", service.RoleUser)
	a2 := child("a2", "s1", "u2", service.RoleAssistant)
	l.append(added(u1), added(a1), added(u2), added(a2))
	wantEqual(t, "a line", branchIDs(t, s, "s1"), []string{"u1", "a1", "u2", "a2"})

	// An edit of u2: added beside it, then its branch made current.
	u2b := child("u2b", "s1", "a1", service.RoleUser)
	u2b.OffBranch = true
	l.append(added(u2b))
	wantEqual(t, "a message added beside the branch stays off it", branchIDs(t, s, "s1"), []string{"u1", "a1", "u2", "a2"})
	l.append(switched("u2b", []string{"u2", "a2"}, []string{"u2b"}))
	wantEqual(t, "after the switch", branchIDs(t, s, "s1"), []string{"u1", "a1", "u2b"})
	a2b := child("a2b", "s1", "u2b", service.RoleAssistant)
	l.append(added(a2b))
	wantEqual(t, "the reply joins at the end", branchIDs(t, s, "s1"), []string{"u1", "a1", "u2b", "a2b"})

	// Pages are of the branch alone.
	ms, err := s.Messages(context.Background(), "s1", service.MessagePage{Last: 2})
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "the last two of the branch", messageIDs(ms), []string{"u2b", "a2b"})
	ms, err = s.Messages(context.Background(), "s1", service.MessagePage{After: 1, Before: 7, First: 10}) // u1 is event 1, a2b event 7
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "a bounded page of the branch", messageIDs(ms), []string{"a1", "u2b"})
	for _, m := range ms {
		if m.OffBranch {
			t.Fatalf("a message of the branch says it is off it: %+v", m)
		}
	}

	// Back to the first version, in one batch with a later one that goes back again.
	mustAppend(t, s, l.batch(switched("a2", []string{"u2b", "a2b"}, []string{"u2", "a2"})))
	l.last++
	wantEqual(t, "back to the first version", branchIDs(t, s, "s1"), []string{"u1", "a1", "u2", "a2"})
	l.append(switched("a2", []string{"u2", "a2"}, []string{"u2b", "a2b"}), switched("a2", []string{"u2b", "a2b"}, []string{"u2", "a2"}))
	wantEqual(t, "two switches in one batch apply in order", branchIDs(t, s, "s1"), []string{"u1", "a1", "u2", "a2"})

	// Other sessions are untouched by a switch naming their messages.
	l2 := create(t, s, newSession("s2", "u1", at(0)))
	l2.append(added(child("x1", "s2", "", service.RoleUser)))
	l.append(switched("a1", []string{"x1", "u2", "a2"}, nil))
	wantEqual(t, "a switch of s1 leaves s2 alone", branchIDs(t, s, "s2"), []string{"x1"})
	wantEqual(t, "the cut branch", branchIDs(t, s, "s1"), []string{"u1", "a1"})
}

func testTreeSwitchWithSnapshot(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", at(0)))
	u1 := child("u1", "s1", "", service.RoleUser)
	a1 := child("a1", "s1", "u1", service.RoleAssistant)
	a1.Status = service.MessageStreaming
	l.append(added(u1), added(a1))
	// The reply completes in the batch that takes it off the branch; its snapshot says
	// nothing of the branch.
	done := *a1
	done.Status = service.MessageComplete
	l.append(switched("u1", []string{"a1"}, nil), completed(&done))
	wantEqual(t, "the branch", branchIDs(t, s, "s1"), []string{"u1"})
	m, err := s.Message(context.Background(), "a1")
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != service.MessageComplete || !m.OffBranch || m.ParentID != "u1" {
		t.Fatalf("the completed reply reads %+v", m)
	}
}

func testTreeSwitchesNet(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", at(0)))
	a1b := child("a1b", "s1", "u1", service.RoleAssistant)
	a1b.OffBranch = true
	l.append(added(child("u1", "s1", "", service.RoleUser)), added(child("a1", "s1", "u1", service.RoleAssistant)), added(a1b))
	wantEqual(t, "before", branchIDs(t, s, "s1"), []string{"u1", "a1"})

	// One batch takes a1 off and puts it back, and puts a1b on and takes it off.
	l.append(switched("a1b", []string{"a1"}, []string{"a1b"}), switched("a1", []string{"a1b"}, []string{"a1"}))
	wantEqual(t, "off and on again in one batch", branchIDs(t, s, "s1"), []string{"u1", "a1"})

	// A message added off the branch, switched on, off and on again in the batch that adds it.
	a1c := child("a1c", "s1", "u1", service.RoleAssistant)
	a1c.OffBranch = true
	l.append(added(a1c), switched("a1c", []string{"a1"}, []string{"a1c"}),
		switched("a1", []string{"a1c"}, []string{"a1"}), switched("a1c", []string{"a1"}, []string{"a1c"}))
	wantEqual(t, "a new message switched three times in its batch", branchIDs(t, s, "s1"), []string{"u1", "a1c"})

	// Several batches in one Append, with another session's between them: the later holds.
	l2 := create(t, s, newSession("s2", "u1", at(0)))
	x1b := child("x1b", "s2", "", service.RoleUser)
	x1b.OffBranch = true
	l2.append(added(child("x1", "s2", "", service.RoleUser)), added(x1b))
	var bs []*service.Batch
	for _, sw := range [][2]string{{"a1c", "a1b"}, {"a1b", "a1"}, {"a1", "a1b"}} {
		bs = append(bs, l.batch(switched(sw[1], []string{sw[0]}, []string{sw[1]})))
		l.last++
		if len(bs) == 1 {
			bs = append(bs, l2.batch(switched("x1b", []string{"x1", "a1"}, []string{"x1b", "a1c"})))
			l2.last++
		}
	}
	mustAppend(t, s, bs...)
	wantEqual(t, "three batches of s1 in one Append", branchIDs(t, s, "s1"), []string{"u1", "a1b"})
	wantEqual(t, "s2's batch among them", branchIDs(t, s, "s2"), []string{"x1b"})
	for id, off := range map[string]bool{"a1": true, "a1b": false, "a1c": true, "x1": true, "x1b": false} {
		m, err := s.Message(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if m.OffBranch != off {
			t.Fatalf("%s reads OffBranch %v, want %v", id, m.OffBranch, off)
		}
	}

	// And in an Append of its own, back where it started, with an event that names a1 in
	// both lists: it leaves, then joins.
	l.append(switched("a1", []string{"a1b", "a1"}, []string{"a1"}))
	wantEqual(t, "batch after batch", branchIDs(t, s, "s1"), []string{"u1", "a1"})
}

func testTreeMessageOffBranch(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", at(0)))
	u1 := child("u1", "s1", "", service.RoleUser)
	u1b := child("u1b", "s1", "", service.RoleUser)
	u1b.OffBranch = true
	l.append(added(u1), added(u1b))
	for id, off := range map[string]bool{"u1": false, "u1b": true} {
		m, err := s.Message(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if m.OffBranch != off || m.ParentID != "" {
			t.Fatalf("%s reads OffBranch %v parent %q", id, m.OffBranch, m.ParentID)
		}
	}
}

func testTreeChildren(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", at(0)))
	var evs []*service.Event
	for i := range 5 {
		m := child(fmt.Sprintf("v%d", i), "s1", "", service.RoleUser)
		m.OffBranch = i > 0
		evs = append(evs, added(m))
	}
	evs = append(evs, added(child("r", "s1", "v0", service.RoleAssistant)))
	l.append(evs...)
	create(t, s, newSession("s2", "u1", at(0))).append(added(child("w", "s2", "", service.RoleUser)))
	kids, err := s.Children(context.Background(), "s1", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "the first messages of s1", messageIDs(kids), []string{"v0", "v1", "v2", "v3", "v4"})
	kids, err = s.Children(context.Background(), "s1", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "up to a limit", messageIDs(kids), []string{"v0", "v1"})
	kids, err = s.Children(context.Background(), "s1", "v0", 0)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "the reply under v0", messageIDs(kids), []string{"r"})
	kids, err = s.Children(context.Background(), "nope", "", 0)
	if err != nil || len(kids) != 0 {
		t.Fatalf("children of a missing session: %v %v", kids, err)
	}
}

func testTreeCount(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", at(0)))
	u1b := child("u1b", "s1", "", service.RoleUser)
	u1b.OffBranch = true
	l.append(added(child("u1", "s1", "", service.RoleUser)), added(u1b), added(child("a1", "s1", "u1", service.RoleAssistant)))
	n, err := s.CountMessages(context.Background(), "s1")
	if err != nil || n != 3 {
		t.Fatalf("CountMessages = %d, %v; want 3", n, err)
	}
	if n, err := s.CountMessages(context.Background(), "nope"); err != nil || n != 0 {
		t.Fatalf("CountMessages of a missing session = %d, %v", n, err)
	}
}

func testTreeSessionRuns(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", at(0)))
	l.append(runChanged(newRun("r3", "s1", service.RunQueued, at(3*time.Second))),
		runChanged(newRun("r1", "s1", service.RunRunning, at(time.Second))),
		runChanged(newRun("r2", "s1", service.RunQueued, at(2*time.Second))),
		runChanged(newRun("r0", "s1", service.RunCompleted, at(0))))
	create(t, s, newSession("s2", "u1", at(0))).append(runChanged(newRun("x", "s2", service.RunQueued, at(0))))
	runs, err := s.SessionRuns(context.Background(), "s1", service.RunQueued)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "queued runs of s1", idsOf(runs, func(r *service.Run) string { return r.ID }), []string{"r2", "r3"})
	runs, err = s.SessionRuns(context.Background(), "s1", service.RunQueued, service.RunRunning)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "active runs of s1", idsOf(runs, func(r *service.Run) string { return r.ID }), []string{"r1", "r2", "r3"})
}

func testTreeRoundTrip(t *testing.T, s service.Store) {
	l := create(t, s, newSession("s1", "u1", at(0)))
	r := newRun("r1", "s1", service.RunQueued, at(0))
	r.ReplyTo = "u1"
	l.append(added(child("u1", "s1", "", service.RoleUser)), runChanged(r), switched("u1", []string{"x", "y"}, []string{"u1"}))
	got, err := s.Run(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ReplyTo != "u1" {
		t.Fatalf("ReplyTo = %q", got.ReplyTo)
	}
	evs, err := s.Events(context.Background(), "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != service.EventBranchSelected || last.Key != "u1" || last.Branch == nil ||
		fmt.Sprint(last.Branch.Off, last.Branch.On) != "[x y] [u1]" {
		t.Fatalf("the BranchSelected event reads %+v (branch %+v)", last, last.Branch)
	}
	if evs[0].Message.ParentID != "" || evs[1].Run.ReplyTo != "u1" {
		t.Fatalf("payloads: %+v %+v", evs[0].Message, evs[1].Run)
	}
}
