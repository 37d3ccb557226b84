//go:build unix

package openai

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// runShell runs command in its own process group, streaming its combined output to out.
// When ctx ends or the timeout passes, the whole group is killed at once (SIGKILL to
// -pgid), so that nothing the command started lives on; so it is when the command ends,
// for what it left in the background. And when the server dies, even by SIGKILL, before
// the command has ended, the group's watchdog kills it (see watchdogScript): a call that
// was running in a crash is never run again, so its command must not go on either.
func runShell(ctx context.Context, cfg ShellConfig, command string, out ToolOutput) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	r, w, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("could not start the command: %v", err)
	}
	defer r.Close()
	// The watchdog's pipe: its write end is this process's alone (close-on-exec, so no
	// child inherits it), and stays open until the command's group is killed.
	alive, lifeline, err := os.Pipe()
	if err != nil {
		w.Close()
		return "", fmt.Errorf("could not start the command: %v", err)
	}
	defer lifeline.Close()
	cmd := exec.Command("sh", "-c", watchdogScript, "sh", command)
	cmd.Dir = cfg.Dir
	cmd.Stdout, cmd.Stderr = w, w
	cmd.ExtraFiles = []*os.File{alive} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	w.Close() // the children hold their own copies
	alive.Close()
	if err != nil {
		return "", fmt.Errorf("could not start the command: %v", err)
	}
	pgid := cmd.Process.Pid // Setpgid: the shell leads a new group of its own ID

	c := &collector{max: cfg.MaxOutput, out: out}
	read := make(chan struct{})
	go func() {
		defer close(read)
		c.readAll(r)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var waitErr error
	select {
	case waitErr = <-exited:
	case <-cctx.Done():
		// The group is ours while any of it lives, the watchdog included.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		waitErr = <-exited
	}
	// Background jobs the command left behind would keep the pipe open: end them too,
	// with the watchdog, and give up on the pipe if a process that left the group still
	// holds it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = r.SetReadDeadline(time.Now().Add(time.Second))
	<-read

	var ending string
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		ending = "[stopped by the user before it finished]"
	case cctx.Err() != nil:
		ending = fmt.Sprintf("[killed after the %s time limit]", cfg.Timeout)
	case errors.As(waitErr, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ending = fmt.Sprintf("[killed by signal %s]", ws.Signal())
		} else {
			ending = fmt.Sprintf("[exit status %d]", exit.ExitCode())
		}
	case waitErr != nil:
		return c.result(""), fmt.Errorf("the command could not be waited for: %v", waitErr)
	}
	return c.result(ending), nil
}

// watchdogScript is what the command's shell runs (as sh -c watchdogScript sh command):
// it starts the watchdog in the background, then becomes sh -c command (exec: the same
// process, so the command's shell still leads the group and $$ is its ID). The watchdog
// is a subshell in the group that reads the pipe on fd 3 until its end, which comes only
// when the server's write end closes: when the server dies, however it dies. It then
// kills its whole group, itself included. It reads fd 3 rather than stdin, which sh gives
// a background job as /dev/null; its output goes to /dev/null, so that it never holds
// the command's output open; it ignores the signals a command may send its own group
// (SIGKILL cannot be ignored); and the command does not see fd 3.
const watchdogScript = `{ trap '' HUP INT QUIT TERM; read _ <&3; kill -s KILL 0; } </dev/null >/dev/null 2>&1 &
exec sh -c "$1" 3<&-`
