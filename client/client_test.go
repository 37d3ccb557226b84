package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Khan/genqlient/graphql"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/client"
)

// wait is how long a test waits for what it expects before failing.
const wait = 15 * time.Second

// serverURL is a server the whole package's tests share (the Example's too).
var serverURL string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "client-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	url, stop, err := start(dir, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serverURL = url
	code := m.Run()
	stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// serve starts a real server (the whole of package app, on SQLite) on a random local port
// with env over the tests' settings, for the test's duration, and returns its URL.
func serve(t testing.TB, env map[string]string) string {
	t.Helper()
	url, stop, err := start(t.TempDir(), env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// start starts a server on dir with env over the tests' settings; with tlsConf, over
// TLS.
func start(dir string, env map[string]string, tlsConf ...*tls.Config) (url string, stop func(), err error) {
	settings := map[string]string{"DATA_DIR": dir, "DEMO_CHUNK_DELAY": "0s", "FLUSH_INTERVAL": "5ms",
		"RATE_LIMIT": "1000", "RATE_BURST": "1000", "ANON_RATE_LIMIT": "1000", "ANON_RATE_BURST": "1000",
		"GUEST_SIGNIN_RATE": "60000", "GUEST_SIGNIN_BURST": "1000"}
	maps.Copy(settings, env)
	cfg, err := app.LoadConfig(nil, func(k string) string { return settings[k] })
	if err != nil {
		return "", nil, err
	}
	cfg.DatabaseURL = "sqlite://" + filepath.Join(dir, "talkgraph.db")
	a, err := app.Open(context.Background(), cfg, io.Discard)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.Close(context.Background())
		return "", nil, err
	}
	url = "http://" + ln.Addr().String()
	if len(tlsConf) > 0 {
		ln, url = tls.NewListener(ln, tlsConf[0]), "https://"+ln.Addr().String()
	}
	go a.Serve(ln)
	return url, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Close(ctx)
	}, nil
}

// guest signs in a new guest user on the server at url.
func guest(t testing.TB, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), url, append(opts, client.AsGuest())...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// wantCode checks that err is the server's error with code want.
func wantCode(t *testing.T, what string, err error, want client.Code) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) || e.Code != want || client.CodeOf(err) != want {
		t.Fatalf("%s: error %v (%T), want a *client.Error with code %s", what, err, err, want)
	}
	if e.Message == "" {
		t.Errorf("%s: %s without a message", what, want)
	}
	return e
}

