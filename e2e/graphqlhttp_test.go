package e2e

// The GraphQL-over-HTTP conformance audit: graphql-http's serverAudits, the suite the
// specification's authors publish, run by Node against the real server
// (testdata/graphql-http, its version pinned in package-lock.json).

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/testsvc"
	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// auditDir holds the audit's package.json, its lock and the script that runs it.
const auditDir = "testdata/graphql-http"

// wantAudits is how many audits graphql-http 1.23.1 runs: fewer means some did not run.
const wantAudits = 61

// auditResult is one audit's outcome as audit.mjs prints it.
type auditResult struct {
	ID, Name, Status, Reason, Body string
	HTTPStatus                     int
}

// TestGraphQLOverHTTPAuditPasses runs every audit of graphql-http (MUST, SHOULD and MAY)
// against /query, once without a token (as the audit itself sends its requests: they
// select only __typename, which needs no user) and once with a guest's token, as a real
// client sends them; every audit must pass both times. The server's limits on requests
// from one address are lifted, as for every test (see startApp): the audit sends some
// sixty requests at once, more than ANON_RATE_BURST lets through.
func TestGraphQLOverHTTPAuditPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node")
	}
	t.Parallel()
	node := installAudit(t)
	a := startApp(t, "memory", nil)
	for _, tc := range []struct{ name, token string }{
		{"without a token", ""},
		{"with a token", guest(t, a).Token},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results := runAudit(t, node, a.URL+"/query", tc.token)
			if len(results) < wantAudits {
				t.Errorf("%d audits ran, want %d", len(results), wantAudits)
			}
			for _, r := range results {
				if r.Status != "ok" {
					t.Errorf("audit %s %q: %s: %s (HTTP %d: %s)", r.ID, r.Name, r.Status, r.Reason, r.HTTPStatus, r.Body)
				}
			}
		})
	}
}

// installAudit returns the path of node, once the audit's packages are installed.
func installAudit(t *testing.T) (node string) {
	t.Helper()
	return installNodePackages(t, auditDir, "graphql-http", "the GraphQL-over-HTTP audit")
}

