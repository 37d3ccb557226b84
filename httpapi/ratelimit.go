package httpapi

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/talkgraph/talkgraph/internal/shrink"
	"github.com/talkgraph/talkgraph/service"
)

// maxTrackedKeys bounds each limiter's memory: past it, the key seen least recently is
// forgotten (its next request starts with a full bucket). 100,000 buckets take about
// 20 MB.
const maxTrackedKeys = 100_000

// keyedLimiter is a token bucket for each key (a user, a client address), bounded in
// memory: a bucket idle long enough to have refilled is no different from a new one and is
// dropped, and at most max keys are tracked, least recently seen first out.
type keyedLimiter struct {
	mu    sync.Mutex
	rate  rate.Limit
	burst int
	idle  time.Duration // time for an empty bucket to refill
	max   int
	keys  map[string]*list.Element
	order *list.List // of *keyedBucket; front: most recently seen
	now   func() time.Time
	peak  int // the most keys the map has held since it was made (see shrink.Map)
}

type keyedBucket struct {
	key  string
	lim  *rate.Limiter
	seen time.Time
}

// newKeyedLimiter allows each key perSec events a second with a burst.
func newKeyedLimiter(perSec float64, burst int) *keyedLimiter {
	burst = max(burst, 1)
	idle := time.Duration(float64(burst) / perSec * float64(time.Second))
	if perSec <= 0 || idle <= 0 || idle > 24*time.Hour {
		idle = 24 * time.Hour
	}
	return &keyedLimiter{rate: rate.Limit(perSec), burst: burst, idle: idle, max: maxTrackedKeys, keys: map[string]*list.Element{}, order: list.New(), now: time.Now}
}

// allow takes one event from key's bucket; when it is empty, false and how long until it
// holds one again.
func (l *keyedLimiter) allow(key string) (bool, time.Duration) {
	l.mu.Lock()
	now := l.now()
	defer l.mu.Unlock()
	// Each call forgets what earlier calls left, so this takes constant time on average.
	l.forgetLocked(now, l.max-1)
	var b *keyedBucket
	if e, ok := l.keys[key]; ok {
		b = e.Value.(*keyedBucket)
		l.order.MoveToFront(e)
	} else {
		b = &keyedBucket{key: key, lim: rate.NewLimiter(l.rate, l.burst)}
		l.keys[key] = l.order.PushFront(b)
		l.peak = max(l.peak, len(l.keys))
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, l.idle
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// forgetLocked forgets the buckets idle long enough to be full again, and the least
// recently seen past keep.
func (l *keyedLimiter) forgetLocked(now time.Time, keep int) {
	for e := l.order.Back(); e != nil; e = l.order.Back() {
		b := e.Value.(*keyedBucket)
		if l.order.Len() <= keep && now.Sub(b.seen) <= l.idle {
			break
		}
		delete(l.keys, b.key)
		l.order.Remove(e)
	}
}

// sweep forgets the buckets idle long enough to be full again, as allow does, for a
// limiter no request has come to since a crowd left: what it remembered of them is
// memory the server keeps for nothing. Once most keys have gone, the map is made anew
// at its present size.
func (l *keyedLimiter) sweep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked(l.now(), l.max)
	l.keys, l.peak = shrink.Map(l.keys, l.peak)
}

// tracked returns the number of keys with a bucket.
func (l *keyedLimiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// clientAddresses finds the client address of a request: the connection's remote address,
// or, when that is a trusted proxy, the last address in X-Forwarded-For that is not one.
type clientAddresses struct {
	trusted []netip.Prefix
}

func (c clientAddresses) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// of returns the key of the request's client: its IPv4 address, or the /64 network of its
// IPv6 address (one host commonly holds a whole /64).
func (c clientAddresses) of(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return r.RemoteAddr
	}
	addr = addr.Unmap()
	if len(c.trusted) > 0 && c.isTrusted(addr) {
		hops := r.Header.Values("X-Forwarded-For")
	walk:
		for i := len(hops) - 1; i >= 0; i-- {
			list := strings.Split(hops[i], ",")
			for j := len(list) - 1; j >= 0; j-- {
				hop, err := netip.ParseAddr(strings.TrimSpace(list[j]))
				if err != nil {
					break walk // not written by a trusted proxy: keep the last good hop
				}
				addr = hop.Unmap()
				if !c.isTrusted(addr) {
					break walk
				}
			}
		}
	}
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

// ParseTrustedProxies reads comma-separated CIDRs (a bare address means just that one).
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not a CIDR like 10.0.0.0/8 or an address", f)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// tooMany answers 429 with Retry-After and a RATE_LIMITED error, without reading the
// request's body (see refuse).
func tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration, what string) {
	secs := int(math.Ceil(wait.Seconds()))
	w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	refuse(w, r, http.StatusTooManyRequests, service.Errorf(service.ERATELIMIT, "%s; try again in %d s", what, max(secs, 1)))
}

// limitByAddress limits the requests of each client address.
func limitByAddress(l *keyedLimiter, addrs clientAddresses, what string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, wait := l.allow(addrs.of(r)); !ok {
			tooMany(w, r, wait, what)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitAnonymous limits, per client address, the requests that come without a user: those
// without an Authorization header at once, as their headers arrive (before any other work,
// the body's reading included: a refused request's body is not read, see refuse), those
// whose token authenticate refuses when it does (see chargeAnonymous). Websocket upgrades
// carry their token in connection_init, so each counts as anonymous.
func limitAnonymous(l *keyedLimiter, addrs clientAddresses, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charge := func(w http.ResponseWriter) bool {
			ok, wait := l.allow(addrs.of(r))
			if !ok {
				tooMany(w, r, wait, "too many requests without a valid token from your address")
			}
			return ok
		}
		if r.Header.Get("Authorization") == "" {
			if !charge(w) {
				return
			}
		} else {
			r = r.WithContext(context.WithValue(r.Context(), anonymousChargeKey{}, charge))
		}
		next.ServeHTTP(w, r)
	})
}

type anonymousChargeKey struct{}

// chargeAnonymous counts a request whose token was refused against its address's
// anonymous budget; false when that is spent, the 429 written.
func chargeAnonymous(w http.ResponseWriter, r *http.Request) bool {
	if charge, ok := r.Context().Value(anonymousChargeKey{}).(func(http.ResponseWriter) bool); ok {
		return charge(w)
	}
	return true
}
