package service_test

import (
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

func TestRunStatusFinal(t *testing.T) {
	for status, final := range map[service.RunStatus]bool{
		service.RunQueued: false, service.RunRunning: false, service.RunWaitingForInput: false,
		service.RunCompleted: true, service.RunCancelled: true, service.RunInterrupted: true, service.RunFailed: true,
		"": false, "DONE": false,
	} {
		if got := status.Final(); got != final {
			t.Errorf("%q.Final() = %v, want %v", status, got, final)
		}
	}
}

func TestBusyPolicyValid(t *testing.T) {
	for policy, valid := range map[service.BusyPolicy]bool{
		service.BusyInterrupt: true, service.BusyEnqueue: true, service.BusyReject: true, "": false, "interrupt": false,
	} {
		if got := policy.Valid(); got != valid {
			t.Errorf("%q.Valid() = %v, want %v", policy, got, valid)
		}
	}
}

func TestEventTypeChunky(t *testing.T) {
	for _, typ := range []service.EventType{service.EventMessageAdded, service.EventMessageCompleted, service.EventRunStatusChanged,
		service.EventQuestionAsked, service.EventQuestionAnswered, service.EventToolCallStarted, service.EventToolCallFinished, service.EventSessionUpdated} {
		if typ.Chunky() {
			t.Errorf("%s is chunky", typ)
		}
	}
	for _, typ := range []service.EventType{service.EventMessageChunk, service.EventToolCallOutput} {
		if !typ.Chunky() {
			t.Errorf("%s is not chunky", typ)
		}
	}
}

func TestAgents(t *testing.T) {
	t.Run("the zero value is empty and ready", func(t *testing.T) {
		var a service.Agents
		if _, ok := a.Get("x"); ok || len(a.List()) != 0 {
			t.Error("not empty")
		}
	})
	t.Run("Register adds or replaces an agent; List gives every agent by name", func(t *testing.T) {
		var a service.Agents
		p1, p2 := newPuppet(), newPuppet()
		a.Register("zeta", "z", p1)
		a.Register("alpha", "a", p1)
		a.Register("zeta", "z2", p2)
		if r, ok := a.Get("zeta"); !ok || r != service.Runner(p2) {
			t.Error("zeta was not replaced")
		}
		list := a.List()
		if len(list) != 2 || list[0].Name != "alpha" || list[0].Description != "a" || list[1].Name != "zeta" || list[1].Description != "z2" {
			t.Errorf("List = %+v", list)
		}
	})
}
