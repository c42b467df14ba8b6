package tmux

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"pam/internal/wire"
)

// Pane geometry of a new session (220 columns × 50 rows, docs/architecture.md#tmux).
const (
	Width  = 220
	Height = 50
)

// User options recorded on every session pam creates, so that
// reconciliation can map a session back to its run and compare epochs.
const (
	OptRunID   = "@pam_run_id"
	OptAttempt = "@pam_attempt"
	// OptInstance is the instance id of the worker that created the
	// session: a worker never adopts or kills a session of another
	// instance sharing the socket (docs/architecture.md#tmux-safety).
	OptInstance = "@pam_instance"
)

// Spawn describes a session to create.
type Spawn struct {
	Name SessionName
	// Cwd is the pane's working directory: an absolute path to an
	// existing directory (tmux would silently fall back to $HOME).
	Cwd string
	// Title is the window title, the task slug; anything not matching
	// ^[a-z0-9-]{1,40}$ becomes DefaultTitle.
	Title string
	// RunID (a lowercase UUID) and Attempt (≥ 1) become @pam_run_id and
	// @pam_attempt.
	RunID   string
	Attempt int
	// Instance (a lowercase UUID, the worker's instance id) becomes
	// @pam_instance.
	Instance string
	// Command is the pane's foreground program and its arguments — for
	// pam, [pam, "exec", "run", …, run_id]. It needs at least two
	// elements: tmux runs a multi-argument command with execvp, but hands
	// a single argument to "sh -c", and pam never runs a shell.
	Command []string
}

// NewSession creates a detached session running s.Command, and records
// the run id, attempt and instance on it, in one tmux invocation so that
// a command that exits at once cannot leave a session without its
// options. The same invocation first takes the prefix and the mouse away
// and removes the default key tables (hardenCommands), so a server it
// starts has no key binding before the session exists.
//
// remain-on-exit stays off: the wrapper (`pam exec run`) holds the
// session open itself after the CLI exits, so a pane whose process has
// gone means the wrapper died or finished holding, and the session
// disappears with it. Liveness is therefore "does the session exist".
//
// A session of that name already there is ErrSessionExists, and then
// nothing of the invocation after the hardening has run: tmux ends a
// sequence at its first failing command, so the options are never set on
// the session that was there.
func (t *Tmux) NewSession(ctx context.Context, s Spawn) error {
	if err := s.Name.check(); err != nil {
		return err
	}
	if !ValidRunID(s.RunID) {
		return fmt.Errorf("new session %s: run id %q is not a lowercase UUID", s.Name, s.RunID)
	}
	if s.Attempt < 1 {
		return fmt.Errorf("new session %s: attempt %d must be at least 1", s.Name, s.Attempt)
	}
	if !ValidRunID(s.Instance) {
		return fmt.Errorf("new session %s: instance id %q is not a lowercase UUID", s.Name, s.Instance)
	}
	if len(s.Command) < 2 {
		return fmt.Errorf("new session %s: the command needs at least two arguments (tmux would run one through a shell)", s.Name)
	}
	if !filepath.IsAbs(s.Command[0]) {
		return fmt.Errorf("new session %s: command %q is not an absolute path", s.Name, s.Command[0])
	}
	if !filepath.IsAbs(s.Cwd) {
		return fmt.Errorf("new session %s: working directory %q is not absolute", s.Name, s.Cwd)
	}
	if st, err := os.Stat(s.Cwd); err != nil {
		return fmt.Errorf("new session %s: working directory: %w", s.Name, err)
	} else if !st.IsDir() {
		return fmt.Errorf("new session %s: working directory %s is not a directory", s.Name, s.Cwd)
	}
	title := s.Title
	if !ValidTitle(title) {
		title = DefaultTitle
	}
	create := []string{"new-session", "-d",
		"-s", s.Name.String(),
		"-n", title,
		// -c is expanded as a tmux format, where #(…) would run a shell
		// command: "##" is a literal "#".
		"-c", strings.ReplaceAll(s.Cwd, "#", "##"),
		"-x", strconv.Itoa(Width), "-y", strconv.Itoa(Height),
		"--"}
	create = append(create, s.Command...)
	cmds := append(hardenCommands(),
		create,
		[]string{"set-option", "-t", s.Name.target(), OptRunID, s.RunID},
		[]string{"set-option", "-t", s.Name.target(), OptAttempt, strconv.Itoa(s.Attempt)},
		[]string{"set-option", "-t", s.Name.target(), OptInstance, s.Instance},
	)
	if _, err := t.run(ctx, cmds...); err != nil {
		return fmt.Errorf("new session %s: %w", s.Name, err)
	}
	return nil
}

