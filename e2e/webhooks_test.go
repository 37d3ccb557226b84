package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// delivery is one POST a receiver took.
type delivery struct {
	ID, Timestamp, Signature string
	Body                     []byte
	Status                   int // what the receiver answered
}

// hookBody is a delivery's body.
type hookBody struct {
	Type      string
	Timestamp time.Time
	Data      struct{ SessionID, RunID, Status, QuestionID, ToolCallID, Cursor string }
}

func (d delivery) body(t *testing.T) hookBody {
	t.Helper()
	var b hookBody
	if err := json.Unmarshal(d.Body, &b); err != nil {
		t.Fatalf("body %s: %v", d.Body, err)
	}
	return b
}

// receiver is a real HTTP server on the loopback that records what it is sent and answers
// as answer says (200 when nil).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []delivery
	answer func(n int, d delivery) int // n counts the requests, from 1
	news   chan struct{}
}

func newReceiver(t *testing.T, answer func(n int, d delivery) int) *receiver {
	r := &receiver{answer: answer, news: make(chan struct{}, 1)}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

// receiverOn is newReceiver on a given listener.
func receiverOn(t *testing.T, ln net.Listener, answer func(n int, d delivery) int) *receiver {
	r := &receiver{answer: answer, news: make(chan struct{}, 1)}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.Listener.Close()
	r.Listener = ln
	r.Start()
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	d := delivery{ID: req.Header.Get("webhook-id"), Timestamp: req.Header.Get("webhook-timestamp"),
		Signature: req.Header.Get("webhook-signature"), Body: body, Status: http.StatusOK}
	r.mu.Lock()
	if r.answer != nil {
		d.Status = r.answer(len(r.got)+1, d)
	}
	r.got = append(r.got, d)
	r.mu.Unlock()
	select {
	case r.news <- struct{}{}:
	default:
	}
	w.WriteHeader(d.Status)
}

// all returns what the receiver took so far.
func (r *receiver) all() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// until waits until what the receiver took satisfies done.
func (r *receiver) until(t *testing.T, what string, done func([]delivery) bool) []delivery {
	t.Helper()
	deadline := time.After(2 * tgtest.Wait)
	for {
		if got := r.all(); done(got) {
			return got
		}
		select {
		case <-r.news:
		case <-deadline:
			t.Fatalf("the receiver waited for %s; it took %d deliveries", what, len(r.all()))
		}
	}
}

// ofType matches deliveries of type typ (in their body) from n on.
func ofType(t *testing.T, typ string, n int) func([]delivery) bool {
	return func(ds []delivery) bool {
		k := 0
		for _, d := range ds {
			if d.body(t).Type == typ {
				k++
			}
		}
		return k >= n
	}
}

// verify checks d's signature against secret as Standard Webhooks defines it, with an
// implementation of this test's own (HMAC-SHA256 over id.timestamp.body, keyed with the
// base64-decoded part of the secret after whsec_): true when one of its signatures
// matches.
func verify(t *testing.T, secret string, d delivery) bool {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") || len(key) != 32 {
		t.Fatalf("secret %q is not whsec_ and base64 of 32 bytes", secret)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(d.ID + "." + d.Timestamp + "."))
	mac.Write(d.Body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(d.Signature) {
		if v, s, ok := strings.Cut(sig, ","); ok && v == "v1" && hmac.Equal([]byte(s), []byte(want)) {
			return true
		}
	}
	return false
}

// hook is a webhook as created.
type hook struct {
	ID, Secret string
}

func createWebhook(t *testing.T, c *tgtest.Client, url string, events ...string) hook {
	t.Helper()
	var out struct {
		CreateWebhook struct {
			Webhook struct{ ID string }
			Secret  string
		}
	}
	c.Must(`mutation($u: String!, $e: [String!]!) { createWebhook(input: {url: $u, events: $e, description: "test"}) { webhook { id } secret } }`,
		map[string]any{"u": url, "e": events}, &out)
	return hook{out.CreateWebhook.Webhook.ID, out.CreateWebhook.Secret}
}

// shownDelivery is a delivery as the API shows it.
type shownDelivery struct {
	ID, EventID, Type, Status, Payload string
	Attempts                           int
	LastStatusCode                     *int
	LastError                          *string
	DeliveredAt, NextAttemptAt         *time.Time
}

// webhookState is a webhook as the API shows it, with its deliveries.
type webhookState struct {
	Enabled        bool
	DisabledReason *string
	Deliveries     []shownDelivery
}

func webhookOf(t *testing.T, c *tgtest.Client, id string) webhookState {
	t.Helper()
	var out struct {
		Webhooks []struct {
			ID             string
			Enabled        bool
			DisabledReason *string
			Deliveries     struct {
				Edges []struct{ Node shownDelivery }
			}
		}
	}
	c.Must(`{ webhooks { id enabled disabledReason deliveries(first: 100) { edges { node {
		id eventId type status attempts lastStatusCode lastError deliveredAt nextAttemptAt payload } } } } }`, nil, &out)
	for _, w := range out.Webhooks {
		if w.ID == id {
			st := webhookState{Enabled: w.Enabled, DisabledReason: w.DisabledReason}
			for _, e := range w.Deliveries.Edges {
				st.Deliveries = append(st.Deliveries, e.Node)
			}
			return st
		}
	}
	t.Fatalf("webhook %s is not listed", id)
	return webhookState{}
}

// webhooksOf returns the IDs of c's webhooks.
func webhooksOf(t *testing.T, c *tgtest.Client) []string {
	t.Helper()
	var out struct{ Webhooks []struct{ ID string } }
	c.Must(`{ webhooks { id } }`, nil, &out)
	var ids []string
	for _, w := range out.Webhooks {
		ids = append(ids, w.ID)
	}
	return ids
}

// hooksApp is a server whose webhooks may reach the loopback (the test's receiver), with
// short retries.
func hooksApp(t *testing.T, store string, change func(*app.Config)) *testApp {
	return startApp(t, store, func(c *app.Config) {
		c.Webhooks.AllowPrivate = true
		c.Service.WebhookRetrySchedule = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
		c.Service.WebhookPoll = 20 * time.Millisecond
		if change != nil {
			change(c)
		}
	})
}

func TestWebhooksDeliverSignedThinEventsToARealReceiver(t *testing.T) {
	eachOfAllStores(t, func(t *testing.T, store string) {
		a := hooksApp(t, store, nil)
		c := guest(t, a)
		rcv := newReceiver(t, nil)
		h := createWebhook(t, c, rcv.URL+"/hook", "session.created", "run.completed", "input.requested")
		other := guest(t, a) // another user's events never reach this webhook
		other.Send(other.CreateSession(nil), "not yours")

		sid := c.CreateSession(nil)
		run := askAndAnswer(t, c, sid)
		got := rcv.until(t, "session.created, input.requested and run.completed", func(ds []delivery) bool {
			return ofType(t, "run.completed", 1)(ds) && ofType(t, "input.requested", 1)(ds) && ofType(t, "session.created", 1)(ds)
		})
		for _, d := range got {
			if !verify(t, h.Secret, d) {
				t.Errorf("a delivery's signature does not verify: %+v", d)
			}
			b := d.body(t)
			if b.Data.SessionID != sid {
				t.Errorf("a delivery of another session: %s", d.Body)
			}
			if strings.Contains(string(d.Body), "what now?") {
				t.Errorf("a body carries the user's text: %s", d.Body)
			}
			if ts, _ := strconv.ParseInt(d.Timestamp, 10, 64); time.Since(time.Unix(ts, 0)) > time.Minute || !strings.HasPrefix(d.ID, "msg_") {
				t.Errorf("webhook-id %q, webhook-timestamp %q", d.ID, d.Timestamp)
			}
			switch b.Type {
			case "run.completed":
				if b.Data.RunID != run || b.Data.Status != "COMPLETED" || b.Data.Cursor == "" {
					t.Errorf("run.completed data: %s", d.Body)
				}
				// The cursor is the run's end in the session's log: what follows it is
				// what came after.
				_, evs := c.Connect("graphql-transport-ws").Stream(sid, b.Data.Cursor)
				if ev, ok := evs.TryNext(time.Second); ok && ev.Typename == "RunStatusChanged" && ev.Run.ID == run {
					t.Errorf("after the cursor comes the run's end again: %+v", ev)
				}
			case "input.requested":
				if b.Data.QuestionID == "" || b.Data.RunID != run || b.Data.Cursor == "" {
					t.Errorf("input.requested data: %s", d.Body)
				}
			}
		}
		st := webhookOf(t, c, h.ID)
		if len(st.Deliveries) != 3 {
			t.Fatalf("deliveries = %+v", st.Deliveries)
		}
		for _, d := range st.Deliveries {
			if d.Status != "DELIVERED" || d.Attempts != 1 || d.LastStatusCode == nil || *d.LastStatusCode != 200 || d.DeliveredAt == nil || d.NextAttemptAt != nil {
				t.Errorf("delivery = %+v", d)
			}
		}
		if r := other.Do(`mutation($id: ID!) { deleteWebhook(id: $id) }`, map[string]any{"id": h.ID}); r.Code() != "NOT_FOUND" {
			t.Errorf("another user deletes the webhook: %s", r.Code())
		}
		if r := other.Do(`mutation($id: ID!) { redeliverWebhook(deliveryId: $id) { id } }`, map[string]any{"id": st.Deliveries[0].ID}); r.Code() != "NOT_FOUND" {
			t.Errorf("another user redelivers: %s", r.Code())
		}
	})
}

func TestWebhooksRetryFailuresWithTheSameIDAndRedeliverOnDemand(t *testing.T) {
	a := hooksApp(t, "sqlite", nil)
	c := guest(t, a)
	rcv := newReceiver(t, func(n int, _ delivery) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	h := createWebhook(t, c, rcv.URL, "session.created")
	c.CreateSession(nil)
	got := rcv.until(t, "three attempts", func(ds []delivery) bool { return len(ds) >= 3 })
	if got[0].ID != got[1].ID || got[1].ID != got[2].ID {
		t.Errorf("webhook-ids of the attempts: %q %q %q, want one", got[0].ID, got[1].ID, got[2].ID)
	}
	for _, d := range got {
		if !verify(t, h.Secret, d) {
			t.Errorf("attempt not signed: %+v", d)
		}
	}
	var st webhookState
	eventually(t, tgtest.Wait, "the delivery DELIVERED after three attempts", func() bool {
		st = webhookOf(t, c, h.ID)
		return len(st.Deliveries) == 1 && st.Deliveries[0].Status == "DELIVERED"
	})
	if d := st.Deliveries[0]; d.Attempts != 3 || *d.LastStatusCode != 204 || d.EventID != got[0].ID {
		t.Errorf("delivery = %+v", d)
	}
	var re struct{ RedeliverWebhook shownDelivery }
	c.Must(`mutation($d: ID!) { redeliverWebhook(deliveryId: $d) { id status attempts } }`, map[string]any{"d": st.Deliveries[0].ID}, &re)
	if re.RedeliverWebhook.Status != "PENDING" {
		t.Errorf("redelivered = %+v", re.RedeliverWebhook)
	}
	again := rcv.until(t, "the redelivery", func(ds []delivery) bool { return len(ds) >= 4 })
	if again[3].ID != got[0].ID {
		t.Errorf("redelivered with id %q, want %q", again[3].ID, got[0].ID)
	}
	eventually(t, tgtest.Wait, "four attempts", func() bool {
		st = webhookOf(t, c, h.ID)
		return st.Deliveries[0].Attempts == 4 && st.Deliveries[0].Status == "DELIVERED"
	})
}

func TestWebhooksGiveUpAndDisable(t *testing.T) {
	a := hooksApp(t, "sqlite", func(c *app.Config) {
		c.Service.WebhookRetrySchedule = []time.Duration{50 * time.Millisecond}
		c.Service.WebhookDisableAfter = 2
	})
	c := guest(t, a)
	failing := newReceiver(t, func(int, delivery) int { return http.StatusServiceUnavailable })
	h := createWebhook(t, c, failing.URL, "session.created")
	c.CreateSession(nil)
	c.CreateSession(nil)
	var st webhookState
	eventually(t, tgtest.Wait, "the webhook disabled after two deliveries failed", func() bool {
		st = webhookOf(t, c, h.ID)
		return !st.Enabled
	})
	if st.DisabledReason == nil || !strings.Contains(*st.DisabledReason, "2 deliveries in a row failed") {
		t.Errorf("disabledReason = %v", st.DisabledReason)
	}
	for _, d := range st.Deliveries {
		if d.Status != "FAILED" || d.Attempts != 2 || d.LastError == nil || *d.LastStatusCode != 503 {
			t.Errorf("delivery = %+v", d)
		}
	}

	gone := newReceiver(t, func(int, delivery) int { return http.StatusGone })
	h2 := createWebhook(t, c, gone.URL, "session.created")
	c.CreateSession(nil)
	eventually(t, tgtest.Wait, "the webhook disabled by 410", func() bool { return !webhookOf(t, c, h2.ID).Enabled })
	st = webhookOf(t, c, h2.ID)
	if st.DisabledReason == nil || !strings.Contains(*st.DisabledReason, "410") || st.Deliveries[0].Attempts != 1 || st.Deliveries[0].Status != "FAILED" {
		t.Errorf("after 410: %+v %v", st, *st.DisabledReason)
	}
	if n := len(gone.all()); n != 1 {
		t.Errorf("the receiver that answered 410 got %d requests", n)
	}
	// Enabled again, it is sent the events of now on.
	c.Must(`mutation($id: ID!) { updateWebhook(input: {id: $id, enabled: true}) { enabled } }`, map[string]any{"id": h2.ID}, nil)
	if st := webhookOf(t, c, h2.ID); !st.Enabled || st.DisabledReason != nil {
		t.Errorf("enabled again: %+v", st)
	}
}

func TestWebhookSecretRotationSignsWithBothFor24Hours(t *testing.T) {
	a := hooksApp(t, "sqlite", nil)
	c := guest(t, a)
	rcv := newReceiver(t, nil)
	h := createWebhook(t, c, rcv.URL, "session.created")
	var out struct{ RotateWebhookSecret struct{ Secret string } }
	c.Must(`mutation($id: ID!) { rotateWebhookSecret(id: $id) { secret } }`, map[string]any{"id": h.ID}, &out)
	fresh := out.RotateWebhookSecret.Secret
	if fresh == h.Secret {
		t.Fatal("the rotated secret is the old one")
	}
	c.CreateSession(nil)
	d := rcv.until(t, "a delivery", func(ds []delivery) bool { return len(ds) >= 1 })[0]
	if len(strings.Fields(d.Signature)) != 2 || !verify(t, h.Secret, d) || !verify(t, fresh, d) {
		t.Errorf("webhook-signature %q: want one signature with each secret", d.Signature)
	}
}

func TestWebhooksRefusePrivateAddresses(t *testing.T) {
	a := startApp(t, "memory", nil) // WEBHOOK_ALLOW_PRIVATE unset
	c := guest(t, a)
	for _, url := range []string{"http://127.0.0.1:8080/hook", "http://10.1.2.3/hook", "http://192.168.1.1/", "http://172.16.0.1/",
		"http://169.254.169.254/latest/meta-data", "http://[::1]:8080/", "http://0.0.0.0/", "http://[fd00::1]/",
		"http://localhost:8080/hook", "ftp://example.com/", "not a url"} {
		r := c.Do(`mutation($u: String!) { createWebhook(input: {url: $u, events: ["run.completed"]}) { secret } }`, map[string]any{"u": url})
		if r.Code() != "BAD_USER_INPUT" {
			t.Errorf("%s: %s %+v, want BAD_USER_INPUT", url, r.Code(), r.Errors)
		}
	}
	for _, events := range [][]string{{}, {"run.finished"}} {
		r := c.Do(`mutation($e: [String!]!) { createWebhook(input: {url: "https://example.com/", events: $e}) { secret } }`, map[string]any{"e": events})
		if r.Code() != "BAD_USER_INPUT" {
			t.Errorf("events %v: %s, want BAD_USER_INPUT", events, r.Code())
		}
	}
}

func TestWebhooksFollowNoRedirect(t *testing.T) {
	a := hooksApp(t, "memory", func(c *app.Config) { c.Service.WebhookRetrySchedule = []time.Duration{time.Hour} })
	c := guest(t, a)
	private := newReceiver(t, nil)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, private.URL+"/internal", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)
	h := createWebhook(t, c, redirecting.URL, "session.created")
	c.CreateSession(nil)
	var st webhookState
	eventually(t, tgtest.Wait, "the attempt", func() bool {
		st = webhookOf(t, c, h.ID)
		return len(st.Deliveries) == 1 && st.Deliveries[0].Attempts == 1
	})
	d := st.Deliveries[0]
	if d.Status != "PENDING" || *d.LastStatusCode != 307 || d.LastError == nil || !strings.Contains(*d.LastError, "redirects are not followed") {
		t.Errorf("after a redirect: %+v %v", d, *d.LastError)
	}
	if n := len(private.all()); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}

// TestWebhooksDeliverAfterASIGKILLWithTheReceiverDown: an event whose receiver is down
// stays due across a crash of the server, and reaches the receiver once it and the server
// are back.
func TestWebhooksDeliverAfterASIGKILLWithTheReceiverDown(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			env := []string{"DATABASE_URL=sqlite://" + dir + "/t.db", "WEBHOOK_ALLOW_PRIVATE=true", "WEBHOOK_TIMEOUT=1s",
				"WEBHOOK_RETRY_SCHEDULE=100ms,100ms,100ms,100ms,100ms,100ms,100ms,100ms,100ms,100ms", "WEBHOOK_POLL=20ms"}
			if store == "postgres" {
				env[0] = "DATABASE_URL=" + testsvc.NewDatabase(t)
				env = append(env, "REPLICA_ID=hooks-"+strconv.Itoa(freePort(t)))
			}
			port := freePort(t)
			srv := startChild(t, dir, port, env...)
			c := tgtest.Guest(t, srv.URL)
			rport := freePort(t) // nobody listens there yet
			h := createWebhook(t, c, fmt.Sprintf("http://127.0.0.1:%d/hook", rport), "session.created")
			sid := c.CreateSession(nil)
			eventually(t, tgtest.Wait, "a failed attempt", func() bool {
				st := webhookOf(t, c, h.ID)
				return len(st.Deliveries) == 1 && st.Deliveries[0].Attempts >= 1 && st.Deliveries[0].Status == "PENDING"
			})
			srv.kill()
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", rport))
			if err != nil {
				t.Fatal(err)
			}
			rcv := receiverOn(t, ln, nil)
			srv = startChild(t, dir, port, env...)
			d := rcv.until(t, "the event after the restart", func(ds []delivery) bool { return len(ds) >= 1 })[0]
			if b := d.body(t); b.Type != "session.created" || b.Data.SessionID != sid || !verify(t, h.Secret, d) {
				t.Errorf("delivered after the restart: %s (%s)", d.Body, d.Signature)
			}
			eventually(t, tgtest.Wait, "DELIVERED", func() bool {
				return webhookOf(t, c.On(srv.URL), h.ID).Deliveries[0].Status == "DELIVERED"
			})
		})
	}
}

