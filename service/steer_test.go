package service_test

import (
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// steerPuppet is a puppet that takes steers (service.Steerable).
type steerPuppet struct{ *puppet }

func (steerPuppet) TakesSteers() bool { return true }

func steerSetup(p *puppet) setup {
	return setup{agents: map[string]service.Runner{"puppet": p, "steerable": steerPuppet{p}}}
}

func steer(t *testing.T, svc *service.Service, sid, content string) (*service.Message, *service.Run) {
	t.Helper()
	m, r, err := svc.AddMessageWith(alice, sid, content, "", service.BusySteer)
	if err != nil {
		t.Fatalf("steer %q: %v", content, err)
	}
	return m, r
}

// A steer is handed to the running agent: the same run, the reply so far complete, the
// agent's text after it a new message after the steer on the branch.
func TestSteerReachesTheRunningAgent(t *testing.T) {
	p := newPuppet()
	svc := start(t, steerSetup(p))
	sess := newSession(t, svc, alice, "steerable", "")
	_, run := send(t, svc, alice, sess.ID, "go")
	tn := p.next(t)
	tn.say(t, "before")
	m, r := steer(t, svc, sess.ID, "turn left")
	if r.ID != run.ID || r.Status != service.RunRunning {
		t.Fatalf("the steer went to run %s (%s), want the running %s", r.ID, r.Status, run.ID)
	}
	got, err := tn.out.Steers()
	if err != nil || len(got) != 1 || got[0].ID != m.ID || got[0].Content != "turn left" {
		t.Fatalf("Steers() = %+v, %v", got, err)
	}
	if again, _ := tn.out.Steers(); len(again) != 0 {
		t.Fatalf("a steer was handed over twice: %+v", again)
	}
	tn.say(t, "after")
	tn.finish(nil)
	f := follow(t, svc, alice, sess.ID, "")
	f.until(runEnds(run.ID))
	h := history(t, svc, alice, sess.ID)
	var got2 []string
	for _, m := range h {
		got2 = append(got2, string(m.Role)+":"+m.Content+":"+string(m.Status))
	}
	want := []string{"USER:go:COMPLETE", "ASSISTANT:before:COMPLETE", "USER:turn left:COMPLETE", "ASSISTANT:after:COMPLETE"}
	if len(got2) != 4 || got2[0] != want[0] || got2[1] != want[1] || got2[2] != want[2] || got2[3] != want[3] {
		t.Fatalf("history %v, want %v", got2, want)
	}
	if h[2].ParentID != h[1].ID || h[3].ParentID != h[2].ID {
		t.Fatalf("the branch's parents: %+v", h)
	}
	p.idle(t)
}

// An agent that cannot take steers gets the message as ENQUEUE gives it: a run of its own
// after the running one, which reads it.
func TestSteerToAnAgentThatCannotTakeItWaits(t *testing.T) {
	p := newPuppet()
	svc := start(t, steerSetup(p))
	sess := newSession(t, svc, alice, "puppet", "")
	_, run := send(t, svc, alice, sess.ID, "go")
	tn := p.next(t)
	_, r := steer(t, svc, sess.ID, "turn left")
	if r.ID == run.ID || r.Status != service.RunQueued {
		t.Fatalf("the steer's run is %s (%s); want a queued run of its own", r.ID, r.Status)
	}
	tn.running(t)
	tn.finish(nil)
	next := p.next(t)
	if next.req.RunID != r.ID || last(next.req.History).Content != "turn left" {
		t.Fatalf("the next run %s reads %+v", next.req.RunID, last(next.req.History))
	}
	next.finish(nil)
}

// A steer the agent never took starts the next run once its run completes; a run that
// is stopped leaves it in the history, starting nothing.
func TestSteerNotTaken(t *testing.T) {
	p := newPuppet()
	svc := start(t, steerSetup(p))
	sess := newSession(t, svc, alice, "steerable", "")
	_, run := send(t, svc, alice, sess.ID, "go")
	tn := p.next(t)
	steer(t, svc, sess.ID, "and then?")
	tn.finish(nil)
	next := p.next(t)
	if next.req.RunID == run.ID || last(next.req.History).Content != "and then?" {
		t.Fatalf("the steer's run %s reads %+v", next.req.RunID, last(next.req.History))
	}
	steer(t, svc, sess.ID, "stop anyway")
	if _, err := svc.CancelRun(alice, sess.ID); err != nil {
		t.Fatal(err)
	}
	next.stopped(t)
	// The stop is one write: a run for the steer would be in it.
	v := view(t, svc, alice, sess.ID)
	queued, err := svc.QueuedRuns(alice, v)
	if err != nil || v.ActiveRun != nil || len(queued) != 0 {
		t.Fatalf("after the stop: active %+v, queued %+v, %v", v.ActiveRun, queued, err)
	}
	if h := history(t, svc, alice, sess.ID); h[len(h)-1].Content != "stop anyway" {
		t.Fatalf("the history ends with %+v", h[len(h)-1])
	}
}

func last(h []service.HistoryMessage) service.HistoryMessage { return h[len(h)-1] }

// A message sent with STEER while nothing runs starts a run as ENQUEUE would.
func TestSteerWhileNothingRunsStartsARun(t *testing.T) {
	p := newPuppet()
	svc := start(t, steerSetup(p))
	sess := newSession(t, svc, alice, "puppet", "")
	_, r := steer(t, svc, sess.ID, "go on")
	tn := p.next(t)
	if tn.req.RunID != r.ID || last(tn.req.History).Content != "go on" {
		t.Fatalf("the run started %s reads %+v, want the steer's run %s", tn.req.RunID, last(tn.req.History), r.ID)
	}
	tn.finish(nil)
}
