package tmux

import (
	"errors"
	"syscall"
)

// killable reports whether signal 0 reaches process group g.
func killable(g int) bool {
	err := syscall.Kill(-g, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
