package tmux

import (
	"os"
	"syscall"

	"pam/internal/procfs"
)

// growPipe makes the control client's output pipe hold a whole round of
// captures (100 full screens are about 1 MiB): the server then writes a
// round in a few large writes and this process reads it in a few large
// reads, instead of both waking for every 64 KiB. Best effort: the
// kernel caps it (fs.pipe-max-size).
func growPipe(f *os.File) {
	_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_SETPIPE_SZ, 1<<20)
}

// controlProcAttr has the kernel kill the control client when the worker
// dies, so that it never outlives it (docs/architecture.md#capture-by-control-mode).
func controlProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// groupAlive reports whether process group g has a member that is not a
// zombie. Zombies are skipped because a host whose init does not reap
// orphans (some containers) would otherwise keep every stopped group
// "alive" until the grace ran out.
func groupAlive(g int) bool {
	if !killable(g) {
		return false
	}
	pids := procfs.PIDs()
	if pids == nil {
		return killable(g) // no /proc to read
	}
	for _, pid := range pids {
		if st, ok := procfs.ReadStat(pid); ok && st.PGRP == g && !st.Zombie {
			return true
		}
	}
	return false
}

// foregroundGroup is the foreground process group of the terminal that
// pid controls (tpgid in /proc/<pid>/stat), 0 when unknown. The
// TIOCGPGRP ioctl would not do: it answers only for the caller's own
// controlling terminal.
func foregroundGroup(pid int) int {
	st, ok := procfs.ReadStat(pid)
	if !ok || st.TPGID < 0 {
		return 0
	}
	return st.TPGID
}
