//go:build unix && !linux

package mcp

import (
	"os/exec"
	"syscall"
)

// procAttr starts a server in a process group of its own, so that stopping it stops what
// it started. Without Linux's Pdeathsig a server outlives a talkgraph killed by SIGKILL
// only until it reads its stdin's end, which is when an MCP server exits.
func procAttr(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

func spawn(cmd *exec.Cmd) error { return cmd.Start() }
