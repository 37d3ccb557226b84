package graph

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
)

// TestAPIReferenceIsComplete keeps docs/API.md complete: every type, enum value, input and
// field the schema defines must be mentioned there, as a word in backticks (`word`, in a
// sentence or a table; fenced code blocks do not count) or in a heading. Names are
// case-sensitive, as in the schema.
//
//   - Object types, interfaces, unions, enums, input types and custom scalars: their name,
//     anywhere.
//   - Fields of Query, Mutation and Subscription: their name, anywhere.
//   - Fields of every other object type and interface, fields of input types, and enum
//     values: in the section about their type (under a heading that names the type, down
//     to the next heading of the same or a higher level), or anywhere as `Type.field`. A
//     generic name such as `id` or `RUNNING` mentioned elsewhere does not count, so that
//     a field added to one type is documented with that type.
//
// Built-in scalars and the introspection types are skipped.
func TestAPIReferenceIsComplete(t *testing.T) {
	schema := loadSchema(t)
	raw, err := os.ReadFile("../docs/API.md")
	if err != nil {
		t.Fatalf("the API reference: %v", err)
	}
	doc := parseReference(string(raw))

	roots := map[string]bool{}
	for _, op := range []*ast.Definition{schema.Query, schema.Mutation, schema.Subscription} {
		if op != nil {
			roots[op.Name] = true
		}
	}

	var missing []string
	miss := func(format string, args ...any) { missing = append(missing, fmt.Sprintf(format, args...)) }
	names := make([]string, 0, len(schema.Types))
	for name := range schema.Types {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		def := schema.Types[name]
		if def.BuiltIn || strings.HasPrefix(name, "__") {
			continue
		}
		if !roots[name] && !doc.mentions(name) {
			miss("%s %s: not mentioned", kindOf(def), name)
		}
		switch def.Kind {
		case ast.Object, ast.Interface, ast.InputObject:
			for _, f := range def.Fields {
				if strings.HasPrefix(f.Name, "__") {
					continue
				}
				switch {
				case roots[name]:
					if !doc.mentions(f.Name) {
						miss("%s.%s: not mentioned", name, f.Name)
					}
				case !doc.mentionsIn(name, f.Name):
					miss("%s.%s: not mentioned in a section about %s nor as `%s.%s`", name, f.Name, name, name, f.Name)
				}
			}
		case ast.Enum:
			for _, v := range def.EnumValues {
				if !doc.mentionsIn(name, v.Name) {
					miss("%s.%s: not mentioned in a section about %s nor as `%s.%s`", name, v.Name, name, name, v.Name)
				}
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/API.md does not document %d names of schema.graphqls:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
}

func kindOf(def *ast.Definition) string {
	switch def.Kind {
	case ast.Object:
		return "type"
	case ast.Interface:
		return "interface"
	case ast.Union:
		return "union"
	case ast.Enum:
		return "enum"
	case ast.InputObject:
		return "input"
	case ast.Scalar:
		return "scalar"
	}
	return strings.ToLower(string(def.Kind))
}

// reference is what the test reads of a Markdown document: the words it mentions, and
// its sections with the words each mentions.
type reference struct {
	words    map[string]bool
	dotted   map[string]bool // Type.field pairs written in backticks
	sections []section
}

type section struct {
	heading map[string]bool // the words of its heading
	words   map[string]bool // the words mentioned in it and its subsections, heading included
}

var (
	headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*)$`)
	codeRE    = regexp.MustCompile("`+([^`]+)`+")
	wordRE    = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	dottedRE  = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*`)
)

func parseReference(md string) *reference {
	r := &reference{words: map[string]bool{}, dotted: map[string]bool{}}
	type open struct {
		level int
		index int
	}
	var stack []open
	fence := ""
	for _, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		var words []string
		if m := headingRE.FindStringSubmatch(line); m != nil {
			level := len(m[1])
			for len(stack) > 0 && stack[len(stack)-1].level >= level {
				stack = stack[:len(stack)-1]
			}
			s := section{heading: map[string]bool{}, words: map[string]bool{}}
			for _, w := range wordRE.FindAllString(m[2], -1) {
				s.heading[w] = true
				words = append(words, w)
			}
			r.sections = append(r.sections, s)
			stack = append(stack, open{level: level, index: len(r.sections) - 1})
		}
		for _, c := range codeRE.FindAllStringSubmatch(line, -1) {
			words = append(words, wordRE.FindAllString(c[1], -1)...)
			for _, d := range dottedRE.FindAllString(c[1], -1) {
				r.dotted[d] = true
			}
		}
		for _, w := range words {
			r.words[w] = true
			for _, o := range stack {
				r.sections[o.index].words[w] = true
			}
		}
	}
	return r
}

// mentions reports whether word is in backticks or in a heading anywhere.
func (r *reference) mentions(word string) bool { return r.words[word] }

// mentionsIn reports whether word is mentioned in a section whose heading names typ, or
// anywhere as `typ.word`.
func (r *reference) mentionsIn(typ, word string) bool {
	if r.dotted[typ+"."+word] {
		return true
	}
	for _, s := range r.sections {
		if s.heading[typ] && s.words[word] {
			return true
		}
	}
	return false
}

// loadSchema parses the schema at the repository's root, as clients and gqlgen read it.
func loadSchema(t *testing.T) *ast.Schema {
	t.Helper()
	src, err := os.ReadFile("../schema.graphqls")
	if err != nil {
		t.Fatal(err)
	}
	schema, gerr := gqlparser.LoadSchema(&ast.Source{Name: "schema.graphqls", Input: string(src)})
	if gerr != nil {
		t.Fatalf("schema.graphqls: %v", gerr)
	}
	return schema
}
