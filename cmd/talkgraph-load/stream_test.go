package main

import (
	"strings"
	"testing"
	"time"
)

func TestTextCheckContiguous(t *testing.T) {
	var c textCheck
	words := 0
	// "héllo wörld, ça va" in pieces that split words and carry multi-byte runes.
	for _, p := range []struct {
		delta  string
		offset int
	}{{"hé", 0}, {"llo wö", 2}, {"rld, ", 8}, {"ça va", 13}} {
		w, err := c.chunk(p.delta, p.offset)
		if err != nil {
			t.Fatalf("chunk %q at %d: %v", p.delta, p.offset, err)
		}
		words += w
	}
	if words != 4 || c.words != 4 {
		t.Errorf("words = %d (%d), want 4", words, c.words)
	}
	if err := c.complete("héllo wörld, ça va"); err != nil {
		t.Errorf("complete: %v", err)
	}
	if err := c.complete("héllo wörld, ça va!"); err == nil {
		t.Error("complete accepted a content the deltas lack")
	}
}

func TestTextCheckGap(t *testing.T) {
	var c textCheck
	if _, err := c.chunk("You ", 0); err != nil {
		t.Fatal(err)
	}
	_, err := c.chunk("said: ", 5)
	if err == nil || !strings.HasPrefix(err.Error(), "gap:") {
		t.Fatalf("gap: err = %v", err)
	}
	// One error per message: later chunks and the completion say nothing more.
	if _, err := c.chunk("x ", 11); err != nil {
		t.Errorf("second error for the same message: %v", err)
	}
	if err := c.complete("You said: x "); err != nil {
		t.Errorf("complete after a reported gap: %v", err)
	}
}

