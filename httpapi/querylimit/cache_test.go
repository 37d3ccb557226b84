package querylimit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/executor"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/graph/generated"
	"github.com/talkgraph/talkgraph/service"
)

// refuseMarked stands for the checks that run after the executor has parsed, validated and
// (with gqlgen's own cache) cached a document: complexity, the rate limit.
type refuseMarked struct{}

func (refuseMarked) ExtensionName() string                   { return "RefuseMarked" }
func (refuseMarked) Validate(graphql.ExecutableSchema) error { return nil }
func (refuseMarked) MutateOperationContext(_ context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	if strings.Contains(rc.RawQuery, "refuse") {
		return graph.Error(service.Errorf(service.EINVALID, "refused"))
	}
	return nil
}

func newExecutor(cache graphql.Cache[*ast.QueryDocument], exts ...graphql.HandlerExtension) *executor.Executor {
	ex := executor.New(generated.NewExecutableSchema(generated.Config{Resolvers: &graph.Resolver{}}))
	ex.SetQueryCache(cache)
	for _, e := range exts {
		ex.Use(e)
	}
	return ex
}

func prepare(ex *executor.Executor, q string) gqlerror.List {
	ctx := graphql.StartOperationTrace(context.Background())
	_, errs := ex.CreateOperationContext(ctx, &graphql.RawParams{Query: q})
	return errs
}

// refusedDocument is a ~20 KB document that passes parsing and validation and is refused
// afterwards.
func refusedDocument(i int) string {
	return fmt.Sprintf("query refuse%d {", i) + strings.Repeat(" viewer { id }", 1) + typenameAliases(20000, fmt.Sprint(i))[1:]
}

func TestRefusedDocumentsAreNotCached(t *testing.T) {
	// gqlgen's own cache keeps what its executor parsed, refused or not (finding 3).
	plain := lru.New[*ast.QueryDocument](1000)
	ex := newExecutor(plain, refuseMarked{})
	for i := 0; i < 20; i++ {
		if errs := prepare(ex, refusedDocument(i)); len(errs) != 1 || errs[0].Message != "refused" {
			t.Fatalf("document %d: %v", i, errs)
		}
	}
	if _, ok := plain.Get(context.Background(), refusedDocument(0)); !ok {
		t.Fatal("gqlgen's cache did not keep a refused document: finding 3 no longer reproduces")
	}

	// Cache keeps only what passed every check.
	cache := NewCache(1000, 4<<20)
	ex = newExecutor(cache, Checker{Limits: Limits{MaxBytes: 32 << 10}, Approved: cache}, refuseMarked{}, cache.Commit())
	for i := 0; i < 20; i++ {
		if errs := prepare(ex, refusedDocument(i)); len(errs) != 1 || errs[0].Message != "refused" {
			t.Fatalf("document %d: %v", i, errs)
		}
	}
	if n, bytes := cache.Len(); n != 0 {
		t.Fatalf("%d refused documents (%d bytes) cached", n, bytes)
	}
	ok := "query Fine { viewer { id } }"
	if errs := prepare(ex, ok); errs != nil {
		t.Fatal(errs)
	}
	if n, _ := cache.Len(); n != 1 || !cache.Contains(ok) {
		t.Fatalf("accepted document not cached: %d entries", n)
	}
	// Refused by the checker before parsing: never reaches the executor.
	if errs := prepare(ex, typenameAliases(40000, "big")); len(errs) != 1 || errs[0].Extensions["code"] != "BAD_USER_INPUT" {
		t.Fatalf("oversized document: %v", errs)
	}
	if n, _ := cache.Len(); n != 1 {
		t.Fatalf("%d entries", n)
	}
}

func TestLRUIsBoundedByEntriesAndWeight(t *testing.T) {
	ctx := context.Background()
	c := NewLRU[string](3, 100, nil)
	for _, k := range []string{"a", "b", "c", "d"} {
		c.Add(ctx, k, k)
	}
	if n, _ := c.Len(); n != 3 || c.Contains("a") {
		t.Errorf("after 4 adds: %d entries, a kept: %v", n, c.Contains("a"))
	}
	c.Get(ctx, "b") // b is now the most recent, c the least
	c.Add(ctx, strings.Repeat("x", 90), "")
	if !c.Contains("b") || c.Contains("c") || !c.Contains("d") {
		t.Errorf("entries: b %v c %v d %v", c.Contains("b"), c.Contains("c"), c.Contains("d"))
	}
	c.Add(ctx, strings.Repeat("z", 10), "") // 102 in all: d and b go
	if c.Contains("b") || c.Contains("d") {
		t.Errorf("weight: b %v d %v", c.Contains("b"), c.Contains("d"))
	}
	if n, w := c.Len(); n != 2 || w != 100 {
		t.Errorf("%d entries weighing %d, want 2 weighing 100", n, w)
	}
	c.Add(ctx, strings.Repeat("y", 101), "")
	if c.Contains(strings.Repeat("y", 101)) {
		t.Error("kept an entry heavier than the whole cache")
	}
	c.Add(ctx, "b", "again")
	if v, _ := c.Get(ctx, "b"); v != "again" {
		t.Errorf("b = %q", v)
	}
	if n, w := c.Len(); n != 2 || w != 11 || !c.Contains(strings.Repeat("z", 10)) {
		t.Errorf("%d entries weighing %d, want z and b weighing 11", n, w)
	}
}

func TestOperationsShareTheCachedText(t *testing.T) {
	cache := NewCache(1000, 4<<20)
	ex := newExecutor(cache, Checker{Limits: Limits{MaxBytes: 32 << 10}, Approved: cache}, refuseMarked{}, cache.Commit())
	doc := "query Fine { viewer { id } }"
	var texts []string
	for range 2 { // the same text, read from two requests
		rc, errs := ex.CreateOperationContext(graphql.StartOperationTrace(context.Background()), &graphql.RawParams{Query: strings.Clone(doc)})
		if errs != nil {
			t.Fatal(errs)
		}
		texts = append(texts, rc.RawQuery)
	}
	if texts[1] != doc || unsafe.StringData(texts[1]) != unsafe.StringData(texts[0]) {
		t.Error("the second operation keeps its own copy of a cached text")
	}
	if n, bytes := cache.Len(); n != 1 || bytes != len(doc) {
		t.Errorf("cache holds %d documents (%d bytes), want the one", n, bytes)
	}
}
