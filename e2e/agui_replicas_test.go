package e2e

import (
	"slices"
	"testing"

	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// TestAGUIResumesOnAnotherReplica: an AG-UI stream from one replica, dropped, resumed with
// Last-Event-ID on another (PostgreSQL and NATS between them), has no gap and no
// duplicate: @ag-ui/client assembles the message the session holds.
func TestAGUIResumesOnAnotherReplica(t *testing.T) {
	t.Parallel()
	node := installNodePackages(t, aguiDir, "@ag-ui/client", "the AG-UI client tests")
	rs := newReplicaSet(t, setOptions{n: 2})
	c := tgtest.Guest(t, rs.reps[0].URL)
	s := runAGUI(t, node, map[string]any{"url": rs.reps[0].URL + "/agui", "token": c.Token, "thread": "across",
		"steps": []map[string]any{
			{"message": "/slow 6", "cut": map[string]any{"after": 3}},
			{"lastEventId": true, "url": rs.reps[1].URL + "/agui"},
		}})
	if slices.Contains(s[0].types(), "RUN_FINISHED") || s[0].LastID == "" {
		t.Fatalf("the first stream was not cut: %v", s[0].types())
	}
	if got := s[1].types(); len(got) < 3 || got[0] != "RUN_STARTED" || got[1] != "TEXT_MESSAGE_START" || got[len(got)-1] != "RUN_FINISHED" {
		t.Errorf("the resumed stream: %v", got)
	}
	msgs := c.On(rs.reps[1].URL).Messages(onlySession(t, c))
	if len(msgs) != 2 || msgs[1].Status != "COMPLETE" || s[1].assistant() != msgs[1].Content {
		t.Errorf("the client assembled %q, the session holds %+v", s[1].assistant(), msgs)
	}
}
