package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/term"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// runAttachCmd is `pam run attach ID`: this terminal becomes the run's
// terminal, relayed through the orchestrator and the run's worker (docs/api.md#websockets).
var runAttachCmd = &command{
	name: "attach", args: "ID", nargs: 1, names: runIDs, group: clientGroup,
	summary: `attach this terminal to a running run through the orchestrator (raw mode; detach with Ctrl-\)`,
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		local := fs.Bool("local", false, "on the run's worker host (PAM_EXECUTOR=pty): read its PTY holder directly, read-only; several terminals may")
		write := fs.Bool("write", false, "with --local: type too, after taking the run's attach lease from the orchestrator; needs PAM_URL and the operator token for this command only (PAM_TOKEN, or --token-file FILE from outside the worker's data dir): a token left on a worker host can be read by every agent there")
		return func(x *invocation) error {
			if *write && !*local {
				return usagef("--write goes with --local")
			}
			if *local {
				return attachLocal(x, *write)
			}
			c, err := x.client()
			if err != nil {
				return err
			}
			in, _ := x.env.Stdin.(*os.File)
			return attachRun(x.ctx, c, x.args[0], in, x.stdout, x.stderr)
		}
	},
}

// detachKey is Ctrl-\ (FS): it never reaches the run.
const detachKey = 0x1c

// resetTerminal undoes what a tmux client leaves set when its relay is cut
// rather than detached (it never gets to write its own exit sequences):
// alternate screen, hidden cursor, mouse reporting, bracketed paste,
// application cursor and keypad modes, attributes.
const resetTerminal = "\x1b[?1049l\x1b[?25h\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\x1b[?1l\x1b>\x1b[m"

// attachEvent is how the relay's goroutines tell attachRun to finish.
type attachEvent struct {
	detach bool
	frame  *wire.TermFrame // a final error frame from the server
	err    error           // the connection is lost
	panic  any             // a goroutine panicked: restore, then re-panic
}

// takeLease opens the attach socket of a running run and waits for its
// lease: what pam run attach and attach --local --write both do first.
func takeLease(ctx context.Context, c *apiclient.Client, runID string, rows, cols int) (*wire.Run, *websocket.Conn, error) {
	run, err := c.GetRun(ctx, runID)
	if err != nil {
		return nil, nil, err
	}
	if run.Status != wire.RunRunning {
		return nil, nil, fmt.Errorf("run %s is %s: only a running run can be attached", run.ID, run.Status)
	}
	ws, err := dialTerminal(ctx, c, run.ID, "attach", url.Values{"rows": {strconv.Itoa(rows)}, "cols": {strconv.Itoa(cols)}})
	if err != nil {
		return nil, nil, err
	}
	ws.SetReadLimit(wire.MaxFrame)
	first, err := readTermFrame(ctx, ws)
	if err != nil {
		ws.CloseNow()
		return nil, nil, fmt.Errorf("attach socket: %w", err)
	}
	if first.Type != wire.WSLeaseAcquired {
		ws.CloseNow()
		return nil, nil, termFrameError(first)
	}
	return run, ws, nil
}

