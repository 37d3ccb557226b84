package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// goTestJSON runs go test -json on packages of the module in testdata/fixture and
// returns what it wrote.
func goTestJSON(t *testing.T, packages ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"test", "-json", "-count=1"}, packages...)...)
	cmd.Dir = "testdata/fixture"
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("go test: %v", err)
	}
	return out.Bytes()
}

func TestReportShowsFailuresAndListsSkips(t *testing.T) {
	var out bytes.Buffer
	failed := report(bytes.NewReader(goTestJSON(t, "./...")), &out)
	got := out.String()
	if !failed {
		t.Error("a failed test and a failed build reported no failure")
	}
	for _, want := range []string{
		"ok  \tfixture/pass\t",
		"--- FAIL: TestFail (",
		"    --- FAIL: TestFail/sub (",
		"fail_test.go:7: boom",
		"FAIL\tfixture/fail\t",
		"cannot use \"not a number\"",
		"FAIL\tfixture/broken [build failed]",
		"2 skipped:",
		"  fixture/fail TestFail/skipped: fail_test.go:9: not here",
		"  fixture/pass TestSkip: pass_test.go:8: no service here\n      start it first",
		"  fixture/broken\n",
		"  fixture/fail TestFail/sub\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report does not say %q:\n%s", want, got)
		}
	}
	for _, quiet := range []string{"a passing test's log", "a passing subtest's log", "=== RUN"} {
		if strings.Contains(got, quiet) {
			t.Errorf("the report shows %q, which plain go test does not:\n%s", quiet, got)
		}
	}
}

func TestReportOfAPassingRun(t *testing.T) {
	var out bytes.Buffer
	if report(bytes.NewReader(goTestJSON(t, "./pass")), &out) {
		t.Errorf("a passing run reported a failure:\n%s", out.String())
	}
	if got := out.String(); !strings.Contains(got, "ok  \tfixture/pass\t") || !strings.Contains(got, "1 skipped:") {
		t.Errorf("the report of a passing run:\n%s", got)
	}
}
