package httpapi

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

func TestKeyedLimiterAllowsABurstThenRefusesWithAWait(t *testing.T) {
	l := newKeyedLimiter(1.0/60, 3) // 1 a minute, 3 at once
	now := time.Now()
	l.now = func() time.Time { return now }
	for i := 0; i < 3; i++ {
		if ok, _ := l.allow("a"); !ok {
			t.Fatalf("request %d refused within the burst", i)
		}
	}
	ok, wait := l.allow("a")
	if ok || wait != time.Minute {
		t.Errorf("4th request: allowed %v, wait %v; want refused for a minute", ok, wait)
	}
	if ok, _ := l.allow("b"); !ok {
		t.Error("another key was refused")
	}
}

func TestKeyedLimiterMemoryIsBounded(t *testing.T) {
	l := newKeyedLimiter(1, 5)
	l.max = 100
	for i := 0; i < 10000; i++ {
		l.allow(fmt.Sprint("addr", i))
	}
	if n := l.tracked(); n > 100 {
		t.Errorf("%d keys tracked, want at most 100", n)
	}
	// A key being refused is the most recent: the cap forgets others first.
	for i := 0; i < 10; i++ {
		l.allow("busy")
	}
	for i := 0; i < 50; i++ {
		l.allow(fmt.Sprint("new", i))
	}
	if ok, _ := l.allow("busy"); ok {
		t.Error("a spent bucket was forgotten while in use")
	}
	// Buckets idle long enough to be full again are dropped.
	clock := time.Now()
	l = newKeyedLimiter(1, 5) // refills in 5 s
	l.now = func() time.Time { return clock }
	for i := 0; i < 100; i++ {
		l.allow(fmt.Sprint("k", i))
	}
	clock = clock.Add(6 * time.Second)
	l.allow("fresh")
	if n := l.tracked(); n != 1 {
		t.Errorf("%d keys tracked after they all went idle, want 1", n)
	}
}

func TestKeyedLimiterSweepForgetsACrowdWithoutRequests(t *testing.T) {
	clock := time.Now()
	l := newKeyedLimiter(1, 5) // refills in 5 s
	l.now = func() time.Time { return clock }
	for i := 0; i < 3000; i++ {
		l.allow(fmt.Sprint("user", i))
	}
	clock = clock.Add(2 * time.Second)
	for i := 0; i < 5; i++ {
		l.allow("late") // spends its whole burst 2 s after the crowd came
	}
	l.sweep()
	if n := l.tracked(); n != 3001 {
		t.Fatalf("%d keys tracked after a sweep before any refilled, want 3001", n)
	}
	clock = clock.Add(3500 * time.Millisecond) // the crowd full again; "late" holds 3.5 tokens
	l.sweep()
	if n := l.tracked(); n != 1 {
		t.Fatalf("%d keys tracked after the crowd refilled, want 1 (the late one)", n)
	}
	if l.peak != 1 {
		t.Errorf("peak %d after the sweep, want the map made anew at its size (1)", l.peak)
	}
	for i := 0; i < 3; i++ {
		if ok, _ := l.allow("late"); !ok {
			t.Fatalf("request %d of the late key refused; it had 3 tokens", i)
		}
	}
	if ok, _ := l.allow("late"); ok {
		t.Error("the late key's bucket was forgotten by the sweep while not yet full")
	}
}

