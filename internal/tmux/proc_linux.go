package tmux

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
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
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return killable(g)
	}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 {
			continue
		}
		if pgrp, err := strconv.Atoi(string(f[2])); err == nil && pgrp == g && string(f[0]) != "Z" && string(f[0]) != "X" {
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
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	// After the comm: state ppid pgrp session tty_nr tpgid.
	f := bytes.Fields(b[i+1:])
	if len(f) < 6 {
		return 0
	}
	g, err := strconv.Atoi(string(f[5]))
	if err != nil {
		return 0
	}
	return g
}
