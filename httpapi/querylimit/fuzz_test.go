package querylimit

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/formatter"
	"github.com/vektah/gqlparser/v2/parser"
)

// FuzzAnalyze checks that the analysis never panics, that its work stays linear in the
// document (within StepBudget of its selections, whatever the limits), and that where a
// document is small enough to expand fragment by fragment its figures are the expanded
// ones. The seed corpus is the findings' documents, the app's and GraphiQL's.
//
//	go test ./httpapi/querylimit -run '^$' -fuzz FuzzAnalyze -fuzztime 2m
func FuzzAnalyze(f *testing.F) {
	for _, h := range hostile {
		f.Add(h.query)
	}
	for _, q := range appDocuments(f) {
		f.Add(q)
	}
	f.Add(doublingFragments(62))
	f.Add(introspectionAliases(30))
	f.Add("{ a { b { c } } ...F } fragment F on Query { a { b { d } ...G } } fragment G on A { b { c e } }")
	f.Fuzz(func(t *testing.T, q string) {
		if len(q) > 64<<10 {
			return
		}
		doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: q}, 20000)
		if err != nil {
			return
		}
		for _, l := range []Limits{Defaults, {}, {IntrospectionCost: 3}} {
			r, err := Analyze(doc, l)
			if r.Steps > StepBudget(r.Selections) {
				t.Fatalf("%d steps for %d selections (%+v)", r.Steps, r.Selections, r)
			}
			if r.Selections > len(q) {
				t.Fatalf("%d selections in %d bytes", r.Selections, len(q))
			}
			if l.MaxCost == 0 && err == nil {
				if want, ok := expand(doc, max(l.IntrospectionCost, 1), 100000); ok && !sameFigures(r, want) {
					t.Fatalf("memoised %+v\nexpanded %+v", r, want)
				}
			}
		}
		// Check agrees with Analyze on what parses within the limits.
		if _, err := Check(q, Defaults); err == nil && len(q) > Defaults.MaxBytes {
			t.Fatalf("%d bytes passed", len(q))
		}
	})
}

// withTypenames adds __typename to every selection but the operations' own, as Apollo
// Client does to every document it sends.
func withTypenames(t testing.TB, q string) string {
	doc := parse(t, q)
	var add func(set ast.SelectionSet) ast.SelectionSet
	add = func(set ast.SelectionSet) ast.SelectionSet {
		for _, sel := range set {
			switch s := sel.(type) {
			case *ast.Field:
				if len(s.SelectionSet) > 0 {
					s.SelectionSet = add(s.SelectionSet)
				}
			case *ast.InlineFragment:
				s.SelectionSet = add(s.SelectionSet)
			}
		}
		return append(set, &ast.Field{Name: "__typename", Alias: "__typename"})
	}
	for _, op := range doc.Operations {
		for _, sel := range op.SelectionSet {
			if f, ok := sel.(*ast.Field); ok && len(f.SelectionSet) > 0 {
				f.SelectionSet = add(f.SelectionSet)
			}
		}
	}
	for _, f := range doc.Fragments {
		f.SelectionSet = add(f.SelectionSet)
	}
	var b bytes.Buffer
	formatter.NewFormatter(&b).FormatQueryDocument(doc)
	return b.String()
}

func TestAppDocumentsPassAsApolloSendsThem(t *testing.T) {
	for name, q := range appDocuments(t) {
		if strings.Contains(name, "introspection") {
			continue
		}
		apollo := withTypenames(t, q)
		r, err := Check(apollo, Defaults)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		t.Logf("%s with __typename: %d bytes, %+v", name, len(apollo), r)
	}
}
