package e2e

import (
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
			{"message": "/slow 6", "dropAfter": 3},
			{"lastEventId": true, "url": rs.reps[1].URL + "/agui"},
		}})
	checkResumed(t, c.On(rs.reps[1].URL), s)
}
