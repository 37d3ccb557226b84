package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/client"
	"github.com/talkgraph/talkgraph/jwtauth"
)

// reconnects records what OnReconnect reports.
type reconnects struct {
	mu   sync.Mutex
	errs []error
}

func (r *reconnects) add(err error, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *reconnects) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// closedWith says whether one of errs is the server closing the socket with code.
func closedWith(errs []error, code int) bool {
	for _, err := range errs {
		var e *client.Error
		if errors.As(err, &e) && e.CloseCode == code {
			return true
		}
	}
	return false
}

// reply follows a session from after until run ends, checking on the way that no event
// comes twice and that every delta starts where the text so far ends. It returns the
// run's reply as the chunks put it together, and as its MessageCompleted says it is.
func reply(t *testing.T, ctx context.Context, c *client.Client, sessionID, after, run string) (chunks, final string) {
	t.Helper()
	seen := map[string]bool{}
	text := map[string]string{}
	var replyID string
	for ev, err := range c.Follow(ctx, sessionID, after) {
		if err != nil {
			t.Fatalf("following run %s: %v", run, err)
		}
		if seen[ev.GetCursor()] {
			t.Fatalf("event %T %s delivered twice", ev, ev.GetCursor())
		}
		seen[ev.GetCursor()] = true
		switch ev := ev.(type) {
		case *client.EventMessageChunk:
			if got := len([]rune(text[ev.MessageId])); ev.Offset != got {
				t.Fatalf("chunk at offset %d, the text so far has %d characters: a gap or a duplicate", ev.Offset, got)
			}
			text[ev.MessageId] += ev.Delta
		case *client.EventMessageCompleted:
			if ev.Message.RunId != nil && *ev.Message.RunId == run && ev.Message.Role == client.RoleAssistant {
				replyID, final = ev.Message.Id, ev.Message.Content
			}
		case *client.EventRunStatusChanged:
			if ev.Run.Id == run && ended(ev.Run.Status) {
				if ev.Run.Status != client.RunStatusCompleted {
					t.Fatalf("run %s ended %s", run, ev.Run.Status)
				}
				return text[replyID], final
			}
		}
	}
	t.Fatalf("the stream ended before run %s did", run)
	return "", ""
}

// A socket the server closes with 4401 because the token expired is resumed with the new
// token the token source gives, after the last event delivered: the reply arrives whole,
// nothing twice.
func TestFollowResumesWithANewTokenAfter4401(t *testing.T) {
	secret := "a secret of the test, long enough"
	url := serve(t, map[string]string{"AUTH_SECRET": secret})
	ctx := testContext(t)
	// Tokens that last two seconds, renewed once they have expired, as an identity
	// provider's client does.
	issuer := &jwtauth.Auth{Secret: []byte(secret), TokenTTL: 2 * time.Second}
	var mu sync.Mutex
	var tok string
	var exp time.Time
	source := func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Until(exp) < 200*time.Millisecond {
			var err error
			if tok, exp, err = issuer.Issue("the-user"); err != nil {
				return "", err
			}
			exp = exp.Truncate(time.Second) // as the token's exp claim says it
		}
		return tok, nil
	}
	var rc reconnects
	c, err := client.New(ctx, url, client.WithTokenSource(source), client.OnReconnect(rc.add))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "/slow 40"}) // 4 s
	if err != nil {
		t.Fatal(err)
	}
	chunks, final := reply(t, ctx, c, s.Id, s.StreamCursor, sent.Run.Id)
	if chunks != final || !strings.HasPrefix(final, "chunk 1. ") || !strings.HasSuffix(final, "chunk 40. ") {
		t.Errorf("chunks put together %q, final content %q", chunks, final)
	}
	if !closedWith(rc.all(), 4401) {
		t.Errorf("reconnections %v, want one after 4401 (the test's tokens last 2 s, the reply 4 s)", rc.all())
	}
}

// With a token that cannot be renewed, a 4401 ends the stream with Unauthenticated: the
// same token would be refused again.
func TestFollowEndsWithUnauthenticatedWhenTheTokenCannotBeRenewed(t *testing.T) {
	secret := "a secret of the test, long enough"
	url := serve(t, map[string]string{"AUTH_SECRET": secret})
	ctx := testContext(t)
	tok, _, err := (&jwtauth.Auth{Secret: []byte(secret), TokenTTL: 2 * time.Second}).Issue("the-user")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, url, client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for _, err := range c.Follow(ctx, s.Id, s.StreamCursor) {
		last = err
	}
	if e := wantCode(t, "the stream's end", last, client.Unauthenticated); e.CloseCode != 4401 {
		t.Errorf("close code %d, want 4401", e.CloseCode)
	}
}

// A subscription the server refuses at its start ends the stream with the server's code:
// here another user's session, named by a cursor of it.
func TestFollowEndsWithTheRefusalsCode(t *testing.T) {
	ctx := testContext(t)
	owner, other := guest(t, serverURL), guest(t, serverURL)
	s, err := owner.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var events int
	var last error
	for ev, err := range other.Follow(ctx, s.Id, s.StreamCursor) {
		if ev != nil {
			events++
		}
		last = err
	}
	wantCode(t, "following another user's session", last, client.NotFound)
	if events != 0 {
		t.Errorf("%d events of another user's session", events)
	}
}

