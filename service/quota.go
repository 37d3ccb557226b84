package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/talkgraph/talkgraph/internal/shrink"
)

// quotas checks what users keep on the server against MaxSessionsPerUser and
// MaxUserBytes. A user's footprint is read from the store at most once per quotaFresh and
// counted forward in between, so the check costs a write nothing in the common case; it
// may let a user go a little over, never by much.
type quotas struct {
	mu    sync.Mutex
	users map[string]*footprint
	peak  int // the most users the map has held since it was made (see shrink.Map)
}

type footprint struct {
	sessions int
	bytes    int64
	read     time.Time
}

const (
	quotaFresh    = 5 * time.Second
	quotaMaxUsers = 100000 // users remembered at once
)

// footprint returns u's footprint, read from the store when the one held is stale.
func (s *core) footprint(ctx context.Context, u string) (*footprint, error) {
	q := &s.quota
	q.mu.Lock()
	f := q.users[u]
	q.mu.Unlock()
	if f != nil && time.Since(f.read) < quotaFresh {
		return f, nil
	}
	n, bytes, err := s.store.Footprint(ctx, u)
	if err != nil {
		return nil, err
	}
	f = &footprint{sessions: n, bytes: bytes, read: time.Now()}
	q.mu.Lock()
	if q.users == nil || len(q.users) >= quotaMaxUsers {
		q.users = map[string]*footprint{}
	}
	q.users[u] = f
	q.peak = max(q.peak, len(q.users))
	q.mu.Unlock()
	return f, nil
}

// checkQuota returns ERATELIMIT when u keeping more sessions or bytes would take them past
// the limits.
func (s *core) checkQuota(ctx context.Context, u string, moreSessions int, moreBytes int64) error {
	f, err := s.footprint(ctx, u)
	if err != nil {
		return err
	}
	s.quota.mu.Lock()
	n, bytes := f.sessions, f.bytes
	s.quota.mu.Unlock()
	if moreSessions > 0 && n+moreSessions > s.cfg.MaxSessionsPerUser {
		return Errorf(ERATELIMIT, "you have %d sessions, the most this server keeps for one user: delete some first", n)
	}
	if moreBytes > 0 && bytes+moreBytes > s.cfg.MaxUserBytes {
		return Errorf(ERATELIMIT, "your sessions hold %s, and this server keeps at most %s for one user: delete some first",
			mib(bytes), mib(s.cfg.MaxUserBytes))
	}
	return nil
}

// sweep forgets the footprints read longer than quotaFresh ago (the next check reads
// them again anyway) and gives back the map's room once most have gone.
func (q *quotas) sweep(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for u, f := range q.users {
		if now.Sub(f.read) >= quotaFresh {
			delete(q.users, u)
		}
	}
	q.users, q.peak = shrink.Map(q.users, q.peak)
}

// counted adds what a write just stored to u's footprint.
func (s *core) counted(u string, sessions int, bytes int64) {
	s.quota.mu.Lock()
	if f := s.quota.users[u]; f != nil {
		f.sessions += sessions
		f.bytes += bytes
	}
	s.quota.mu.Unlock()
}

// forget drops u's footprint, to be read again at the next check (after a deletion).
func (s *core) forget(u string) {
	s.quota.mu.Lock()
	delete(s.quota.users, u)
	s.quota.mu.Unlock()
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
