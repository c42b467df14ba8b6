package benchproc

import "syscall"

// childAttr puts a started process in its own process group; Pdeathsig:
// a driver killed outright does not leave it behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
