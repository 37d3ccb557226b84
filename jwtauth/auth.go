// Package jwtauth verifies the JSON Web Tokens that identify talkgraph's users (HS256 with
// a shared secret, or an identity provider's keys from a JWKS URL) and issues HS256 ones for
// guest sign-in. It knows nothing of HTTP or GraphQL: the HTTP edge (package httpapi) reads
// the token from a request and asks Verify who it names.
package jwtauth

import (
	"errors"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/talkgraph/talkgraph/service"
)

// Auth verifies the JWTs that identify users, and issues HS256 ones: the user is the
// token's sub claim, never an argument.
type Auth struct {
	// Secret signs and verifies HS256 tokens (guest sign-in's). Without it HS256 tokens are
	// refused and none are issued.
	Secret []byte
	// JWKS, when set, verifies tokens signed by an identity provider with the keys it
	// publishes (see JWKSAlgorithms).
	JWKS *JWKS
	// Issuer and Audience, when set, must match the token's iss and aud (as an identity
	// provider sets them); tokens issued here carry them.
	Issuer   string
	Audience string
	// TokenTTL is how long issued tokens last; default DefaultTokenTTL.
	TokenTTL time.Duration
	// Leeway tolerates clock skew when checking exp and nbf.
	Leeway time.Duration
}

// Defaults for the zero values of Auth and JWKS.
const (
	DefaultTokenTTL    = 30 * 24 * time.Hour
	DefaultJWKSRefresh = 15 * time.Minute
)

// Identity is a verified token's user and expiry.
type Identity struct {
	UserID  string
	Expires time.Time // tokens without an expiry are refused
	// Guest is set for a token of guest sign-in (IssueGuest): HS256, signed here, with
	// the claim GuestClaim. An identity provider's tokens are never guests'.
	Guest bool
}

// GuestClaim marks the tokens guest sign-in issues (IssueGuest).
const GuestClaim = "tg_guest"

// claims are the claims of the tokens issued and verified here.
type claims struct {
	jwt.RegisteredClaims
	Guest bool `json:"tg_guest,omitempty"`
}

// Issue signs a token for userID.
func (a *Auth) Issue(userID string) (string, time.Time, error) {
	return a.issue(userID, false)
}

// IssueGuest signs a token for userID, a guest: Verify's Identity has Guest set.
func (a *Auth) IssueGuest(userID string) (string, time.Time, error) {
	return a.issue(userID, true)
}

func (a *Auth) issue(userID string, guest bool) (string, time.Time, error) {
	if len(a.Secret) == 0 {
		return "", time.Time{}, errors.New("no secret to sign tokens with")
	}
	ttl := a.TokenTTL
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	now := time.Now()
	exp := now.Add(ttl)
	c := claims{RegisteredClaims: jwt.RegisteredClaims{Subject: userID, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp), Issuer: a.Issuer}, Guest: guest}
	if a.Audience != "" {
		c.Audience = jwt.ClaimStrings{a.Audience}
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(a.Secret)
	return tok, exp, err
}

// Verify checks a token's signature, algorithm, expiry (which it must have), issuer and
// audience: HS256 with Secret, or an identity provider's algorithm with the JWKS key its
// kid names.
// EUNAUTHORIZED with a short reason when any is wrong.
func (a *Auth) Verify(token string) (Identity, error) {
	methods := make([]string, 0, 1+len(JWKSAlgorithms)) // never nil: nil would allow any
	if len(a.Secret) > 0 {
		methods = append(methods, "HS256")
	}
	if a.JWKS != nil {
		methods = append(methods, JWKSAlgorithms...)
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithLeeway(a.Leeway)}
	if a.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(a.Issuer))
	}
	if a.Audience != "" {
		opts = append(opts, jwt.WithAudience(a.Audience))
	}
	var claims claims
	tok, err := jwt.ParseWithClaims(token, &claims, a.key, opts...)
	if err != nil {
		if errors.Is(err, ErrJWKSUnavailable) {
			return Identity{}, service.Errorf(service.EUNAUTHORIZED, "cannot verify tokens right now")
		}
		if errors.Is(err, jwt.ErrTokenExpired) {
			return Identity{}, service.Errorf(service.EUNAUTHORIZED, "token expired")
		}
		return Identity{}, service.Errorf(service.EUNAUTHORIZED, "invalid token")
	}
	if claims.Subject == "" || len(claims.Subject) > 200 {
		return Identity{}, service.Errorf(service.EUNAUTHORIZED, "invalid token: no subject")
	}
	// A token without exp would be good forever, however it leaked: refuse it.
	if claims.ExpiresAt == nil {
		return Identity{}, service.Errorf(service.EUNAUTHORIZED, "invalid token: it has no expiry (exp claim); tokens must expire")
	}
	// Only a token signed with the server's own secret can be a guest's: an identity
	// provider's claims name its users, never the server's guests.
	guest := claims.Guest && tok.Method.Alg() == "HS256"
	return Identity{UserID: claims.Subject, Expires: claims.ExpiresAt.Time, Guest: guest}, nil
}

// key picks the key that verifies tok; the parser has already refused algorithms Verify
// does not allow.
func (a *Auth) key(tok *jwt.Token) (any, error) {
	alg := tok.Method.Alg()
	if alg == "HS256" {
		if len(a.Secret) == 0 {
			return nil, errors.New("HS256 tokens are not accepted")
		}
		return a.Secret, nil
	}
	if a.JWKS == nil {
		return nil, errors.New("no keys for " + alg)
	}
	kid, _ := tok.Header["kid"].(string)
	return a.JWKS.Key(kid, alg)
}

// Bearer returns the token of an Authorization value "Bearer <token>".
func Bearer(v string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}
