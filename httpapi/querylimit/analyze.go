// Package querylimit bounds what a GraphQL document may cost the server before any work
// is done on it: its size in bytes and tokens, the cost and depth of each operation, the
// aliases and introspection fields of the document and the directives on each location.
//
// The analysis is linear in the size of the document: each fragment definition is analysed
// once, whatever the number of its uses, and a spread adds the memoised figures of its
// fragment. Costs are counted as if every fragment were expanded at every use (which is
// what validation and execution may do), so a document of fragments that double at each
// level costs 2^levels and is refused, in microseconds, before gqlparser's validation or
// gqlgen's execution sees it. Fragment cycles are refused too.
//
// The package also holds the gqlgen extension that runs the analysis before parsing and
// validation (Checker) and the query cache that only takes documents which passed every
// check (Cache).
package querylimit

import (
	"fmt"
	"math"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/talkgraph/talkgraph/service"
)

// Limits are the bounds on a document. A zero field means no bound on that measure;
// Defaults gives the server's.
type Limits struct {
	// MaxBytes bounds the query text (MAX_QUERY_BYTES).
	MaxBytes int
	// MaxTokens bounds the lexical tokens of the query, comments included (MAX_QUERY_TOKENS).
	MaxTokens int
	// MaxCost bounds each operation's cost: 1 for each field, IntrospectionCost for each
	// __schema or __type field, fragments counted at every use (MAX_QUERY_COMPLEXITY).
	MaxCost int
	// MaxDepth bounds the nesting of fields in each operation, outside introspection
	// (MAX_QUERY_DEPTH).
	MaxDepth int
	// MaxAliases bounds the aliased fields of the document, fragments counted at every
	// use (MAX_ALIASES).
	MaxAliases int
	// MaxIntrospection bounds the __schema and __type fields of the document, fragments
	// counted at every use.
	MaxIntrospection int
	// IntrospectionCost is what one __schema or __type field costs: its answer is the
	// size of the schema, not of the query. At least 1.
	IntrospectionCost int
	// MaxIntrospectionDepth bounds the nesting of fields inside a __schema or __type field,
	// the field itself included. It is separate from MaxDepth because the standard
	// introspection query (graphql-js getIntrospectionQuery, which GraphiQL sends) nests
	// ofType nine levels deep: 15 levels in all.
	MaxIntrospectionDepth int
	// MaxDirectives bounds the directives on one field, fragment, operation or variable.
	MaxDirectives int
	// MaxComparisons bounds the work of checking that fields answering under the same
	// name can be merged (gqlparser's OverlappingFieldsCanBeMerged compares every pair of
	// them, then every pair of their subfields under one name, and so on), which grows
	// with the square of the duplicates: the selections of each operation and fragment are
	// merged as execution merges them (fields under one name together, fragments at every
	// use), and each name given to m fields at one place counts m(m-1)/2 pairs, each
	// weighing one more than the names below it.
	MaxComparisons int
	// MaxFragments bounds the fragment definitions of a document: validation compares
	// fragments spread together pair by pair.
	MaxFragments int
}

// Defaults are the server's limits when no setting changes them. With them the worst
// document parses, passes this analysis and gqlparser's validation in a few milliseconds
// (see the benchmarks).
//
//   - 32 KiB and 4,000 tokens: the web app's largest document (the messageStream
//     subscription with its fragments) is 1.8 KB and about 220 tokens, GraphiQL's
//     introspection query 2 KB and about 180: some fifteen times the largest is plenty.
//   - cost 1,000 and depth 12: what MAX_QUERY_COMPLEXITY and MAX_QUERY_DEPTH always were.
//   - 30 aliases: the app uses none; a hand-written dashboard query rarely needs more than
//     a handful. Aliases are how one small document asks for many large answers.
//   - 3 introspection fields costing 100 each: one __schema (what GraphiQL and codegen
//     tools send) plus a couple of __type lookups. A whole-schema answer is tens of
//     kilobytes however small the query.
//   - introspection depth 20: GraphiQL's query needs 15.
//   - 10 directives on a location: @include, @skip and @defer are all a query uses.
//   - 1,000 comparisons (about a millisecond of validation): the app's documents need
//     at most about 200, with the __typename fields Apollo Client adds everywhere.
//   - 32 fragments: the app's largest document has 6, GraphiQL's 3; 32 fragments spread
//     together take validation about 3 ms.
var Defaults = Limits{
	MaxBytes:              32 << 10,
	MaxTokens:             4000,
	MaxCost:               1000,
	MaxDepth:              12,
	MaxAliases:            30,
	MaxIntrospection:      3,
	IntrospectionCost:     100,
	MaxIntrospectionDepth: 20,
	MaxDirectives:         10,
	MaxComparisons:        1000,
	MaxFragments:          32,
}

