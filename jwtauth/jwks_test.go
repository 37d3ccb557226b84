package jwtauth_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/talkgraph/talkgraph/jwtauth"
	"github.com/talkgraph/talkgraph/service"
)

const (
	testIssuer   = "https://id.example.test/"
	testAudience = "talkgraph-test"
)

// testKeys are generated once for the whole test binary: RSA key generation is slow.
var testKeys = sync.OnceValue(func() (k struct {
	rsa1, rsa2 *rsa.PrivateKey
	ec256      *ecdsa.PrivateKey
	ec384      *ecdsa.PrivateKey
}) {
	var err error
	if k.rsa1, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if k.rsa2, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if k.ec256, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	if k.ec384, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader); err != nil {
		panic(err)
	}
	return k
})

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// publicJWK writes a public key as a JSON Web Key.
func publicJWK(t testing.TB, kid string, key crypto.PublicKey) map[string]any {
	t.Helper()
	switch k := key.(type) {
	case *rsa.PublicKey:
		return map[string]any{"kty": "RSA", "kid": kid, "use": "sig", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PublicKey:
		point, err := k.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		size := (len(point) - 1) / 2
		return map[string]any{"kty": "EC", "kid": kid, "crv": k.Curve.Params().Name, "x": b64(point[1 : 1+size]), "y": b64(point[1+size:])}
	}
	t.Fatalf("no JWK for %T", key)
	return nil
}

func keySet(keys ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// provider is a fake identity provider's JWKS endpoint: it serves whatever set it was last
// given and counts the fetches.
type provider struct {
	mu      sync.Mutex
	body    []byte
	status  int
	fetches atomic.Int32
	srv     *httptest.Server
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.fetches.Add(1)
	p.mu.Lock()
	body, status := p.body, p.status
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if status != 0 {
		w.WriteHeader(status)
	}
	_, _ = w.Write(body)
}

// publish makes the provider serve a new set (status 0: 200).
func (p *provider) publish(body []byte, status int) {
	p.mu.Lock()
	p.body, p.status = body, status
	p.mu.Unlock()
}

func newProvider(t testing.TB, body []byte) *provider {
	p := &provider{body: body}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// clock is the JWKS's clock; tests move it instead of waiting.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newAuth makes an Auth verifying against url's key set, loaded now.
func newAuth(t testing.TB, url string, clk *clock) (*jwtauth.Auth, error) {
	t.Helper()
	j := &jwtauth.JWKS{URL: url, Refresh: time.Hour, Now: clk.Now}
	a := &jwtauth.Auth{JWKS: j, Issuer: testIssuer, Audience: testAudience}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a, j.Load(ctx)
}

// claims are a provider token's claims for sub, valid for an hour.
func claims(sub string) jwt.RegisteredClaims {
	now := time.Now()
	return jwt.RegisteredClaims{Subject: sub, Issuer: testIssuer, Audience: jwt.ClaimStrings{testAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}
}

func sign(t testing.TB, m jwt.SigningMethod, key any, kid string, c jwt.Claims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantRefused checks that token fails with UNAUTHENTICATED and, when msg is set, that
// message.
func wantRefused(t testing.TB, a *jwtauth.Auth, token, msg string) {
	t.Helper()
	id, err := a.Verify(token)
	if err == nil {
		t.Fatalf("token accepted as %q; want it refused", id.UserID)
	}
	if service.ErrorCode(err) != service.EUNAUTHORIZED {
		t.Fatalf("error %v; want code %s", err, service.EUNAUTHORIZED)
	}
	if msg != "" && service.ErrorMessage(err) != msg {
		t.Fatalf("message %q; want %q", service.ErrorMessage(err), msg)
	}
}

func wantUser(t testing.TB, a *jwtauth.Auth, token, user string) {
	t.Helper()
	id, err := a.Verify(token)
	if err != nil {
		t.Fatalf("token refused: %v", err)
	}
	if id.UserID != user {
		t.Fatalf("user %q; want %q", id.UserID, user)
	}
}

func TestJWKSVerifiesProviderTokens(t *testing.T) {
	k := testKeys()
	p := newProvider(t, keySet(
		publicJWK(t, "rsa", &k.rsa1.PublicKey),
		publicJWK(t, "p256", &k.ec256.PublicKey),
		publicJWK(t, "p384", &k.ec384.PublicKey),
	))
	a, err := newAuth(t, p.srv.URL, newClock())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		m   jwt.SigningMethod
		key any
		kid string
	}{
		{jwt.SigningMethodRS256, k.rsa1, "rsa"},
		{jwt.SigningMethodRS384, k.rsa1, "rsa"},
		{jwt.SigningMethodRS512, k.rsa1, "rsa"},
		{jwt.SigningMethodPS256, k.rsa1, "rsa"},
		{jwt.SigningMethodES256, k.ec256, "p256"},
		{jwt.SigningMethodES384, k.ec384, "p384"},
	} {
		t.Run(c.m.Alg(), func(t *testing.T) {
			cl := claims("user-" + c.m.Alg())
			id, err := a.Verify(sign(t, c.m, c.key, c.kid, cl))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if id.UserID != "user-"+c.m.Alg() || !id.Expires.Equal(cl.ExpiresAt.Time) {
				t.Errorf("identity %+v", id)
			}
		})
	}
	// A key serves only the algorithms of its type and curve.
	wantRefused(t, a, sign(t, jwt.SigningMethodES256, k.ec256, "p384", claims("u")), "invalid token")
	wantRefused(t, a, sign(t, jwt.SigningMethodES384, k.ec384, "rsa", claims("u")), "invalid token")
	// Signed by a key the provider does not have, under one of its kids.
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, k.rsa2, "rsa", claims("u")), "invalid token")
	if n := p.fetches.Load(); n != 1 {
		t.Errorf("%d fetches; want the one at start", n)
	}
}

func TestJWKSKeyAlgMemberIsEnforced(t *testing.T) {
	k := testKeys()
	jwk := publicJWK(t, "rsa", &k.rsa1.PublicKey)
	jwk["alg"] = "PS256"
	p := newProvider(t, keySet(jwk))
	a, err := newAuth(t, p.srv.URL, newClock())
	if err != nil {
		t.Fatal(err)
	}
	wantUser(t, a, sign(t, jwt.SigningMethodPS256, k.rsa1, "rsa", claims("ann")), "ann")
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "rsa", claims("ann")), "invalid token")
}

