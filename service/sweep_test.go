package service

import (
	"fmt"
	"testing"
	"time"
)

func TestQuotaSweepForgetsStaleFootprintsAndTheirRoom(t *testing.T) {
	var q quotas
	crowd := time.Now()
	q.users = map[string]*footprint{}
	for i := range 3000 {
		q.users[fmt.Sprint("user", i)] = &footprint{sessions: 1, read: crowd}
	}
	q.peak = len(q.users)
	q.users["recent"] = &footprint{sessions: 2, read: crowd.Add(quotaFresh - time.Second)}

	q.sweep(crowd.Add(quotaFresh - time.Millisecond))
	if n := len(q.users); n != 3001 {
		t.Fatalf("%d footprints after a sweep while all were fresh, want 3001", n)
	}
	q.sweep(crowd.Add(quotaFresh))
	if n := len(q.users); n != 1 || q.users["recent"] == nil {
		t.Fatalf("footprints after the crowd went stale: %d, want only the recent one", n)
	}
	if q.peak != 1 {
		t.Errorf("peak %d after the sweep, want the map made anew at its size (1)", q.peak)
	}
	if f := q.users["recent"]; f.sessions != 2 {
		t.Errorf("the recent footprint changed: %+v", f)
	}
}

func TestShrinkStatesGivesBackTheRoomOfACrowd(t *testing.T) {
	c := &core{states: registry{byID: map[string]*sessionState{}}}
	c.peers = solo{c}
	for i := range 3000 {
		c.acquireState(&TalkSession{ID: fmt.Sprint("session", i), UserID: "u"})
	}
	kept := c.states.byID["session7"]
	for _, st := range c.liveStates() {
		if st.id != "session7" {
			c.releaseState(st)
		}
	}
	c.states.shrink()
	if len(c.states.byID) != 1 || c.states.byID["session7"] != kept {
		t.Fatalf("states after the crowd left: %d, want the one still held", len(c.states.byID))
	}
	if c.states.peak != 1 {
		t.Errorf("peak %d after shrinking, want the map made anew at its size (1)", c.states.peak)
	}
	if st := c.acquireState(&TalkSession{ID: "session7", UserID: "u"}); st != kept || st.refs != 2 {
		t.Errorf("the held state was not kept as it was (refs %d)", st.refs)
	}
}
