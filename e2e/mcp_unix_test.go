//go:build unix

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talkgraph/talkgraph/internal/tgtest"
)

// alive reports whether the process pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc to say otherwise
	}
	_, after, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(after, "Z")
}

// waitGone waits until the process pid has ended. It is no child of this process, so
// nothing tells when it ends: it is looked at every 10 ms until the deadline.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(tgtest.Wait)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Errorf("%s (process %d) still runs %v after talkgraph ended", what, pid, tgtest.Wait)
			return
		}
		time.Sleep(10 * time.Millisecond) // polling another process's end, with a deadline
	}
}

// waitMetric waits until the server's /metrics holds line; nothing tells when it changes,
// so it is read every 20 ms until the deadline.
func waitMetric(t *testing.T, base, line string) {
	t.Helper()
	deadline := time.Now().Add(tgtest.Wait)
	for !strings.Contains(metricsText(t, base), line+"\n") {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never said %s", line)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's metrics, with a deadline
	}
}

// readPID reads a process ID a shell wrote to path.
func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscanf(string(b), "%d", &pid); err != nil {
		t.Fatalf("a process ID in %s: %q", path, b)
	}
	return pid
}

// shellWords quotes the command of a stdio server's entry for sh.
func shellWords(entry map[string]any) string {
	words := []string{"'" + entry["command"].(string) + "'"}
	for _, a := range entry["args"].([]string) {
		words = append(words, "'"+a+"'")
	}
	return strings.Join(words, " ")
}

// No MCP server outlives the real talkgraph process, whether it shuts down gracefully
// (SIGTERM) or is killed (SIGKILL; on Linux the kernel kills a stdio server with
// talkgraph, Pdeathsig): neither a server talkgraph started, nor one a wrapper started (as
// npx does), which reads the end of its stdin, nor a wrapper that goes on after its server
// without reading its stdin. A graceful shutdown also ends what a server started in the
// background, which reads nothing (its process group is killed); after a SIGKILL such a
// process is the process manager's to end (see docs/OPERATIONS.md).
func TestMCPNoOrphansAfterShutdown(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			if sig == syscall.SIGKILL && runtime.GOOS != "linux" {
				t.Skip("a stdio server dies with a killed talkgraph through Linux's Pdeathsig")
			}
			dir := t.TempDir()
			direct, wrapped, spawner := newNotesServer(t, "stdio"), newNotesServer(t, "stdio"), newNotesServer(t, "stdio")
			wrapperPID, backgroundPID := filepath.Join(dir, "wrapper.pid"), filepath.Join(dir, "background.pid")
			// The wrapper notes its process ID, runs the server, then becomes a process that
			// never reads its stdin.
			wrapped.entry = map[string]any{"command": "sh", "args": []string{"-c",
				"echo $$ > '" + wrapperPID + "'; " + shellWords(wrapped.entry) + "; exec sleep 600"}}
			// The spawner leaves a process in the background that reads nothing, and becomes
			// the server.
			spawner.entry = map[string]any{"command": "sh", "args": []string{"-c",
				"sleep 600 & echo $! > '" + backgroundPID + "'; exec " + shellWords(spawner.entry)}}
			servers := map[string]any{"direct": direct.entry, "wrapped": wrapped.entry}
			if sig == syscall.SIGTERM {
				servers["spawner"] = spawner.entry
			}
			child := startChild(t, t.TempDir(), freePort(t), "MCP_CONFIG="+mcpConfig(t, servers), "OPENAI_BASE_URL=http://127.0.0.1:1/v1")
			for name := range servers {
				waitMetric(t, child.URL, fmt.Sprintf(`talkgraph_mcp_server_state{server=%q,state="up"} 1`, name))
			}
			started := func(r record) bool { return r.Event == "start" }
			pids := map[string]int{
				"the server talkgraph started":               direct.waitRecord("its start", started).PID,
				"the server a wrapper started":               wrapped.waitRecord("its start", started).PID,
				"the wrapper, which does not read its stdin": readPID(t, wrapperPID),
			}
			if sig == syscall.SIGTERM {
				pids["what a server left in the background"] = readPID(t, backgroundPID)
			}
			for what, pid := range pids {
				if !alive(pid) {
					t.Fatalf("%s (process %d) is not running", what, pid)
				}
			}
			if err := child.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-child.done:
			case <-time.After(tgtest.Wait):
				t.Fatalf("talkgraph did not end within %v of %s", tgtest.Wait, sig)
			}
			for what, pid := range pids {
				waitGone(t, pid, what)
			}
		})
	}
}