func TestJWKSChecksIssuerAudienceAndExpiry(t *testing.T) {
	k := testKeys()
	p := newProvider(t, keySet(publicJWK(t, "k1", &k.rsa1.PublicKey)))
	a, err := newAuth(t, p.srv.URL, newClock())
	if err != nil {
		t.Fatal(err)
	}
	good := claims("bob")
	wantUser(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", good), "bob")

	iss := claims("bob")
	iss.Issuer = "https://evil.example.test/"
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", iss), "invalid token")

	aud := claims("bob")
	aud.Audience = jwt.ClaimStrings{"another-app"}
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", aud), "invalid token")

	noAud := claims("bob")
	noAud.Audience = nil
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", noAud), "invalid token")

	expired := claims("bob")
	expired.IssuedAt = jwt.NewNumericDate(time.Now().Add(-2 * time.Hour))
	expired.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Hour))
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", expired), "token expired")

	noSub := claims("")
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", noSub), "invalid token: no subject")

	noExp := claims("bob")
	noExp.ExpiresAt = nil
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", noExp), "invalid token: it has no expiry (exp claim); tokens must expire")
}

func TestJWKSUnknownKidRefreshesOnceThenVerifiesRotatedKey(t *testing.T) {
	k := testKeys()
	p := newProvider(t, keySet(publicJWK(t, "old", &k.rsa1.PublicKey)))
	clk := newClock()
	a, err := newAuth(t, p.srv.URL, clk)
	if err != nil {
		t.Fatal(err)
	}
	wantUser(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "old", claims("cy")), "cy")

	// The provider rotates: the new key is published, the old one dropped.
	p.publish(keySet(publicJWK(t, "new", &k.ec256.PublicKey)), 0)
	rotated := sign(t, jwt.SigningMethodES256, k.ec256, "new", claims("cy"))

	// Right after the fetch at start an unknown kid does not fetch again.
	wantRefused(t, a, rotated, "invalid token")
	if n := p.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches within 30s of the last; want 1", n)
	}

	// Later, tokens naming the new kid make exactly one fetch, however many arrive at once.
	clk.Advance(31 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			if _, err := a.Verify(rotated); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("rotated key refused: %v", err)
	}
	if n := p.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches; want one more for the unknown kid", n)
	}
	wantUser(t, a, rotated, "cy")
	// The old key is gone with the refresh.
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "old", claims("cy")), "invalid token")

	// Made-up kids cannot make it fetch more than once per 30s.
	for i := range 5 {
		wantRefused(t, a, sign(t, jwt.SigningMethodES256, k.ec256, "bogus-"+string(rune('a'+i)), claims("cy")), "invalid token")
	}
	if n := p.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after made-up kids; want still 2", n)
	}
	clk.Advance(31 * time.Second)
	wantRefused(t, a, sign(t, jwt.SigningMethodES256, k.ec256, "bogus-z", claims("cy")), "invalid token")
	if n := p.fetches.Load(); n != 3 {
		t.Fatalf("%d fetches; want 3 once 30s passed", n)
	}
}