func TestClientAddress(t *testing.T) {
	trusted, err := ParseTrustedProxies("10.0.0.0/8, 192.168.1.1")
	if err != nil {
		t.Fatal(err)
	}
	addrs := clientAddresses{trusted: trusted}
	for _, c := range []struct{ remote, xff, want string }{
		{"203.0.113.7:5000", "", "203.0.113.7"},
		{"203.0.113.7:5000", "1.2.3.4", "203.0.113.7"},             // not from a trusted proxy: ignored
		{"10.1.2.3:5000", "1.2.3.4", "1.2.3.4"},                    // the proxy's client
		{"10.1.2.3:5000", "6.6.6.6, 1.2.3.4", "1.2.3.4"},           // the client's own claim is ignored
		{"10.1.2.3:5000", "1.2.3.4, 192.168.1.1", "1.2.3.4"},       // through two proxies
		{"10.1.2.3:5000", "garbage, 10.9.9.9", "10.9.9.9"},         // nothing untrusted: the last good hop
		{"10.1.2.3:5000", "", "10.1.2.3"},                          // no header: the proxy itself
		{"[2001:db8::1]:5000", "", "2001:db8::/64"},                // IPv6 by /64
		{"[::ffff:203.0.113.7]:5000", "", "203.0.113.7"},           // mapped IPv4
		{"10.1.2.3:5000", "2001:db8:0:1::99", "2001:db8:0:1::/64"}, // IPv6 client behind the proxy
	} {
		r := httptest.NewRequest("GET", "/query", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := addrs.of(r); got != c.want {
			t.Errorf("remote %s, X-Forwarded-For %q: %s, want %s", c.remote, c.xff, got, c.want)
		}
	}
	if _, err := ParseTrustedProxies("10.0.0.0/8,nonsense"); err == nil {
		t.Error("nonsense accepted")
	}
}

func TestCapErrors(t *testing.T) {
	errs := make(gqlerror.List, 50000)
	for i := range errs {
		errs[i] = &gqlerror.Error{Message: fmt.Sprint("error ", i), Extensions: map[string]any{"code": "GRAPHQL_VALIDATION_FAILED"}}
	}
	resp := capErrors(20)(context.Background(), func(context.Context) *graphql.Response {
		return &graphql.Response{Errors: errs}
	})
	if len(resp.Errors) != 20 {
		t.Fatalf("%d errors", len(resp.Errors))
	}
	last := resp.Errors[19]
	if last.Message != "too many errors: 49981 more not shown" || last.Extensions["code"] != "GRAPHQL_VALIDATION_FAILED" {
		t.Errorf("last error: %+v", last)
	}
	if resp.Errors[18].Message != "error 18" {
		t.Errorf("errors kept: %v", resp.Errors[18])
	}
}

// FuzzClientAddress checks that any X-Forwarded-For behind a trusted proxy gives a key
// that is an address (or /64 network) the request named: the remote address or a hop of
// the header, never anything else, and never a panic.
//
//	go test ./httpapi -run '^$' -fuzz FuzzClientAddress -fuzztime 1m
func FuzzClientAddress(f *testing.F) {
	f.Add("10.1.2.3:5000", "6.6.6.6, 1.2.3.4")
	f.Add("10.1.2.3:5000", "garbage, 10.9.9.9")
	f.Add("[::ffff:10.0.0.1]:1", "2001:db8::1,::ffff:1.2.3.4")
	f.Add("203.0.113.7:5000", "1.2.3.4")
	f.Add("nonsense", "")
	trusted, _ := ParseTrustedProxies("10.0.0.0/8,::ffff:10.0.0.0/104")
	addrs := clientAddresses{trusted: trusted}
	f.Fuzz(func(t *testing.T, remote, xff string) {
		r := httptest.NewRequest("GET", "/query", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xff)
		got := addrs.of(r)
		if got == remote || strings.Contains(remote, strings.TrimSuffix(got, "/64")) {
			return
		}
		for _, hop := range strings.Split(xff, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(hop))
			if err != nil {
				continue
			}
			if got == a.Unmap().String() {
				return
			}
			if p, _ := a.Unmap().Prefix(64); a.Unmap().Is6() && p.String() == got {
				return
			}
		}
		// The remote address in canonical form.
		host, _, err := net.SplitHostPort(remote)
		if err != nil {
			host = remote
		}
		if a, err := netip.ParseAddr(host); err == nil {
			a = a.Unmap()
			if p, _ := a.Prefix(64); got == a.String() || (a.Is6() && p.String() == got) {
				return
			}
		}
		t.Fatalf("remote %q, X-Forwarded-For %q: key %q is neither", remote, xff, got)
	})
}
