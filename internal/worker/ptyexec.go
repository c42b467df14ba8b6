package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/x/vt"

	"pam/internal/holder"
	"pam/internal/tmux"
	"pam/internal/wire"
)

// The pty executor (PAM_EXECUTOR=pty, docs/architecture.md#the-pty-holder):
// each session is a detached holder process (package holder) serving
// <data>/worker/holders/<name>.sock. The worker is a reader of every
// holder and keeps a screen model of its byte stream (a VT emulator), so
// Capture answers what capture-pane -p -e answers for tmux: the visible
// screen with colour. Holders outlive the worker; a new worker finds
// them with holder.List and reads them again (asking for a redraw, so
// its model starts from a whole screen).

// holdersDir is the holders folder under <data>/worker.
const holdersDir = "holders"

// ptyStopPoll is how often Stop and KillSession look whether a holder
// has gone.
const ptyStopPoll = 50 * time.Millisecond

// ptyKillWait bounds how long a killed holder may take to go.
const ptyKillWait = 5 * time.Second

// newExecutor is the executor o.Executor names.
func newExecutor(o Options, dir, instanceID string) (executor, error) {
	if o.Executor == "pty" {
		return newPTYExecutor(o, dir, o.Logger), nil
	}
	t, err := tmux.New(o.Tmux)
	if err != nil {
		return nil, err
	}
	// The control client is a local service: it is restarted on the
	// uplink's backoff bounds.
	return controlExecutor{tmuxExecutor{t}, t.NewCapturer(tmux.CapturerOptions{
		Instance: instanceID, Logger: o.Logger, BackoffMin: o.BackoffMin, BackoffMax: o.BackoffMax,
	})}, nil
}

// ptyExecutor runs sessions as holders.
type ptyExecutor struct {
	dir  string   // <data>/worker/holders
	argv []string // pam exec hold --
	env  []string // the holders' (and their programs') environment
	log  *slog.Logger
	// grace is PAM_STOP_GRACE, for a session ended to free its workspace.
	grace time.Duration
	// finished, when set, reports whether a run's attempt is over (its
	// session only holds its last screen open, PAM_HOLD_OPEN): such a
	// holder gives its workspace up to a new run rather than keep it
	// from starting.
	finished func(ctx context.Context, runID string, attempt int) bool

	mu      sync.Mutex
	screens map[string]*screen // by session name
}

func newPTYExecutor(o Options, dir string, log *slog.Logger) *ptyExecutor {
	return &ptyExecutor{
		dir:     filepath.Join(dir, holdersDir),
		argv:    []string{o.PamBinary, "exec", "hold", "--"},
		env:     holderEnv(os.Getenv),
		log:     log,
		grace:   o.StopGrace,
		screens: map[string]*screen{},
	}
}

// holderEnv is the whole environment of a holder and its program, as
// clean as the tmux server's: PATH, HOME, USER, SHELL and LANG (TERM is
// the holder's to set). No token the worker holds reaches a run; the
// dispatch file carries what the run needs.
func holderEnv(getenv func(string) string) []string {
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	usr := getenv("USER")
	if usr == "" {
		if u, err := user.Current(); err == nil {
			usr = u.Username
		}
	}
	return []string{
		"PATH=" + def(getenv("PATH"), "/usr/local/bin:/usr/bin:/bin"),
		"HOME=" + def(home, "/"),
		"USER=" + usr,
		"SHELL=" + def(getenv("SHELL"), "/bin/sh"),
		"LANG=" + def(getenv("LANG"), "C.UTF-8"),
	}
}

// Harden has nothing to do: a holder has no key bindings or command
// prompt, only its one PTY.
func (e *ptyExecutor) Harden(context.Context) error { return nil }