func TestJWKSRefreshesWhenOldAndKeepsKeysWhileProviderFails(t *testing.T) {
	k := testKeys()
	p := newProvider(t, keySet(publicJWK(t, "k1", &k.rsa1.PublicKey)))
	clk := newClock()
	a, err := newAuth(t, p.srv.URL, clk) // Refresh: 1h
	if err != nil {
		t.Fatal(err)
	}
	tok := sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", claims("di"))
	wantUser(t, a, tok, "di")
	clk.Advance(59 * time.Minute)
	wantUser(t, a, tok, "di")
	if n := p.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches before the keys are old; want 1", n)
	}

	p.publish([]byte("oops"), http.StatusInternalServerError)
	clk.Advance(2 * time.Minute)
	wantUser(t, a, tok, "di") // refresh failed: the keys held stay in use
	if n := p.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches; want a refresh of the old keys", n)
	}
	wantUser(t, a, tok, "di")
	if n := p.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches; want no retry within 30s of a failure", n)
	}

	p.publish(keySet(publicJWK(t, "k1", &k.rsa1.PublicKey)), 0)
	clk.Advance(31 * time.Second)
	wantUser(t, a, tok, "di")
	if n := p.fetches.Load(); n != 3 {
		t.Fatalf("%d fetches; want a retry after 30s", n)
	}
	wantUser(t, a, tok, "di")
	if n := p.fetches.Load(); n != 3 {
		t.Fatalf("%d fetches; want none while the keys are fresh", n)
	}
}

func TestJWKSRefusesAlgNoneAndHS256WithThePublicKey(t *testing.T) {
	k := testKeys()
	set := keySet(publicJWK(t, "k1", &k.rsa1.PublicKey))
	p := newProvider(t, set)
	der, err := x509.MarshalPKIXPublicKey(&k.rsa1.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	forged := map[string]string{
		"none":          sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "k1", claims("eve")),
		"HS256/pem":     sign(t, jwt.SigningMethodHS256, pemKey, "k1", claims("eve")),
		"HS256/der":     sign(t, jwt.SigningMethodHS256, der, "k1", claims("eve")),
		"HS256/modulus": sign(t, jwt.SigningMethodHS256, k.rsa1.N.Bytes(), "k1", claims("eve")),
		"HS256/jwks":    sign(t, jwt.SigningMethodHS256, set, "k1", claims("eve")),
		"HS512/pem":     sign(t, jwt.SigningMethodHS512, pemKey, "k1", claims("eve")),
	}
	// alg none with the real signature of an RS256 token
	genuine := sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", claims("eve"))
	parts := strings.Split(genuine, ".")
	forged["none/with signature"] = b64([]byte(`{"alg":"none","kid":"k1","typ":"JWT"}`)) + "." + parts[1] + "." + parts[2]

	for _, withSecret := range []bool{false, true} {
		name := "JWKS only"
		if withSecret {
			name = "JWKS and secret"
		}
		t.Run(name, func(t *testing.T) {
			a, err := newAuth(t, p.srv.URL, newClock())
			if err != nil {
				t.Fatal(err)
			}
			if withSecret {
				a.Secret = []byte("a shared secret of the deployment")
			}
			for name, tok := range forged {
				t.Run(name, func(t *testing.T) { wantRefused(t, a, tok, "invalid token") })
			}
			wantUser(t, a, genuine, "eve")
			guest, _, err := a.Issue("guest-1")
			if !withSecret {
				// Without a secret HS256 is refused and nothing is issued.
				if err == nil {
					t.Error("issued an HS256 token without a secret")
				}
				other := sign(t, jwt.SigningMethodHS256, []byte("whatever secret anyone likes"), "", claims("eve"))
				wantRefused(t, a, other, "invalid token")
				return
			}
			// With a secret, HS256 tokens signed with it work beside the provider's.
			if err != nil {
				t.Fatal(err)
			}
			wantUser(t, a, guest, "guest-1")
		})
	}
}

