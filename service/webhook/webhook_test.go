package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // base64 of 24 bytes: any key length signs

// receiver is a local HTTP server counting what it is sent, with the last request's
// headers and body.
type receiver struct {
	*httptest.Server
	hits   atomic.Int64
	header atomic.Value // http.Header
	body   atomic.Value // []byte
}

func newReceiver(t *testing.T, status int) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		b := make([]byte, 1<<16)
		n, _ := req.Body.Read(b)
		r.header.Store(req.Header.Clone())
		r.body.Store(b[:n])
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func TestSendSignsAsStandardWebhooksSays(t *testing.T) {
	rcv := newReceiver(t, http.StatusNoContent)
	s := webhook.New(webhook.Options{AllowPrivate: true})
	at := time.Unix(1700000000, 0)
	body := []byte(`{"type":"run.completed","timestamp":"2023-11-14T22:13:20Z","data":{"sessionId":"s"}}`)
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another key of thirty-two bytes!"))
	status, err := s.Send(t.Context(), &service.HookRequest{URL: rcv.URL, ID: "msg_1", At: at, Body: body, Secrets: []string{secret, other}})
	if err != nil || status != http.StatusNoContent {
		t.Fatalf("Send = %d, %v", status, err)
	}
	h := rcv.header.Load().(http.Header)
	if h.Get("webhook-id") != "msg_1" || h.Get("webhook-timestamp") != "1700000000" || h.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", h)
	}
	// An implementation of the test's own: HMAC-SHA256 of id.timestamp.body, keyed with
	// the base64 after whsec_, in base64 after v1, one per secret.
	sigs := strings.Fields(h.Get("webhook-signature"))
	for i, sec := range []string{secret, other} {
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, "whsec_"))
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte("msg_1." + strconv.FormatInt(at.Unix(), 10) + "."))
		mac.Write(body)
		if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); i >= len(sigs) || sigs[i] != want {
			t.Errorf("signature %d: %v, want %s", i, sigs, want)
		}
	}
	// And the library's verifier, as a receiver would use it.
	wh, _ := standardwebhooks.NewWebhook(other)
	if err := wh.VerifyIgnoringTimestamp(rcv.body.Load().([]byte), h); err != nil {
		t.Errorf("the library does not verify it: %v", err)
	}
}

func TestCheckURLRefusesWhatIsOrResolvesToAPrivateAddress(t *testing.T) {
	s := webhook.New(webhook.Options{})
	for _, u := range []string{"http://127.0.0.1/", "http://10.0.0.1/", "http://[::1]/", "http://169.254.169.254/", "http://0.0.0.0/",
		"http://localhost/", "http://[::ffff:127.0.0.1]/", "ftp://example.com/"} {
		if err := s.CheckURL(t.Context(), u); service.ErrorCode(err) != service.EINVALID {
			t.Errorf("CheckURL(%s) = %v, want EINVALID", u, err)
		}
	}
	if err := s.CheckURL(t.Context(), "https://93.184.216.34/hook"); err != nil {
		t.Errorf("a public address: %v", err)
	}
	if err := webhook.New(webhook.Options{AllowPrivate: true}).CheckURL(t.Context(), "http://127.0.0.1/"); err != nil {
		t.Errorf("with AllowPrivate: %v", err)
	}
}

// fakeDNS answers A queries for any name: with public the first time, then with
// 127.0.0.1, as a name whose owner rebinds it would.
func fakeDNS(t *testing.T, public netip.Addr) *net.Resolver {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var asked atomic.Int64
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			hdr, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: hdr.ID, Response: true, Authoritative: true})
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			if q.Type == dnsmessage.TypeA {
				addr := netip.MustParseAddr("127.0.0.1")
				if asked.Add(1) == 1 {
					addr = public
				}
				_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}, dnsmessage.AResource{A: addr.As4()})
			}
			msg, _ := b.Finish()
			_, _ = pc.WriteTo(msg, from)
		}
	}()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
}

func TestSendRefusesANameThatResolvesToLoopbackWhenItIsDialed(t *testing.T) {
	rcv := newReceiver(t, http.StatusOK)
	_, port, _ := net.SplitHostPort(rcv.Listener.Addr().String())
	s := webhook.New(webhook.Options{Resolver: fakeDNS(t, netip.MustParseAddr("93.184.216.34"))})
	url := "http://rebind.example:" + port + "/hook"
	if err := s.CheckURL(t.Context(), url); err != nil {
		t.Fatalf("CheckURL while the name resolves to a public address: %v", err)
	}
	_, err := s.Send(t.Context(), &service.HookRequest{URL: url, ID: "msg_1", At: time.Now(), Body: []byte(`{}`), Secrets: []string{secret}})
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("Send once the name resolves to 127.0.0.1: %v, want refused", err)
	}
	if n := rcv.hits.Load(); n != 0 {
		t.Errorf("the loopback receiver got %d requests", n)
	}
}

func TestSendFollowsNoRedirect(t *testing.T) {
	target := newReceiver(t, http.StatusOK)
	redirect := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusFound))
	t.Cleanup(redirect.Close)
	s := webhook.New(webhook.Options{AllowPrivate: true})
	status, err := s.Send(t.Context(), &service.HookRequest{URL: redirect.URL, ID: "msg_1", At: time.Now(), Body: []byte(`{}`), Secrets: []string{secret}})
	if err != nil || status != http.StatusFound || target.hits.Load() != 0 {
		t.Errorf("Send = %d, %v; the redirect's target got %d requests", status, err, target.hits.Load())
	}
}

func TestSendCapsTheBodyAndTheAnswer(t *testing.T) {
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 32<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(endless.Close)
	s := webhook.New(webhook.Options{AllowPrivate: true, MaxBody: 100})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	status, err := s.Send(ctx, &service.HookRequest{URL: endless.URL, ID: "msg_1", At: time.Now(), Body: []byte(`{}`), Secrets: []string{secret}})
	if err != nil || status != http.StatusOK || ctx.Err() != nil {
		t.Errorf("an endless answer: %d, %v (context %v): it must be cut, not read to the end", status, err, ctx.Err())
	}
	if _, err := s.Send(ctx, &service.HookRequest{URL: endless.URL, ID: "msg_1", At: time.Now(), Body: make([]byte, 101), Secrets: []string{secret}}); err == nil {
		t.Error("a body over MaxBody was sent")
	}
}
