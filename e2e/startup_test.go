package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// runChild runs the server process to its end with env and returns its output and error.
func runChild(t *testing.T, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tgtest.Wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"TALKGRAPH_CHILD=1", "DATA_DIR=" + t.TempDir(), "PORT=0"}, env...)...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the server did not stop within %v:\n%s", tgtest.Wait, out)
	}
	return string(out), err
}

// What an operator sees of a real server process at start: -version prints the build, a
// bad setting stops it with a message naming the setting and its valid values, and a good
// start logs the URL to open, the storage and the agents.
func TestStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Run("version", func(t *testing.T) {
		out, err := runChild(t, "TALKGRAPH_CHILD_ARGS=-version")
		if err != nil || !strings.HasPrefix(out, "talkgraph ") || !strings.Contains(out, "go1.") {
			t.Errorf("-version: %v %q", err, out)
		}
	})
	for _, tc := range []struct{ env, want string }{
		{"WORKERS=0", "WORKERS (-workers): want a whole number ≥ 1"},
		{"LOG_LEVEL=loud", "LOG_LEVEL (-log-level): want debug, info, warn or error"},
		{"ALLOWED_ORIGINS=notaurl", "ALLOWED_ORIGINS (-allowed-origins): want origins like https://app.example.com"},
		{"DATABASE_URL=sqlite:///nonexistent/dir/x.db", "DATABASE_URL (-database-url): the directory /nonexistent/dir"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL=http/json", "OTEL_EXPORTER_OTLP_PROTOCOL (-otlp-protocol): want http/protobuf or grpc"},
		{"OTEL_TRACES_SAMPLER=sometimes", "OTEL_TRACES_SAMPLER (-traces-sampler): want always_on"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			out, err := runChild(t, tc.env)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("%s: %v, output %q; want a failure saying %q", tc.env, err, out, tc.want)
			}
		})
	}
	if _, err := os.Stat("/nonexistent/dir"); err == nil {
		t.Error("the bad DATABASE_URL's directory was created")
	}

	t.Run("log", func(t *testing.T) {
		dir := t.TempDir()
		port := freePort(t)
		startChild(t, dir, port, "LOG_LEVEL=info", "OPENAI_BASE_URL=http://127.0.0.1:1/v1")
		raw, err := os.ReadFile(filepath.Join(dir, "child.log"))
		if err != nil {
			t.Fatal(err)
		}
		var line map[string]any
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.Contains(l, "talkgraph listening") && json.Unmarshal([]byte(l), &line) == nil {
				break
			}
		}
		if line == nil {
			t.Fatalf("no start-up line in the log:\n%s", raw)
		}
		want := map[string]string{
			"msg":    fmt.Sprintf("talkgraph listening: open http://127.0.0.1:%d", port),
			"store":  "sqlite://" + filepath.Join(dir, "talkgraph.db"),
			"agents": "demo,openai",
		}
		for k, v := range want {
			if got, _ := line[k].(string); got != v {
				t.Errorf("start-up log %s = %q, want %q", k, got, v)
			}
		}
		if v, _ := line["version"].(string); !strings.HasPrefix(v, "talkgraph ") {
			t.Errorf("start-up log version = %q", v)
		}
	})
}