// NewSession starts the session's holder and becomes its first reader
// (so the model sees the program's output from its first byte).
func (e *ptyExecutor) NewSession(ctx context.Context, s tmux.Spawn) error {
	if _, err := tmux.ParseSessionName(s.Name.String()); err != nil {
		return err
	}
	if !tmux.ValidRunID(s.RunID) || s.Attempt < 1 || !tmux.ValidRunID(s.Instance) {
		return fmt.Errorf("new session %s: run id, attempt and instance must be valid", s.Name)
	}
	if len(s.Command) == 0 || !filepath.IsAbs(s.Command[0]) {
		return fmt.Errorf("new session %s: the command needs an absolute path", s.Name)
	}
	spec := holder.Spec{
		Argv: e.argv,
		Env:  e.env,
		Options: holder.Options{
			Dir: e.dir, Name: s.Name.String(), RunID: s.RunID, Attempt: s.Attempt, Instance: s.Instance,
			Cwd: s.Cwd, Term: holder.DefaultTerm, Command: s.Command, Rows: tmux.Height, Cols: tmux.Width,
		},
	}
	_, err := holder.Start(ctx, spec)
	if errors.Is(err, holder.ErrHeld) && e.freeWorkspace(ctx, s) {
		_, err = holder.Start(ctx, spec)
	}
	if err != nil {
		return fmt.Errorf("new session %s: %w", s.Name, err)
	}
	if _, err := e.screen(s.Name.String(), false); err != nil {
		e.log.Warn("read a new holder", "session", s.Name.String(), "err", err)
	}
	return nil
}

// freeWorkspace ends the session that holds s's workspace when its run
// is over and it only holds its last screen open (hold-open): a finished
// run never keeps the next one in its workspace from starting. It
// reports whether it ended one.
func (e *ptyExecutor) freeWorkspace(ctx context.Context, s tmux.Spawn) bool {
	if e.finished == nil {
		return false
	}
	ws, err := holder.Workspace(s.Cwd)
	if err != nil {
		return false
	}
	notes, err := holder.List(e.dir)
	if err != nil {
		return false
	}
	for _, n := range notes {
		if n.Name == s.Name.String() {
			continue
		}
		if other, err := holder.Workspace(n.Cwd); err != nil || other != ws {
			continue
		}
		name, err := tmux.ParseSessionName(n.Name)
		if err != nil || !e.finished(ctx, n.RunID, n.Attempt) {
			return false
		}
		e.log.Info("workspace held by a finished run in hold-open; its session ends for the new run",
			"workspace", ws, "session", n.Name, "run_id", n.RunID, "attempt", n.Attempt, "new_run_id", s.RunID)
		if err := e.Stop(ctx, name, e.grace, false); err != nil {
			e.log.Warn("end a hold-open session", "session", n.Name, "err", err)
			return false
		}
		return true
	}
	return false
}

// attemptOver is ptyExecutor.finished: the orchestrator says the run's
// attempt is over (a later attempt exists, or the run is terminal).
func (w *agent) attemptOver(ctx context.Context, runID string, attempt int) bool {
	if !tmux.ValidRunID(runID) || attempt < 1 {
		return false
	}
	wr, err := w.lookupRun(ctx, runID)
	if err != nil {
		return false
	}
	return wr.Attempt > attempt || wr.Status == wire.RunExited || wr.Status == wire.RunFailed || wr.Status == wire.RunStopped
}

// ListSessions is the live holders, as sessions. A holder has no dead
// pane: it ends with its program.
func (e *ptyExecutor) ListSessions(context.Context) ([]tmux.Session, error) {
	notes, err := holder.List(e.dir)
	if err != nil {
		return nil, err
	}
	var out []tmux.Session
	for _, n := range notes {
		name, err := tmux.ParseSessionName(n.Name)
		if err != nil {
			continue
		}
		s := tmux.Session{Name: name, Instance: n.Instance, PanePID: n.ChildPID}
		if tmux.ValidRunID(n.RunID) {
			s.RunID = n.RunID
		}
		if n.Attempt > 0 {
			s.Attempt = n.Attempt
		}
		out = append(out, s)
	}
	return out, nil
}

// Capture renders the session's screen model; a holder that is no
// longer alive (its model may still take its last frames) is
// tmux.ErrNoSession, as a vanished tmux session is.
func (e *ptyExecutor) Capture(_ context.Context, name tmux.SessionName) (string, error) {
	if _, ok := holder.Alive(e.dir, name.String()); !ok {
		return "", fmt.Errorf("capture %s: %w", name, tmux.ErrNoSession)
	}
	sc, err := e.screen(name.String(), true)
	if err != nil {
		return "", fmt.Errorf("capture %s: %w", name, err)
	}
	return sc.render(), nil
}