func TestWebhooksTwoReplicasDeliverEachEventOnce(t *testing.T) {
	rcv := newReceiver(t, nil)
	rs := newReplicaSet(t, setOptions{n: 2, env: []string{"WEBHOOK_ALLOW_PRIVATE=true", "WEBHOOK_POLL=10ms"}})
	c := tgtest.Guest(t, rs.reps[0].URL)
	createWebhook(t, c, rcv.URL, "session.created", "run.completed")
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := c.On(rs.reps[i%2].URL)
			cl.Send(cl.CreateSession(nil), "hello")
		}()
	}
	wg.Wait()
	rcv.until(t, "every event", func(ds []delivery) bool { return len(ds) >= 2*n })
	// Once every delivery is recorded DELIVERED, none is attempted again: what the
	// receiver took by then is all it takes.
	eventually(t, tgtest.Wait, "every delivery DELIVERED", func() bool {
		st := webhookOf(t, c, webhooksOf(t, c)[0])
		if len(st.Deliveries) != 2*n {
			return false
		}
		for _, d := range st.Deliveries {
			if d.Status != "DELIVERED" {
				return false
			}
		}
		return true
	})
	got := rcv.all()
	seen := map[string]int{}
	for _, d := range got {
		seen[d.ID]++
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("event %s delivered %d times", id, k)
		}
	}
	if len(seen) != 2*n || len(got) != 2*n {
		t.Errorf("%d events delivered, want %d", len(seen), 2*n)
	}
}
