package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/term"

	"pam/internal/holder"
	"pam/internal/wire"
)

// attachLocal is `pam run attach --local ID` on the worker host of a run
// under the pty executor: this terminal becomes a reader of the run's
// holder directly (docs/architecture.md#the-pty-holder), as many at once
// as the operator likes. It is read-only — the holder drops input from
// a reader that did not ask to write — unless write: then the run's
// attach lease is taken from the orchestrator first (and held, over the
// attach socket, until detach), so the single-writer rule holds for
// local terminals too.
func attachLocal(x *invocation, write bool) error {
	in, _ := x.env.Stdin.(*os.File)
	fd := int(in.Fd())
	if in == nil || !term.IsTerminal(fd) {
		return fmt.Errorf("pam run attach --local needs a terminal on stdin")
	}
	ctx, out, errw := x.ctx, x.stdout, x.stderr
	if write {
		// The orchestrator knows the whole id of a prefix, and holds the
		// lease.
		if _, err := x.client(); err != nil {
			return fmt.Errorf("pam run attach --local --write takes the run's attach lease from the orchestrator, so it needs PAM_URL and the operator token: "+
				"give the token to this command only (PAM_TOKEN=… in its environment, or --token-file FILE), never in a file the worker's agents can read: %w", err)
		}
	}
	dir, name, err := localHolder(x)
	if err != nil {
		return err
	}
	rows, cols := termRowsCols(fd)

	ws, conn, err := openLocal(x, dir, name, write, rows, cols)
	if err != nil {
		return err
	}
	if ws != nil {
		defer ws.CloseNow()
	}
	defer conn.Close()
	mode := "read-only; --write to type"
	if write {
		mode = "writing, under the run's lease"
	}
	fmt.Fprintf(errw, "attached to %s locally (%s); detach with Ctrl-\\\n", name, mode)

	s, err := startTermSession(ctx, in, out)
	if err != nil {
		return err
	}
	defer s.close()
	// Keyboard: typed (with --write) up to Ctrl-\; otherwise only
	// watched for Ctrl-\.
	var send func([]byte) error
	if write {
		send = conn.Input
		s.watchResize(func(rows, cols int) { _ = conn.Resize(rows, cols) })
		s.guard(func() { s.events <- watchLease(s.ctx, ws) })
	}
	s.copyKeys(send)
	s.copyOut(func() ([]byte, *attachEvent) { return nextHolderOutput(conn) })

	ev, interrupted := s.wait()
	if interrupted {
		ev.detach = true
	}
	if ws != nil {
		releaseLease(s.ctx, ws)
	}
	s.restore()
	switch {
	case ev.detach:
		fmt.Fprintf(errw, "\ndetached from %s\n", name)
		return nil
	case ev.msg != "":
		fmt.Fprintf(errw, "\n%s: %s\n", name, ev.msg)
		return nil
	default:
		fmt.Fprintln(errw)
		return ev.err
	}
}

// openLocal connects to the run's holder: to write, after taking the
// run's attach lease (whose socket it returns, to be held until detach);
// otherwise as a reader that is sent a redraw of the screen.
func openLocal(x *invocation, dir, name string, write bool, rows, cols int) (*websocket.Conn, *holder.Conn, error) {
	if !write {
		conn, err := holder.Dial(dir, name, holder.Hello{Redraw: true})
		return nil, conn, err
	}
	c, err := x.client()
	if err != nil {
		return nil, nil, err
	}
	_, ws, err := takeLease(x.ctx, c, x.args[0], rows, cols)
	if err != nil {
		return nil, nil, err
	}
	conn, err := holder.Dial(dir, name, holder.Hello{Rows: rows, Cols: cols, Write: true})
	if err != nil {
		ws.CloseNow()
		return nil, nil, err
	}
	return ws, conn, nil
}

// localHolder is the holder directory and name of the run whose id (or a
// prefix of at least 8 characters) is the command's argument: a holder is
// named after the run id's first 8 characters, so the orchestrator is not
// needed to find it.
func localHolder(x *invocation) (dir, name string, err error) {
	runID := x.args[0]
	if len(runID) < 8 || strings.Trim(strings.ToLower(runID[:8]), "0123456789abcdef") != "" {
		return "", "", usagef("pam run attach --local: %q is not a run id (at least its first 8 characters)", runID)
	}
	name = "pam-" + strings.ToLower(runID[:8])
	dir = filepath.Join(x.cfg.str("PAM_DATA_DIR"), "worker", "holders")
	if _, ok := holder.Alive(dir, name); !ok {
		return "", "", fmt.Errorf("no live holder %s in %s: --local reads a run's PTY holder on its worker host (PAM_EXECUTOR=pty, same PAM_DATA_DIR); elsewhere use pam run attach", name, dir)
	}
	return dir, name, nil
}

// watchLease reads the lease socket of attach --local --write until it
// ends the attach: its output is the holder's too (dropped here); an error
// frame means the lease was taken away or the run ended.
func watchLease(ctx context.Context, ws *websocket.Conn) attachEvent {
	for {
		f, err := readTermFrame(ctx, ws)
		if err != nil {
			return attachEvent{err: err}
		}
		if f.Type == wire.WSError && f.Code != wire.CodeMalformedFrame {
			return attachEvent{msg: termFrameError(f).Error()}
		}
	}
}

// releaseLease gives the run's attach lease back and closes its socket,
// even when the attach ended because ctx did.
func releaseLease(ctx context.Context, ws *websocket.Conn) {
	b, _ := json.Marshal(wire.TermFrame{Type: wire.WSReleaseLease})
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = ws.Write(wctx, websocket.MessageText, b)
	wcancel()
	_ = ws.Close(websocket.StatusNormalClosure, "detached")
}

// nextHolderOutput reads the holder connection up to the next output for
// the terminal, or the event that ends the attach: the run's program
// exited, or the holder went.
func nextHolderOutput(conn *holder.Conn) ([]byte, *attachEvent) {
	for {
		f, err := conn.Next()
		if err != nil {
			return nil, &attachEvent{err: fmt.Errorf("the holder closed the connection: %w", err)}
		}
		switch f.Type {
		case holder.FrameOutput:
			return f.Payload, nil
		case holder.FrameExit:
			var e holder.Exit
			_ = json.Unmarshal(f.Payload, &e)
			return nil, &attachEvent{msg: fmt.Sprintf("the run's program %s (code %d)", e.Reason, e.Code)}
		}
	}
}
