//go:build linux

package main

import (
	"os"
	"os/exec"
	"testing"
)

// The database's CPU is its own and its children's, those that ran and exited (as
// PostgreSQL's backends do when their connections close) included.
func TestTreeCPUCountsChildrenThatExited(t *testing.T) {
	before, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := child.Run(); err != nil {
		t.Skipf("no shell to burn CPU in: %v", err)
	}
	used := child.ProcessState.UserTime() + child.ProcessState.SystemTime()
	after, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if used < 5*clockTick {
		t.Fatalf("the child used only %v: too little to see", used)
	}
	if got := after - before; got < used-clockTick {
		t.Fatalf("treeCPU grew by %v while a child that exited used %v", got, used)
	}
}

func TestTreeCPUOfNoProcessIsAnError(t *testing.T) {
	if _, err := treeCPU(1 << 30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
