package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
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

	s, err := startTermSession(ctx, in, out)
	if err != nil {
		return err
	}
	defer s.close()
	send := func(f wire.TermFrame) error {
		b, _ := json.Marshal(f)
		wctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		defer cancel()
		return ws.Write(wctx, websocket.MessageText, b)
	}
	s.copyKeys(func(b []byte) error { return send(wire.TermFrame{Type: wire.WSInput, Bytes: b}) })
	s.watchResize(func(rows, cols int) { _ = send(wire.TermFrame{Type: wire.WSResize, Rows: rows, Cols: cols}) })
	s.copyOut(func() ([]byte, *attachEvent) { return nextRunOutput(s.ctx, ws) })

	ev, interrupted := s.wait()
	if interrupted {
		_ = ws.Close(websocket.StatusNormalClosure, "interrupted")
		s.restore()
		fmt.Fprintf(errw, "\ndetached from run %s\n", run.ID)
		return nil
	}
	return endAttachRun(s, ws, run, ev, send, errw)
}

// nextRunOutput reads the attach socket up to the next output for the
// terminal, or the event that ends the attach: an error frame (the run
// ended, the lease was taken away) or a lost connection. A malformed-frame
// error is ours and not worth breaking the screen for.
func nextRunOutput(ctx context.Context, ws *websocket.Conn) ([]byte, *attachEvent) {
	for {
		f, err := readTermFrame(ctx, ws)
		if err != nil {
			return nil, &attachEvent{err: err}
		}
		switch f.Type {
		case wire.WSData:
			return f.Bytes, nil
		case wire.WSError:
			if f.Code == wire.CodeMalformedFrame {
				continue // ours: say nothing in the middle of the screen
			}
			return nil, &attachEvent{frame: &f}
		}
	}
}

// endAttachRun closes the attach socket the way ev calls for (giving the
// lease back on a detach), restores the terminal and says why it ended.
func endAttachRun(s *termSession, ws *websocket.Conn, run *wire.Run, ev attachEvent, send func(wire.TermFrame) error, errw io.Writer) error {
	switch {
	case ev.detach:
		_ = send(wire.TermFrame{Type: wire.WSReleaseLease})
		_ = ws.Close(websocket.StatusNormalClosure, "detached")
		s.restore()
		fmt.Fprintf(errw, "\ndetached from run %s\n", run.ID)
		return nil
	case ev.frame != nil:
		_ = ws.Close(websocket.StatusNormalClosure, "")
		s.restore()
		if ev.frame.Code == wire.CodeRunEnded {
			fmt.Fprintf(errw, "\nrun %s ended (%s)\n", run.ID, ev.frame.Message)
			return nil
		}
		fmt.Fprintln(errw)
		return termFrameError(*ev.frame)
	default:
		s.restore()
		if s.ctx.Err() != nil {
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
