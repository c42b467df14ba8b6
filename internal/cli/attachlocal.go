package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
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
	runID := x.args[0]
	if len(runID) < 8 || strings.Trim(strings.ToLower(runID[:8]), "0123456789abcdef") != "" {
		return usagef("pam run attach --local: %q is not a run id (at least its first 8 characters)", runID)
	}
	name := "pam-" + strings.ToLower(runID[:8])
	dir := filepath.Join(x.cfg.str("PAM_DATA_DIR"), "worker", "holders")
	if _, ok := holder.Alive(dir, name); !ok {
		return fmt.Errorf("no live holder %s in %s: --local reads a run's PTY holder on its worker host (PAM_EXECUTOR=pty, same PAM_DATA_DIR); elsewhere use pam run attach", name, dir)
	}
	rows, cols := termRowsCols(fd)

	var ws *websocket.Conn
	if write {
		c, err := x.client()
		if err != nil {
			return err
		}
		if _, ws, err = takeLease(ctx, c, runID, rows, cols); err != nil {
			return err
		}
		defer ws.CloseNow()
	}
	hello := holder.Hello{Redraw: true}
	if write {
		hello = holder.Hello{Rows: rows, Cols: cols, Write: true}
	}
	conn, err := holder.Dial(dir, name, hello)
	if err != nil {
		return err
	}
	defer conn.Close()
	mode := "read-only; --write to type"
	if write {
		mode = "writing, under the run's lease"
	}
	fmt.Fprintf(errw, "attached to %s locally (%s); detach with Ctrl-\\\n", name, mode)

	old, err := term.MakeRaw(fd)
	if err != nil {
		return fmt.Errorf("raw mode: %w", err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if isTerminal(out) {
				_, _ = io.WriteString(out, resetTerminal)
			}
			_ = term.Restore(fd, old)
		}
	}
	defer restore()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type ending struct {
		detach bool
		msg    string
		err    error
	}
	events := make(chan ending, 4)
	// Keyboard: typed (with --write) up to Ctrl-\; otherwise only
	// watched for Ctrl-\.
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			b := buf[:n]
			i := bytes.IndexByte(b, detachKey)
			if i >= 0 {
				b = b[:i]
			}
			if write && len(b) > 0 {
				if err := conn.Input(append([]byte(nil), b...)); err != nil {
					events <- ending{err: err}
					return
				}
			}
			if i >= 0 || err != nil {
				events <- ending{detach: true}
				return
			}
		}
	}()
	if write {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-winch:
				}
				r, c := termRowsCols(fd)
				_ = conn.Resize(r, c)
			}
		}()
		// The lease socket: its output is the holder's too (dropped
		// here); an error frame ends the attach (lease taken away, run
		// ended).
		go func() {
			for {
				f, err := readTermFrame(ctx, ws)
				if err != nil {
					events <- ending{err: err}
					return
				}
				if f.Type == wire.WSError && f.Code != wire.CodeMalformedFrame {
					events <- ending{msg: termFrameError(f).Error()}
					return
				}
			}
		}()
	}
	// The holder → this terminal.
	go func() {
		for {
			f, err := conn.Next()
			if err != nil {
				events <- ending{err: fmt.Errorf("the holder closed the connection: %w", err)}
				return
			}
			switch f.Type {
			case holder.FrameOutput:
				if _, err := out.Write(f.Payload); err != nil {
					events <- ending{err: err}
					return
				}
			case holder.FrameExit:
				var e holder.Exit
				_ = json.Unmarshal(f.Payload, &e)
				events <- ending{msg: fmt.Sprintf("the run's program %s (code %d)", e.Reason, e.Code)}
				return
			}
		}
	}()
	var ev ending
	select {
	case <-ctx.Done():
		ev.detach = true
	case ev = <-events:
	}
	if ws != nil {
		b, _ := json.Marshal(wire.TermFrame{Type: wire.WSReleaseLease})
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = ws.Write(wctx, websocket.MessageText, b)
		wcancel()
		_ = ws.Close(websocket.StatusNormalClosure, "detached")
	}
	restore()
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
