package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"pam/internal/wire"
)

// detachKey is Ctrl-\ (FS): it never reaches the run.
const detachKey = 0x1c

// resetTerminal undoes what a tmux client leaves set when its relay is cut
// rather than detached (it never gets to write its own exit sequences):
// alternate screen, hidden cursor, mouse reporting, bracketed paste,
// application cursor and keypad modes, attributes.
const resetTerminal = "\x1b[?1049l\x1b[?25h\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\x1b[?1l\x1b>\x1b[m"

// attachEvent is how a terminal session's goroutines tell the attach
// command to finish. Exactly one field is set.
type attachEvent struct {
	detach bool
	frame  *wire.TermFrame // a final error frame from the server
	msg    string          // the far end ended, said so: not an error
	err    error           // the connection is lost
	panic  any             // a goroutine panicked: restore, then re-panic
}

// termSession is this terminal given over to a remote one for the length
// of an attach: raw mode, the keyboard copied up to the detach key, window
// size changes passed on, the remote's output copied back. Both attach
// paths (through the orchestrator, and --local to a PTY holder) use it so
// that the terminal is put back the same way whichever way an attach ends,
// including on a panic of one of its goroutines.
type termSession struct {
	ctx    context.Context // ends when the session does
	cancel context.CancelFunc
	in     *os.File
	fd     int
	out    io.Writer
	old    *term.State
	done   bool // restored
	winch  chan os.Signal
	events chan attachEvent
}

// startTermSession puts in (a terminal) in raw mode. The caller defers
// close, and calls restore before it writes its last words.
func startTermSession(ctx context.Context, in *os.File, out io.Writer) (*termSession, error) {
	fd := int(in.Fd())
	old, err := term.MakeRaw(fd)
	if err != nil {
		return nil, fmt.Errorf("raw mode: %w", err)
	}
	s := &termSession{in: in, fd: fd, out: out, old: old, events: make(chan attachEvent, 4)}
	s.ctx, s.cancel = context.WithCancel(ctx)
	return s, nil
}

// restore leaves raw mode, and resets what a cut tmux client left set;
// only the first call does anything.
func (s *termSession) restore() {
	if s.done {
		return
	}
	s.done = true
	if isTerminal(s.out) {
		_, _ = io.WriteString(s.out, resetTerminal)
	}
	_ = term.Restore(s.fd, s.old)
}

// close ends the session's goroutines' context, stops resize signals and
// restores the terminal (if not done yet): deferred, it also runs on a
// panic of the attach's own goroutine.
func (s *termSession) close() {
	s.cancel()
	if s.winch != nil {
		signal.Stop(s.winch)
	}
	s.restore()
}

// guard runs f in a goroutine whose panic becomes an event, so that the
// terminal is restored before the panic goes on.
func (s *termSession) guard(f func()) {
	go func() {
		defer func() {
			if p := recover(); p != nil {
				s.events <- attachEvent{panic: p}
			}
		}()
		f()
	}()
}

// copyKeys relays the keyboard to send up to the detach key, which ends
// the session as does the end of stdin. A nil send (read-only) only
// watches for the detach key.
func (s *termSession) copyKeys(send func([]byte) error) {
	s.guard(func() {
		buf := make([]byte, 4096)
		for {
			n, err := s.in.Read(buf)
			b := buf[:n]
			i := bytes.IndexByte(b, detachKey)
			if i >= 0 {
				b = b[:i]
			}
			if send != nil && len(b) > 0 {
				if err := send(append([]byte(nil), b...)); err != nil {
					s.events <- attachEvent{err: err}
					return
				}
			}
			if i >= 0 || err != nil {
				s.events <- attachEvent{detach: true} // or stdin closed: nothing more to type
				return
			}
		}
	})
}

// watchResize passes each new window size (SIGWINCH) to resize until the
// session ends.
func (s *termSession) watchResize(resize func(rows, cols int)) {
	s.winch = make(chan os.Signal, 1)
	signal.Notify(s.winch, syscall.SIGWINCH)
	s.guard(func() {
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-s.winch:
			}
			resize(termRowsCols(s.fd))
		}
	})
}

// copyOut writes what next returns to the terminal until next returns an
// event (the remote ended, or is lost) or the terminal fails.
func (s *termSession) copyOut(next func() ([]byte, *attachEvent)) {
	s.guard(func() {
		for {
			b, end := next()
			if end != nil {
				s.events <- *end
				return
			}
			if len(b) == 0 {
				continue
			}
			if _, err := s.out.Write(b); err != nil {
				s.events <- attachEvent{err: err}
				return
			}
		}
	})
}

// wait is the first event of the session, or interrupted when ctx ends
// first. A goroutine's panic is re-raised here, with the terminal restored.
func (s *termSession) wait() (ev attachEvent, interrupted bool) {
	select {
	case <-s.ctx.Done():
		return attachEvent{}, true
	case ev = <-s.events:
	}
	if ev.panic != nil {
		s.restore()
		panic(ev.panic)
	}
	return ev, false
}
