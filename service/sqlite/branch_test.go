package sqlite

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// treeSession writes a session whose current branch is a line of n messages, with
// branches versions beside its middle message (each with a reply): what edits leave.
func treeSession(tb testing.TB, s *Store, n, branches int) {
	tb.Helper()
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sess := &service.TalkSession{ID: "s1", UserID: "u", Title: "t", Settings: service.Settings{Agent: "demo"}, CreatedAt: now, UpdatedAt: now}
	if errs := s.Append(ctx, []*service.Batch{{SessionID: "s1", Create: sess}}); errs[0] != nil {
		tb.Fatal(errs[0])
	}
	var evs []*service.Event
	seq := int64(0)
	add := func(m *service.Message) {
		seq++
		m.SessionID, m.Seq, m.Kind, m.Status, m.CreatedAt = "s1", seq, service.KindText, service.MessageComplete, now
		evs = append(evs, &service.Event{SessionID: "s1", Seq: seq, Type: service.EventMessageAdded, At: now, Message: m})
	}
	parent := ""
	var middleParent string
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		if i == n/2 {
			middleParent = parent
		}
		add(&service.Message{ID: id, Role: service.RoleUser, Content: "line " + id, ParentID: parent})
		parent = id
	}
	for b := range branches {
		v := fmt.Sprintf("v%d", b)
		add(&service.Message{ID: v, Role: service.RoleUser, Content: "version", ParentID: middleParent, OffBranch: true})
		add(&service.Message{ID: v + "r", Role: service.RoleAssistant, Content: "reply", ParentID: v, OffBranch: true})
	}
	for len(evs) > 0 {
		k := min(len(evs), 500)
		if errs := s.Append(ctx, []*service.Batch{{SessionID: "s1", Events: evs[:k]}}); errs[0] != nil {
			tb.Fatal(errs[0])
		}
		evs = evs[k:]
	}
}

// TestCurrentBranchIsOneIndexedRange: SQLite reads a page of the current branch as one
// range of the partial index messages_on_branch, whatever other branches there are.
func TestCurrentBranchIsOneIndexedRange(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "t.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	treeSession(t, s, 40, 50)
	for _, q := range []string{qMessagesFirst, qMessagesLast} {
		rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, "s1", int64(math.MinInt64), int64(math.MaxInt64), 20)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notUsed int
			var detail string
			if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		all := strings.Join(plan, "; ")
		if len(plan) != 1 || !strings.Contains(all, "USING INDEX messages_on_branch") || strings.Contains(all, "TEMP B-TREE") {
			t.Fatalf("the branch is read as %q; want one range of messages_on_branch", all)
		}
	}
	ms, err := s.Messages(ctx, "s1", service.MessagePage{})
	if err != nil || len(ms) != 40 {
		t.Fatalf("the branch has %d messages (%v), want 40", len(ms), err)
	}
}

// BenchmarkCurrentBranch reads the last 20 messages of a session's current branch, with
// no other branch and with 1,000 of them.
func BenchmarkCurrentBranch(b *testing.B) {
	for _, branches := range []int{0, 1000} {
		b.Run(fmt.Sprintf("branches=%d", branches), func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, filepath.Join(b.TempDir(), "t.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			treeSession(b, s, 200, branches)
			b.ResetTimer()
			for b.Loop() {
				ms, err := s.Messages(ctx, "s1", service.MessagePage{Last: 20})
				if err != nil || len(ms) != 20 {
					b.Fatalf("%d messages, %v", len(ms), err)
				}
			}
		})
	}
}
