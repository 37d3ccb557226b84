//go:build linux

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// raiseFileLimit raises the soft limit on open files to the hard limit, since every
// connection is a file, and answers the new limit.
func raiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, err
		}
	}
	return l.Cur, nil
}

// processCPU is the CPU time (user and system) this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// treeCPU is the CPU time pid has used, with that of its children: those still running and
// those it has waited for. For PostgreSQL's postmaster that is the whole server: each
// connection's backend is a child, counted while it runs and after it exits.
func treeCPU(pid int) (time.Duration, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	total := f.utime + f.stime + f.cutime + f.cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, err := procStat(child)
		if err != nil || c.ppid != pid {
			continue // gone since the listing, or not a child
		}
		total += c.utime + c.stime
	}
	return time.Duration(total) * clockTick, nil
}

// stat holds the fields of /proc/PID/stat that treeCPU reads.
type stat struct {
	ppid                         int
	utime, stime, cutime, cstime int64
}

func procStat(pid int) (stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: the fields after
	// it start at the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return stat{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); ppid is field 4, utime to cstime fields 14 to 17.
	if len(fields) < 15 {
		return stat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	var st stat
	st.ppid, _ = strconv.Atoi(fields[1])
	for i, p := range []*int64{&st.utime, &st.stime, &st.cutime, &st.cstime} {
		if *p, err = strconv.ParseInt(fields[11+i], 10, 64); err != nil {
			return stat{}, fmt.Errorf("/proc/%d/stat: %v", pid, err)
		}
	}
	return st, nil
}
