package fleetsim

import "syscall"

// childAttr puts the serve a simulation starts in its own process group;
// Pdeathsig: a simulation killed outright does not leave its serve behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