// Report is what the analysis found: the document's totals, fragments counted at every
// use, and for depths the deepest of any operation.
type Report struct {
	// Cost is the sum of the operations' costs: validation reads every operation of a
	// document (and the fragments each uses), not only the one executed.
	Cost               int
	Depth              int
	IntrospectionDepth int
	Aliases            int
	Introspection      int
	// Comparisons estimates the work of merging fields that answer under one name (see
	// Limits.MaxComparisons).
	Comparisons int
	// Selections counts the selections written in the document.
	Selections int
	// Steps counts the analysis's work: each selection of the document once, plus the
	// names a fragment brings to each selection it is spread in. It never exceeds
	// StepBudget(Selections).
	Steps int
}

// StepBudget is the most work the analysis does on a document of n selections: linear,
// whatever the document. A document that would take more is refused.
func StepBudget(n int) int { return 33*n + 10000 }

// figures are the measures of a selection set, with fragments expanded.
type figures struct {
	cost       int
	aliases    int
	intro      int // __schema and __type fields
	depth      int // deepest field nesting, every field counted
	plainDepth int // deepest nesting outside introspection (an introspection field counts 1)
	introDepth int // deepest introspection subtree, from its __schema or __type field
}

func (f *figures) add(g figures) {
	f.cost = satAdd(f.cost, g.cost)
	f.aliases = satAdd(f.aliases, g.aliases)
	f.intro = satAdd(f.intro, g.intro)
	f.depth = max(f.depth, g.depth)
	f.plainDepth = max(f.plainDepth, g.plainDepth)
	f.introDepth = max(f.introDepth, g.introDepth)
}

// names is a selection merged as execution merges it: the fields under each response
// name, with their selections merged in turn.
type names map[string]*group

type group struct {
	fields int   // fields answering under this name here, fragments counted at every use
	below  names // their selections, merged; nil for leaves
}

func (n names) group(key string) *group {
	g := n[key]
	if g == nil {
		g = &group{}
		n[key] = g
	}
	return g
}

// compares returns the comparisons validation makes to check that the fields of a merged
// selection can be merged: m(m-1)/2 pairs for m fields under one name, each pair weighing
// one more than the names below them.
func (n names) compares() int {
	total := 0
	for _, g := range n {
		m := g.fields
		if m > 1<<31 {
			return math.MaxInt
		}
		total = satAdd(total, satMul(m*(m-1)/2, 1+len(g.below)))
		total = satAdd(total, g.below.compares())
	}
	return total
}

func satMul(a, b int) int {
	if a != 0 && b > math.MaxInt/a {
		return math.MaxInt
	}
	return a * b
}

// satAdd adds without overflowing: counts of doubling fragments grow as 2^n.
func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

type fragState struct {
	visiting bool
	counted  bool
	figures  figures
	names    names // the fragment's selection, merged
	compares int   // comparisons to check the fragment on its own
}

type analyzer struct {
	limits Limits
	defs   map[string]*ast.FragmentDefinition
	frags  map[string]*fragState
	visits int // selections visited: at most one for each selection of the document
	merges int // groups merged from fragments into the selections they are spread in
	budget int // most merges allowed
	err    error
}

