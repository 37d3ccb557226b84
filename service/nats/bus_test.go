package nats_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/service"
	tgnats "github.com/talkgraph/talkgraph/service/nats"
)

// wiretap is a plain NATS client of the test's own on the replicas' server: what anyone
// who can reach NATS sees and can send.
type wiretap struct {
	t    *testing.T
	nc   *nats.Conn
	mu   sync.Mutex
	msgs []*nats.Msg
}

func tap(t *testing.T, url, subjects string) *wiretap {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := &wiretap{t: t, nc: nc}
	for _, s := range strings.Fields(subjects) {
		if _, err := nc.Subscribe(s, func(m *nats.Msg) {
			w.mu.Lock()
			w.msgs = append(w.msgs, m)
			w.mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// captured returns the messages seen on subjects starting with prefix, once there are at
// least n of them.
func (w *wiretap) captured(prefix string, n int) []*nats.Msg {
	w.t.Helper()
	var out []*nats.Msg
	waitFor(w.t, "messages on "+prefix, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		out = out[:0]
		for _, m := range w.msgs {
			if strings.HasPrefix(m.Subject, prefix) {
				out = append(out, m)
			}
		}
		return len(out) >= n
	})
	return out
}

// dropped waits until c has dropped at least n messages for reason.
func dropped(t *testing.T, c *tgnats.Cluster, reason string, n int64) {
	t.Helper()
	waitFor(t, "a message dropped as "+reason, func() bool { return c.Dropped()[reason] >= n })
}

// Nothing a user wrote crosses NATS in the clear: events, commands and replies are sealed,
// so a client of the same server subscribed to everything reads none of it.
func TestBusCarriesNothingInTheClear(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	w := tap(t, url, p+".> _INBOX.>")
	a, b := connect(t, url, p), connect(t, url, p)
	const secret = "my password is hunter2"

	got := make(chan []*service.Event, 10)
	if _, err := b.Follow("s1", func(evs []*service.Event) { got <- evs }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Serve(replica, func(_ context.Context, cmd *service.Command) *service.Reply {
		return &service.Reply{Message: &service.Message{ID: "m1", Content: cmd.Args.(*service.AddMessageArgs).Content}}
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	evs := events("s1", 1, 1)
	evs[0].Delta = secret
	a.Publish("s1", evs)
	if evs := receive(t, "the events", got); evs[0].Delta != secret {
		t.Fatalf("the event arrived as %+v", evs[0])
	}
	reply, err := a.Send(t.Context(), replica, &service.Command{Op: "addMessage", UserID: "user-1234", SessionID: "s1", Args: &service.AddMessageArgs{Content: secret}})
	if err != nil || reply.Message.Content != secret {
		t.Fatalf("Send: %+v, %v", reply, err)
	}
	a.Announce("leaving-replica")

	w.captured(p+".ev.", 1)
	w.captured(p+".cmd.", 1)
	w.captured(p+".left", 1)
	w.captured("_INBOX.", 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.msgs {
		for _, plain := range []string{"hunter2", "user-1234", "leaving-replica", "addMessage", `"Seq"`, "MessageChunk", `"message"`} {
			if bytes.Contains(m.Data, []byte(plain)) {
				t.Errorf("a message on %s shows %q: %q", m.Subject, plain, m.Data)
			}
		}
	}
}

// What a client of the same NATS server forges, alters or replays takes no effect, and is
// counted: events written in the clear, a sealed batch with a byte changed, a sealed batch
// sent again; a command replayed, altered, or sealed with another deployment's key.
func TestForgedAlteredAndReplayedMessagesTakeNoEffect(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	w := tap(t, url, p+".>")
	a, b := connect(t, url, p), connect(t, url, p)

	got := make(chan []*service.Event, 10)
	if _, err := b.Follow("s1", func(evs []*service.Event) { got <- evs }); err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	if _, err := b.Serve(replica, func(context.Context, *service.Command) *service.Reply {
		handled.Add(1)
		return &service.Reply{}
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}

	// Events.
	a.Publish("s1", events("s1", 1, 1))
	receive(t, "the genuine events", got)
	genuine := w.captured(p+".ev.", 1)[0]
	forged := []byte(`[{"SessionID":"s1","Seq":2,"Type":"MessageChunk","Key":"m","MessageID":"m","Delta":"forged","Offset":1}]`)
	altered := bytes.Clone(genuine.Data)
	altered[len(altered)-3] ^= 1
	for _, data := range [][]byte{forged, altered, genuine.Data} {
		if err := w.nc.Publish(genuine.Subject, data); err != nil {
			t.Fatal(err)
		}
	}
	dropped(t, b, "unopenable", 2)
	dropped(t, b, "replayed", 1)
	a.Publish("s1", events("s1", 2, 1))
	if evs := receive(t, "the next genuine events", got); evs[0].Seq != 2 || evs[0].Delta != "d2 " {
		t.Fatalf("after the forged, altered and replayed batches the follower got %+v", evs[0])
	}
	select {
	case evs := <-got:
		t.Fatalf("the follower got more: %+v", evs[0])
	default:
	}

	// Commands.
	if _, err := a.Send(t.Context(), replica, &service.Command{Op: "cancelRun", UserID: "u1", SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	cmd := w.captured(p+".cmd.", 1)[0]
	before := b.Dropped()
	if err := w.nc.Publish(cmd.Subject, cmd.Data); err != nil { // replayed
		t.Fatal(err)
	}
	altered = bytes.Clone(cmd.Data)
	altered[40] ^= 1
	if err := w.nc.Publish(cmd.Subject, altered); err != nil {
		t.Fatal(err)
	}
	dropped(t, b, "replayed", before["replayed"]+1)
	dropped(t, b, "unopenable", before["unopenable"]+1)
	if n := handled.Load(); n != 1 {
		t.Errorf("the command was done %d times, want once", n)
	}

	// Another deployment on the same NATS server, with a key of its own: its command goes
	// to a subject of its own, and moved onto this deployment's, it does not open.
	other, err := tgnats.Connect(url, tgnats.Options{Secret: []byte("another deployment's bus secret"), Prefix: p, Name: "other", RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Send(t.Context(), replica, &service.Command{Op: "cancelRun", UserID: "u1", SessionID: "s1"}); service.ErrorCode(err) != service.EUNAVAILABLE {
		t.Errorf("a command sealed with another key: %v, want EUNAVAILABLE unanswered", err)
	}
	var theirs *nats.Msg
	for _, m := range w.captured(p+".cmd.", 4) { // the genuine, replayed and altered ones, and theirs
		if m.Subject != cmd.Subject {
			theirs = m
		}
	}
	if theirs == nil {
		t.Fatal("the other deployment's command went to this deployment's subject")
	}
	if err := w.nc.Publish(cmd.Subject, theirs.Data); err != nil {
		t.Fatal(err)
	}
	dropped(t, b, "unopenable", before["unopenable"]+2)
	if n := handled.Load(); n != 1 {
		t.Errorf("the command was done %d times, want once", n)
	}
}

// Subjects name no session and no replica: a client of the same NATS server subscribed
// to every subject of the bus, while a session's events and a command for it cross from
// one replica to another, sees neither the session's ID nor the replica's name, nor their
// base64url forms, in any subject.
func TestSubjectsNameNoSessionAndNoReplica(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	w := tap(t, url, p+".>")
	a, b := connect(t, url, p), connect(t, url, p)
	const session = "0f4c9a7e-1b2d-4e8f-9a3c-5d6e7f8a9b0c"

	got := make(chan []*service.Event, 10)
	if _, err := b.Follow(session, func(evs []*service.Event) { got <- evs }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Serve(replica, func(context.Context, *service.Command) *service.Reply { return &service.Reply{} }); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	a.Publish(session, events(session, 1, 1))
	receive(t, "the events", got)
	if _, err := a.Send(t.Context(), replica, &service.Command{Op: "cancelRun", UserID: "u1", SessionID: session}); err != nil {
		t.Fatal(err)
	}

	subjects := map[string]bool{}
	for _, m := range append(w.captured(p+".ev.", 1), w.captured(p+".cmd.", 1)...) {
		subjects[m.Subject] = true
	}
	for subject := range subjects {
		for _, name := range []string{session, replica} {
			for _, form := range []string{name, base64.RawURLEncoding.EncodeToString([]byte(name)), base64.StdEncoding.EncodeToString([]byte(name))} {
				if strings.Contains(subject, form) {
					t.Errorf("the subject %s names %q", subject, name)
				}
			}
		}
	}
}

// Two deployments on one NATS server, each with a bus secret of its own, share no
// subject even where their replicas have the same names: each replica's commands reach
// it alone, never the other deployment's replica of that name, which could not open them.
func TestDeploymentsWithTheirOwnSecretsShareNoSubject(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	deployment := func(secret string) (sender *tgnats.Cluster, handled *atomic.Int64) {
		opts := tgnats.Options{Secret: []byte(secret), Prefix: p, Name: replica, RequestTimeout: 2 * time.Second}
		sender, err := tgnats.Connect(url, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sender.Close)
		server, err := tgnats.Connect(url, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(server.Close)
		handled = new(atomic.Int64)
		if _, err := server.Serve(replica, func(context.Context, *service.Command) *service.Reply {
			handled.Add(1)
			return &service.Reply{}
		}); err != nil {
			t.Fatal(err)
		}
		if err := server.Flush(); err != nil {
			t.Fatal(err)
		}
		return sender, handled
	}
	a, handledA := deployment("the first deployment's bus secret")
	b, handledB := deployment("the second deployment's bus secret")

	const n = 8
	for i := range n {
		for _, c := range []*tgnats.Cluster{a, b} {
			if _, err := c.Send(t.Context(), replica, &service.Command{Op: "cancelRun", SessionID: "s1"}); err != nil {
				t.Fatalf("command %d: %v", i, err)
			}
		}
	}
	if got, gotB := handledA.Load(), handledB.Load(); got != n || gotB != n {
		t.Errorf("the deployments' replicas did %d and %d commands, want %d each", got, gotB, n)
	}
}

// A member of NATS that answers in a replica's place (it joined its queue group, and the
// replica is gone) can make a command fail, never make its sender take an answer: neither
// a reply in the clear nor one replayed from an earlier request.
func TestImpostorCannotAnswerForAReplica(t *testing.T) {
	t.Parallel()
	url, p := testsvc.NATS(t), prefix()
	w := tap(t, url, "_INBOX.>")
	a, b := connect(t, url, p), connect(t, url, p)
	stop, err := b.Serve(replica, func(context.Context, *service.Command) *service.Reply {
		return &service.Reply{Message: &service.Message{ID: "m1"}, Run: &service.Run{ID: "r1", Status: service.RunQueued}}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Send(t.Context(), replica, &service.Command{Op: "addMessage", SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	success := w.captured("_INBOX.", 1)[0].Data // a genuine "accepted", of another request
	stop()
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}

	var subject string
	var answers = [][]byte{success, []byte(`{"message":{"ID":"m2"},"run":{"ID":"r2","Status":"QUEUED"}}`)}
	var next atomic.Int64 // the impostor's answers so far
	sub, err := w.nc.QueueSubscribe(p+".cmd.>", "runners", func(m *nats.Msg) {
		subject = m.Subject
		_ = m.Respond(answers[int(next.Add(1)-1)%len(answers)])
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for range answers {
		reply, err := a.Send(t.Context(), replica, &service.Command{Op: "addMessage", SessionID: "s1"})
		if err == nil || service.ErrorCode(err) != service.EUNAVAILABLE {
			t.Fatalf("an impostor's answer was taken: %+v, %v (on %s)", reply, err, subject)
		}
	}
	// Each command was the impostor's to answer, and each answer was dropped.
	if n := next.Load(); n != int64(len(answers)) {
		t.Errorf("the impostor answered %d commands, want %d", n, len(answers))
	}
	if n := a.Dropped()["unopenable"]; n != int64(len(answers)) {
		t.Errorf("%d answers dropped as unopenable, want %d", n, len(answers))
	}
}

// NATS's own security: a token or a user and password in the URL, an nkey seed file, and
// TLS with a private CA each get a replica onto a server that asks for them.
func TestConnectionSecurity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ready := func(t *testing.T, url string, opts tgnats.Options) {
		t.Helper()
		opts.Secret, opts.Prefix = busSecret, prefix()
		c, err := tgnats.Connect(url, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		waitFor(t, "the connection", func() bool { return c.Ready() == nil })
	}
	refused := func(t *testing.T, url string) {
		t.Helper()
		if nc, err := nats.Connect(url, nats.Timeout(2*time.Second)); err == nil {
			nc.Close()
			t.Fatal("the server took a client without its credentials: the test proves nothing")
		}
	}

	t.Run("token", func(t *testing.T) {
		srv := testsvc.StartNATSWith(t, func(o *natsserver.Options) { o.Authorization = "s3cret-token" })
		refused(t, srv.URL)
		ready(t, strings.Replace(srv.URL, "nats://", "nats://s3cret-token@", 1), tgnats.Options{})
	})
	t.Run("user and password", func(t *testing.T) {
		srv := testsvc.StartNATSWith(t, func(o *natsserver.Options) { o.Username, o.Password = "replica", "pa55" })
		refused(t, srv.URL)
		ready(t, strings.Replace(srv.URL, "nats://", "nats://replica:pa55@", 1), tgnats.Options{})
	})
	t.Run("nkey", func(t *testing.T) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		file := filepath.Join(dir, "replica.nk")
		if err := os.WriteFile(file, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		srv := testsvc.StartNATSWith(t, func(o *natsserver.Options) { o.Nkeys = []*natsserver.NkeyUser{{Nkey: pub}} })
		refused(t, srv.URL)
		ready(t, srv.URL, tgnats.Options{NKeyFile: file})
	})
	t.Run("TLS with a private CA", func(t *testing.T) {
		caFile, serverTLS := privateCA(t, dir)
		srv := testsvc.StartNATSWith(t, func(o *natsserver.Options) { o.TLS, o.TLSConfig = true, serverTLS })
		url := strings.Replace(srv.URL, "nats://", "tls://", 1)
		if nc, err := nats.Connect(url, nats.Timeout(2*time.Second)); err == nil {
			nc.Close()
			t.Fatal("a client that does not know the private CA was taken: the test proves nothing")
		}
		ready(t, url, tgnats.Options{CAFile: caFile})
	})
	t.Run("files that cannot be used are named", func(t *testing.T) {
		missing := filepath.Join(dir, "missing")
		for name, opts := range map[string]tgnats.Options{
			"credentials":    {CredsFile: missing},
			"nkey":           {NKeyFile: missing},
			"CA":             {CAFile: missing},
			"certificate":    {CertFile: missing, KeyFile: missing},
			"certificate ke": {CertFile: missing},
		} {
			opts.Secret = busSecret
			if _, err := tgnats.Connect("nats://127.0.0.1:1", opts); err == nil || service.ErrorCode(err) != service.EINVALID {
				t.Errorf("%s file missing: %v, want EINVALID", name, err)
			}
		}
		if _, err := tgnats.Connect("nats://127.0.0.1:1", tgnats.Options{Secret: []byte("short")}); err == nil {
			t.Error("a bus secret of 5 bytes was taken")
		}
	})
}

// privateCA makes a CA and a certificate it signs for 127.0.0.1, and returns the CA's
// file and the server's TLS configuration.
func privateCA(t *testing.T, dir string) (caFile string, server *tls.Config) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
}