// installNodePackages returns the path of node, once the packages of dir's
// package-lock.json are installed (npm ci when pkg is missing or not the locked version).
// Without node or npm it skips the test (what names it), or fails it under CI=true.
func installNodePackages(t *testing.T, dir, pkg, what string) (node string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testsvc.Unavailable(t, what+" needs Node.js (node) on PATH")
	}
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err == nil {
		err = json.Unmarshal(b, &lock)
	}
	if err != nil {
		t.Fatalf("%s/package-lock.json: %v", dir, err)
	}
	want := lock.Packages["node_modules/"+pkg].Version
	var installed struct{ Version string }
	b, err = os.ReadFile(filepath.Join(dir, "node_modules", filepath.FromSlash(pkg), "package.json"))
	if err == nil && json.Unmarshal(b, &installed) == nil && installed.Version == want {
		return node
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		testsvc.Unavailable(t, what+" needs npm on PATH to install "+pkg+" "+want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return node
}

// runAudit runs audit.mjs against url, with token when it is not empty, and returns its
// results.
func runAudit(t *testing.T, node, url, token string) []auditResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "audit.mjs", url)
	cmd.Dir = auditDir
	cmd.Env = append(os.Environ(), "AUDIT_TOKEN="+token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node audit.mjs: %v\n%s", err, stderr.Bytes())
	}
	var results []auditResult
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &results); err != nil {
		t.Fatalf("node audit.mjs printed no results (%v):\n%s\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	return results
}

// TestRequestErrorsAnswerAsDocumented checks docs/API.md's statuses for requests that are
// refused before they run, over POST and GET, under both response types: a query that
// does not parse or validate (variables included) is 200 under application/json, with
// "data": null, and 400 under application/graphql-response+json, without data; a request
// with no query is 400 under both; a mutation over GET is 406.
func TestRequestErrorsAnswerAsDocumented(t *testing.T) {
	t.Parallel()
	a := startApp(t, "memory", nil)
	token := guest(t, a).Token
	const (
		plain   = "application/json"
		gqlJSON = "application/graphql-response+json"
	)
	for _, tc := range []struct {
		name, query, vars, accept string
		status                    int
		code                      string
		data                      bool // the body has a data entry (null)
	}{
		{"parse", "{", "", plain, 200, "GRAPHQL_PARSE_FAILED", true},
		{"parse", "{", "", gqlJSON, 400, "GRAPHQL_PARSE_FAILED", false},
		{"validation", "{ nope }", "", plain, 200, "GRAPHQL_VALIDATION_FAILED", true},
		{"validation", "{ nope }", "", gqlJSON, 400, "GRAPHQL_VALIDATION_FAILED", false},
		{"variables", "query($s: ID!) { session(id: $s) { id } }", `{"s": null}`, plain, 200, "GRAPHQL_VALIDATION_FAILED", true},
		{"variables", "query($s: ID!) { session(id: $s) { id } }", `{"s": null}`, gqlJSON, 400, "GRAPHQL_VALIDATION_FAILED", false},
		{"no query", "", "", plain, 400, "BAD_USER_INPUT", true},
		{"no query", "", "", gqlJSON, 400, "BAD_USER_INPUT", false},
		{"answered", "{ viewer { id } }", "", gqlJSON, 200, "", true},
	} {
		for _, method := range []string{"POST", "GET"} {
			t.Run(method+" "+tc.name+" "+tc.accept, func(t *testing.T) {
				var req *http.Request
				if method == "POST" {
					body := map[string]any{}
					if tc.query != "" {
						body["query"] = tc.query
					}
					if tc.vars != "" {
						body["variables"] = json.RawMessage(tc.vars)
					}
					b, _ := json.Marshal(body)
					req, _ = http.NewRequest("POST", a.URL+"/query", bytes.NewReader(b))
					req.Header.Set("Content-Type", "application/json")
				} else {
					q := url.Values{}
					if tc.query != "" {
						q.Set("query", tc.query)
					}
					if tc.vars != "" {
						q.Set("variables", tc.vars)
					}
					req, _ = http.NewRequest("GET", a.URL+"/query?"+q.Encode(), nil)
				}
				req.Header.Set("Accept", tc.accept)
				req.Header.Set("Authorization", "Bearer "+token)
				status, ctype, body := roundTrip(t, req)
				var r map[string]json.RawMessage
				if err := json.Unmarshal(body, &r); err != nil {
					t.Fatalf("status %d: %s: %v", status, body, err)
				}
				var errs []tgtest.GQLError
				_ = json.Unmarshal(r["errors"], &errs)
				code := ""
				if len(errs) > 0 {
					code = errs[0].Code()
				}
				_, data := r["data"]
				if status != tc.status || ctype != tc.accept || code != tc.code || data != tc.data {
					t.Errorf("status %d, %s, code %q, data entry %v; want %d, %s, %q, %v: %s",
						status, ctype, code, data, tc.status, tc.accept, tc.code, tc.data, body)
				}
			})
		}
	}
	t.Run("GET mutation", func(t *testing.T) {
		req, _ := http.NewRequest("GET", a.URL+"/query?query="+url.QueryEscape("mutation { createTalkSession { id } }"), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if status, _, body := roundTrip(t, req); status != http.StatusNotAcceptable || !strings.Contains(string(body), "GET requests only allow query operations") {
			t.Errorf("status %d: %s", status, body)
		}
	})
}

// roundTrip sends req and returns the answer's status, content type and body.
func roundTrip(t *testing.T, req *http.Request) (status int, contentType string, body []byte) {
	t.Helper()
	resp, err := (&http.Client{Timeout: tgtest.Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}