// SendKeys types keys through a write-mode reader: named keys as the
// bytes a terminal sends, text literally, bracketed when the program
// asked for bracketed paste (as tmux's paste-buffer -p does).
func (e *ptyExecutor) SendKeys(_ context.Context, name tmux.SessionName, keys []wire.Key) error {
	if err := wire.ValidateKeys(keys); err != nil {
		return fmt.Errorf("send keys to %s: %w", name, err)
	}
	paste := false
	if sc, err := e.screen(name.String(), true); err == nil {
		paste = sc.bracketedPaste()
	}
	b, err := keyBytes(keys, paste)
	if err != nil {
		return fmt.Errorf("send keys to %s: %w", name, err)
	}
	c, err := e.dial(name, holder.Hello{Write: true})
	if err != nil {
		return fmt.Errorf("send keys to %s: %w", name, err)
	}
	defer c.Close()
	if err := c.Input(b); err != nil {
		return fmt.Errorf("send keys to %s: %w", name, err)
	}
	return nil
}

// keyBytes is what a terminal sends for keys.
func keyBytes(keys []wire.Key, paste bool) ([]byte, error) {
	var b []byte
	for _, k := range keys {
		if k.Key == "" {
			if paste {
				b = append(b, "\x1b[200~"...)
			}
			b = append(b, k.Text...)
			if paste {
				b = append(b, "\x1b[201~"...)
			}
			continue
		}
		seq, ok := map[string]string{"Enter": "\r", "C-c": "\x03", "C-d": "\x04", "BSpace": "\x7f", "DC": "\x1b[3~"}[k.Key]
		if !ok {
			return nil, fmt.Errorf("key %q has no terminal sequence", k.Key)
		}
		b = append(b, seq...)
	}
	return b, nil
}

// KillSession ends the holder and its program at once.
func (e *ptyExecutor) KillSession(_ context.Context, name tmux.SessionName) error {
	c, err := e.dial(name, holder.Hello{})
	if err != nil {
		return fmt.Errorf("kill session %s: %w", name, err)
	}
	defer c.Close()
	if err := c.Control(holder.ControlKill); err != nil {
		return fmt.Errorf("kill session %s: %w", name, err)
	}
	if !e.waitGone(name, ptyKillWait) {
		return fmt.Errorf("kill session %s: the holder is still there after %s", name, ptyKillWait)
	}
	return nil
}

// Stop is the graceful stop ladder: a cooperative stop (SIGTERM to the
// program's groups), up to grace for the holder to end with its
// program, then the forced kill. force skips the cooperative step.
func (e *ptyExecutor) Stop(ctx context.Context, name tmux.SessionName, grace time.Duration, force bool) error {
	if _, ok := holder.Alive(e.dir, name.String()); !ok {
		return nil
	}
	if !force && grace > 0 {
		c, err := e.dial(name, holder.Hello{})
		if errors.Is(err, tmux.ErrNoSession) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("stop %s: %w", name, err)
		}
		err = c.Control(holder.ControlStop)
		c.Close()
		if err != nil {
			return fmt.Errorf("stop %s: %w", name, err)
		}
		if e.waitGone(name, grace) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("stop %s: %w", name, ctx.Err())
		}
	}
	if err := e.KillSession(ctx, name); err != nil && !errors.Is(err, tmux.ErrNoSession) {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// waitGone polls until the holder is no longer alive, for up to d.
func (e *ptyExecutor) waitGone(name tmux.SessionName, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if _, ok := holder.Alive(e.dir, name.String()); !ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(ptyStopPoll)
	}
}

// Attach is a write-mode reader sized to the remote terminal: the
// holder resizes the PTY and the program repaints for it.
func (e *ptyExecutor) Attach(name tmux.SessionName, rows, cols int) (attachment, error) {
	c, err := e.dial(name, holder.Hello{Rows: rows, Cols: cols, Write: true})
	if err != nil {
		return nil, err
	}
	return &holderClient{c: c}, nil
}

// dial connects to a live holder; tmux.ErrNoSession when there is none.
func (e *ptyExecutor) dial(name tmux.SessionName, h holder.Hello) (*holder.Conn, error) {
	if _, err := tmux.ParseSessionName(name.String()); err != nil {
		return nil, err
	}
	if _, ok := holder.Alive(e.dir, name.String()); !ok {
		return nil, tmux.ErrNoSession
	}
	c, err := holder.Dial(e.dir, name.String(), h)
	if err != nil {
		if _, ok := holder.Alive(e.dir, name.String()); !ok {
			return nil, tmux.ErrNoSession
		}
		return nil, err
	}
	return c, nil
}

