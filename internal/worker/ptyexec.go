package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"sync"
	"time"

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

// newExecutor is o.Sessions when set, else the executor o.Executor
// names.
func newExecutor(o Options, dir, instanceID string) (Executor, error) {
	if o.Sessions != nil {
		return o.Sessions, nil
	}
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