// Every error the server answers comes back as a *client.Error whose code tells the kinds
// a client acts on apart, whether the server answered 200 with errors or refused the
// request with an HTTP status.
func TestErrorsCarryTheServerCode(t *testing.T) {
	ctx := testContext(t)
	c := guest(t, serverURL)
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("NotFound", func(t *testing.T) {
		_, err := c.Session(ctx, "5e26ebe5-1775-4b16-949c-8da04f47b5ff")
		wantCode(t, "a session that does not exist", err, client.NotFound)
		_, err = c.RespondToQuestion(ctx, "5e26ebe5-1775-4b16-949c-8da04f47b5ff", "hi")
		wantCode(t, "a question that does not exist", err, client.NotFound)
		other := guest(t, serverURL)
		_, _, err = other.Messages(ctx, s.Id)
		wantCode(t, "another user's history", err, client.NotFound)
	})
	t.Run("BadUserInput", func(t *testing.T) {
		_, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "  "})
		wantCode(t, "an empty message", err, client.BadUserInput)
	})
	t.Run("Conflict", func(t *testing.T) {
		key := "the key"
		if _, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "one", IdempotencyKey: &key}); err != nil {
			t.Fatal(err)
		}
		_, err := c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: "another", IdempotencyKey: &key})
		wantCode(t, "an idempotency key reused for other content", err, client.Conflict)
	})
	t.Run("Unauthenticated", func(t *testing.T) {
		bad, err := client.New(ctx, serverURL, client.WithToken("not-a-token"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = bad.CreateSession(ctx, nil)
		if e := wantCode(t, "a bad token", err, client.Unauthenticated); e.StatusCode != 401 {
			t.Errorf("status %d, want 401", e.StatusCode)
		}
		off := serve(t, map[string]string{"GUEST_SIGNIN": "false"})
		_, err = client.New(ctx, off, client.AsGuest())
		if e := wantCode(t, "guest sign-in switched off", err, client.Unauthenticated); e.StatusCode != 403 {
			t.Errorf("status %d, want 403", e.StatusCode)
		}
	})
	t.Run("RateLimited", func(t *testing.T) {
		slow := guest(t, serve(t, map[string]string{"RATE_LIMIT": "0.01", "RATE_BURST": "1"}))
		if _, err := slow.CreateSession(ctx, nil); err != nil {
			t.Fatal(err)
		}
		_, err := slow.CreateSession(ctx, nil)
		wantCode(t, "an operation over the rate", err, client.RateLimited)
	})
	t.Run("Unavailable", func(t *testing.T) {
		full := guest(t, serve(t, map[string]string{"SQLITE_MAX_BYTES": fmt.Sprint(400 << 10)}))
		fs, err := full.CreateSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		big := strings.Repeat("x", 30<<10)
		for i := 0; ; i++ {
			if i == 100 {
				t.Fatal("the capped database never filled up")
			}
			_, err = full.AddMessage(ctx, client.AddMessageInput{SessionId: fs.Id, Content: big})
			if err != nil {
				break
			}
		}
		wantCode(t, "a message when the storage is full", err, client.Unavailable)
	})
	t.Run("NotTheServers", func(t *testing.T) {
		gone, err := client.New(ctx, "http://127.0.0.1:1", client.WithToken("t"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = gone.CreateSession(ctx, nil)
		var e *client.Error
		if err == nil || errors.As(err, &e) || client.CodeOf(err) != "" {
			t.Errorf("no server: error %v, want a network error that is no *client.Error", err)
		}
	})
}

// GraphQL sends operations the client has no method for (here, deleting a session), as
// its user, and answers their errors as *client.Error too.
func TestGraphQLSendsOtherOperationsAsTheUser(t *testing.T) {
	ctx := testContext(t)
	c := guest(t, serverURL)
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := deleteSession(ctx, c.GraphQL(), s.Id); err != nil {
		t.Fatal(err)
	}
	_, err = c.Session(ctx, s.Id)
	wantCode(t, "the deleted session", err, client.NotFound)
	err = deleteSession(ctx, c.GraphQL(), s.Id)
	wantCode(t, "deleting it again", err, client.NotFound)
}

func deleteSession(ctx context.Context, gql graphql.Client, id string) error {
	var data struct{ DeleteTalkSession string }
	return gql.MakeRequest(ctx, &graphql.Request{
		OpName:    "Delete",
		Query:     `mutation Delete($s: ID!) { deleteTalkSession(id: $s) }`,
		Variables: map[string]any{"s": id},
	}, &graphql.Response{Data: &data})
}

// Messages pages through a history longer than the server's largest page, oldest first,
// and returns the stream cursor of the moment it read the newest page.
func TestMessagesReadsTheWholeHistoryOldestFirst(t *testing.T) {
	ctx := testContext(t)
	c := guest(t, serverURL)
	s, err := c.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 120
	var last *client.AddMessagePayload
	for i := range n {
		if last, err = c.AddMessage(ctx, client.AddMessageInput{SessionId: s.Id, Content: fmt.Sprintf("m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	untilRunEnds(t, ctx, c, s.Id, s.StreamCursor, last.Run.Id)

	msgs, cursor, err := c.Messages(ctx, s.Id)
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, m := range msgs {
		if m.Role == client.RoleUser {
			users = append(users, m.Content)
		}
	}
	if len(users) != n || users[0] != "m0" || users[n-1] != fmt.Sprintf("m%d", n-1) {
		t.Fatalf("user messages %d: %v; want m0 … m%d in order", len(users), users, n-1)
	}
	for i, u := range users {
		if u != fmt.Sprintf("m%d", i) {
			t.Fatalf("user message %d is %q", i, u)
		}
	}
	if end := msgs[len(msgs)-1]; end.Role != client.RoleAssistant || end.Content != fmt.Sprintf("You said: m%d", n-1) {
		t.Errorf("last message %s %q, want the reply to the last one", end.Role, end.Content)
	}
	now, err := c.Session(ctx, s.Id)
	if err != nil {
		t.Fatal(err)
	}
	if cursor != now.StreamCursor {
		t.Errorf("stream cursor %q, want the session's %q (nothing happened since)", cursor, now.StreamCursor)
	}
}

// untilRunEnds follows the session from after until run ends, and returns its last status.
func untilRunEnds(t *testing.T, ctx context.Context, c *client.Client, sessionID, after, run string) client.Run {
	t.Helper()
	for ev, err := range c.Follow(ctx, sessionID, after) {
		if err != nil {
			t.Fatalf("waiting for run %s to end: %v", run, err)
		}
		if rs, ok := ev.(*client.EventRunStatusChanged); ok && rs.Run.Id == run && ended(rs.Run.Status) {
			return rs.Run
		}
	}
	t.Fatalf("the stream ended before run %s did", run)
	return client.Run{}
}

// ended says whether a run's status is final.
func ended(s client.RunStatus) bool {
	switch s {
	case client.RunStatusCompleted, client.RunStatusCancelled, client.RunStatusInterrupted, client.RunStatusFailed:
		return true
	}
	return false
}
