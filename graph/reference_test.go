package graph

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
)

// The schema is the API's reference: what each element means is said in its description,
// which introspection, the playground's documentation pane and the generated clients
// (client/generated.go, web/src/gql) carry. docs/API.md is the guide around it and does
// not restate it; the tests below keep the guide from naming elements the schema no
// longer has, and its links from pointing at sections it no longer has.

// TestSchemaIsDescribed checks that every element of schema.graphqls has a description: its
// types, their fields and the fields' arguments, input fields, enum values, and directives
// with their arguments. Built-in scalars and directives and the introspection types are
// skipped.
func TestSchemaIsDescribed(t *testing.T) {
	schema := loadSchema(t)
	var missing []string
	lacks := func(description string) bool { return strings.TrimSpace(description) == "" }
	for _, def := range schemaTypes(schema) {
		if lacks(def.Description) {
			missing = append(missing, fmt.Sprintf("%s %s", kindOf(def), def.Name))
		}
		for _, f := range def.Fields {
			if strings.HasPrefix(f.Name, "__") {
				continue
			}
			if lacks(f.Description) {
				missing = append(missing, fmt.Sprintf("%s.%s", def.Name, f.Name))
			}
			for _, a := range f.Arguments {
				if lacks(a.Description) {
					missing = append(missing, fmt.Sprintf("%s.%s(%s:)", def.Name, f.Name, a.Name))
				}
			}
		}
		for _, v := range def.EnumValues {
			if lacks(v.Description) {
				missing = append(missing, fmt.Sprintf("%s.%s", def.Name, v.Name))
			}
		}
	}
	for name, d := range schema.Directives {
		if d.Position != nil && d.Position.Src != nil && d.Position.Src.BuiltIn {
			continue
		}
		if lacks(d.Description) {
			missing = append(missing, "directive @"+name)
		}
		for _, a := range d.Arguments {
			if lacks(a.Description) {
				missing = append(missing, fmt.Sprintf("directive @%s(%s:)", name, a.Name))
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("schema.graphqls: %d elements have no description. Say what a client author needs "+
			"to act on: units, when it is null, the errors it answers with (extensions.code), the "+
			"limits and the setting that changes them, the order of lists.\n  %s",
			len(missing), strings.Join(missing, "\n  "))
	}
}

// TestGuideNamesSchemaElements checks the schema elements docs/API.md names in inline code
// (fenced code blocks do not count):
//
//   - Type.member, and longer paths such as QuestionAsked.question.id: the type exists and
//     each member is a field of the type before it (or, last, one of its enum values). A
//     dotted name that begins with a capital and is no type of the schema is refused too,
//     unless notSchema lists it.
//   - field(arg: …) and field(arg, …): some type of the schema has that field with those
//     arguments. A call of a name no type has as a field is refused, unless notSchema
//     lists it.
func TestGuideNamesSchemaElements(t *testing.T) {
	schema := loadSchema(t)
	guide := readGuide(t)
	var stale []string
	for _, code := range inlineCode(guide) {
		for _, path := range typePathRE.FindAllString(code, -1) {
			if err := resolvePath(schema, path); err != nil {
				stale = append(stale, fmt.Sprintf("`%s` (in `%s`): %v", path, code, err))
			}
		}
		for _, m := range callRE.FindAllStringSubmatchIndex(code, -1) {
			name := code[m[2]:m[3]]
			args := callArguments(code[m[1]:])
			if err := resolveCall(schema, name, args); err != nil {
				stale = append(stale, fmt.Sprintf("`%s` (in `%s`): %v", name, code, err))
			}
		}
	}
	if len(stale) > 0 {
		t.Errorf("docs/API.md names %d schema elements that schema.graphqls does not have:\n  %s",
			len(stale), strings.Join(stale, "\n  "))
	}
}

// TestGuideLinksResolve checks that every link to a section of docs/API.md, from the guide
// itself (#section) and from the other documents (API.md#section), names a heading the
// guide has, as GitHub makes its anchors.
func TestGuideLinksResolve(t *testing.T) {
	anchors := headingAnchors(readGuide(t))
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "../README.md", "../web/README.md")
	var broken []string
	for _, path := range docs {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		linkRE := otherDocLinkRE
		if filepath.Base(path) == "API.md" {
			linkRE = ownLinkRE
		}
		for _, m := range linkRE.FindAllStringSubmatch(string(raw), -1) {
			if !anchors[m[1]] {
				broken = append(broken, fmt.Sprintf("%s: #%s", strings.TrimPrefix(path, "../"), m[1]))
			}
		}
	}
	if len(broken) > 0 {
		t.Errorf("%d links name a section docs/API.md does not have:\n  %s", len(broken), strings.Join(broken, "\n  "))
	}
}

// notSchema lists the names in the guide's inline code that look like schema elements and
// are not.
var notSchema = map[string]bool{
	"ws": true, // ws(s)://<host>/query
}

var (
	// typePathRE matches Type.member paths: a capitalised name with a lower-case letter
	// (JSON, README.md are no types), then members that are fields or enum values.
	typePathRE = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+`)
	// callRE matches the name of a call written name(…), not a member of a path (x.name(…)).
	callRE = regexp.MustCompile(`(?:^|[^.\w])([a-z][A-Za-z0-9]*)\(`)
	// Links to the guide's sections: its own, and the other documents'.
	ownLinkRE      = regexp.MustCompile(`\]\(#([^)\s]+)\)`)
	otherDocLinkRE = regexp.MustCompile(`API\.md#([^)\s]+)\)`)
	headingRE      = regexp.MustCompile(`^(#{1,6})\s+(.*)$`)
	codeSpanRE     = regexp.MustCompile("`+([^`]+)`+")
	identRE        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)
)

// resolvePath checks a path Type.member.member…: each member is a field of the type the
// path has reached, or, last, an enum value of it.
func resolvePath(schema *ast.Schema, path string) error {
	parts := strings.Split(path, ".")
	def := schema.Types[parts[0]]
	if def == nil || def.BuiltIn {
		if notSchema[parts[0]] || notSchema[path] {
			return nil
		}
		return fmt.Errorf("no type %s", parts[0])
	}
	for i, member := range parts[1:] {
		if def.Kind == ast.Enum && i == len(parts)-2 && def.EnumValues.ForName(member) != nil {
			return nil
		}
		f := def.Fields.ForName(member)
		if f == nil {
			return fmt.Errorf("%s has no field or value %s", def.Name, member)
		}
		def = schema.Types[f.Type.Name()]
	}
	return nil
}

// resolveCall checks that some type has a field name taking every argument in args.
func resolveCall(schema *ast.Schema, name string, args []string) error {
	found := false
	for _, def := range schemaTypes(schema) {
		f := def.Fields.ForName(name)
		if f == nil {
			continue
		}
		found = true
		ok := true
		for _, a := range args {
			if f.Arguments.ForName(a) == nil {
				ok = false
			}
		}
		if ok {
			return nil
		}
	}
	switch {
	case !found && notSchema[name]:
		return nil
	case !found:
		return fmt.Errorf("no type has a field %s", name)
	}
	return fmt.Errorf("no field %s takes the arguments %s", name, strings.Join(args, ", "))
}

// callArguments returns the names of the arguments of a call whose text follows its "(":
// the identifiers that begin each argument at its top level, up to the closing ")".
func callArguments(rest string) []string {
	var args []string
	depth, start := 0, true
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c == ')' && depth == 0:
			return args
		case c == '(' || c == '{' || c == '[':
			depth++
		case c == ')' || c == '}' || c == ']':
			depth--
		case c == ',' && depth == 0:
			start = true
		case c == ' ':
		case start && depth == 0:
			if id := identRE.FindString(rest[i:]); id != "" {
				args = append(args, id)
				i += len(id) - 1
			}
			start = false
		}
	}
	return nil // no closing ")": the text is not a call
}

// schemaTypes returns the types schema.graphqls defines, by name: built-in scalars and the
// introspection types left out.
func schemaTypes(schema *ast.Schema) []*ast.Definition {
	var defs []*ast.Definition
	for name, def := range schema.Types {
		if !def.BuiltIn && !strings.HasPrefix(name, "__") {
			defs = append(defs, def)
		}
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	return defs
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

// readGuide returns docs/API.md.
func readGuide(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../docs/API.md")
	if err != nil {
		t.Fatalf("the API guide: %v", err)
	}
	return string(raw)
}

// inlineCode returns the text of the inline code spans of a Markdown document, outside its
// fenced code blocks.
func inlineCode(md string) []string {
	var spans []string
	for _, line := range outsideFences(md) {
		for _, m := range codeSpanRE.FindAllStringSubmatch(line, -1) {
			spans = append(spans, m[1])
		}
	}
	return spans
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown document:
// lower case, without punctuation but hyphens and underscores, spaces made hyphens, and
// -1, -2, … after a repeated one.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range outsideFences(md) {
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[2])) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// outsideFences returns the lines of a Markdown document that are not in fenced code
// blocks.
func outsideFences(md string) []string {
	var lines []string
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
		lines = append(lines, line)
	}
	return lines
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