// Session is one pam session on the socket.
type Session struct {
	Name SessionName
	// RunID and Attempt are the @pam_run_id and @pam_attempt options;
	// empty / 0 when missing or malformed (a session pam did not create,
	// or one whose options were tampered with).
	RunID   string
	Attempt int
	// Instance is @pam_instance as recorded: the instance id of the
	// worker that created the session, empty when missing (a session of
	// a pam that did not record it). It is only ever compared: a
	// malformed value is kept, so that it matches no worker.
	Instance string
	// PanePID is the pid of the active pane's process; PaneDead is set
	// when that process has exited but the pane remains.
	PanePID  int
	PaneDead bool
}

const listFormat = "#{session_name}\t#{" + OptRunID + "}\t#{" + OptAttempt + "}\t#{pane_pid}\t#{pane_dead}\t#{" + OptInstance + "}"

// ListSessions returns the sessions whose names match ^pam-[0-9a-f]{8}$,
// in one list-sessions call. Any other session on the socket is skipped
// and never touched. No server running means no sessions, not an error.
//
// A crashed server cannot be told apart from one that exited normally
// after its last session ended: tmux 3.3 leaves the socket file behind in
// both cases. Callers that knew of live sessions which all vanish at once
// with the server may infer a crash themselves.
func (t *Tmux) ListSessions(ctx context.Context) ([]Session, error) {
	out, err := t.run(ctx, []string{"list-sessions", "-F", listFormat})
	if errors.Is(err, errNoServer) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	var list []Session
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 6 {
			continue
		}
		name, err := ParseSessionName(f[0])
		if err != nil {
			continue // not ours: never listed, never touched
		}
		s := Session{Name: name, PaneDead: f[4] == "1"}
		if ValidRunID(f[1]) {
			s.RunID = f[1]
		}
		if n, err := strconv.Atoi(f[2]); err == nil && n > 0 {
			s.Attempt = n
		}
		s.PanePID, _ = strconv.Atoi(f[3])
		s.Instance = f[5]
		list = append(list, s)
	}
	return list, nil
}

// Pane is the state of a session's active pane.
type Pane struct {
	PID        int
	Dead       bool
	DeadStatus int    // exit status when Dead
	TTY        string // e.g. /dev/pts/3
}

// Pane reports the active pane of the session, or ErrNoSession.
func (t *Tmux) Pane(ctx context.Context, name SessionName) (Pane, error) {
	if err := name.check(); err != nil {
		return Pane{}, err
	}
	// display-message tolerates a missing target (it then formats with
	// no session at all), so the name is part of the answer and checked.
	out, err := t.run(ctx, []string{"display-message", "-p", "-t", name.target(),
		"#{session_name}\t#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_tty}"})
	if gone(err) {
		return Pane{}, fmt.Errorf("pane of %s: %w", name, ErrNoSession)
	}
	if err != nil {
		return Pane{}, fmt.Errorf("pane of %s: %w", name, err)
	}
	f := strings.Split(strings.TrimRight(out, "\n"), "\t")
	if len(f) != 5 || f[0] != name.String() {
		return Pane{}, fmt.Errorf("pane of %s: %w", name, ErrNoSession)
	}
	var p Pane
	p.PID, _ = strconv.Atoi(f[1])
	p.Dead = f[2] == "1"
	p.DeadStatus, _ = strconv.Atoi(f[3])
	p.TTY = f[4]
	return p, nil
}

// Alive reports whether the session exists and its pane's process runs.
func (t *Tmux) Alive(ctx context.Context, name SessionName) (bool, error) {
	p, err := t.Pane(ctx, name)
	if errors.Is(err, ErrNoSession) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !p.Dead, nil
}

