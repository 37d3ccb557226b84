package querylimit

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// BenchmarkAnalyze measures the analysis alone (Analyze on a parsed document) and the
// whole check of a query's text (Check: size, parsing within the token limit, analysis)
// on the app's documents and on hostile ones:
//
//	go test ./httpapi/querylimit -run '^$' -bench Analyze
func BenchmarkAnalyze(b *testing.B) {
	docs := appDocuments(b)
	docs["doubling fragments (finding 1, 30 levels)"] = doublingFragments(30)
	docs["2,000 __schema aliases (finding 2)"] = introspectionAliases(2000)
	docs["1 MB of aliases (finding 3)"] = typenameAliases(1<<20, "")
	docs["50,000 duplicate directives"] = duplicateDirectives(50000)
	docs["copies of a selection"] = copies(10)
	docs["32 fragments spread together"] = spreadTogether(32)
	for _, name := range sortedKeys(docs) {
		q := docs[name]
		doc := parse(b, q)
		b.Run("Analyze/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_, _ = Analyze(doc, Defaults)
			}
		})
		b.Run("Check/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_, _ = Check(q, Defaults)
			}
		})
	}
}

// BenchmarkWorstValidation measures what a document within the limits can cost gqlgen's
// executor to parse and validate (no cache): the documents closest to each limit.
//
//	go test ./httpapi/querylimit -run '^$' -bench WorstValidation
func BenchmarkWorstValidation(b *testing.B) {
	docs := appDocuments(b)
	var b1 strings.Builder
	b1.WriteString("{")
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b1, " f%d", i)
	}
	docs["1,000 unknown fields"] = b1.String() + " }"
	docs["same field 45 times, 990 comparisons"] = "{" + strings.Repeat(" __typename", 45) + " }"
	docs["copies of a selection, 812 comparisons"] = copies(8)
	docs["32 fragments spread together"] = spreadTogether(32)
	docs["cost 1,000 with 29 aliases"] = "{" + wideValid(1000) + " }"
	for _, name := range sortedKeys(docs) {
		q := docs[name]
		if _, err := Check(q, Defaults); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		ex := newExecutor(graphql.NoCache[*ast.QueryDocument]{})
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_ = prepare(ex, q)
			}
		})
	}
}

// wideValid is a valid query costing about n, with aliases but no name repeated.
func wideValid(n int) string {
	const session = "id title status updatedAt createdAt streamCursor messages(first: 10) { edges { cursor node { " +
		"id role kind content status runId createdAt toolCalls { id name arguments output result status } question { id prompt answer } } } }"
	var b strings.Builder
	b.WriteString("viewer { id }")
	for i, cost := 0, 2; cost+30 <= n && i < 29; i++ {
		fmt.Fprintf(&b, " s%d: session(id: %d) { %s }", i, i, session)
		cost += 30
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
