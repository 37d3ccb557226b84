//go:build unix

package openai_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/talkgraph/talkgraph/internal/fakellm"
	"github.com/talkgraph/talkgraph/service"
	"github.com/talkgraph/talkgraph/service/openai"
)

// shellCall is a response in which the model runs command with the shell tool.
func shellCall(command string) http.HandlerFunc {
	return fakellm.SSE(
		fakellm.Chunk(`{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"call_sh","type":"function","function":{"name":"shell","arguments":""}}]}`, ""),
		fakellm.Chunk(`{"tool_calls":[{"index":0,"function":{"arguments":`+jsonString(`{"command":`+jsonString(command)+`}`)+`}}]}`, ""),
		fakellm.Chunk(`{}`, "tool_calls"),
		fakellm.Done,
	)
}

func TestShellIsOffByDefault(t *testing.T) {
	srv := newFakeServer(t, shellCall("echo hi"), fakellm.TextReply("ok"))
	a := newAgent(t, srv, openai.Config{})
	if err := run(t, a, userSays("hi"), newRecorder()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	equal(t, "tools offered", srv.Request(0).ToolNames(), []string{"ask_user"})
	equal(t, "tool answer", srv.Request(1).Transcript()[2:], []string{`tool call_sh: error: there is no tool named "shell"`})
}

func TestShellRunsCommands(t *testing.T) {
	dir := t.TempDir()
	// pwd, then 1000 two-byte characters against a cap of 1001 bytes: the cap falls in the
	// middle of a character, which must not reach the user half-written.
	command := `pwd; yes é | head -n 1000 | tr -d '\n'; echo oops >&2; exit 3`
	srv := newFakeServer(t, shellCall(command), fakellm.TextReply("done"))
	a := newAgent(t, srv, openai.Config{EnableShell: true, Shell: openai.ShellConfig{Dir: dir, MaxOutput: len(dir) + 1 + 1001}})
	out := newRecorder()
	if err := run(t, a, userSays("go"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	equal(t, "tools offered", srv.Request(0).ToolNames(), []string{"ask_user", "shell"})

	calls := out.toolCalls()
	if len(calls) != 1 {
		t.Fatalf("%d calls", len(calls))
	}
	c := calls[0]
	streamed := c.output.String()
	if !utf8.ValidString(streamed) || strings.ContainsRune(streamed, utf8.RuneError) {
		t.Errorf("streamed output is not clean UTF-8: %q", streamed)
	}
	if want := dir + "\n" + strings.Repeat("é", 500); streamed != want {
		t.Errorf("streamed output = %q…, want %q…", head(streamed), head(want))
	}
	wantResult := streamed + "\n[output cut at " + strconv.Itoa(len(dir)+1+1001) + " bytes]\n[exit status 3]"
	if c.result != wantResult || c.err != nil {
		t.Errorf("result = %q, %v; want %q", c.result, c.err, wantResult)
	}
	if got := srv.Request(1).Body.Messages[2]; got.Content.Text == nil || *got.Content.Text != wantResult {
		t.Errorf("tool message to the model = %v", got)
	}
}

func TestShellTimeout(t *testing.T) {
	srv := newFakeServer(t, shellCall("echo start; sleep 30"), fakellm.TextReply("ok"))
	a := newAgent(t, srv, openai.Config{EnableShell: true, Shell: openai.ShellConfig{Timeout: 200 * time.Millisecond}})
	out := newRecorder()
	if err := run(t, a, userSays("go"), out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got, want := out.toolCalls()[0].result, "start\n\n[killed after the 200ms time limit]"; got != want {
		t.Errorf("result = %q, want %q", got, want)
	}
}

// Stop during a long command kills its whole process group promptly; the output so far
// was streamed, and the result says the command was stopped.
func TestShellStopKillsProcessGroup(t *testing.T) {
	srv := newFakeServer(t, shellCall(`echo $$; sleep 30 & sleep 30; wait`))
	a := newAgent(t, srv, openai.Config{EnableShell: true})
	out := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := runAsync(ctx, a, service.RunRequest{History: userSays("go")}, out)

	var pgid int
	out.waitFor(t, "the shell to print its PID", func() bool {
		if len(out.tools) == 0 {
			return false
		}
		line, ok := strings.CutSuffix(out.tools[0].output.String(), "\n")
		if !ok {
			return false
		}
		pgid, _ = strconv.Atoi(line)
		return true
	})
	if pgid <= 1 {
		t.Fatalf("bad pgid %d", pgid)
	}
	if err := syscall.Kill(-pgid, 0); err != nil {
		t.Fatalf("process group %d is not running: %v", pgid, err)
	}

	cancel()
	if err := waitErr(t, errc); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	// The group is killed before Run returns; its orphans are reaped by init, which may
	// take a moment in a container.
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for syscall.Kill(-pgid, 0) != syscall.ESRCH {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still exists", pgid)
		}
		<-tick.C
	}

	c := out.toolCalls()[0]
	if !c.finished || !strings.HasPrefix(c.result, strconv.Itoa(pgid)+"\n") || !strings.Contains(c.result, "stopped") {
		t.Errorf("finish = %v %q", c.finished, c.result)
	}
}

// A command dies with the server that runs it, and so does what it started: when the
// process running the shell tool is killed by SIGKILL (a crash, which leaves the call
// "not run again"), the command's shell and a child it left running in the background end
// with it.
func TestShellCommandDiesWithItsServer(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	server := exec.Command(self, "-test.run=^$")
	server.Env = append(os.Environ(), "SHELL_TEST_COMMAND=sleep 600 & echo $$ $!; wait")
	printed, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = server.Process.Kill(); _ = server.Wait() }()

	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(printed).ReadString('\n')
		line <- s
	}()
	var shell, child int
	select {
	case s := <-line:
		if _, err := fmt.Sscanf(s, "%d %d", &shell, &child); err != nil || shell <= 1 || child <= 1 {
			t.Fatalf("the command printed %q, want its shell's and its child's process IDs", s)
		}
	case <-time.After(wait):
		t.Fatalf("the command printed nothing within %v", wait)
	}
	t.Cleanup(func() { _ = syscall.Kill(-shell, syscall.SIGKILL) }) // when the test fails
	for _, pid := range []int{shell, child} {
		if !alive(pid) {
			t.Fatalf("process %d is not running before the server is killed", pid)
		}
	}

	if err := server.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = server.Wait()
	for what, pid := range map[string]int{"the command's shell": shell, "its child in the background": child} {
		waitGone(t, pid, what)
	}
}

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
	deadline := time.Now().Add(wait)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Errorf("%s (process %d) still runs %v after its server was killed", what, pid, wait)
			return
		}
		time.Sleep(10 * time.Millisecond) // polling another process's end, with a deadline
	}
}

func head(s string) string {
	if r := []rune(s); len(r) > 60 {
		return string(r[:60])
	}
	return s
}
