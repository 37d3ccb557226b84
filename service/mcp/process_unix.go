//go:build unix

package mcp

import (
	"os/exec"
	"syscall"
)

// Inherited names the variables of talkgraph's environment a stdio server gets (besides
// its own "env"): those a program needs to find itself and its user's files, never
// talkgraph's settings and secrets. The list is the one the TypeScript SDK's clients use.
var Inherited = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}

// signalGroup sends the process's group SIGTERM, or SIGKILL when kill: the group is
// the command and whatever it started.
func signalGroup(cmd *exec.Cmd, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig) // Setpgid: the command leads a group of its own ID
}
