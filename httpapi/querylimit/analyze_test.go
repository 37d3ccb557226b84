package querylimit

import (
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/talkgraph/talkgraph/service"
)

func parse(t testing.TB, q string) *ast.QueryDocument {
	t.Helper()
	doc, err := parser.ParseQuery(&ast.Source{Input: q})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return doc
}

func TestAppDocumentsPass(t *testing.T) {
	for name, q := range appDocuments(t) {
		r, err := Check(q, Defaults)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		t.Logf("%s: %d bytes, %+v", name, len(q), r)
	}
	r, _ := Check(appDocuments(t)["introspection"], Defaults)
	if r.Introspection != 1 || r.IntrospectionDepth != 15 || r.Depth != 1 {
		t.Errorf("introspection query: %+v, want 1 introspection field 15 deep", r)
	}
}

func TestHostileDocumentsAreRefused(t *testing.T) {
	for name, h := range hostile {
		t.Run(name, func(t *testing.T) {
			r, err := Check(h.query, Defaults)
			if err == nil {
				t.Fatalf("passed: %+v", r)
			}
			if service.ErrorCode(err) != service.EINVALID || !containsAny(err.Error(), h.reason) {
				t.Errorf("refused with %v, want EINVALID about %q", err, h.reason)
			}
			if r.Steps > StepBudget(r.Selections) {
				t.Errorf("%d steps for %d selections", r.Steps, r.Selections)
			}
		})
	}
}

func containsAny(s, alternatives string) bool {
	for _, a := range strings.Split(alternatives, "|") {
		if strings.Contains(s, a) {
			return true
		}
	}
	return false
}

func TestFindingsAreRefusedBeforeParsing(t *testing.T) {
	for name, q := range map[string]string{
		"2,000 introspection aliases (41 KB)":  introspectionAliases(2000),
		"1 MB of aliases":                      typenameAliases(1<<20, ""),
		"50,000 duplicate directives (900 KB)": duplicateDirectives(50000),
	} {
		_, err := Check(q, Defaults)
		if err == nil || !strings.Contains(err.Error(), "too large") {
			t.Errorf("%s (%d bytes): %v, want too large", name, len(q), err)
		}
	}
	// Within the size, the token limit stops what the parser would otherwise build.
	q := "{" + strings.Repeat(" a", 5000) + " }"
	if _, err := Check(q, Defaults); err == nil || !strings.Contains(err.Error(), "more than 4000 tokens") {
		t.Errorf("5,000 fields: %v", err)
	}
}

func TestCostCountsFragmentsAtEveryUse(t *testing.T) {
	for n := 1; n <= 62; n++ {
		r, err := Analyze(parse(t, doublingFragments(n)), Limits{})
		want := 1 << n
		if n > 40 {
			// Past the step budget the analysis stops and refuses: no document is
			// analysed at more than linear cost.
			if err == nil {
				continue
			}
			if !strings.Contains(err.Error(), "overlap too much") {
				t.Fatalf("n=%d: %v", n, err)
			}
			continue
		}
		if err != nil || r.Cost != want {
			t.Fatalf("n=%d: cost %d (%v), want %d", n, r.Cost, err, want)
		}
		if r.Steps > StepBudget(r.Selections) || r.Steps > 10*r.Selections+100 {
			t.Fatalf("n=%d: %d steps for %d selections", n, r.Steps, r.Selections)
		}
	}
	r, err := Analyze(parse(t, doublingFragments(62)), Defaults)
	if err == nil || !strings.Contains(err.Error(), "fragments") {
		t.Errorf("with the default limits: %+v %v", r, err)
	}
}

