package worker

import (
	"bytes"
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

	// keepDead is how long a dead holder's events, log and locks stay
	// for a look after the fact (PAM_WORKTREE_RETENTION, which keeps a
	// finished run's worktree as long).
	keepDead time.Duration

	// modelBudget, when set, replaces the screens' parse budget
	// (a benchmark's baseline: every byte).
	modelBudget int

	mu        sync.Mutex
	screens   map[string]*screen // by session name
	lastPrune time.Time          // when dead holders' files were last pruned
}

func newPTYExecutor(o Options, dir string, log *slog.Logger) *ptyExecutor {
	return &ptyExecutor{
		dir:      filepath.Join(dir, holdersDir),
		argv:     []string{o.PamBinary, "exec", "hold", "--"},
		env:      holderEnv(os.Getenv),
		log:      log,
		grace:    o.StopGrace,
		keepDead: o.WorktreeRetention,
		screens:  map[string]*screen{},
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
	if errors.Is(err, holder.ErrHeld) && e.nameHeld(s.Name) {
		// The name's own holder: an earlier incarnation, which the
		// worker stops before it creates again, as with tmux.
		return fmt.Errorf("new session %s: %w (%w)", s.Name, tmux.ErrSessionExists, err)
	}
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

// nameHeld reports whether a live holder has the session's name.
func (e *ptyExecutor) nameHeld(name tmux.SessionName) bool {
	_, live := holder.Alive(e.dir, name.String())
	return live
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
	e.prune(time.Now())
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

// prune removes, at most once an hour, the files of holders dead for
// longer than keepDead.
func (e *ptyExecutor) prune(now time.Time) {
	e.mu.Lock()
	due := e.keepDead > 0 && now.Sub(e.lastPrune) >= time.Hour
	if due {
		e.lastPrune = now
	}
	e.mu.Unlock()
	if due {
		if n := holder.Prune(e.dir, e.keepDead, now); n > 0 {
			e.log.Info("removed the files of long-dead holders", "count", n)
		}
	}
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

// SendKeys delivers keys through a write-mode reader as the bytes the
// tmux executor's send-keys and paste-buffer put in (docs/api.md#keys):
// named keys as tmux sends them (arrows in the cursor-key mode the
// program asked for), text as typed, a paste with its newlines as
// carriage returns, bracketed when the program asked for bracketed paste.
func (e *ptyExecutor) SendKeys(_ context.Context, name tmux.SessionName, keys []wire.Key) error {
	if err := wire.ValidateKeys(keys); err != nil {
		return fmt.Errorf("send keys to %s: %w", name, err)
	}
	var m termModes
	if sc, err := e.screen(name.String(), true); err == nil {
		m = sc.modes()
	}
	b, err := keyBytes(keys, m)
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

// termModes are the input modes a program set on its terminal that
// change what a key sends.
type termModes struct {
	paste     bool // bracketed paste (CSI ?2004h)
	appCursor bool // application cursor keys (CSI ?1h, DECCKM)
}

// keySeqs are the bytes tmux 3.3 sends for each named key of
// wire.KeyNames (its input-keys table; TestExecutorsSendTheSameBytes
// holds the two executors to it). appCursorSeqs replace the arrows while
// the program asked for application cursor keys.
var (
	keySeqs = map[string]string{
		"Enter": "\r", "Escape": "\x1b", "Tab": "\t", "BTab": "\x1b[Z", "Space": " ", "BSpace": "\x7f", "DC": "\x1b[3~",
		"Up": "\x1b[A", "Down": "\x1b[B", "Right": "\x1b[C", "Left": "\x1b[D",
		"Home": "\x1b[1~", "End": "\x1b[4~", "PageUp": "\x1b[5~", "PageDown": "\x1b[6~",
		"C-c": "\x03", "C-d": "\x04",
		"0": "0", "1": "1", "2": "2", "3": "3", "4": "4", "5": "5", "6": "6", "7": "7", "8": "8", "9": "9", "y": "y", "n": "n",
	}
	appCursorSeqs = map[string]string{"Up": "\x1bOA", "Down": "\x1bOB", "Right": "\x1bOC", "Left": "\x1bOD"}
)

// keyBytes is what a terminal sends for keys under modes m.
func keyBytes(keys []wire.Key, m termModes) ([]byte, error) {
	var b []byte
	for _, k := range keys {
		switch {
		case k.Key != "":
			seq, ok := keySeqs[k.Key]
			if app, ok := appCursorSeqs[k.Key]; ok && m.appCursor {
				seq = app
			}
			if !ok {
				return nil, fmt.Errorf("key %q has no terminal sequence", k.Key)
			}
			b = append(b, seq...)
		case k.Text != "":
			b = append(b, k.Text...)
		default:
			// As tmux's paste-buffer without -r: a newline is pasted
			// as the carriage return a terminal's Enter sends.
			if m.paste {
				b = append(b, "\x1b[200~"...)
			}
			b = append(b, strings.ReplaceAll(k.Paste, "\n", "\r")...)
			if m.paste {
				b = append(b, "\x1b[201~"...)
			}
		}
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
	// Skip: past the holder's pending limit the model loses output, not
	// its connection, and resynchronizes.
	c, err := e.dial(n, holder.Hello{Redraw: redraw, Skip: true})
	if err != nil {
		return nil, err
	}
	sc := newScreen(c)
	if e.modelBudget > 0 {
		sc.budget = e.modelBudget
	}
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
//
// The model is a VT emulator (github.com/charmbracelet/x/vt), which
// takes scrolling output at only a few MB/s: fed every byte of a flood
// it would hold a core per flooding session. So the connection is read
// at once into a queue, and the model takes at most modelBudget bytes
// per modelWindow; when more waited, it takes only the newest
// modelBudget (from a line start), on a fresh emulator, and asks the
// program to repaint (a full-screen program's screen is not in that
// tail). A capture lags a flood by at most a window or so; what is
// skipped is output that scrolled past the visible screen anyway. The
// holder too drops output rather than release the model's connection
// when it falls behind (Hello.Skip), with the same resynchronization.
type screen struct {
	c *holder.Conn

	mu   sync.Mutex // the model: term, rows, cols
	term *vt.Emulator

	qmu sync.Mutex // the queue and the paste tracking
	q   []modelInput
	qn  int // bytes in q
	// paste: the program asked for bracketed paste (CSI ?2004h); tail
	// keeps the end of the last chunk, for a sequence cut in two. Kept
	// from every byte read, skipped or not.
	paste bool
	// appCursor: the program asked for application cursor keys (CSI
	// ?1h), tracked as paste is.
	appCursor bool
	tail      []byte
	wake      chan struct{}
	eof       bool // the connection ended; the queue is the last input
	resync    bool // the holder skipped output: a fresh model, a redraw
	done      chan struct{}
	resets    int // fresh emulators after skipping (for tests)
	budget    int // modelBudget (a benchmark's baseline lifts it)
}

// modelInput is output bytes or, with data nil, a size change.
type modelInput struct {
	data       []byte
	rows, cols int
}

const (
	// modelBudget is what the model parses at most per modelWindow:
	// 32 KiB per 100 ms is ≈ 10 % of a core for scrolling output on
	// this emulator, far above what an agent's interface writes.
	modelBudget = 32 << 10
	modelWindow = 100 * time.Millisecond
)

func newScreen(c *holder.Conn) *screen {
	rows, cols := c.Info.Rows, c.Info.Cols
	if rows <= 0 || cols <= 0 {
		rows, cols = tmux.Height, tmux.Width
	}
	return &screen{c: c, term: newModel(rows, cols), wake: make(chan struct{}, 1), done: make(chan struct{}), budget: modelBudget}
}

// newModel is an emulator of rows×cols whose answers are dropped.
func newModel(rows, cols int) *vt.Emulator {
	t := vt.NewEmulator(cols, rows)
	// Captures are the visible screen: a scrollback (10,000 lines by
	// default, and 0 means the default) only costs memory and, on every
	// scrolled line, a copy.
	t.SetScrollbackSize(1)
	// The emulator answers the program's queries on its input side;
	// those answers are the attached terminal's to give, not the
	// model's: drained and dropped, or the emulator would block.
	go func() { _, _ = io.Copy(io.Discard, t) }()
	return t
}

// closeModel ends the drain of an emulator's answers (Close would race
// with that drain on the emulator's unguarded closed flag).
func closeModel(t *vt.Emulator) {
	if pw, ok := t.InputPipe().(*io.PipeWriter); ok {
		_ = pw.CloseWithError(io.EOF)
	}
}

// read reads the holder until the connection ends, queueing for the
// model, which parse feeds.
func (s *screen) read() {
	parsed := make(chan struct{})
	go func() { defer close(parsed); s.parse() }()
	defer func() {
		<-parsed
		s.c.Close()
		s.mu.Lock()
		closeModel(s.term)
		s.mu.Unlock()
		close(s.done)
	}()
	defer func() {
		s.qmu.Lock()
		s.eof = true
		s.qmu.Unlock()
		poke(s.wake)
	}()
	for {
		f, err := s.c.Next()
		if err != nil {
			return
		}
		switch f.Type {
		case holder.FrameOutput:
			s.qmu.Lock()
			s.trackPaste(f.Payload)
			s.q = append(s.q, modelInput{data: f.Payload})
			s.qn += len(f.Payload)
			s.qmu.Unlock()
			poke(s.wake)
		case holder.FrameSize:
			if rows, cols, err := holder.ParseSize(f.Payload); err == nil {
				s.qmu.Lock()
				s.q = append(s.q, modelInput{rows: rows, cols: cols})
				s.qmu.Unlock()
				poke(s.wake)
			}
		case holder.FrameSkipped:
			// What is queued precedes the gap: the model starts again
			// after it (a size frame follows).
			s.qmu.Lock()
			s.q, s.qn, s.resync = nil, 0, true
			s.qmu.Unlock()
			poke(s.wake)
		case holder.FrameExit:
			return
		}
	}
}

// parse feeds the model from the queue within its budget, until the
// connection ended and the queue is empty.
func (s *screen) parse() {
	// A repaint is asked for at most once a second (each is a size
	// change the program sees); one owed is asked for when the flood
	// ends.
	var lastRedraw time.Time
	owed := false
	for {
		<-s.wake
		for {
			in, skipped, last := s.take()
			if len(in) == 0 && !skipped {
				if last {
					return
				}
				if owed { // the flood is over
					_ = s.c.Control(holder.ControlRedraw)
					lastRedraw, owed = time.Now(), false
				}
				break
			}
			n := s.apply(in, skipped)
			owed = owed || skipped
			if owed && time.Since(lastRedraw) >= time.Second {
				_ = s.c.Control(holder.ControlRedraw)
				lastRedraw, owed = time.Now(), false
			}
			if n >= s.budget {
				// Flooded: the next window's worth waits for it.
				time.Sleep(modelWindow)
			}
		}
	}
}

// take empties the queue: all of it when it holds at most s.budget
// bytes, else the last size change and the newest s.budget bytes from a
// line start (skipped). last: the connection ended.
func (s *screen) take() (in []modelInput, skipped, last bool) {
	s.qmu.Lock()
	in, s.q = s.q, nil
	n := s.qn
	s.qn = 0
	last = s.eof
	resync := s.resync
	s.resync = false
	s.qmu.Unlock()
	if n <= s.budget {
		return in, resync, last
	}
	// The newest chunks that make up the budget, newest first.
	var keep [][]byte
	size, rows, cols := 0, 0, 0
	for i := len(in) - 1; i >= 0; i-- {
		m := in[i]
		if m.data == nil {
			if rows == 0 {
				rows, cols = m.rows, m.cols
			}
			continue
		}
		if size < s.budget {
			d := m.data[max(0, len(m.data)-(s.budget-size)):]
			keep = append(keep, d)
			size += len(d)
		}
	}
	data := make([]byte, 0, size)
	for i := len(keep) - 1; i >= 0; i-- {
		data = append(data, keep[i]...)
	}
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data = data[i+1:]
	}
	out := make([]modelInput, 0, 2)
	if rows > 0 {
		out = append(out, modelInput{rows: rows, cols: cols})
	}
	return append(out, modelInput{data: data}), true, last
}

// apply writes in to the model (on a fresh one when skipped) and
// returns how many output bytes it parsed.
func (s *screen) apply(in []modelInput, skipped bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if skipped {
		rows, cols := s.term.Height(), s.term.Width()
		closeModel(s.term)
		s.term = newModel(rows, cols)
		s.resets++
	}
	n := 0
	for _, m := range in {
		if m.data == nil {
			s.term.Resize(m.cols, m.rows)
			continue
		}
		_, _ = s.term.Write(m.data)
		n += len(m.data)
	}
	return n
}

// trackPaste follows the input modes keys depend on (s.qmu held):
// bracketed paste and application cursor keys.
func (s *screen) trackPaste(p []byte) {
	const keep = len("\x1b[?2004h") - 1
	s.paste = trackMode(s.paste, s.tail, p, "\x1b[?2004h", "\x1b[?2004l")
	s.appCursor = trackMode(s.appCursor, s.tail, p, "\x1b[?1h", "\x1b[?1l")
	if len(p) >= keep {
		s.tail = append(s.tail[:0], p[len(p)-keep:]...)
	} else {
		s.tail = append(s.tail, p...)
		s.tail = s.tail[max(0, len(s.tail)-keep):]
	}
}

// trackMode is a mode after the output p, switched by the sequences on
// and off, without copying p: the last switch in p decides, else one cut
// in two between the previous chunk's tail and p's head.
func trackMode(cur bool, tail, p []byte, on, off string) bool {
	i, j := bytes.LastIndex(p, []byte(on)), bytes.LastIndex(p, []byte(off))
	if i < 0 && j < 0 {
		keep := len(on) - 1
		seam := append(append(make([]byte, 0, len(tail)+keep), tail...), p[:min(len(p), keep)]...)
		i, j = bytes.LastIndex(seam, []byte(on)), bytes.LastIndex(seam, []byte(off))
	}
	if i >= 0 || j >= 0 {
		return i > j
	}
	return cur
}

func (s *screen) modes() termModes {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return termModes{paste: s.paste, appCursor: s.appCursor}
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
