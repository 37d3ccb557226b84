package querylimit

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The documents of the security review's findings and other hostile ones, shared by the
// tests, the fuzz seed corpus and the benchmarks.

// doublingFragments is finding 1: each fragment spreads the next twice, so the last one's
// field appears 2^n times once expanded, in about 40 bytes per fragment.
func doublingFragments(n int) string {
	var b strings.Builder
	b.WriteString("query { ...F0 }")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " fragment F%d on Query { ...F%d ...F%d }", i, i+1, i+1)
	}
	fmt.Fprintf(&b, " fragment F%d on Query { __typename }", n)
	return b.String()
}

// introspectionAliases is finding 2: n aliases of __schema sharing one fragment.
func introspectionAliases(n int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " s%d: __schema { ...S }", i)
	}
	b.WriteString(" } fragment S on __Schema { types { name kind fields { name } } }")
	return b.String()
}

// typenameAliases is finding 3: `{ a_k: __typename … }` of about size bytes; salt makes
// each document different.
func typenameAliases(size int, salt string) string {
	var b strings.Builder
	b.WriteString("{")
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, " a%s_%d: __typename", salt, i)
	}
	b.WriteString(" }")
	return b.String()
}

// duplicateDirectives is the low finding: one field with n copies of one directive.
func duplicateDirectives(n int) string {
	return "{ __typename" + strings.Repeat(" @include(if: true)", n) + " }"
}

// copies selects the same field n times, each time with the same large selection.
func copies(n int) string {
	const one = " sessions { edges { node { id title status updatedAt createdAt streamCursor settings { agent model systemPrompt temperature busyPolicy } } } }"
	return "{" + strings.Repeat(one, n) + " }"
}

// spreadTogether spreads n different fragments in one selection.
func spreadTogether(n int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " ...F%d", i)
	}
	b.WriteString(" }")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " fragment F%d on Query { f%d }", i, i)
	}
	return b.String()
}

// hostile are hostile documents small enough to parse within the default token limit,
// each refused by the analysis for one of the reasons named (separated by |).
var hostile = map[string]struct{ query, reason string }{
	"doubling fragments":          {doublingFragments(30), "complexity|same name|fragments"},
	"doubling fragments, short":   {doublingFragments(12), "complexity|same name"},
	"introspection aliases":       {introspectionAliases(200), "complexity"},
	"five __schema":               {introspectionAliases(5), "introspection"},
	"aliases":                     {typenameAliases(1000, "x"), "aliases"},
	"duplicate directives":        {duplicateDirectives(11), "directives"},
	"same field many times":       {"{" + strings.Repeat(" __typename", 100) + " }", "same name"},
	"copies of a selection":       {copies(10), "same name"},
	"fragments spread together":   {spreadTogether(40), "fragments"},
	"fragment cycle":              {"{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }", "spreads itself"},
	"fragment spreading itself":   {"{ ...A } fragment A on Query { __typename ...A }", "spreads itself"},
	"deep":                        {"{" + strings.Repeat(" session(id: 1) { messages { edges { node {", 4) + " id" + strings.Repeat(" } } } }", 4) + " }", "deep"},
	"deep introspection":          {"{ __schema { types { " + strings.Repeat("ofType { ", 20) + "name" + strings.Repeat(" }", 20) + " } } }", "introspection query is too deep"},
	"wide unused fragment":        {"{ __typename } fragment U on Query {" + strings.Repeat(" __typename", 100) + " }", "same name"},
	"expensive unused fragment":   {"{ __typename } " + strings.Replace(doublingFragments(20), "query { ...F0 }", "", 1), "complexity|same name"},
	"operations sharing the cost": {strings.Repeat("query { ...F } ", 100) + "fragment F on Query { sessions { edges { node { id title status updatedAt createdAt streamCursor settings { agent model } } } } }", "complexity"},
}

// appDocuments are the web app's largest documents and GraphiQL's introspection query,
// which must pass.
func appDocuments(t testing.TB) map[string]string {
	docs := map[string]string{}
	for _, name := range []string{"session", "stream", "introspection"} {
		b, err := os.ReadFile("testdata/" + name + ".graphql")
		if err != nil {
			t.Fatal(err)
		}
		docs[name] = string(b)
	}
	return docs
}
