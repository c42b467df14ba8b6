package worker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/creack/pty"

	"pam/internal/tmux"
	"pam/internal/wire"
)

// Executor is what the worker needs of whatever runs its sessions: tmux
// (package tmux, PAM_EXECUTOR=tmux), the built-in PTY holder (package
// holder, PAM_EXECUTOR=pty), or one given in Options.Sessions (the
// simulated fleet's fake sessions, internal/fleetsim). Everything above it — dispatch,
// reconciliation, liveness, capture, logs, attach relays — is the same
// for both (docs/architecture.md#the-pty-holder).
//
// Sessions are named and described with package tmux's types: a
// SessionName is checked against ^pam-[0-9a-f]{8}$ by either executor,
// and a Session carries the run id, attempt and instance that the tmux
// executor keeps as user options and the holder keeps in its note.
type Executor interface {
	// Harden prepares the executor before any relay opens (tmux: no key
	// bindings on an older server).
	Harden(ctx context.Context) error
	// NewSession starts a session running s.Command in s.Cwd.
	NewSession(ctx context.Context, s tmux.Spawn) error
	// ListSessions lists the live pam sessions.
	ListSessions(ctx context.Context) ([]tmux.Session, error)
	// Capture is the visible screen, with colour as ANSI escapes;
	// tmux.ErrNoSession when the session is gone.
	Capture(ctx context.Context, name tmux.SessionName) (string, error)
	// SendKeys types allowlisted keys; text always literally.
	SendKeys(ctx context.Context, name tmux.SessionName, keys []wire.Key) error
	// KillSession ends the session at once; tmux.ErrNoSession when gone.
	KillSession(ctx context.Context, name tmux.SessionName) error
	// Stop is the graceful stop ladder (force skips the grace); nil when
	// the session is already gone.
	Stop(ctx context.Context, name tmux.SessionName, grace time.Duration, force bool) error
	// Attach opens an interactive terminal on the session, sized
	// rows×cols.
	Attach(name tmux.SessionName, rows, cols int) (Attachment, error)
}

// batchCapturer is what an executor offers when it can tell cheaply
// which panes may have changed since their last capture, and capture
// several at once: the tmux executor, through one control-mode client
// (docs/architecture.md#capture-by-control-mode).
type batchCapturer interface {
	// start connects before the worker starts any session of its own.
	start(ctx context.Context) error
	// refresh reads the change marks of the live sessions, once per
	// round.
	refresh(ctx context.Context, live []tmux.SessionName)
	// refreshPanes reads the change marks of a few sessions only (the
	// watched ones); false when it cannot.
	refreshPanes(ctx context.Context, names []tmux.SessionName) bool
	// mayHaveChanged is false only for a pane known unchanged since its
	// last capture.
	mayHaveChanged(name tmux.SessionName) bool
	// captureAll captures the panes of names, in order.
	captureAll(ctx context.Context, names []tmux.SessionName) []tmux.Captured
	// close lets its resources go when the worker stops.
	close()
}

// Attachment is one interactive terminal on a session: Read is its
// output, Write its input. Close detaches; it never ends the session.
type Attachment interface {
	io.ReadWriter
	Resize(rows, cols int) error
	Close() error
}

// tmuxExecutor is the tmux executor: package tmux, plus attach clients
// run on a PTY.
type tmuxExecutor struct{ *tmux.Tmux }

// controlExecutor is the tmux executor of a running worker: captures go
// through a tmux.Capturer (one control-mode client, exec while it is
// down); everything else is tmuxExecutor's.
type controlExecutor struct {
	tmuxExecutor
	cap *tmux.Capturer
}

func (e controlExecutor) Capture(ctx context.Context, name tmux.SessionName) (string, error) {
	return e.cap.Capture(ctx, name)
}

func (e controlExecutor) start(ctx context.Context) error { return e.cap.Start(ctx) }

func (e controlExecutor) refresh(ctx context.Context, live []tmux.SessionName) {
	e.cap.Refresh(ctx, live)
}

func (e controlExecutor) refreshPanes(ctx context.Context, names []tmux.SessionName) bool {
	return e.cap.RefreshPanes(ctx, names)
}

func (e controlExecutor) mayHaveChanged(name tmux.SessionName) bool {
	return e.cap.MayHaveChanged(name)
}

func (e controlExecutor) captureAll(ctx context.Context, names []tmux.SessionName) []tmux.Captured {
	return e.cap.CaptureAll(ctx, names)
}

func (e controlExecutor) close() { e.cap.Close() }

// sharedServer: every session lives in one tmux server, and dies with
// it (liveness tells tmux_crash from session_lost by it).
func (tmuxExecutor) sharedServer() bool { return true }

// Attach runs `tmux attach-session` on a PTY sized to the remote
// terminal (tmux sizes the window to its latest client).
func (t tmuxExecutor) Attach(name tmux.SessionName, rows, cols int) (Attachment, error) {
	cmd, err := t.AttachCommand(name)
	if err != nil {
		return nil, err
	}
	p, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: uint16(rows), Cols: uint16(cols)})
	if err != nil {
		return nil, err
	}
	return &tmuxClient{cmd: cmd, pty: p}, nil
}

// tmuxClient is a tmux attach client on a PTY.
type tmuxClient struct {
	cmd *exec.Cmd
	pty *os.File
}

func (c *tmuxClient) Read(p []byte) (int, error)  { return c.pty.Read(p) }
func (c *tmuxClient) Write(p []byte) (int, error) { return c.pty.Write(p) }

func (c *tmuxClient) Resize(rows, cols int) error {
	return pty.Setsize(c.pty, &pty.Winsize{Rows: uint16(rows), Cols: uint16(cols)})
}

// Close hangs the client up, as a terminal going away would: tmux
// detaches it and never ends the session. (Closing the PTY alone leaves
// the client waiting for seconds.) A client that does not exit within
// relayExitWait is killed.
func (c *tmuxClient) Close() error {
	_ = c.cmd.Process.Signal(syscall.SIGHUP)
	_ = c.pty.Close()
	exited := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(relayExitWait):
		_ = c.cmd.Process.Kill()
		<-exited
	}
	return nil
}
