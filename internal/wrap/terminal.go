package wrap

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// paneTerminal returns the pane as a file when it is a real terminal (the
// tmux pane's pty), or nil (tests run the wrapper on pipes).
func paneTerminal(r io.Reader) *os.File {
	f, ok := r.(*os.File)
	if !ok || f == nil || !isTerminal(f) {
		return nil
	}
	return f
}

// isTerminal asks the terminal for its size. A terminal that hung up (its
// tmux session was killed, or the tmux server died and closed the pty's
// master side) answers no more: the kernel has switched every open file
// of it to the hung-up operations, which fail.
func isTerminal(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	_ = rc.Control(func(fd uintptr) {
		_, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ)
		ok = err == nil
	})
	return ok
}
