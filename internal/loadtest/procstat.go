package loadtest

import "pam/internal/procfs"

// rssBytes is the resident set of a process (VmRSS), 0 when it is gone.
func rssBytes(pid int) int64 { return procfs.StatusBytes(pid, "VmRSS:") }

// mib converts bytes to MiB.
func mib(b int64) float64 { return float64(b) / (1 << 20) }
