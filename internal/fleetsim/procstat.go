package fleetsim

import (
	"strings"
	"time"

	"pam/internal/procfs"
)

// clusterUsage sums CPU time over the embedded cluster's postmaster and
// its children (the backends and the auxiliary processes) and counts the
// client backends: processes whose title is "postgres: user db …",
// which is what a connection of serve's is.
func clusterUsage(postmaster int) (cpu time.Duration, backends int) {
	if postmaster <= 0 {
		return 0, 0
	}
	if u, ok := procfs.ReadStat(postmaster); ok {
		cpu += u.CPU
	}
	for _, pid := range procfs.ChildrenOf(postmaster) {
		u, ok := procfs.ReadStat(pid)
		if !ok {
			continue
		}
		cpu += u.CPU
		if isClientBackend(string(procfs.File(pid, "cmdline"))) {
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
