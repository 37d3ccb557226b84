package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// compare gives each build's median over its runs, their range, and the ratio of each
// median to the base build's; a run with errors is left out and said so.
func TestCompareMediansRangesAndRatios(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(v string) string {
		return `{"errorCount":0,"figures":[{"scenario":"burst","name":"first chunk p50","value":` + v + `,"unit":"ms"}]}`
	}
	write("old-1-burst.json", run("100"))
	write("old-2-burst.json", run("120"))
	write("old-3-burst.json", run("110"))
	write("new-1-burst.json", run("90"))
	write("new-2-burst.json", run("80"))
	write("new-3-burst.json", run("88"))
	write("new-4-burst.json", `{"errorCount":2,"figures":[{"scenario":"burst","name":"first chunk p50","value":1}]}`)

	var out strings.Builder
	if err := compare(&out, dir, "old"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"110 ms (100 to 120, n=3)", "88 ms (80 to 90, n=3)", "0.80x", "new: 1 runs reported errors"} {
		if !strings.Contains(got, want) {
			t.Errorf("the comparison lacks %q:\n%s", want, got)
		}
	}
	if err := compare(&out, dir, "nobody"); err == nil {
		t.Error("a base with no runs was accepted")
	}
}
