package querylimit

import (
	"container/list"
	"context"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// LRU is a least-recently-used cache bounded both by its number of entries and by the
// total weight of its entries (for query texts: their bytes), so that a few huge entries
// cannot hold more memory than many small ones would. It implements graphql.Cache.
type LRU[T any] struct {
	mu         sync.Mutex
	maxEntries int
	maxWeight  int
	weight     func(key string, value T) int
	total      int
	order      *list.List // front: most recently used
	items      map[string]*list.Element
}

type lruEntry[T any] struct {
	key    string
	value  T
	weight int
}

var _ graphql.Cache[string] = (*LRU[string])(nil)

// NewLRU returns a cache of at most maxEntries entries weighing at most maxWeight in all;
// weight weighs an entry (nil: every entry weighs its key's length). An entry heavier
// than maxWeight on its own is never kept.
func NewLRU[T any](maxEntries, maxWeight int, weight func(key string, value T) int) *LRU[T] {
	if weight == nil {
		weight = func(key string, _ T) int { return len(key) }
	}
	return &LRU[T]{maxEntries: max(maxEntries, 1), maxWeight: max(maxWeight, 1), weight: weight, order: list.New(), items: map[string]*list.Element{}}
}

// Get returns the value of key, marking it recently used.
func (c *LRU[T]) Get(_ context.Context, key string) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruEntry[T]).value, true
	}
	var zero T
	return zero, false
}

// Contains reports whether key is cached, without marking it used.
func (c *LRU[T]) Contains(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.items[key]
	return ok
}

// Add keeps value under key, dropping the least recently used entries to make room.
func (c *LRU[T]) Add(_ context.Context, key string, value T) {
	w := c.weight(key, value)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.remove(e)
	}
	if w > c.maxWeight {
		return
	}
	c.items[key] = c.order.PushFront(&lruEntry[T]{key: key, value: value, weight: w})
	c.total += w
	for c.order.Len() > c.maxEntries || c.total > c.maxWeight {
		c.remove(c.order.Back())
	}
}

func (c *LRU[T]) remove(e *list.Element) {
	ent := c.order.Remove(e).(*lruEntry[T])
	delete(c.items, ent.key)
	c.total -= ent.weight
}

// Keep is Add for a value that stands for its key whatever adds it (a query's document):
// when key is cached already it only marks it used. It returns the key as the cache
// holds it, so that callers can drop their own copy of an equal text.
func (c *LRU[T]) Keep(ctx context.Context, key string, value T) string {
	c.mu.Lock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		c.mu.Unlock()
		return e.Value.(*lruEntry[T]).key
	}
	c.mu.Unlock()
	c.Add(ctx, key, value)
	return key
}

// Len returns the number of entries and their total weight.
func (c *LRU[T]) Len() (entries, weight int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len(), c.total
}

// Cache is the executor's query cache (handler.Server.SetQueryCache) that keeps only
// documents which passed every check. gqlgen's executor adds a document to its cache as
// soon as it is parsed and validated, before the extensions that check its cost, depth
// or rate run; so Cache ignores the executor's Add, and the extension returned by Commit,
// registered after every other check, adds the document of each operation that got
// through.
type Cache struct {
	lru *LRU[*ast.QueryDocument]
}

var _ graphql.Cache[*ast.QueryDocument] = (*Cache)(nil)

// NewCache returns a cache of at most entries documents whose query texts hold at most
// bytes in all. A parsed document takes some 25 times the memory of its text.
func NewCache(entries, bytes int) *Cache {
	return &Cache{lru: NewLRU[*ast.QueryDocument](entries, bytes, nil)}
}

// Get returns the parsed and validated document of query.
func (c *Cache) Get(ctx context.Context, query string) (*ast.QueryDocument, bool) {
	return c.lru.Get(ctx, query)
}

// Add does nothing: the executor calls it before the checks run. See Commit.
func (c *Cache) Add(context.Context, string, *ast.QueryDocument) {}

// Contains reports whether query's document is cached, which it is only after passing
// every check.
func (c *Cache) Contains(query string) bool { return c.lru.Contains(query) }

// Len returns the number of cached documents and the bytes of their query texts.
func (c *Cache) Len() (entries, bytes int) { return c.lru.Len() }

// Commit returns the gqlgen extension that caches an operation's document once every
// check has passed: register it after every other extension that can refuse an operation.
// An operation whose text is cached already takes the cache's copy of it: a subscription
// keeps its operation, and so its text, for as long as it is open, and a thousand clients
// of one app send the same text a thousand times.
func (c *Cache) Commit() graphql.HandlerExtension { return commit{c} }

type commit struct{ c *Cache }

var _ graphql.OperationContextMutator = commit{}

func (commit) ExtensionName() string                   { return "QueryCacheCommit" }
func (commit) Validate(graphql.ExecutableSchema) error { return nil }

func (m commit) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	if rc.Doc != nil && rc.RawQuery != "" {
		rc.RawQuery = m.c.lru.Keep(ctx, rc.RawQuery, rc.Doc)
	}
	return nil
}
