package nats

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func testSealer(t testing.TB, secret string) *sealer {
	t.Helper()
	s, err := newSealer([]byte(secret), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// What one replica seals, another with the same secret opens, for the same purpose only:
// the body, the sender and the ID come back; another secret, another purpose, any byte
// changed, a message cut short or grown are refused; nothing of the body shows in the
// envelope.
func TestSealOpens(t *testing.T) {
	a, b := testSealer(t, "0123456789abcdef-secret"), testSealer(t, "0123456789abcdef-secret")
	body := []byte(`{"content":"my password is hunter2"}`)
	ad := []byte("talkgraph.cmd.cmVwbGljYQ")
	env, id := a.seal(ad, "replica-a", body)
	if bytes.Contains(env, []byte("hunter2")) {
		t.Fatal("the envelope shows the body")
	}
	o, err := b.open(ad, env, time.Now())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if !bytes.Equal(o.body, body) || o.sender != "replica-a" || o.id != id {
		t.Fatalf("opened %q from %q (id %x), want %q from replica-a (id %x)", o.body, o.sender, o.id, body, id)
	}

	refused := map[string]func() error{
		"another secret": func() error {
			_, err := testSealer(t, "another secret, 16+ bytes").open(ad, env, time.Now())
			return err
		},
		"another purpose": func() error { _, err := b.open([]byte("talkgraph.cmd.b3RoZXI"), env, time.Now()); return err },
		"cut short":       func() error { _, err := b.open(ad, env[:len(env)-1], time.Now()); return err },
		"grown":           func() error { _, err := b.open(ad, append(bytes.Clone(env), 0), time.Now()); return err },
		"empty":           func() error { _, err := b.open(ad, nil, time.Now()); return err },
	}
	for i := range env {
		altered := bytes.Clone(env)
		altered[i] ^= 0x20
		if _, err := b.open(ad, altered, time.Now()); !errors.Is(err, errUnopenable) {
			t.Fatalf("byte %d altered: %v, want errUnopenable", i, err)
		}
	}
	for name, open := range refused {
		if err := open(); !errors.Is(err, errUnopenable) {
			t.Errorf("%s: %v, want errUnopenable", name, err)
		}
	}
}

// A message older than MaxAge, or that far ahead of the receiver's clock, is stale.
func TestSealStale(t *testing.T) {
	s := testSealer(t, "0123456789abcdef-secret")
	env, _ := s.seal([]byte("x"), "r", []byte("b"))
	now := time.Now()
	for _, at := range []time.Time{now.Add(-2 * time.Minute), now.Add(2 * time.Minute)} {
		if _, err := s.open([]byte("x"), env, at); !errors.Is(err, errStale) {
			t.Errorf("opened at %v from now: %v, want errStale", at.Sub(now).Round(time.Second), err)
		}
	}
	if _, err := s.open([]byte("x"), env, now.Add(50*time.Second)); err != nil {
		t.Errorf("within MaxAge: %v", err)
	}
}

// A replica's messages carry strictly growing times, however fast it sends.
func TestSealTimesGrow(t *testing.T) {
	s := testSealer(t, "0123456789abcdef-secret")
	var last time.Time
	for range 1000 {
		env, _ := s.seal([]byte("x"), "r", nil)
		o, err := s.open([]byte("x"), env, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !o.sentAt.After(last) {
			t.Fatalf("sent at %v after %v", o.sentAt, last)
		}
		last = o.sentAt
	}
}

// An ID is taken once, however often it comes within twice MaxAge.
func TestSeenSetTakesAnIDOnce(t *testing.T) {
	s := newSeenSet(time.Minute)
	now := time.Now()
	id := [idSize]byte{1}
	if !s.first(id, now) {
		t.Fatal("a new ID was taken for seen")
	}
	for _, later := range []time.Duration{0, 30 * time.Second, 61 * time.Second, 90 * time.Second} {
		if s.first(id, now.Add(later)) {
			t.Fatalf("the ID was taken again %v later", later)
		}
	}
	if !s.first([idSize]byte{2}, now.Add(90*time.Second)) {
		t.Fatal("another ID was taken for seen")
	}
}

// A short secret is refused.
func TestSealNeedsASecret(t *testing.T) {
	if _, err := newSealer([]byte("short"), time.Minute); err == nil {
		t.Fatal("a 5-byte secret was taken")
	}
}

// FuzzOpen: whatever arrives, open neither panics nor takes what was not sealed with the
// key, and what was sealed opens whole.
func FuzzOpen(f *testing.F) {
	s := testSealer(f, "0123456789abcdef-secret")
	ad := []byte("talkgraph.ev.s1")
	const sealedBody = `[{"Seq":1}]`
	good, _ := s.seal(ad, "replica", []byte(sealedBody))
	f.Add(good)
	f.Add([]byte{envelopeVersion})
	f.Add(append([]byte{envelopeVersion}, make([]byte, 80)...))
	f.Add([]byte(`[{"Seq":1,"Type":"MessageChunk","Delta":"forged"}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Only the seed was sealed with the key (in whichever process made it), so only it
		// opens.
		o, err := s.open(ad, bytes.Clone(data), time.Now())
		if err == nil && (o.sender != "replica" || string(o.body) != sealedBody) {
			t.Fatalf("opened %q from %q, bytes that were not sealed with the key", o.body, o.sender)
		}
		body := bytes.Clone(data)
		env, _ := s.seal(ad, "r", body)
		if o, err := s.open(ad, env, time.Now()); err != nil || !bytes.Equal(o.body, body) {
			t.Fatalf("sealed %q, opened %q, %v", body, o.body, err)
		}
	})
}

// BenchmarkSealOpen is what sealing costs one event batch on its way between replicas:
// sealed once by its writer, opened once by each replica that follows the session.
func BenchmarkSealOpen(b *testing.B) {
	s := testSealer(b, "0123456789abcdef-secret")
	ad := []byte("talkgraph.ev.6f1c0e4e-2b7d-4c7e-9a51-0a3b4c5d6e7f")
	body := bytes.Repeat([]byte(`{"Seq":1,"Type":"MessageChunk","Delta":"a few words "}`), 2)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		env, _ := s.seal(ad, "replica-8081", body)
		if _, err := s.open(ad, env, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}
