//go:build !linux

package benchproc

import "syscall"

// childAttr puts a started process in its own process group (no
// Pdeathsig outside Linux: a driver killed outright may leave it).
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
