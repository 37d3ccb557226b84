package jwtauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// JWKSMaxBytes is the largest key set document JWKS accepts.
const JWKSMaxBytes = 1 << 20

const (
	// jwksUnknownKidGap is the least time between two fetches made because a token named a
	// key the cached set lacks, and between retries after a failed refresh.
	jwksUnknownKidGap = 30 * time.Second
	// jwksKeylessGap is the least time between fetches while no key set was ever loaded:
	// every token fails then, so keys are worth retrying sooner.
	jwksKeylessGap = 5 * time.Second
	jwksTimeout    = 5 * time.Second
)

// JWKSAlgorithms are the token algorithms JWKS verifies.
var JWKSAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "ES256", "ES384"}

// ErrJWKSUnavailable is returned for a token when no key set could be loaded yet.
var ErrJWKSUnavailable = errors.New("the identity provider's keys are not available")

// errUnknownKey is returned for a token naming a key the set lacks (after any refresh).
var errUnknownKey = errors.New("unknown signing key")

// JWKS is an identity provider's JSON Web Key Set, fetched from URL and cached. Keys are
// fetched again when they are older than Refresh, and when a token names a key the set
// lacks (at most once per 30 seconds, so made-up key IDs cannot make it hammer the
// provider). When a refresh fails the keys already held stay in use. Safe for concurrent
// use.
type JWKS struct {
	URL string
	// Refresh is how long fetched keys are used before they are fetched again; default
	// DefaultJWKSRefresh.
	Refresh time.Duration
	// Client fetches the set; default: a client with a 5s timeout.
	Client *http.Client
	// Log receives warnings about failed fetches; default: none.
	Log *slog.Logger
	// Now is the clock; default time.Now. Tests move it to cross the refresh intervals.
	Now func() time.Time

	mu          sync.Mutex
	keys        []jwk     // nil until a fetch succeeds
	loadedAt    time.Time // of the keys
	lastAttempt time.Time
	attempted   bool
	lastErr     error
	inflight    chan struct{} // closed when the fetch under way ends
}

// jwk is one usable signing key of the set.
type jwk struct {
	kid  string
	alg  string // the key's alg member; "" allows every algorithm of its type
	key  any    // *rsa.PublicKey or *ecdsa.PublicKey
	algs []string
}

func (k *JWKS) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

func (k *JWKS) refresh() time.Duration {
	if k.Refresh > 0 {
		return k.Refresh
	}
	return DefaultJWKSRefresh
}

