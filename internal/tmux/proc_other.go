//go:build !linux

package tmux

import (
	"os"
	"syscall"
)

// groupAlive reports whether process group g still has a member.
func groupAlive(g int) bool { return killable(g) }

// foregroundGroup is 0 off Linux: there is no /proc to read the
// terminal's foreground group from, and the TIOCGPGRP ioctl answers only
// for the caller's own controlling terminal. The pane's own process group
// is still signalled.
func foregroundGroup(pid int) int { return 0 }

// growPipe: elsewhere the pipe keeps its size.
func growPipe(*os.File) {}

// controlProcAttr: elsewhere a control client whose worker died stays
// until the next worker's start sweeps it away (Capturer.Start).
func controlProcAttr() *syscall.SysProcAttr { return nil }