// A subscription refused with RATE_LIMITED is tried again, with backoff, and then
// delivers everything after its cursor.
func TestFollowRetriesWhenRateLimited(t *testing.T) {
	ctx := testContext(t)
	var rc reconnects
	c := guest(t, serve(t, map[string]string{"SUBSCRIBE_RATE": "1", "SUBSCRIBE_BURST": "1"}), client.OnReconnect(rc.add))
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "hello there"})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range c.Follow(ctx, s.Id, s.StreamCursor) { // spends the one subscription the user may start at once
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	// A second one at once is refused until the rate allows it.
	chunks, final := reply(t, ctx, c, s.Id, s.StreamCursor, sent.Run.Id)
	if want := "You said: hello there"; chunks != want || final != want {
		t.Errorf("reply %q (chunks %q), want the demo's echo", final, chunks)
	}
	limited := false
	for _, err := range rc.all() {
		limited = limited || client.CodeOf(err) == client.RateLimited
	}
	if !limited {
		t.Errorf("reconnections %v, want one after RATE_LIMITED", rc.all())
	}
}

// The server's keep-alives (a ping message every WS_KEEPALIVE) neither end nor disturb a
// stream: genqlient v0.8.1's websocket client fails at the first one.
func TestFollowKeepsItsConnectionThroughKeepAlives(t *testing.T) {
	ctx := testContext(t)
	var rc reconnects
	c := guest(t, serve(t, map[string]string{"WS_KEEPALIVE": "20ms"}), client.OnReconnect(rc.add))
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "/slow 5"}) // 0.5 s: 25 keep-alives
	if err != nil {
		t.Fatal(err)
	}
	if chunks, final := reply(t, ctx, c, s.Id, s.StreamCursor, sent.Run.Id); chunks != final {
		t.Errorf("chunks %q, final %q", chunks, final)
	}
	if errs := rc.all(); len(errs) > 0 {
		t.Errorf("the stream reconnected: %v", errs)
	}
}

// A stream whose session is deleted ends (the server completes it, or answers the event
// it was delivering with NOT_FOUND); one that the caller stops ends at once, and so does
// one whose context ends, with the context's error.
func TestFollowEnds(t *testing.T) {
	ctx := testContext(t)
	c := guest(t, serverURL)

	t.Run("SessionDeleted", func(t *testing.T) {
		s, err := c.CreateSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "hello"}); err != nil {
			t.Fatal(err)
		}
		n := 0
		for ev, err := range c.Follow(ctx, s.Id, s.StreamCursor) {
			if err != nil {
				if client.CodeOf(err) != client.NotFound {
					t.Fatalf("after %d events: %v, want the end or NOT_FOUND", n, err)
				}
				break
			}
			if n++; n == 1 {
				if _, ok := ev.(*client.EventMessageAdded); !ok {
					t.Errorf("first event %T, want the message added", ev)
				}
				if err := deleteSession(ctx, c.GraphQL(), s.Id); err != nil {
					t.Fatal(err)
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the stream did not end when its session was deleted")
		}
	})
	// Go panics if an iterator goes on after its loop's break.
	t.Run("StoppedByTheCaller", func(t *testing.T) {
		s, err := c.CreateSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "/slow 1000"}); err != nil {
			t.Fatal(err)
		}
		for ev, err := range c.Follow(ctx, s.Id, s.StreamCursor) {
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := ev.(*client.EventMessageChunk); ok {
				break
			}
		}
		stopped, err := c.CancelRun(ctx, s.Id)
		if err != nil || stopped == nil || stopped.Status != client.RunStatusCancelled {
			t.Fatalf("cancelRun: %+v, %v; want the run CANCELLED", stopped, err)
		}
		if again, err := c.CancelRun(ctx, s.Id); err != nil || again != nil {
			t.Errorf("cancelRun with nothing running: %+v, %v; want nil", again, err)
		}
	})
	t.Run("WithoutACursor", func(t *testing.T) {
		s, err := c.CreateSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		var last error
		for ev, err := range c.Follow(ctx, s.Id, "") {
			if ev != nil {
				n++
			}
			last = err
		}
		if n != 0 || last == nil || !strings.Contains(last.Error(), "cursor") {
			t.Errorf("Follow without a cursor: %d events, %v; want an error saying it needs one", n, last)
		}
	})
	t.Run("ContextDone", func(t *testing.T) {
		s, err := c.CreateSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "/slow 1000"}); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithCancel(ctx)
		defer cancel()
		var last error
		for ev, err := range c.Follow(short, s.Id, s.StreamCursor) {
			if ev != nil {
				cancel()
			}
			last = err
		}
		if !errors.Is(last, context.Canceled) {
			t.Errorf("a stream whose context ended: %v, want context.Canceled", last)
		}
	})
}

// WithHTTPClient's transport settings serve the websocket too: here a server over TLS
// with a certificate of its own, which only the given client trusts.
func TestWithHTTPClientAppliesToStreams(t *testing.T) {
	ctx := testContext(t)
	ts := httptest.NewUnstartedServer(nil) // for its certificate and a client that trusts it
	ts.StartTLS()
	defer ts.Close()
	url, stop, err := start(t.TempDir(), nil, &tls.Config{Certificates: ts.TLS.Certificates})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := client.New(ctx, url, client.AsGuest()); err == nil {
		t.Fatal("a client that does not trust the certificate signed in")
	}
	// Without them, a stream ends at once: retrying would not make the certificate trusted.
	untrusting, err := client.New(ctx, url, client.WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range untrusting.Follow(ctx, "5e26ebe5-1775-4b16-949c-8da04f47b5ff", "a cursor") {
		var ce *tls.CertificateVerificationError
		if !errors.As(err, &ce) {
			t.Errorf("following a server whose certificate is not trusted: %v, want the certificate's error", err)
		}
	}
	c := guest(t, url, client.WithHTTPClient(ts.Client()))
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "over TLS"})
	if err != nil {
		t.Fatal(err)
	}
	if chunks, final := reply(t, ctx, c, s.Id, s.StreamCursor, sent.Run.Id); final != "You said: over TLS" || chunks != final {
		t.Errorf("reply %q (chunks %q)", final, chunks)
	}
}