func TestTextCheckDuplicate(t *testing.T) {
	var c textCheck
	if _, err := c.chunk("You ", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.chunk("said: ", 4); err != nil {
		t.Fatal(err)
	}
	_, err := c.chunk("said: ", 4)
	if err == nil || !strings.HasPrefix(err.Error(), "duplicate:") {
		t.Fatalf("duplicate: err = %v", err)
	}
}

func TestTextCheckMissingTail(t *testing.T) {
	var c textCheck
	if _, err := c.chunk("You said: ", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.complete("You said: hi"); err == nil {
		t.Error("complete accepted content longer than the deltas")
	}
	var empty textCheck
	if err := empty.complete(""); err != nil {
		t.Errorf("empty message: %v", err)
	}
}

func TestTextCheckWordsAcrossChunks(t *testing.T) {
	var c textCheck
	total := 0
	for i, d := range []string{"ab", "cd ", " ef", "g\nh", "  "} {
		off := 0
		for _, prev := range []string{"ab", "cd ", " ef", "g\nh", "  "}[:i] {
			off += len([]rune(prev))
		}
		w, err := c.chunk(d, off)
		if err != nil {
			t.Fatal(err)
		}
		total += w
	}
	if total != 3 { // "abcd", "efg", "h"
		t.Errorf("words = %d, want 3", total)
	}
}

// A session's reader sees a whole demo reply: the turn ends once both the reply and the
// run are done, with the first chunk's time.
func TestSessionTurn(t *testing.T) {
	errs := newErrorLog()
	s := newSession(0, "test", errs)
	s.id = "s1"
	tr := s.begin("You said: hi", 2)
	s.markSent(tr)
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s.onEvent(&streamEvent{Typename: "MessageAdded", Message: &eventMessage{ID: "u", Role: "USER"}}, at(1))
	s.onEvent(&streamEvent{Typename: "RunStatusChanged", Run: &eventRun{ID: "r", Status: "RUNNING"}}, at(2))
	s.onEvent(&streamEvent{Typename: "MessageAdded", Message: &eventMessage{ID: "a", Role: "ASSISTANT"}}, at(3))
	s.onEvent(&streamEvent{Typename: "MessageChunk", MessageID: "a", Delta: "You ", Offset: 0}, at(4))
	select {
	case <-tr.reached:
		t.Fatal("reached after one chunk of two")
	default:
	}
	s.onEvent(&streamEvent{Typename: "MessageChunk", MessageID: "a", Delta: "said: hi", Offset: 4}, at(9))
	select {
	case <-tr.reached:
	default:
		t.Fatal("not reached after two chunks")
	}
	s.onEvent(&streamEvent{Typename: "MessageCompleted", Message: &eventMessage{ID: "a", Role: "ASSISTANT", Status: "COMPLETE", Content: "You said: hi"}}, at(10))
	select {
	case <-tr.done:
		t.Fatal("done before the run's final status")
	default:
	}
	s.onEvent(&streamEvent{Typename: "RunStatusChanged", Run: &eventRun{ID: "r", Status: "COMPLETED"}}, at(11))
	<-tr.done
	r := s.result(tr)
	if !r.Done || r.Status != "COMPLETED" || r.Chunks != 2 || !r.FirstChunk.Equal(at(4)) || !r.End().Equal(at(11)) ||
		r.LongestPause != 5*time.Millisecond {
		t.Errorf("result = %+v", r)
	}
	if s.wordsDelivered() != 3 {
		t.Errorf("words = %d, want 3", s.wordsDelivered())
	}
	if n := errs.total(""); n != 0 {
		t.Errorf("errors: %+v", errs.list())
	}
}

func TestSessionReportsProblems(t *testing.T) {
	errs := newErrorLog()
	s := newSession(0, "test", errs)
	s.id = "s1"
	tr := s.begin("You said: hi", 0)
	s.markSent(tr)
	now := time.Now()
	s.onEvent(&streamEvent{Typename: "MessageAdded", Message: &eventMessage{ID: "a", Role: "ASSISTANT"}}, now)
	s.onEvent(&streamEvent{Typename: "MessageChunk", MessageID: "a", Delta: "You ", Offset: 0}, now)
	s.onEvent(&streamEvent{Typename: "MessageChunk", MessageID: "a", Delta: "You ", Offset: 0}, now)
	s.onBroken("subscription ended early", "complete frame")
	<-tr.done
	if r := s.result(tr); r.Failed != "subscription ended early" {
		t.Errorf("failed = %q", r.Failed)
	}
	kinds := map[string]int{}
	for _, k := range errs.list() {
		kinds[k.Error] = k.Count
	}
	if kinds["chunk duplicate"] != 1 || kinds["subscription ended early"] != 1 || len(kinds) != 2 {
		t.Errorf("errors = %v", kinds)
	}
	// A turn begun on a broken connection ends at once.
	tr2 := s.begin("", 0)
	<-tr2.done
}

func TestSessionWrongReply(t *testing.T) {
	errs := newErrorLog()
	s := newSession(0, "test", errs)
	tr := s.begin("You said: hi", 0)
	s.markSent(tr)
	now := time.Now()
	s.onEvent(&streamEvent{Typename: "MessageAdded", Message: &eventMessage{ID: "a", Role: "ASSISTANT"}}, now)
	s.onEvent(&streamEvent{Typename: "MessageChunk", MessageID: "a", Delta: "You said: ho", Offset: 0}, now)
	s.onEvent(&streamEvent{Typename: "MessageCompleted", Message: &eventMessage{ID: "a", Role: "ASSISTANT", Status: "COMPLETE", Content: "You said: hi"}}, now)
	kinds := map[string]int{}
	for _, k := range errs.list() {
		kinds[k.Error] = k.Count
	}
	if kinds["content differs from deltas"] != 1 || kinds["unexpected reply"] != 0 {
		t.Errorf("errors = %v", kinds)
	}
}

func TestDemoMessage(t *testing.T) {
	content, reply := demoMessage(5)
	if content != "w1 w2 w3" || reply != "You said: w1 w2 w3" {
		t.Errorf("demoMessage(5) = %q, %q", content, reply)
	}
	if got := len(strings.Fields(reply)); got != 5 {
		t.Errorf("reply has %d words", got)
	}
}