// Capture returns the visible pane text with its ANSI escape sequences
// (capture-pane -p -e).
func (t *Tmux) Capture(ctx context.Context, name SessionName) (string, error) {
	if err := name.check(); err != nil {
		return "", err
	}
	out, err := t.run(ctx, []string{"capture-pane", "-p", "-e", "-t", name.target()})
	if gone(err) {
		return "", fmt.Errorf("capture %s: %w", name, ErrNoSession)
	}
	if err != nil {
		return "", fmt.Errorf("capture %s: %w", name, err)
	}
	return out, nil
}

// SendKeys delivers keys into the session after checking them against
// the allowlist again (wire.ValidateKeys), in one tmux invocation
// (docs/api.md#keys):
//
//   - a named key goes as its tmux key name (send-keys -t NAME KEY);
//   - a text is typed literally, key by key (send-keys -l -t NAME --
//     TEXT): -l sends the characters and never looks them up as key
//     names, "--" keeps a text starting with "-" from being an option.
//     A TUI's menu sees keystrokes, as from a keyboard;
//   - a paste is put in a buffer of its own (set-buffer -- TEXT) and
//     pasted with paste-buffer -p, which wraps it in ESC[200~ … ESC[201~
//     exactly when the pane's program has asked for bracketed-paste mode:
//     an agent's prompt takes several lines as one message.
func (t *Tmux) SendKeys(ctx context.Context, name SessionName, keys []wire.Key) error {
	cmds, buffers, err := sendKeysCommands(name, keys)
	if err != nil {
		return err
	}
	_, err = t.run(ctx, cmds...)
	if err != nil {
		// A failed sequence stops at the failing command: remove the
		// buffers it left behind (best effort; they hold no secret).
		for _, b := range buffers {
			_, _ = t.run(ctx, []string{"delete-buffer", "-b", b})
		}
	}
	if gone(err) {
		return fmt.Errorf("send keys to %s: %w", name, ErrNoSession)
	}
	if err != nil {
		return fmt.Errorf("send keys to %s: %w", name, err)
	}
	return nil
}

// sendKeysCommands turns keys into the tmux commands SendKeys runs, and
// the paste buffers they create, after checking the name and the keys.
// It is where a key request becomes tmux arguments, kept apart from
// running them so that it can be fuzzed.
func sendKeysCommands(name SessionName, keys []wire.Key) (cmds [][]string, buffers []string, err error) {
	if err := name.check(); err != nil {
		return nil, nil, err
	}
	if err := wire.ValidateKeys(keys); err != nil {
		return nil, nil, fmt.Errorf("send keys to %s: %w", name, err)
	}
	cmds = make([][]string, 0, 2*len(keys))
	for _, k := range keys {
		switch {
		case k.Key != "":
			cmds = append(cmds, []string{"send-keys", "-t", name.target(), k.Key})
		case k.Text != "":
			cmds = append(cmds, []string{"send-keys", "-l", "-t", name.target(), "--", k.Text})
		default:
			buf := pasteBuffer(name)
			buffers = append(buffers, buf)
			cmds = append(cmds,
				[]string{"set-buffer", "-b", buf, "--", k.Paste},
				[]string{"paste-buffer", "-p", "-d", "-b", buf, "-t", name.target()})
		}
	}
	return cmds, buffers, nil
}

// pasteBuffer is a fresh buffer name for one paste entry: concurrent
// requests never paste each other's text.
func pasteBuffer(name SessionName) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "pam-keys-" + name.String()[4:] + "-" + hex.EncodeToString(b[:])
}

// KillSession removes the session (kill-session). A session already gone
// is ErrNoSession.
func (t *Tmux) KillSession(ctx context.Context, name SessionName) error {
	if err := name.check(); err != nil {
		return err
	}
	_, err := t.run(ctx, []string{"kill-session", "-t", name.target()})
	if gone(err) {
		return fmt.Errorf("kill session %s: %w", name, ErrNoSession)
	}
	if err != nil {
		return fmt.Errorf("kill session %s: %w", name, err)
	}
	return nil
}
