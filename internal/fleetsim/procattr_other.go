//go:build !linux

package fleetsim

import "syscall"

// childAttr puts the serve a simulation starts in its own process group
// (no Pdeathsig outside Linux: a simulation killed outright may leave it).
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
