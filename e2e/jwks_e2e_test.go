package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/talkgraph/talkgraph/app"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// TestIdentityProviderTokensThroughTheServer runs the whole server against a fake identity
// provider's JWKS endpoint: its tokens identify users over HTTP and on websockets, other
// tokens get 401 and close 4401, and guest sign-in needs AUTH_SECRET beside the JWKS.
func TestIdentityProviderTokensThroughTheServer(t *testing.T) {
	const issuer, audience = "https://id.example.test/", "talkgraph-e2e"
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	point, err := ecKey.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	set, _ := json.Marshal(map[string]any{"keys": []any{
		map[string]any{"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": b64(rsaKey.N.Bytes()), "e": b64(big.NewInt(int64(rsaKey.E)).Bytes())},
		map[string]any{"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": b64(point[1:33]), "y": b64(point[33:])},
	}})
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(set)
	}))
	t.Cleanup(idp.Close)

	token := func(m jwt.SigningMethod, key any, kid, sub, iss string) string {
		now := time.Now()
		tok := jwt.NewWithClaims(m, jwt.RegisteredClaims{Subject: sub, Issuer: iss, Audience: jwt.ClaimStrings{audience},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	good := map[string]string{
		"RS256": token(jwt.SigningMethodRS256, rsaKey, "rsa-1", "auth0|alice", issuer),
		"ES256": token(jwt.SigningMethodES256, ecKey, "ec-1", "auth0|alice", issuer),
	}
	bad := map[string]string{
		"other key":    token(jwt.SigningMethodRS256, otherKey, "rsa-1", "auth0|mallory", issuer),
		"other issuer": token(jwt.SigningMethodRS256, rsaKey, "rsa-1", "auth0|mallory", "https://evil.example.test/"),
		"HS256":        token(jwt.SigningMethodHS256, []byte("a secret the server never had"), "rsa-1", "auth0|mallory", issuer),
	}

	check := func(t *testing.T, a *testApp) {
		for name, tok := range good {
			t.Run("good "+name, func(t *testing.T) {
				c := &tgtest.Client{T: t, Base: a.URL, Token: tok, HTTP: &http.Client{Timeout: tgtest.Wait}}
				var out struct{ Viewer struct{ ID string } }
				c.Must(`{ viewer { id } }`, nil, &out)
				if out.Viewer.ID != "auth0|alice" {
					t.Errorf("viewer over HTTP is %q; want the token's sub", out.Viewer.ID)
				}
				sid := c.CreateSession(nil) // the user can work, not only look

				s := c.Connect("graphql-transport-ws")
				_, frames := s.Subscribe(`{ viewer { id } session(id: "`+sid+`") { id } }`, nil)
				select {
				case f := <-frames:
					var data struct {
						Viewer  struct{ ID string }
						Session *struct{ ID string }
					}
					if len(f.Errors) > 0 || json.Unmarshal(f.Data, &data) != nil {
						t.Fatalf("query over the websocket: %s %+v", f.Data, f.Errors)
					}
					if data.Viewer.ID != "auth0|alice" || data.Session == nil || data.Session.ID != sid {
						t.Errorf("over the websocket: viewer %q, session %+v", data.Viewer.ID, data.Session)
					}
				case <-time.After(tgtest.Wait):
					t.Fatal("no answer over the websocket")
				}
			})
		}
		for name, tok := range bad {
			t.Run("bad "+name, func(t *testing.T) {
				c := &tgtest.Client{T: t, Base: a.URL, Token: tok, HTTP: &http.Client{Timeout: tgtest.Wait}}
				if r := c.Do(`{ viewer { id } }`, nil); r.Status != http.StatusUnauthorized || r.Code() != "UNAUTHENTICATED" {
					t.Errorf("over HTTP: status %d, errors %+v; want 401 UNAUTHENTICATED", r.Status, r.Errors)
				}
				s, err := tgtest.Dial(t, a.URL, "graphql-transport-ws", map[string]any{"Authorization": "Bearer " + tok})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Conn.Close()
				if code := closeCode(t, s.Conn); code != 4401 {
					t.Errorf("websocket closed with %d; want 4401", code)
				}
			})
		}
	}
	useIdP := func(c *app.Config) {
		c.AuthJWKSURL = idp.URL + "/.well-known/jwks.json"
		c.AuthIssuer, c.AuthAudience = issuer, audience
	}

	t.Run("JWKS only", func(t *testing.T) {
		a := startApp(t, "memory", useIdP)
		check(t, a)
		resp, err := http.Post(a.URL+"/auth/guest", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("guest sign-in without AUTH_SECRET: status %d; want 403", resp.StatusCode)
		}
	})

	t.Run("JWKS and AUTH_SECRET", func(t *testing.T) {
		a := startApp(t, "memory", func(c *app.Config) {
			useIdP(c)
			c.AuthSecret = "the deployment's own shared secret"
		})
		check(t, a)
		g := guest(t, a) // guest sign-in goes on beside the provider
		var out struct{ Viewer struct{ ID string } }
		g.Must(`{ viewer { id } }`, nil, &out)
		if out.Viewer.ID == "" || out.Viewer.ID == "auth0|alice" {
			t.Errorf("guest viewer %q", out.Viewer.ID)
		}
		g.Connect("graphql-ws")
	})

	t.Run("provider unreachable at start", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		down := "http://" + ln.Addr().String() + "/jwks.json"
		ln.Close()
		a := startApp(t, "memory", func(c *app.Config) { useIdP(c); c.AuthJWKSURL = down })
		c := &tgtest.Client{T: t, Base: a.URL, Token: good["RS256"], HTTP: &http.Client{Timeout: tgtest.Wait}}
		r := c.Do(`{ viewer { id } }`, nil)
		if r.Status != http.StatusUnauthorized || r.Code() != "UNAUTHENTICATED" || r.Errors[0].Message != "cannot verify tokens right now" {
			t.Errorf("status %d, errors %+v; want 401 cannot verify tokens right now", r.Status, r.Errors)
		}
	})
}
