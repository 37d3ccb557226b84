//go:build !linux

package main

import (
	"errors"
	"time"
)

// raiseFileLimit does nothing here: only Linux raises the open-file limit (0: unknown).
func raiseFileLimit() (uint64, error) { return 0, nil }

// processCPU is unknown here (0).
func processCPU() time.Duration { return 0 }

// treeCPU is known only on Linux.
func treeCPU(pid int) (time.Duration, error) {
	return 0, errors.New("a process's CPU is read only on Linux")
}
