package holder

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The holder's side of its PTY: control requests, signals to the
// program, sizes and redraws, and input on its way to the program.

// control acts on a control request.
func (h *holder) control(r *reader, req string) {
	switch req {
	case ControlStop:
		h.event(Event{Event: "stop", Reader: r.id})
		h.signalProgram(syscall.SIGTERM)
	case ControlKill:
		h.event(Event{Event: "kill", Reader: r.id})
		h.requestKill("")
	case ControlRedraw:
		h.redraw(0, 0)
	default:
		h.log.Warn("unknown control request", "reader", r.id, "request", req)
	}
}

// requestKill SIGKILLs the program and ends the holder.
func (h *holder) requestKill(why string) {
	h.kill.Do(func() {
		if why != "" {
			h.event(Event{Event: "kill", Detail: why})
		}
		h.signalProgram(syscall.SIGKILL)
		close(h.killed)
	})
}

// signalProgram signals the program's process group and the terminal's
// foreground process group (a job the program put in the foreground of
// its own). The holder's own group and the groups 0 and 1 never are.
func (h *holder) signalProgram(sig syscall.Signal) {
	self := syscall.Getpgrp()
	var groups []int
	if g, err := syscall.Getpgid(h.cmd.Process.Pid); err == nil {
		groups = append(groups, g)
	}
	if g, err := h.foreground(); err == nil {
		groups = append(groups, g)
	}
	sent := false
	for i, g := range groups {
		if g <= 1 || g == self || (i == 1 && g == groups[0]) {
			continue
		}
		_ = syscall.Kill(-g, sig)
		sent = true
	}
	if !sent {
		_ = h.cmd.Process.Signal(sig)
	}
}

// resize sets the PTY's size; the kernel sends SIGWINCH when it changed.
func (h *holder) resize(rows, cols int) {
	h.sizeMu.Lock()
	defer h.sizeMu.Unlock()
	h.setSize(rows, cols)
}

// redraw makes the program repaint its whole screen, at rows×cols (zero:
// the current size): the PTY takes an interim size, then the wanted
// one, so the program sees a change even when the size is the same.
func (h *holder) redraw(rows, cols int) {
	h.sizeMu.Lock()
	defer h.sizeMu.Unlock()
	if rows == 0 || cols == 0 {
		h.mu.Lock()
		rows, cols = h.rows, h.cols
		h.mu.Unlock()
	}
	interim := cols - 1
	if interim < 1 {
		interim = cols + 1
	}
	if err := h.winsize(rows, interim); err != nil {
		h.log.Warn("redraw", "err", err)
		return
	}
	time.Sleep(redrawPause)
	h.setSize(rows, cols)
}

// setSize sets the PTY's size and tells every reader (h.sizeMu held).
//
// The PTY is resized with h.mu held: the program's repaint at the new
// size (after its SIGWINCH) is broadcast under h.mu too, so every reader
// gets the size frame before any output drawn at that size.
func (h *holder) setSize(rows, cols int) {
	h.mu.Lock()
	if err := h.winsize(rows, cols); err != nil {
		h.mu.Unlock()
		h.log.Warn("resize", "rows", rows, "cols", cols, "err", err)
		return
	}
	changed := h.rows != rows || h.cols != cols
	h.rows, h.cols = rows, cols
	frame := AppendFrame(nil, FrameSize, SizePayload(rows, cols))
	for _, r := range h.readers {
		r.pending = append(r.pending, frame...)
		poke(r.wake)
	}
	h.mu.Unlock()
	if changed {
		h.event(Event{Event: "resize", Rows: rows, Cols: cols})
	}
}

// inputLoop writes queued input to the PTY: the only goroutine that
// waits on the program taking its input.
func (h *holder) inputLoop() {
	for {
		b, ok := h.input.pop()
		if !ok {
			return
		}
		if _, err := h.ptmx.Write(b); err != nil {
			h.input.close()
			return
		}
	}
}

// pollable turns the PTY's master into a file Go's poller serves: reads
// and writes park their goroutine instead of holding a thread, and Close
// unblocks them. (pty.Start leaves it blocking: File.Fd does that.) From
// here on the descriptor is only reached through SyscallConn, never Fd,
// which would make it blocking again.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("pty: %w", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pty: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// winsize sets the PTY's size.
func (h *holder) winsize(rows, cols int) error {
	return h.ioctl(func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	})
}

// foreground is the terminal's foreground process group.
func (h *holder) foreground() (int, error) {
	var g int
	err := h.ioctl(func(fd int) (err error) {
		g, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	return g, err
}

// ioctl runs op on the master's descriptor.
func (h *holder) ioctl(op func(fd int) error) error {
	rc, err := h.ptmx.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = op(int(fd)) }); err != nil {
		return err
	}
	return opErr
}