// screen is the model of the holder called name, reading it when it is
// not read yet (redraw asks the program to repaint, for a reader that
// did not see it start).
func (e *ptyExecutor) screen(name string, redraw bool) (*screen, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if sc := e.screens[name]; sc != nil && !sc.ended() {
		return sc, nil
	}
	n, err := tmux.ParseSessionName(name)
	if err != nil {
		return nil, err
	}
	c, err := e.dial(n, holder.Hello{Redraw: redraw})
	if err != nil {
		return nil, err
	}
	sc := newScreen(c)
	e.screens[name] = sc
	go func() {
		sc.read()
		e.mu.Lock()
		if e.screens[name] == sc {
			delete(e.screens, name)
		}
		e.mu.Unlock()
	}()
	return sc, nil
}

// screen is the worker's model of one holder's terminal.
type screen struct {
	c    *holder.Conn
	mu   sync.Mutex
	term *vt.Emulator
	// paste: the program asked for bracketed paste (CSI ?2004h); tail
	// keeps the end of the last chunk, for a sequence cut in two.
	paste bool
	tail  []byte
	done  chan struct{}
}

func newScreen(c *holder.Conn) *screen {
	rows, cols := c.Info.Rows, c.Info.Cols
	if rows <= 0 || cols <= 0 {
		rows, cols = tmux.Height, tmux.Width
	}
	t := vt.NewEmulator(cols, rows)
	// Captures are the visible screen: a scrollback (10,000 lines by
	// default, and 0 means the default) only costs memory and, on every
	// scrolled line, a copy.
	t.SetScrollbackSize(1)
	// The emulator answers the program's queries on its input side;
	// those answers are the attached terminal's to give, not the
	// model's: drained and dropped, or the emulator would block.
	go func() { _, _ = io.Copy(io.Discard, t) }()
	return &screen{c: c, term: t, done: make(chan struct{})}
}

// read feeds the model until the connection ends.
func (s *screen) read() {
	defer close(s.done)
	defer s.c.Close()
	// Ends the drain of the emulator's answers (Close would race with
	// that drain on the emulator's unguarded closed flag).
	defer func() {
		if pw, ok := s.term.InputPipe().(*io.PipeWriter); ok {
			_ = pw.CloseWithError(io.EOF)
		}
	}()
	for {
		f, err := s.c.Next()
		if err != nil {
			return
		}
		switch f.Type {
		case holder.FrameOutput:
			s.mu.Lock()
			_, _ = s.term.Write(f.Payload)
			s.trackPaste(f.Payload)
			s.mu.Unlock()
		case holder.FrameSize:
			if rows, cols, err := holder.ParseSize(f.Payload); err == nil {
				s.mu.Lock()
				s.term.Resize(cols, rows)
				s.mu.Unlock()
			}
		case holder.FrameExit:
			return
		}
	}
}

// trackPaste follows the bracketed-paste mode (s.mu held).
func (s *screen) trackPaste(p []byte) {
	b := append(s.tail, p...)
	on := strings.LastIndex(string(b), "\x1b[?2004h")
	off := strings.LastIndex(string(b), "\x1b[?2004l")
	if on >= 0 || off >= 0 {
		s.paste = on > off
	}
	const keep = len("\x1b[?2004h") - 1
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	s.tail = append(s.tail[:0], b...)
}

func (s *screen) bracketedPaste() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paste
}

func (s *screen) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// render is the screen as capture-pane -p -e gives it: one line per
// row, colour as SGR escapes, each line ending in a newline.
func (s *screen) render() string {
	s.mu.Lock()
	out := s.term.Render()
	s.mu.Unlock()
	out = strings.ReplaceAll(out, "\r\n", "\n")
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out
}

// holderClient is an interactive attach through a holder: Read gives
// the output bytes (size and info frames are the model's business), an
// exit frame ends it.
type holderClient struct {
	c    *holder.Conn
	rest []byte
}

func (h *holderClient) Read(p []byte) (int, error) {
	for len(h.rest) == 0 {
		f, err := h.c.Next()
		if err != nil {
			return 0, err
		}
		switch f.Type {
		case holder.FrameOutput:
			h.rest = f.Payload
		case holder.FrameExit:
			return 0, io.EOF
		}
	}
	n := copy(p, h.rest)
	h.rest = h.rest[n:]
	return n, nil
}

func (h *holderClient) Write(p []byte) (int, error) {
	if err := h.c.Input(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (h *holderClient) Resize(rows, cols int) error { return h.c.Resize(rows, cols) }

// Close leaves the holder: the program is never signalled for it.
func (h *holderClient) Close() error { return h.c.Close() }
