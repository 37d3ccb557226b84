package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"golang.org/x/time/rate"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/service"
)

// userLimiter allows each user a rate of operations with a burst. Idle users' limiters are
// dropped so memory stays bounded by the active users.
type userLimiter struct {
	mu      sync.Mutex
	perSec  rate.Limit
	burst   int
	byUser  map[string]*limiterEntry
	lastGC  time.Time
	idleTTL time.Duration
}

type limiterEntry struct {
	lim  *rate.Limiter
	seen time.Time
}

func newUserLimiter(perSec float64, burst int) *userLimiter {
	return &userLimiter{perSec: rate.Limit(perSec), burst: max(burst, 1), byUser: map[string]*limiterEntry{}, idleTTL: 10 * time.Minute}
}

func (l *userLimiter) allow(user string) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastGC) > time.Minute {
		for u, e := range l.byUser {
			if now.Sub(e.seen) > l.idleTTL {
				delete(l.byUser, u)
			}
		}
		l.lastGC = now
	}
	e := l.byUser[user]
	if e == nil {
		e = &limiterEntry{lim: rate.NewLimiter(l.perSec, l.burst)}
		l.byUser[user] = e
	}
	e.seen = now
	return e.lim.AllowN(now, 1)
}

// operationLimits is a gqlgen extension that enforces the per-user operation rate and
// the query depth limit before an operation runs.
type operationLimits struct {
	rate     *userLimiter
	maxDepth int
}

var (
	_ graphql.HandlerExtension        = operationLimits{}
	_ graphql.OperationContextMutator = operationLimits{}
)

func (operationLimits) ExtensionName() string                   { return "OperationLimits" }
func (operationLimits) Validate(graphql.ExecutableSchema) error { return nil }
func (o operationLimits) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	if o.maxDepth > 0 && rc.Operation != nil {
		if d := depth(rc.Operation.SelectionSet, rc.Doc.Fragments, 0, map[string]bool{}); d > o.maxDepth {
			return graph.Error(service.Errorf(service.EINVALID, "query is too deep: %d levels, at most %d", d, o.maxDepth))
		}
	}
	if u := service.UserFrom(ctx); u != "" && o.rate != nil && !o.rate.allow(u) {
		return graph.Error(service.Errorf(service.ERATELIMIT, "too many operations; slow down"))
	}
	return nil
}

// depth returns the deepest field nesting of a selection set, following fragments.
func depth(set ast.SelectionSet, frags ast.FragmentDefinitionList, level int, seen map[string]bool) int {
	deepest := level
	for _, sel := range set {
		var d int
		switch s := sel.(type) {
		case *ast.Field:
			d = depth(s.SelectionSet, frags, level+1, seen)
		case *ast.InlineFragment:
			d = depth(s.SelectionSet, frags, level, seen)
		case *ast.FragmentSpread:
			if seen[s.Name] {
				continue
			}
			if f := frags.ForName(s.Name); f != nil {
				seen[s.Name] = true
				d = depth(f.SelectionSet, frags, level, seen)
				delete(seen, s.Name)
			}
		}
		deepest = max(deepest, d)
	}
	return deepest
}

// limitBody caps request bodies; the JSON decoder then fails with a clear error.
func limitBody(max int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			writeError(w, http.StatusRequestEntityTooLarge, service.Errorf(service.EINVALID, "request body is too large: at most %d bytes", max))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
}
