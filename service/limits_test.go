package service_test

import (
	"fmt"
	"testing"

	"github.com/talkgraph/talkgraph/service"
)

// MaxSessionMessages counts the replies a session owes: under ENQUEUE, each queued run
// and the active run that has not written yet will add one, so a message is accepted
// only while the session, with those replies, the message and its own reply, stays
// within the limit; once every run has replied the session holds at most the limit.
func TestSessionMessagesCountRepliesOwed(t *testing.T) {
	p := newPuppet()
	svc := start(t, setup{agents: map[string]service.Runner{"puppet": p}, config: func(c *service.Config) {
		c.MaxSessionMessages = 10
	}})
	sess := newSession(t, svc, alice, "puppet", service.BusyEnqueue)
	f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
	accepted := 0
	var refused error
	var last *service.Run
	for i := range 8 {
		_, run, err := svc.AddMessage(alice, sess.ID, fmt.Sprintf("m%d", i), "")
		if err != nil {
			refused = err
			break
		}
		accepted, last = accepted+1, run
	}
	wantCode(t, "a message past what the session can hold with the replies it owes", refused, service.ERATELIMIT)
	if accepted != 5 {
		t.Errorf("%d messages accepted, want 5: each with its reply makes 10", accepted)
	}
	for range accepted {
		tn := p.next(t)
		tn.say(t, "reply")
		tn.finish(nil)
	}
	f.until(runEnds(last.ID))
	if n := len(history(t, svc, alice, sess.ID)); n != 10 {
		t.Errorf("the session holds %d messages, want the limit, 10", n)
	}
	_, _, err := svc.AddMessage(alice, sess.ID, "one more", "")
	wantCode(t, "a message to a full session", err, service.ERATELIMIT)
}