func (k *JWKS) log() *slog.Logger {
	if k.Log != nil {
		return k.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Load fetches the key set now, waiting for a fetch already under way instead of starting
// another. A server calls it at start: an error says why the provider's keys could not be
// had, and the JWKS keeps trying when tokens arrive.
func (k *JWKS) Load(ctx context.Context) error {
	k.mu.Lock()
	if ch := k.inflight; ch != nil {
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.lastErr
	}
	k.startFetchLocked()
	k.mu.Unlock()
	return k.fetchAndStore(ctx, false)
}

// Key returns the public key for a token's kid header and alg: *rsa.PublicKey or
// *ecdsa.PublicKey. It fetches the set when none is held yet, when it is older than
// Refresh, or when kid is missing from it (rate-limited). A token without a kid is
// verified with the set's only key, when it has exactly one. ErrJWKSUnavailable when no
// set could be loaded.
func (k *JWKS) Key(kid, alg string) (any, error) {
	fetched := false
	for {
		k.mu.Lock()
		e := k.lookupLocked(kid, alg)
		if !fetched {
			if ch := k.inflight; ch != nil && e == nil {
				// A fetch is under way and may bring the key.
				k.mu.Unlock()
				<-ch
				fetched = true
				continue
			}
			if k.inflight == nil && k.dueLocked(k.now(), e != nil) {
				k.startFetchLocked()
				k.mu.Unlock()
				_ = k.fetchAndStore(context.Background(), true)
				fetched = true
				continue
			}
		}
		loaded := k.keys != nil
		k.mu.Unlock()
		switch {
		case !loaded:
			return nil, ErrJWKSUnavailable
		case e == nil:
			return nil, errUnknownKey
		case !e.allows(alg):
			return nil, fmt.Errorf("key %q does not sign with %s", e.kid, alg)
		}
		return e.key, nil
	}
}

// lookupLocked finds kid's key, preferring one that signs with alg when the set holds
// several under that kid; with kid empty, the set's only key.
func (k *JWKS) lookupLocked(kid, alg string) *jwk {
	if kid == "" {
		if len(k.keys) == 1 {
			return &k.keys[0]
		}
		return nil
	}
	var found *jwk
	for i := range k.keys {
		if e := &k.keys[i]; e.kid == kid {
			if e.allows(alg) {
				return e
			}
			if found == nil {
				found = e
			}
		}
	}
	return found
}

// dueLocked says whether a token should make the JWKS fetch the set now: none held (retried
// every 5s), kid unknown (every 30s), or the set is older than Refresh.
func (k *JWKS) dueLocked(now time.Time, known bool) bool {
	if !k.attempted {
		return true
	}
	since := now.Sub(k.lastAttempt)
	switch {
	case k.keys == nil:
		return since >= jwksKeylessGap
	case !known:
		return since >= jwksUnknownKidGap
	default:
		return now.Sub(k.loadedAt) >= k.refresh() && since >= min(jwksUnknownKidGap, k.refresh())
	}
}

func (k *JWKS) startFetchLocked() {
	k.inflight = make(chan struct{})
	k.attempted = true
	k.lastAttempt = k.now()
}

// fetchAndStore fetches the set and keeps it, or keeps the previous one and the error,
// logging the error when warn is set (Load's caller reports it instead).
func (k *JWKS) fetchAndStore(ctx context.Context, warn bool) error {
	keys, err := k.fetch(ctx)
	if err != nil {
		err = fmt.Errorf("JWKS %s: %w", k.URL, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case err == nil:
		k.keys, k.loadedAt = keys, k.now()
		k.log().Debug("identity provider keys loaded", "url", k.URL, "keys", len(keys))
	case !warn:
	case k.keys != nil:
		k.log().Warn("refreshing the identity provider's keys failed; keeping the ones held", "err", err)
	default:
		k.log().Warn("the identity provider's keys are still not available; its tokens are refused", "err", err)
	}
	k.lastErr = err
	close(k.inflight)
	k.inflight = nil
	return err
}

func (k *JWKS) fetch(ctx context.Context) ([]jwk, error) {
	client := k.Client
	if client == nil {
		client = &http.Client{Timeout: jwksTimeout}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if uerr, ok := err.(*url.Error); ok {
			err = uerr.Err // the caller names the URL
		}
		return nil, fmt.Errorf("unreachable: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, JWKSMaxBytes))
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, JWKSMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the key set: %w", err)
	}
	if len(body) > JWKSMaxBytes {
		return nil, fmt.Errorf("key set larger than %d bytes", JWKSMaxBytes)
	}
	return parseJWKS(body)
}

// rawJWK is a JSON Web Key as RFC 7517 and 7518 write it.
type rawJWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS reads a key set, keeping the signing keys it can use (RSA of 2048 bits or
// more, EC on P-256 or P-384) and skipping others; an error when none is left.
func parseJWKS(body []byte) ([]jwk, error) {
	var set struct {
		Keys []rawJWK `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	var keys []jwk
	var skipped []string
	for i, r := range set.Keys {
		k, err := r.parse()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d (kid %q): %v", i, r.Kid, err))
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		if len(skipped) > 0 {
			return nil, fmt.Errorf("no usable signing key: %s", strings.Join(skipped, "; "))
		}
		return nil, errors.New("the key set is empty")
	}
	return keys, nil
}

func (r rawJWK) parse() (jwk, error) {
	if r.Use != "" && r.Use != "sig" {
		return jwk{}, fmt.Errorf("use %q is not sig", r.Use)
	}
	k := jwk{kid: r.Kid, alg: r.Alg}
	switch r.Kty {
	case "RSA":
		n, err := b64int(r.N)
		if err != nil {
			return jwk{}, fmt.Errorf("n: %w", err)
		}
		e, err := b64int(r.E)
		if err != nil {
			return jwk{}, fmt.Errorf("e: %w", err)
		}
		if n.BitLen() < 2048 {
			return jwk{}, fmt.Errorf("RSA key of %d bits; want 2048 or more", n.BitLen())
		}
		if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Bit(0) == 0 {
			return jwk{}, errors.New("bad RSA exponent")
		}
		k.key = &rsa.PublicKey{N: n, E: int(e.Int64())}
		k.algs = []string{"RS256", "RS384", "RS512", "PS256"}
	case "EC":
		var curve elliptic.Curve
		var size int
		switch r.Crv {
		case "P-256":
			curve, size, k.algs = elliptic.P256(), 32, []string{"ES256"}
		case "P-384":
			curve, size, k.algs = elliptic.P384(), 48, []string{"ES384"}
		default:
			return jwk{}, fmt.Errorf("curve %q not supported", r.Crv)
		}
		x, err := b64bytes(r.X)
		if err != nil {
			return jwk{}, fmt.Errorf("x: %w", err)
		}
		y, err := b64bytes(r.Y)
		if err != nil {
			return jwk{}, fmt.Errorf("y: %w", err)
		}
		if len(x) > size || len(y) > size {
			return jwk{}, errors.New("coordinates too long for the curve")
		}
		point := make([]byte, 1+2*size)
		point[0] = 4 // uncompressed
		copy(point[1+size-len(x):1+size], x)
		copy(point[1+2*size-len(y):], y)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return jwk{}, err
		}
		k.key = pub
	default:
		return jwk{}, fmt.Errorf("kty %q not supported", r.Kty)
	}
	if k.alg != "" && !k.allows(k.alg) {
		return jwk{}, fmt.Errorf("alg %q does not fit the key", k.alg)
	}
	return k, nil
}

// allows says whether the key verifies tokens signed with alg.
func (k *jwk) allows(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	return slices.Contains(k.algs, alg)
}

func b64bytes(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("missing")
	}
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

func b64int(s string) (*big.Int, error) {
	b, err := b64bytes(s)
	if err != nil {
		return nil, err
	}
	return new(big.Int).SetBytes(b), nil
}
