package fleetsim

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux pam runs on).
const clockTick = 10 * time.Millisecond

// pageSize is the unit of rss in /proc/<pid>/stat.
var pageSize = int64(os.Getpagesize())

// procUsage is what /proc says of one process: CPU time so far (user and
// system) and resident memory.
type procUsage struct {
	cpu  time.Duration
	rss  int64
	ppid int
}

// readProc reads /proc/<pid>/stat; ok is false if the process is gone.
func readProc(pid int) (procUsage, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procUsage{}, false
	}
	// The command name, in parentheses, may hold spaces: the fields
	// start after its closing one.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procUsage{}, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15, rss 24.
	if len(f) < 22 {
		return procUsage{}, false
	}
	num := func(field int) int64 { n, _ := strconv.ParseInt(f[field-3], 10, 64); return n }
	return procUsage{
		cpu:  time.Duration(num(14)+num(15)) * clockTick,
		rss:  num(24) * pageSize,
		ppid: int(num(4)),
	}, true
}

// clusterUsage sums CPU time over the embedded cluster's postmaster and
// its children (the backends and the auxiliary processes) and counts the
// client backends: processes whose title is "postgres: user db …",
// which is what a connection of serve's is.
func clusterUsage(postmaster int) (cpu time.Duration, backends int) {
	if postmaster <= 0 {
		return 0, 0
	}
	if u, ok := readProc(postmaster); ok {
		cpu += u.cpu
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return cpu, 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		u, ok := readProc(pid)
		if !ok || u.ppid != postmaster {
			continue
		}
		cpu += u.cpu
		if cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && isClientBackend(string(cmd)) {
			backends++
		}
	}
	return cpu, backends
}

// isClientBackend tells a backend serving a connection from PostgreSQL's
// own processes by its title: a connection's is "postgres: USER DB
// [local] STATE", the others' "postgres: checkpointer" and the like.
func isClientBackend(title string) bool {
	return strings.HasPrefix(title, "postgres: ") && strings.Contains(title, "[local]")
}
