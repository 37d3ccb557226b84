//go:build !unix

package mcp

import "os/exec"

// Inherited names the variables of talkgraph's environment a stdio server gets (besides
// its own "env"), as the TypeScript SDK's clients do on Windows.
var Inherited = []string{"APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PROCESSOR_ARCHITECTURE",
	"SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "USERNAME", "USERPROFILE", "PROGRAMFILES"}

func procAttr(*exec.Cmd) {}

func spawn(cmd *exec.Cmd) error { return cmd.Start() }

// signalGroup kills the process (there is no group to signal, nor SIGTERM).
func signalGroup(cmd *exec.Cmd, kill bool) {
	if kill {
		_ = cmd.Process.Kill()
	}
}
