//go:build linux

package mcp

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// procAttr starts a server in a process group of its own (so that stopping it stops
// what it started) and has the kernel kill it when talkgraph dies, even by SIGKILL
// (Pdeathsig): no server outlives talkgraph. What the server itself started sees its
// stdin end then, which is when an MCP server exits.
func procAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Pdeathsig fires when the thread that started the child exits, not the process, and Go
// ends threads behind goroutines' backs (golang.org/issue/27505). So every server is
// started from one goroutine locked to a thread that lives as long as the process.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

// spawn starts cmd from the spawner's thread.
func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd, done}
	return <-done
}