// Analyze measures doc, parsed but not yet validated, against l. The error, when not nil,
// is a *service.Error with code EINVALID naming the first limit exceeded; the report is
// then partial.
func Analyze(doc *ast.QueryDocument, l Limits) (Report, error) {
	a := &analyzer{
		limits: l,
		defs:   make(map[string]*ast.FragmentDefinition, len(doc.Fragments)),
		frags:  make(map[string]*fragState, len(doc.Fragments)),
	}
	n := 0
	for _, op := range doc.Operations {
		n += countSelections(op.SelectionSet)
	}
	for _, f := range doc.Fragments {
		n += countSelections(f.SelectionSet)
		if _, dup := a.defs[f.Name]; !dup { // the first wins, as validation's lookups do
			a.defs[f.Name] = f
		}
	}
	a.budget = StepBudget(n) - n // visits take at most n steps
	if a.limits.MaxFragments > 0 && len(doc.Fragments) > a.limits.MaxFragments {
		return Report{Selections: n}, service.Errorf(service.EINVALID, "too many fragments: %d, at most %d", len(doc.Fragments), a.limits.MaxFragments)
	}
	r := Report{Selections: n}
	for _, op := range doc.Operations {
		if a.err != nil {
			break
		}
		a.directives(op.Directives, "operation")
		for _, v := range op.VariableDefinitions {
			a.directives(v.Directives, "variable")
		}
		merged := names{}
		f := a.selectionSet(op.SelectionSet, merged)
		r.Comparisons = satAdd(r.Comparisons, merged.compares())
		r.Cost = satAdd(r.Cost, f.cost)
		r.Depth = max(r.Depth, f.plainDepth)
		r.IntrospectionDepth = max(r.IntrospectionDepth, f.introDepth)
		r.Aliases = satAdd(r.Aliases, f.aliases)
		r.Introspection = satAdd(r.Introspection, f.intro)
	}
	// Validation checks each fragment on its own too, and reads those no operation uses
	// before refusing them.
	for _, f := range doc.Fragments {
		if a.err != nil {
			break
		}
		if st := a.fragment(f.Name); st != nil && !st.counted {
			st.counted = true
			r.Comparisons = satAdd(r.Comparisons, st.compares)
		}
	}
	r.Steps = a.visits + a.merges
	if a.err != nil {
		return r, a.err
	}
	return r, a.check(r)
}

// countSelections counts the selections written in set, fragments not expanded.
func countSelections(set ast.SelectionSet) int {
	n := len(set)
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			n += countSelections(s.SelectionSet)
		case *ast.InlineFragment:
			n += countSelections(s.SelectionSet)
		}
	}
	return n
}

// check compares a report with the limits.
func (a *analyzer) check(r Report) error {
	l := a.limits
	switch {
	case l.MaxCost > 0 && r.Cost > l.MaxCost:
		return a.costError(r.Cost)
	case l.MaxDepth > 0 && r.Depth > l.MaxDepth:
		return service.Errorf(service.EINVALID, "query is too deep: %d levels, at most %d", r.Depth, l.MaxDepth)
	case l.MaxAliases > 0 && r.Aliases > l.MaxAliases:
		return service.Errorf(service.EINVALID, "too many aliases: %s, at most %d", count(r.Aliases), l.MaxAliases)
	case l.MaxIntrospection > 0 && r.Introspection > l.MaxIntrospection:
		return service.Errorf(service.EINVALID, "too many introspection fields (__schema, __type): %s, at most %d", count(r.Introspection), l.MaxIntrospection)
	case l.MaxIntrospectionDepth > 0 && r.IntrospectionDepth > l.MaxIntrospectionDepth:
		return service.Errorf(service.EINVALID, "introspection query is too deep: %d levels, at most %d", r.IntrospectionDepth, l.MaxIntrospectionDepth)
	case l.MaxComparisons > 0 && r.Comparisons > l.MaxComparisons:
		return a.comparisonsError(r.Comparisons)
	}
	return nil
}

func (a *analyzer) costError(cost int) error {
	return service.Errorf(service.EINVALID, "query complexity %s is over the limit of %d", count(cost), a.limits.MaxCost)
}

func (a *analyzer) comparisonsError(n int) error {
	return service.Errorf(service.EINVALID, "too many fields under the same name in one selection: merging them takes %s comparisons, at most %d", count(n), a.limits.MaxComparisons)
}

func count(n int) string {
	if n == math.MaxInt {
		return "beyond counting"
	}
	return fmt.Sprint(n)
}

func (a *analyzer) fail(err error) {
	if a.err == nil {
		a.err = err
	}
}

func (a *analyzer) directives(list ast.DirectiveList, where string) {
	if a.limits.MaxDirectives > 0 && len(list) > a.limits.MaxDirectives {
		a.fail(service.Errorf(service.EINVALID, "too many directives on one %s: %d, at most %d", where, len(list), a.limits.MaxDirectives))
	}
}

