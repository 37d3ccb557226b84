// Command testreport reads `go test -json` on its standard input and writes what a plain
// `go test` shows: each package's result line, the output of the tests that failed, build
// errors. At the end it lists every test that skipped, with its skip message (a test that
// needs PostgreSQL or NATS skips without them, and says so), and the tests that failed. It
// exits 1 when a test, a package or a build failed. scripts/test.sh runs it; lines that
// are not JSON (go's own messages) pass through as they are.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	if failed := report(os.Stdin, os.Stdout); failed {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json), build events included.
type event struct {
	Action     string
	Package    string
	ImportPath string // of build-output and build-fail
	Test       string
	Output     string
}

// test is what one test (or subtest) printed, and how it ended ("" while it runs).
type test struct {
	name   string
	header string   // its "--- FAIL: name (…)" line
	lines  []string // what it printed, without the "=== RUN" lines and its header
	status string
	top    bool // no parent among the package's tests: printed on its own
	subs   []*test
}

// pkg holds the tests of one package until they end.
type pkg struct {
	tests map[string]*test
	order []*test // top-level tests, in the order they started
}

// skip is a test that skipped, with what it said.
type skip struct{ pkg, test, message string }

// report copies the result of `go test -json` from r to w as a plain `go test` shows it,
// then lists the skipped and failed tests; it reports whether anything failed.
func report(r io.Reader, w io.Writer) (failed bool) {
	pkgs := map[string]*pkg{}
	var skips []skip
	var failures []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		var ev event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &ev) != nil {
			fmt.Fprintln(w, line) // not JSON: go's own words
			continue
		}
		switch ev.Action {
		case "build-output":
			fmt.Fprint(w, ev.Output)
			continue
		case "build-fail":
			failed = true
			continue
		}
		p := pkgs[ev.Package]
		if p == nil {
			p = &pkg{tests: map[string]*test{}}
			pkgs[ev.Package] = p
		}
		if ev.Test == "" { // the package's own lines and end
			switch ev.Action {
			case "output":
				if ev.Output != "PASS\n" { // plain go test prints "ok" alone
					fmt.Fprint(w, ev.Output)
				}
			case "fail":
				failed = true
				// Tests that never ended (a panic, the timeout): what they printed.
				n := len(failures)
				for _, t := range p.order {
					if t.status == "" {
						printTest(w, t, 0)
						failures = append(failures, ev.Package+" "+t.name+" (did not end)")
					}
				}
				if len(failures) == n && !anyFailed(p) { // the build, or the package outside its tests
					failures = append(failures, ev.Package)
				}
				delete(pkgs, ev.Package)
			case "pass", "skip":
				delete(pkgs, ev.Package)
			}
			continue
		}
		t := p.tests[ev.Test]
		if t == nil {
			t = &test{name: ev.Test}
			p.tests[ev.Test] = t
			if parent := p.tests[parentOf(ev.Test)]; parent != nil {
				parent.subs = append(parent.subs, t)
			} else {
				t.top = true
				p.order = append(p.order, t)
			}
		}
		switch ev.Action {
		case "output":
			out := strings.TrimSuffix(ev.Output, "\n")
			trimmed := strings.TrimLeft(out, " ")
			switch {
			case strings.HasPrefix(trimmed, "=== "):
			case strings.HasPrefix(trimmed, "--- ") && strings.Contains(trimmed, ": "+t.name+" ("):
				t.header = trimmed
			default:
				t.lines = append(t.lines, out)
			}
		case "pass", "fail", "skip":
			t.status = ev.Action
			if ev.Action == "skip" {
				skips = append(skips, skip{ev.Package, t.name, message(t.lines)})
			}
			if ev.Action == "fail" {
				if t.top {
					printTest(w, t, 0)
				}
				failures = append(failures, ev.Package+" "+t.name)
				failed = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(w, "testreport: reading go test's output: %v\n", err)
		failed = true
	}

	sort.SliceStable(skips, func(i, j int) bool { return skips[i].pkg < skips[j].pkg })
	if len(skips) == 0 {
		fmt.Fprintln(w, "\nNo test skipped.")
	} else {
		fmt.Fprintf(w, "\n%d skipped:\n", len(skips))
		for _, s := range skips {
			fmt.Fprintf(w, "  %s %s: %s\n", s.pkg, s.test, strings.ReplaceAll(s.message, "\n", "\n      "))
		}
	}
	if len(failures) > 0 {
		fmt.Fprintf(w, "\n%d failed:\n", len(failures))
		for _, f := range failures {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
	return failed
}

// printTest writes a failed test as plain go test does: its result line, what it printed,
// then its failed subtests, each level indented four spaces more.
func printTest(w io.Writer, t *test, depth int) {
	indent := strings.Repeat("    ", depth)
	header := t.header
	if header == "" {
		header = "--- " + strings.ToUpper(t.status) + ": " + t.name
	}
	fmt.Fprintf(w, "%s%s\n", indent, header)
	for _, l := range t.lines {
		fmt.Fprintf(w, "%s%s\n", indent, l)
	}
	for _, s := range t.subs {
		if s.status == "fail" || s.status == "" {
			printTest(w, s, depth+1)
		}
	}
}

// message is what a skipped test said: its lines without their common indent, the first
// line's source position kept.
func message(lines []string) string {
	var out []string
	for _, l := range lines {
		if s := strings.TrimSpace(l); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "(no message)"
	}
	return strings.Join(out, "\n")
}

// parentOf returns the name of a subtest's parent ("" for a top-level test).
func parentOf(name string) string {
	i := strings.LastIndex(name, "/")
	if i < 0 {
		return ""
	}
	return name[:i]
}

// anyFailed reports whether a test of p failed.
func anyFailed(p *pkg) bool {
	for _, t := range p.tests {
		if t.status == "fail" {
			return true
		}
	}
	return false
}
