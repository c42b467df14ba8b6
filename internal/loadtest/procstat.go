package loadtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat:
// 100 on every Linux pam runs on.
const clockTicks = 100

// rssBytes is the resident set of a process (VmRSS), 0 when it is gone.
func rssBytes(pid int) int64 {
	return statusField(pid, "VmRSS:")
}

// statusField reads a "kB" line of /proc/<pid>/status in bytes.
func statusField(pid int, name string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
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

// procStat is what pam reads of /proc/<pid>/stat.
type procStat struct {
	ppid int
	// cpu is the process's own user+system time; children is that of its
	// children it has waited for.
	cpu, children time.Duration
}

// readStat parses /proc/<pid>/stat; ok is false when the process is gone.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return procStat{}, false
	}
	n := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	tick := time.Second / clockTicks
	return procStat{
		ppid:     int(n(4)),
		cpu:      time.Duration(n(14)+n(15)) * tick,
		children: time.Duration(n(16)+n(17)) * tick,
	}, true
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || !bytes.HasPrefix(bytes.TrimSpace(b[i+1:]), []byte("Z"))
}

// childrenOf lists the live processes whose parent is pid.
func childrenOf(pid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, d := range dirs {
		p, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if st, ok := readStat(p); ok && st.ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// groupCPU is the CPU time a process and everything it forked have used:
// its own, its waited-for children's, and its live children's (a
// PostgreSQL postmaster and its backends).
func groupCPU(pid int) time.Duration {
	st, ok := readStat(pid)
	if !ok {
		return 0
	}
	total := st.cpu + st.children
	for _, c := range childrenOf(pid) {
		if cs, ok := readStat(c); ok {
			total += cs.cpu + cs.children
		}
	}
	return total
}

// mib converts bytes to MiB.
func mib(b int64) float64 { return float64(b) / (1 << 20) }