func isIntrospection(name string) bool { return name == "__schema" || name == "__type" }

// selectionSet returns the figures of set, adding the fields of its own level (with its
// inline fragments and spread fragments merged in) to level.
func (a *analyzer) selectionSet(set ast.SelectionSet, level names) figures {
	var sum figures
	for _, sel := range set {
		if a.err != nil {
			return sum
		}
		a.visits++
		switch s := sel.(type) {
		case *ast.Field:
			a.directives(s.Directives, "field")
			key := s.Alias
			if key == "" {
				key = s.Name
			}
			g := level.group(key)
			g.fields = satAdd(g.fields, 1)
			var child figures
			if len(s.SelectionSet) > 0 {
				if g.below == nil {
					g.below = names{}
				}
				child = a.selectionSet(s.SelectionSet, g.below)
			}
			f := figures{aliases: child.aliases, intro: child.intro, depth: child.depth + 1}
			if s.Alias != "" && s.Alias != s.Name {
				f.aliases = satAdd(f.aliases, 1)
			}
			if isIntrospection(s.Name) {
				f.cost = satAdd(max(a.limits.IntrospectionCost, 1), child.cost)
				f.intro = satAdd(f.intro, 1)
				f.plainDepth = 1
				f.introDepth = max(child.introDepth, child.depth+1)
			} else {
				f.cost = satAdd(1, child.cost)
				f.plainDepth = child.plainDepth + 1
				f.introDepth = child.introDepth
			}
			sum.add(f)
		case *ast.InlineFragment:
			a.directives(s.Directives, "inline fragment")
			sum.add(a.selectionSet(s.SelectionSet, level))
		case *ast.FragmentSpread:
			a.directives(s.Directives, "fragment spread")
			st := a.fragment(s.Name)
			if st == nil || a.err != nil {
				continue
			}
			// Merging the fragment's selection costs a step for each of its names, at most
			// one for each field it counts: refuse before merging what could only be refused
			// afterwards.
			if a.limits.MaxCost > 0 && satAdd(sum.cost, st.figures.cost) > a.limits.MaxCost {
				a.fail(a.costError(satAdd(sum.cost, st.figures.cost)))
				return sum
			}
			if !a.merge(level, st.names) {
				a.fail(service.Errorf(service.EINVALID, "query is too complex: its fragments overlap too much"))
				return sum
			}
			sum.add(st.figures)
		}
	}
	return sum
}

// merge adds from into to, a step for each group; false when that goes over the budget.
func (a *analyzer) merge(to, from names) bool {
	for k, src := range from {
		if a.merges >= a.budget {
			return false
		}
		a.merges++
		dst := to.group(k)
		dst.fields = satAdd(dst.fields, src.fields)
		if src.below != nil {
			if dst.below == nil {
				dst.below = names{}
			}
			if !a.merge(dst.below, src.below) {
				return false
			}
		}
	}
	return true
}

// fragment returns the analysis of the named fragment, analysing its definition on first
// use only; nil for an unknown fragment (validation refuses it). A cycle is refused, and
// so is a fragment over the cost or comparison limits on its own: every operation using it would
// be, and validation reads it even if none does.
func (a *analyzer) fragment(name string) *fragState {
	st := a.frags[name]
	if st != nil {
		if st.visiting {
			a.fail(service.Errorf(service.EINVALID, "fragment %s spreads itself", name))
			return nil
		}
		return st
	}
	def := a.defs[name]
	if def == nil {
		return nil
	}
	st = &fragState{visiting: true, names: names{}}
	a.frags[name] = st
	a.directives(def.Directives, "fragment")
	st.figures = a.selectionSet(def.SelectionSet, st.names)
	st.visiting = false
	l := a.limits
	if l.MaxCost > 0 && st.figures.cost > l.MaxCost {
		a.fail(service.Errorf(service.EINVALID, "fragment %s alone has complexity %s, over the limit of %d", name, count(st.figures.cost), l.MaxCost))
	}
	st.compares = st.names.compares()
	if l.MaxComparisons > 0 && st.compares > l.MaxComparisons {
		a.fail(a.comparisonsError(st.compares))
	}
	return st
}
