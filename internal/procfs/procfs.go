// Package procfs is pam's one reader of /proc/<pid> (Linux): the state,
// parent, process group, terminal, CPU and memory of a process, and the
// process list. tmux's stop ladder reads process groups and a pane's
// foreground group with it, and the bench drivers (internal/loadtest,
// internal/fleetsim) the CPU, memory and process trees of what they
// measure, so that every figure is taken the same way. Off Linux every
// read answers "gone".
package procfs

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of the CPU times in /proc/<pid>/stat:
// 100 on every Linux pam runs on.
const clockTick = time.Second / 100

// pageSize is the unit of rss in /proc/<pid>/stat.
var pageSize = int64(os.Getpagesize())

// Stat is what is read of /proc/<pid>/stat.
type Stat struct {
	PPID int
	// PGRP is its process group; TPGID the foreground process group of
	// the terminal it controls (0 or -1 for none).
	PGRP, TPGID int
	// Zombie: the process has exited (it waits to be reaped, or is dead).
	Zombie bool
	// CPU is the process's own user+system time; Children is that of the
	// children it has waited for.
	CPU, Children time.Duration
	// RSS is its resident memory in bytes.
	RSS int64
}

// ReadStat parses /proc/<pid>/stat; ok is false when the process is gone.
func ReadStat(pid int) (Stat, bool) {
	if pid <= 0 {
		return Stat{}, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, pgrp 5, tpgid 8,
	// utime..cstime 14..17, rss 24.
	if len(f) < 22 {
		return Stat{}, false
	}
	n := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	return Stat{
		PPID:     int(n(4)),
		PGRP:     int(n(5)),
		TPGID:    int(n(8)),
		Zombie:   f[0] == "Z" || f[0] == "X",
		CPU:      time.Duration(n(14)+n(15)) * clockTick,
		Children: time.Duration(n(16)+n(17)) * clockTick,
		RSS:      n(24) * pageSize,
	}, true
}

// Alive reports whether pid is a live process (not a zombie).
func Alive(pid int) bool {
	st, ok := ReadStat(pid)
	return ok && !st.Zombie
}

// StatusBytes reads a "kB" line of /proc/<pid>/status (VmRSS:, VmHWM:)
// in bytes; 0 when the process is gone.
func StatusBytes(pid int, name string) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// File is one of /proc/<pid>'s files (cmdline, environ), nil when the
// process is gone or it cannot be read.
func File(pid int, name string) []byte {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), name))
	return b
}

// PIDs lists the processes there are now.
func PIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// ChildrenOf lists the processes whose parent is pid (a zombie too: its
// CPU time is not yet in its parent's Children).
func ChildrenOf(pid int) []int {
	var out []int
	for _, p := range PIDs() {
		if st, ok := ReadStat(p); ok && st.PPID == pid {
			out = append(out, p)
		}
	}
	return out
}

// GroupCPU is the CPU time a process and everything it forked have used:
// its own, its waited-for children's, and its live children's (a
// PostgreSQL postmaster and its backends).
func GroupCPU(pid int) time.Duration {
	st, ok := ReadStat(pid)
	if !ok {
		return 0
	}
	total := st.CPU + st.Children
	for _, c := range ChildrenOf(pid) {
		if cs, ok := ReadStat(c); ok {
			total += cs.CPU + cs.Children
		}
	}
	return total
}