// attachRun relays in (raw) and out through the attach socket until the
// user detaches with Ctrl-\, the run ends, the lease is taken away, the
// server goes or ctx ends. The terminal is restored on each of these,
// and on a panic.
func attachRun(ctx context.Context, c *apiclient.Client, runID string, in *os.File, out, errw io.Writer) error {
	fd := int(in.Fd()) // a nil *os.File (stdin is no file) has no descriptor
	if in == nil || !term.IsTerminal(fd) {
		return fmt.Errorf("pam run attach needs a terminal on stdin (use pam run watch to look, pam run keys to type)")
	}
	rows, cols := termRowsCols(fd)
	run, ws, err := takeLease(ctx, c, runID, rows, cols)
	if err != nil {
		return err
	}
	defer ws.CloseNow()
	fmt.Fprintf(errw, "attached to run %s (session %s); detach with Ctrl-\\\n", run.ID, run.SessionName)

	old, err := term.MakeRaw(fd)
	if err != nil {
		return fmt.Errorf("raw mode: %w", err)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if isTerminal(out) {
			_, _ = io.WriteString(out, resetTerminal)
		}
		_ = term.Restore(fd, old)
	}
	defer restore() // also on a panic of this goroutine

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan attachEvent, 4)
	guard := func(f func()) {
		go func() {
			defer func() {
				if p := recover(); p != nil {
					events <- attachEvent{panic: p}
				}
			}()
			f()
		}()
	}
	send := func(f wire.TermFrame) error {
		b, _ := json.Marshal(f)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return ws.Write(wctx, websocket.MessageText, b)
	}
	// Keyboard → input frames, up to Ctrl-\.
	guard(func() {
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				b := buf[:n]
				i := bytes.IndexByte(b, detachKey)
				if i >= 0 {
					b = b[:i]
				}
				if len(b) > 0 {
					if err := send(wire.TermFrame{Type: wire.WSInput, Bytes: append([]byte(nil), b...)}); err != nil {
						events <- attachEvent{err: err}
						return
					}
				}
				if i >= 0 {
					events <- attachEvent{detach: true}
					return
				}
			}
			if err != nil {
				events <- attachEvent{detach: true} // stdin closed: nothing more to type
				return
			}
		}
	})
	// Window size changes → resize frames.
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	guard(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
			}
			r, c := termRowsCols(fd)
			_ = send(wire.TermFrame{Type: wire.WSResize, Rows: r, Cols: c})
		}
	})
	// Socket → terminal.
	guard(func() {
		for {
			f, err := readTermFrame(ctx, ws)
			if err != nil {
				events <- attachEvent{err: err}
				return
			}
			switch f.Type {
			case wire.WSData:
				if _, err := out.Write(f.Bytes); err != nil {
					events <- attachEvent{err: err}
					return
				}
			case wire.WSError:
				if f.Code == wire.CodeMalformedFrame {
					continue // ours: say nothing in the middle of the screen
				}
				events <- attachEvent{frame: &f}
				return
			}
		}
	})

	var ev attachEvent
	select {
	case <-ctx.Done():
		_ = ws.Close(websocket.StatusNormalClosure, "interrupted")
		restore()
		fmt.Fprintf(errw, "\ndetached from run %s\n", run.ID)
		return nil
	case ev = <-events:
	}
	switch {
	case ev.panic != nil:
		restore()
		panic(ev.panic)
	case ev.detach:
		_ = send(wire.TermFrame{Type: wire.WSReleaseLease})
		_ = ws.Close(websocket.StatusNormalClosure, "detached")
		restore()
		fmt.Fprintf(errw, "\ndetached from run %s\n", run.ID)
		return nil
	case ev.frame != nil:
		_ = ws.Close(websocket.StatusNormalClosure, "")
		restore()
		if ev.frame.Code == wire.CodeRunEnded {
			fmt.Fprintf(errw, "\nrun %s ended (%s)\n", run.ID, ev.frame.Message)
			return nil
		}
		fmt.Fprintln(errw)
		return termFrameError(*ev.frame)
	default:
		restore()
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprintln(errw)
		return fmt.Errorf("connection to the orchestrator lost: %w", ev.err)
	}
}

// termRowsCols is the terminal's size, 24×80 when unknown, within the
// bounds the server takes.
func termRowsCols(fd int) (int, int) {
	cols, rows, err := term.GetSize(fd)
	if err != nil || rows <= 0 || cols <= 0 {
		return 24, 80
	}
	return min(rows, wire.MaxTermSize), min(cols, wire.MaxTermSize)
}

// readTermFrame reads one frame of the attach socket.
func readTermFrame(ctx context.Context, ws *websocket.Conn) (wire.TermFrame, error) {
	var f wire.TermFrame
	_, b, err := ws.Read(ctx)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("undecodable frame from the server: %w", err)
	}
	return f, nil
}

// termFrameError turns an error frame into the command's error.
func termFrameError(f wire.TermFrame) error {
	if f.Type != wire.WSError {
		return fmt.Errorf("unexpected %s frame from the server", f.Type)
	}
	msg := f.Message
	if msg == "" {
		msg = f.Code
	}
	if f.Code == wire.CodeLeaseHeld && f.Holder != nil {
		msg = fmt.Sprintf("%s: held by token %s at %s (%s, %s auth) since %s; `DELETE /api/v1/runs/{id}/lease` revokes it",
			msg, f.Holder.Token, f.Holder.RemoteAddr, f.Holder.UserAgent, f.Holder.Auth, f.Holder.AttachedAt.Format(time.RFC3339))
	}
	return &wire.Error{Code: f.Code, Message: msg}
}
