package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/service"
)

// eventReader is a Subscription, or a SharedSubscription (see feedOf).
type eventReader interface {
	Read(ctx context.Context, max int) ([]*service.Event, error)
	Close()
}

// share makes a link to a session of alice's and returns it with its token.
func share(t *testing.T, svc *service.Service, ctx context.Context, in service.CreateShareLinkInput) (*service.ShareLink, string) {
	t.Helper()
	l, token, err := svc.CreateShareLink(ctx, in)
	if err != nil {
		t.Fatalf("CreateShareLink: %v", err)
	}
	return l, token
}

// shared reads what token opens, as a reader who did not sign in.
func shared(t *testing.T, svc *service.Service, token string) *service.SharedView {
	t.Helper()
	v, err := svc.SharedSession(nobody, token)
	if err != nil {
		t.Fatalf("SharedSession: %v", err)
	}
	return v
}

// sharedFeed follows a live link's stream, as follow does a session's.
func sharedFeed(t *testing.T, svc *service.Service, token, after string) *feed {
	t.Helper()
	wake := make(chan struct{}, 1)
	sub, err := svc.SubscribeShared(nobody, token, after, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("SubscribeShared: %v", err)
	}
	return feedOf(t, sub, wake)
}

func contents(msgs []*service.HistoryMessage) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Role)+":"+m.Content+":"+string(m.Status))
	}
	return out
}

