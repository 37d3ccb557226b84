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
	s := &Service{states: map[string]*sessionState{}}
	s.peers = solo{s}
	for i := range 3000 {
		s.acquireState(&TalkSession{ID: fmt.Sprint("session", i), UserID: "u"})
	}
	kept := s.states["session7"]
	for id, st := range s.states {
		if id != "session7" {
			s.releaseState(st)
		}
	}
	s.shrinkStates()
	if len(s.states) != 1 || s.states["session7"] != kept {
		t.Fatalf("states after the crowd left: %d, want the one still held", len(s.states))
	}
	if s.statesPeak != 1 {
		t.Errorf("peak %d after shrinking, want the map made anew at its size (1)", s.statesPeak)
	}
	if st := s.acquireState(&TalkSession{ID: "session7", UserID: "u"}); st != kept || st.refs != 2 {
		t.Errorf("the held state was not kept as it was (refs %d)", st.refs)
	}
}