// reserveAddr returns a local address nothing listens on (the listener is closed).
func reserveAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestJWKSProviderDownAtStartThenUp(t *testing.T) {
	k := testKeys()
	addr := reserveAddr(t)
	url := "http://" + addr + "/.well-known/jwks.json"
	clk := newClock()
	a, err := newAuth(t, url, clk)
	if err == nil || !strings.Contains(err.Error(), url) || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("load error %v; want one naming the URL as unreachable", err)
	}
	tok := sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", claims("fay"))
	wantRefused(t, a, tok, "cannot verify tokens right now")

	// The provider comes up on that address.
	p := &provider{body: keySet(publicJWK(t, "k1", &k.rsa1.PublicKey))}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	// Retries wait 5s after a failure, so a flood of tokens does not flood the provider.
	wantRefused(t, a, tok, "cannot verify tokens right now")
	if n := p.fetches.Load(); n != 0 {
		t.Fatalf("%d fetches within 5s of the failure; want 0", n)
	}
	clk.Advance(5 * time.Second)
	wantUser(t, a, tok, "fay")
	if n := p.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches; want 1", n)
	}
}

func TestJWKSResponseSizeLimit(t *testing.T) {
	k := testKeys()
	set := keySet(publicJWK(t, "k1", &k.rsa1.PublicKey))
	padded := func(size int) []byte { // still valid JSON: trailing spaces
		return append(bytes.Clone(set), bytes.Repeat([]byte(" "), size-len(set))...)
	}
	tok := sign(t, jwt.SigningMethodRS256, k.rsa1, "k1", claims("gus"))

	p := newProvider(t, padded(jwtauth.JWKSMaxBytes+1))
	a, err := newAuth(t, p.srv.URL, newClock())
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("load error %v; want the set refused as too large", err)
	}
	wantRefused(t, a, tok, "cannot verify tokens right now")

	p.publish(padded(jwtauth.JWKSMaxBytes), 0)
	a, err = newAuth(t, p.srv.URL, newClock())
	if err != nil {
		t.Fatalf("a set of exactly the limit: %v", err)
	}
	wantUser(t, a, tok, "gus")
}

func TestJWKSSkipsUnusableKeys(t *testing.T) {
	k := testKeys()
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	offCurve := publicJWK(t, "off", &k.ec256.PublicKey)
	offCurve["y"] = b64(bytes.Repeat([]byte{7}, 32))
	enc := publicJWK(t, "enc", &k.rsa2.PublicKey)
	enc["use"] = "enc"
	unusable := []map[string]any{
		{"kty": "oct", "kid": "sym", "k": b64([]byte("a symmetric key, not for us"))},
		{"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": b64(make([]byte, 32))},
		publicJWK(t, "small", &small.PublicKey),
		offCurve,
		enc,
		{"kty": "RSA", "kid": "broken", "n": "!!!", "e": "AQAB"},
	}

	p := newProvider(t, keySet(unusable...))
	if _, err := newAuth(t, p.srv.URL, newClock()); err == nil || !strings.Contains(err.Error(), "no usable signing key") {
		t.Fatalf("load error %v; want no usable key", err)
	}
	p.publish([]byte(`<html>not json</html>`), 0)
	if _, err := newAuth(t, p.srv.URL, newClock()); err == nil || !strings.Contains(err.Error(), "not a JSON Web Key Set") {
		t.Fatalf("load error %v; want not a key set", err)
	}

	p.publish(keySet(append(unusable, publicJWK(t, "good", &k.rsa1.PublicKey))...), 0)
	a, err := newAuth(t, p.srv.URL, newClock())
	if err != nil {
		t.Fatal(err)
	}
	wantUser(t, a, sign(t, jwt.SigningMethodRS256, k.rsa1, "good", claims("hal")), "hal")
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, k.rsa2, "enc", claims("hal")), "invalid token")
	wantRefused(t, a, sign(t, jwt.SigningMethodRS256, small, "small", claims("hal")), "invalid token")
}

func TestJWKSTokenWithoutKid(t *testing.T) {
	k := testKeys()
	p := newProvider(t, keySet(publicJWK(t, "only", &k.rsa1.PublicKey)))
	a, err := newAuth(t, p.srv.URL, newClock())
	if err != nil {
		t.Fatal(err)
	}
	tok := sign(t, jwt.SigningMethodRS256, k.rsa1, "", claims("ivy"))
	wantUser(t, a, tok, "ivy") // the set's only key

	p.publish(keySet(publicJWK(t, "only", &k.rsa1.PublicKey), publicJWK(t, "two", &k.rsa2.PublicKey)), 0)
	a, err = newAuth(t, p.srv.URL, newClock())
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, a, tok, "invalid token") // which key? none is guessed
}