// A snapshot shows the branch as it was when the link was made: the reply then being
// written with its text then, STREAMING, its running call as it was, and nothing of what
// came after (more text, the call's end, a later call, the next messages).
func TestSnapshotStaysAsItWasWhileTheSessionGoesOn(t *testing.T) {
	p := newPuppet()
	svc := start(t, withPuppet(p))
	sess := newSession(t, svc, alice, "puppet", "")
	f := follow(t, svc, alice, sess.ID, sess.StreamCursor)
	send(t, svc, alice, sess.ID, "hello")
	tn := p.next(t)
	tn.say(t, "part one")
	f.until(is(service.EventMessageChunk))
	h, err := tn.out.StartTool("", "search", `{"q":"go"}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Output("found"); err != nil {
		t.Fatal(err)
	}
	f.until(is(service.EventToolCallOutput))

	_, token := share(t, svc, alice, service.CreateShareLinkInput{SessionID: sess.ID, IncludeTools: true})
	want := []string{"USER:hello:COMPLETE", "ASSISTANT:part one:STREAMING"}
	check := func(when string) {
		t.Helper()
		v := shared(t, svc, token)
		if v == nil {
			t.Fatalf("%s: the link opens nothing", when)
		}
		if got := contents(v.Messages); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: the snapshot shows %q, want %q", when, got, want)
		}
		if v.Live || v.StreamCursor != "" {
			t.Errorf("%s: a snapshot is live (%v) or has a cursor %q", when, v.Live, v.StreamCursor)
		}
		calls := v.Messages[1].ToolCalls
		if len(calls) != 1 || calls[0].Status != service.ToolRunning || calls[0].Output != "found" || calls[0].Result != nil {
			t.Errorf("%s: the snapshot's calls: %+v, want the one running with its output then", when, calls)
		}
	}
	check("while the reply streams")

	tn.say(t, " and part two")
	if err := h.Output(" more"); err != nil {
		t.Fatal(err)
	}
	if err := h.Finish("the result", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.out.StartTool("", "later", `{}`); err != nil {
		t.Fatal(err)
	}
	check("while the session goes on")
	tn.finish(nil)
	f.until(runEnds(tn.req.RunID))
	send(t, svc, alice, sess.ID, "and then")
	p.next(t).finish(nil)
	f.until(is(service.EventRunStatusChanged))
	check("after the reply and the next message")
}

// A live link shows the branch as it is, and its stream brings new replies as they are
// written, without tool arguments or output unless the link includes them, without what
// the session waits on, and with no event that names the session or its owner.
func TestLiveLinkStreamsNewRepliesThroughTheMask(t *testing.T) {
	p := newPuppet()
	svc := start(t, withPuppet(p))
	sess := newSession(t, svc, alice, "puppet", "")
	send(t, svc, alice, sess.ID, "first")
	tn := p.next(t)
	tn.say(t, "one")
	tn.finish(nil)
	waitIdle(t, svc, alice, sess.ID)

	_, token := share(t, svc, alice, service.CreateShareLinkInput{SessionID: sess.ID, Live: true})
	v := shared(t, svc, token)
	if got := contents(v.Messages); len(got) != 2 || got[1] != "ASSISTANT:one:COMPLETE" || !v.Live || v.StreamCursor == "" {
		t.Fatalf("the live link shows %q (live %v, cursor %q)", got, v.Live, v.StreamCursor)
	}
	rf := sharedFeed(t, svc, token, v.StreamCursor)
	send(t, svc, alice, sess.ID, "second")
	tn = p.next(t)
	tn.say(t, "two")
	h, err := tn.out.StartTool("", "search", `{"q":"secret"}`)
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Output("private output")
	_ = h.Finish("private result", nil)
	a := tn.ask("Shall I?", []string{"yes"})
	_ = a
	evs := rf.until(is(service.EventRunStatusChanged))
	evs = append(evs, rf.until(func(ev *service.Event) bool {
		return ev.Type == service.EventRunStatusChanged && ev.Run.Status == service.RunWaitingForInput
	})...)
	var text string
	for _, ev := range evs {
		switch ev.Type {
		case service.EventMessageChunk:
			text += ev.Delta
		case service.EventQuestionAsked, service.EventToolCallOutput, service.EventToolApprovalRequested, service.EventSessionUpdated:
			t.Errorf("a reader got a %s", ev.Type)
		case service.EventToolCallStarted, service.EventToolCallFinished:
			if c := ev.ToolCall; c.Arguments != "" || c.Output != "" || c.Result != nil || c.SessionID != "" {
				t.Errorf("a reader got a call's details: %+v", c)
			}
		}
		if m := ev.Message; m != nil && m.SessionID != "" {
			t.Errorf("a reader got a message that names its session: %+v", m)
		}
		if r := ev.Run; r != nil && (r.SessionID != "" || r.UserID != "") {
			t.Errorf("a reader got a run that names its session or owner: %+v", r)
		}
	}
	if !strings.Contains(text, "two") {
		t.Errorf("the reader's stream carried %q, want the reply", text)
	}
	if n := count(evs, is(service.EventToolCallFinished)); n != 1 {
		t.Errorf("%d ToolCallFinished, want 1: %s", n, describe(evs))
	}
}

// Revoking a link, its expiry and deleting its session end reads and live streams at once.
func TestRevocationExpiryAndDeletionEndReadsAndStreams(t *testing.T) {
	svc := start(t, setup{})
	t.Run("revoked", func(t *testing.T) {
		sess := newSession(t, svc, alice, "", "")
		l, token := share(t, svc, alice, service.CreateShareLinkInput{SessionID: sess.ID, Live: true})
		rf := sharedFeed(t, svc, token, "")
		got, err := svc.RevokeShareLink(alice, l.ID)
		if err != nil || got.RevokedAt == nil {
			t.Fatalf("RevokeShareLink: %+v, %v", got, err)
		}
		if _, err := rf.rest(); err != service.ErrNoShare {
			t.Errorf("the stream ended with %v, want ErrNoShare", err)
		}
		if v := shared(t, svc, token); v != nil {
			t.Errorf("a revoked link opens %+v", v)
		}
	})
	t.Run("expired", func(t *testing.T) {
		sess := newSession(t, svc, alice, "", "")
		exp := time.Now().Add(time.Second)
		_, token := share(t, svc, alice, service.CreateShareLinkInput{SessionID: sess.ID, Live: true, ExpiresAt: &exp})
		rf := sharedFeed(t, svc, token, "")
		if _, err := rf.rest(); err != service.ErrNoShare {
			t.Errorf("the stream ended with %v, want ErrNoShare", err)
		}
		if time.Now().Before(exp) {
			t.Errorf("the stream ended before the link expired")
		}
		if v := shared(t, svc, token); v != nil {
			t.Errorf("an expired link opens %+v", v)
		}
	})
	t.Run("session deleted", func(t *testing.T) {
		sess := newSession(t, svc, alice, "", "")
		_, token := share(t, svc, alice, service.CreateShareLinkInput{SessionID: sess.ID, Live: true})
		rf := sharedFeed(t, svc, token, "")
		if err := svc.DeleteTalkSession(alice, sess.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := rf.rest(); err != service.ErrNoShare {
			t.Errorf("the stream ended with %v, want ErrNoShare", err)
		}
		if v := shared(t, svc, token); v != nil {
			t.Errorf("a deleted session's link opens %+v", v)
		}
	})
}

// Wrong, malformed, revoked, expired and guessed tokens look the same: no session, no
// error, and a stream refused with the same error.
func TestTokensThatOpenNothingLookAlike(t *testing.T) {
	svc := start(t, setup{})
	sess := newSession(t, svc, alice, "", "")
	l, revoked := share(t, svc, alice, service.CreateShareLinkInput{SessionID: sess.ID, Live: true})
	if _, err := svc.RevokeShareLink(alice, l.ID); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(500 * time.Millisecond)
	_, expired := share(t, svc, alice, service.CreateShareLinkInput{SessionID: sess.ID, Live: true, ExpiresAt: &exp})
	_, good := share(t, svc, alice, service.CreateShareLinkInput{SessionID: sess.ID, Live: true})
	if _, err := sharedFeed(t, svc, expired, "").rest(); err != service.ErrNoShare { // the link's stream ends at its expiry
		t.Fatalf("the expiring link's stream ended with %v", err)
	}
	tokens := map[string]string{
		"wrong":     strings.Repeat("A", 43),
		"malformed": "not a token at all %%%",
		"empty":     "",
		"long":      strings.Repeat("x", 100000),
		"revoked":   revoked,
		"expired":   expired,
		"guessed":   good[:42] + map[bool]string{true: "A", false: "B"}[good[42] != 'A'],
	}
	var first error
	for name, token := range tokens {
		v, err := svc.SharedSession(nobody, token)
		if v != nil || err != nil {
			t.Errorf("%s token: %+v, %v; want nothing and no error", name, v, err)
		}
		_, err = svc.SubscribeShared(nobody, token, "", func() {})
		if first == nil {
			first = err
		}
		wantCode(t, name+" token's stream", err, service.ENOTFOUND)
		wantSameError(t, first, err)
		_, err = svc.ForkSharedSession(bob, token, "")
		wantCode(t, name+" token's fork", err, service.ENOTFOUND)
	}
	if v := shared(t, svc, good); v == nil {
		t.Error("the good token opens nothing")
	}
}

// Another user continues a shared conversation as a session of their own: a copy of what
// the link shows, with the server's default settings (none of the owner's), the original
// untouched and still not theirs.
func TestForkSharedSessionByAnotherUser(t *testing.T) {
	svc := start(t, setup{})
	prompt := "owner's secret system prompt"
	sess, err := svc.CreateTalkSession(alice, "the original", service.SettingsInput{SystemPrompt: &prompt})
	if err != nil {
		t.Fatal(err)
	}
	send(t, svc, alice, sess.ID, "hello there")
	waitIdle(t, svc, alice, sess.ID)
	_, token := share(t, svc, alice, service.CreateShareLinkInput{SessionID: sess.ID})

	_, err = svc.ForkSharedSession(nobody, token, "")
	wantCode(t, "a fork without a sign-in", err, service.EUNAUTHORIZED)
	fork, err := svc.ForkSharedSession(bob, token, "")
	if err != nil {
		t.Fatal(err)
	}
	if fork.UserID != "bob" || fork.ID == sess.ID || fork.Title != "the original" || fork.Settings.SystemPrompt != nil {
		t.Errorf("the fork: %+v", fork.TalkSession)
	}
	got := contents(history(t, svc, bob, fork.ID))
	want := contents(history(t, svc, alice, sess.ID))
	if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != 2 {
		t.Errorf("the fork holds %q, want %q", got, want)
	}
	send(t, svc, bob, fork.ID, "my own turn")
	waitIdle(t, svc, bob, fork.ID)
	if n := len(history(t, svc, alice, sess.ID)); n != 2 {
		t.Errorf("the original has %d messages after the fork went on", n)
	}
	_, err = svc.View(bob, sess.ID)
	wantCode(t, "the original, for the forker", err, service.ENOTFOUND)
	named, err := svc.ForkSharedSession(bob, token, "  mine  ")
	if err != nil || named.Title != "mine" {
		t.Errorf("a fork with a title: %+v, %v", named, err)
	}
}

// A link is its owner's: others cannot list or revoke it; a past expiry is refused; reads
// and stream starts count as views.
func TestShareLinksAreTheOwnersAndCountViews(t *testing.T) {
	svc := start(t, setup{})
	sess := newSession(t, svc, alice, "", "")
	past := time.Now().Add(-time.Minute)
	_, _, err := svc.CreateShareLink(alice, service.CreateShareLinkInput{SessionID: sess.ID, ExpiresAt: &past})
	wantCode(t, "an expiry in the past", err, service.EINVALID)
	_, _, err = svc.CreateShareLink(bob, service.CreateShareLinkInput{SessionID: sess.ID})
	wantCode(t, "a link to another's session", err, service.ENOTFOUND)
	l, token := share(t, svc, alice, service.CreateShareLinkInput{SessionID: sess.ID, Live: true})
	if len(token) < 22 || l.Hash == nil || strings.Contains(string(l.Hash), token) {
		t.Errorf("token %q, hash %x", token, l.Hash)
	}
	_, err = svc.RevokeShareLink(bob, l.ID)
	wantCode(t, "revoking another's link", err, service.ENOTFOUND)
	_, err = svc.ShareLinks(bob, sess.ID)
	wantCode(t, "listing another's links", err, service.ENOTFOUND)
	shared(t, svc, token)
	shared(t, svc, token)
	sub, err := svc.SubscribeShared(nobody, token, "", func() {})
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	list, err := svc.ShareLinks(alice, sess.ID)
	if err != nil || len(list) != 1 || list[0].Views != 3 {
		t.Errorf("the session's links: %+v, %v; want one with 3 views", list, err)
	}
}

// waitIdle sends nothing: it waits until the session's agent has nothing left to do.
func waitIdle(t *testing.T, svc *service.Service, ctx context.Context, sessionID string) {
	t.Helper()
	v := view(t, svc, ctx, sessionID)
	if v.ActiveRun == nil {
		return
	}
	f := follow(t, svc, ctx, sessionID, "")
	if v = view(t, svc, ctx, sessionID); v.ActiveRun == nil {
		return
	}
	f.until(runEnds(v.ActiveRun.ID))
}
