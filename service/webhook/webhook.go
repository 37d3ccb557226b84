// Package webhook sends talkgraph's webhook deliveries over HTTP (service.HookSender):
// a POST of the delivery's JSON, signed as Standard Webhooks says, by the project's own Go
// library (github.com/standard-webhooks/standard-webhooks/libraries), from a client that
// reaches only public addresses.
//
// The client is hardened against being turned on the server's own network (SSRF): every
// address it connects to is checked as it is dialed (a net.Dialer Control function from
// code.dny.dev/ssrf, which refuses loopback, private, link-local, unspecified and the
// other special-purpose ranges), so that a name is resolved once, and the address
// checked is the address dialed: a name that resolves to a public address when the
// webhook is made and to a private one later (DNS rebinding) is refused when it is
// dialed. It follows no redirect (a 3xx is an answer like any other that is not 2xx),
// uses no proxy from the environment, sends a body of at most MaxBody bytes and reads at
// most MaxResponse bytes of an answer.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"code.dny.dev/ssrf"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/talkgraph/talkgraph/service"
)

// Options configure a Sender; the zero value is the safe default.
type Options struct {
	// AllowPrivate lets webhooks reach loopback and private addresses (WEBHOOK_ALLOW_PRIVATE):
	// for a receiver on the server's own network, and tests.
	AllowPrivate bool
	// MaxBody bounds the bodies sent (DefaultMaxBody when 0); MaxResponse the bytes of an
	// answer read (DefaultMaxResponse when 0).
	MaxBody, MaxResponse int64
	// Resolver resolves hosts (net.DefaultResolver when nil).
	Resolver *net.Resolver
	// DialTimeout bounds a connection's set-up (10 s when 0); the caller's context bounds
	// the whole attempt.
	DialTimeout time.Duration
}

// The defaults of Options.
const (
	DefaultMaxBody     = 64 << 10
	DefaultMaxResponse = 64 << 10
)

// Sender is a service.HookSender over HTTP.
type Sender struct {
	opts   Options
	guard  *ssrf.Guardian
	client *http.Client
}

var _ service.HookSender = (*Sender)(nil)

// New returns a Sender.
func New(opts Options) *Sender {
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.MaxResponse <= 0 {
		opts.MaxResponse = DefaultMaxResponse
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 10 * time.Second
	}
	s := &Sender{opts: opts, guard: ssrf.New(ssrf.WithAnyPort())}
	dialer := &net.Dialer{Timeout: opts.DialTimeout, Resolver: opts.Resolver}
	if !opts.AllowPrivate {
		dialer.Control = s.guard.Safe
	}
	s.client = &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil, // never a proxy from the environment: it would be the one dialed
			DialContext:            dialer.DialContext,
			TLSHandshakeTimeout:    opts.DialTimeout,
			MaxResponseHeaderBytes: 16 << 10,
			MaxIdleConns:           64,
			IdleConnTimeout:        30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return s
}

// CheckURL implements service.HookSender: EINVALID for a URL that is not http(s) with a
// host, or (unless AllowPrivate) whose host is, or resolves to, an address the client
// would refuse to dial.
func (s *Sender) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return service.Errorf(service.EINVALID, "the URL must be an http or https URL with a host")
	}
	if s.opts.AllowPrivate {
		return nil
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if addrs, err = s.opts.Resolver.LookupNetIP(ctx, "ip", host); err != nil || len(addrs) == 0 {
			return service.Errorf(service.EINVALID, "the URL's host %q cannot be resolved", host)
		}
	}
	for _, a := range addrs {
		if err := s.guard.SafeAddr(a.Unmap()); err != nil {
			return service.Errorf(service.EINVALID, "the URL's host %q is or resolves to %s, a loopback, private, link-local or otherwise non-public address: webhooks reach public addresses only", host, a)
		}
	}
	return nil
}

// Send implements service.HookSender: one POST of r.Body to r.URL, signed with each of
// r.Secrets.
func (s *Sender) Send(ctx context.Context, r *service.HookRequest) (int, error) {
	if int64(len(r.Body)) > s.opts.MaxBody {
		return 0, fmt.Errorf("the body is %d bytes, more than the %d sent", len(r.Body), s.opts.MaxBody)
	}
	sig, err := Sign(r.Secrets, r.ID, r.At, r.Body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return 0, fmt.Errorf("the URL cannot be requested: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "talkgraph-webhooks")
	req.Header.Set(standardwebhooks.HeaderWebhookID, r.ID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(r.At.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, plain(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, s.opts.MaxResponse))
	return resp.StatusCode, nil
}

// Sign returns the webhook-signature header of a delivery: a "v1,<signature>" for each
// whsec_ secret, space-separated, as Standard Webhooks says.
func Sign(secrets []string, id string, at time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, secret := range secrets {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return "", fmt.Errorf("a webhook secret is malformed: %w", err)
		}
		sig, err := wh.Sign(id, at, body)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// plain is an error of the client as a webhook's owner is shown it: without the method
// and URL the client wraps it in, and saying so when an address was refused.
func plain(err error) error {
	if errors.Is(err, ssrf.ErrProhibitedIP) || errors.Is(err, ssrf.ErrProhibitedNetwork) {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("refused: the host resolves to a loopback, private, link-local or otherwise non-public address (%v)", err)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
