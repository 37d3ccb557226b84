package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// examples/embed, built as a program, serves its own agent, shuts down gracefully on
// SIGTERM (what process managers send) as the server does, and refuses to start on a data
// directory another running instance holds, saying why.
func TestEmbedExampleStopsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts a program")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "embed")
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/embed").CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/embed: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	start := func(port int) (*exec.Cmd, *syncBuffer, chan error) {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "DATA_DIR="+data, fmt.Sprintf("PORT=%d", port), "HOST=127.0.0.1", "LOG_FORMAT=text")
		log := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd, log, done
	}
	port := freePort(t)
	cmd, log, done := start(port)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(tgtest.Wait)
	for {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("embed exited before it was ready: %v\n%s", err, log.String())
		case <-time.After(20 * time.Millisecond): // nothing to wait on before it listens
		}
		if time.Now().After(deadline) {
			t.Fatalf("embed not ready in time:\n%s", log.String())
		}
	}
	c := tgtest.Guest(t, url)
	var agents struct{ Agents []struct{ Name string } }
	c.Must(`{ agents { name } }`, nil, &agents)
	if !strings.Contains(fmt.Sprint(agents), "shout") {
		t.Errorf("agents %v, want shout among them", agents)
	}

	// A second instance on the same data directory (another port) stops at once, saying why.
	_, log2, done2 := start(freePort(t))
	select {
	case err := <-done2:
		if err == nil || !strings.Contains(log2.String(), "in use by another process") {
			t.Errorf("second instance: %v\n%s", err, log2.String())
		}
	case <-time.After(tgtest.Wait):
		t.Error("a second instance on the same data directory is still running")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("embed exited with %v after SIGTERM, want 0\n%s", err, log.String())
		}
	case <-time.After(tgtest.Wait):
		t.Fatalf("embed did not stop within %v of SIGTERM", tgtest.Wait)
	}
	if !strings.Contains(log.String(), "shutting down") {
		t.Errorf("no graceful shutdown in the log:\n%s", log.String())
	}
}

// String returns what was written so far.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
