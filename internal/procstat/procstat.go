// Package procstat reads what /proc says of a process of this machine: its name, state and
// parent (the test harness finds a server's children by them), and the CPU time it and its
// children have used. The benchmarks report what work costs in CPU, by process, beside how
// fast it went: which process spends the time a task takes.
package procstat

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// clockTick is the unit of /proc's CPU counters: USER_HZ, 100 on every Linux architecture.
const clockTick = 10 * time.Millisecond

// Stat is what /proc/<pid>/stat says of a process.
type Stat struct {
	Command string        // the executable's name, as the kernel keeps it (comm)
	State   string        // R, S, Z (a zombie: ended, not yet waited for)...
	Parent  int           // ppid
	CPU     time.Duration // user and system time the process has used
	// Children is the user and system time of its children that exited and that it waited
	// for: a PostgreSQL server's backends that ended, in its postmaster's.
	Children time.Duration
}

// Of reads process pid's Stat; ok is false when there is no such process here.
func Of(pid int) (s Stat, ok bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields are
	// counted from its last closing parenthesis.
	open, end := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
	if open < 0 || end < open {
		return Stat{}, false
	}
	f := bytes.Fields(raw[end+1:])
	// After comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return Stat{}, false
	}
	n := make([]int64, 15)
	for _, i := range []int{1, 11, 12, 13, 14} {
		if n[i], err = strconv.ParseInt(string(f[i]), 10, 64); err != nil {
			return Stat{}, false
		}
	}
	return Stat{
		Command:  string(raw[open+1 : end]),
		State:    string(f[0]),
		Parent:   int(n[1]),
		CPU:      time.Duration(n[11]+n[12]) * clockTick,
		Children: time.Duration(n[13]+n[14]) * clockTick,
	}, true
}

// Self is the CPU time, user and system, this process has used so far.
func Self() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
