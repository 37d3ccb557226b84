package e2e

import (
	"testing"

	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// TestAGUIResumesOnAnotherReplica: AG-UI streams from one replica, cut while their run
// goes on at the cuts that need care (inside a message, right before its end, inside a
// tool call that runs or awaits approval), resumed with Last-Event-ID on another
// (PostgreSQL and NATS between them): no gap, no duplicate, and @ag-ui/client takes them.
func TestAGUIResumesOnAnotherReplica(t *testing.T) {
	t.Parallel()
	node := installNodePackages(t, aguiDir, "@ag-ui/client", "the AG-UI client tests")
	rs := newReplicaSet(t, setOptions{n: 2, env: []string{"DEMO_CHUNK_DELAY=20ms"}})
	checkLiveCuts(t, node, rs.reps[0].URL, rs.reps[1].URL, func(t *testing.T) *tgtest.Client { return tgtest.Guest(t, rs.reps[0].URL) })
}