func TestFiguresMatchExpansion(t *testing.T) {
	docs := []string{
		"{ viewer { id } a: viewer { id } }",
		"{ ...F ...F a: viewer { ...G } } fragment F on Query { viewer { id } } fragment G on Viewer { id b: id }",
		"query A { __schema { types { name } } } query B { __type(name: \"Query\") { name } ...F } fragment F on Query { __typename }",
		"{ ... on Query { viewer { id } } ... @include(if: true) { viewer { id } } }",
		"{ x: a { b { c { d } } } x: a { b { e } } ...F } fragment F on Query { x: a { b { c { d } } } }",
	}
	for _, q := range docs {
		doc := parse(t, q)
		got, err := Analyze(doc, Limits{IntrospectionCost: 7})
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		want, ok := expand(doc, 7, 1<<20)
		if !ok {
			t.Fatalf("%s: expansion too large", q)
		}
		if !sameFigures(got, want) {
			t.Errorf("%s:\n memoised %+v\n expanded %+v", q, got, want)
		}
	}
}

func sameFigures(a, b Report) bool {
	return a.Cost == b.Cost && a.Depth == b.Depth && a.IntrospectionDepth == b.IntrospectionDepth &&
		a.Aliases == b.Aliases && a.Introspection == b.Introspection && a.Comparisons == b.Comparisons
}

// expand measures doc the slow way, expanding every fragment at every use, as an oracle
// for Analyze; false when that takes more than budget steps.
func expand(doc *ast.QueryDocument, introCost, budget int) (Report, bool) {
	var r Report
	steps := 0
	var walk func(set ast.SelectionSet, level names, inIntro bool, d int, stack []string) bool
	defs := map[string]*ast.FragmentDefinition{}
	for _, f := range doc.Fragments {
		if defs[f.Name] == nil {
			defs[f.Name] = f
		}
	}
	var cost, aliases, intro, plain, introDepth int
	walk = func(set ast.SelectionSet, level names, inIntro bool, d int, stack []string) bool {
		for _, sel := range set {
			if steps++; steps > budget {
				return false
			}
			switch s := sel.(type) {
			case *ast.Field:
				key := s.Alias
				if key == "" {
					key = s.Name
				}
				g := level.group(key)
				g.fields++
				if s.Alias != "" && s.Alias != s.Name {
					aliases++
				}
				next := d + 1
				switch {
				case isIntrospection(s.Name):
					intro++
					cost += introCost
					if inIntro {
						introDepth = max(introDepth, d+1)
					} else {
						plain = max(plain, d+1)
						introDepth = max(introDepth, 1)
						next = 1
					}
				case inIntro:
					cost++
					introDepth = max(introDepth, d+1)
				default:
					cost++
					plain = max(plain, d+1)
				}
				childIntro := inIntro || isIntrospection(s.Name)
				if len(s.SelectionSet) > 0 {
					if g.below == nil {
						g.below = names{}
					}
					if !walk(s.SelectionSet, g.below, childIntro, next, stack) {
						return false
					}
				}
			case *ast.InlineFragment:
				if !walk(s.SelectionSet, level, inIntro, d, stack) {
					return false
				}
			case *ast.FragmentSpread:
				def := defs[s.Name]
				if def == nil {
					continue
				}
				if !walk(def.SelectionSet, level, inIntro, d, append(stack, s.Name)) {
					return false
				}
			}
		}
		return true
	}
	for _, op := range doc.Operations {
		cost, aliases, intro, plain, introDepth = 0, 0, 0, 0, 0
		merged := names{}
		if !walk(op.SelectionSet, merged, false, 0, nil) {
			return r, false
		}
		r.Cost += cost
		r.Aliases += aliases
		r.Introspection += intro
		r.Depth = max(r.Depth, plain)
		r.IntrospectionDepth = max(r.IntrospectionDepth, introDepth)
		r.Comparisons += merged.compares()
	}
	seen := map[string]bool{}
	for _, f := range doc.Fragments {
		if seen[f.Name] {
			continue
		}
		seen[f.Name] = true
		merged := names{}
		if !walk(defs[f.Name].SelectionSet, merged, false, 0, nil) {
			return r, false
		}
		r.Comparisons += merged.compares()
	}
	return r, true
}
