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
// -pgid), so that nothing the command started lives on.
func runShell(ctx context.Context, cfg ShellConfig, command string, out ToolOutput) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	r, w, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("could not start the command: %v", err)
	}
	defer r.Close()
	cmd := exec.Command("sh", "-c", command)
	cmd.Dir = cfg.Dir
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	w.Close() // the children hold their own copies
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
		// Killed while the shell still lives (and is not reaped), so -pgid is ours.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		waitErr = <-exited
	}
	// Background jobs the command left behind would keep the pipe open: end them too,
	// and give up on the pipe if a process that left the group still holds it.
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
