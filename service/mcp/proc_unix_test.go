//go:build unix

package mcp_test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

func killPID(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// alive reports whether the process pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: it exists
	}
	_, after, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(after, "Z")
}
