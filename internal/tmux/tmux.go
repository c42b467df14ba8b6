// Package tmux is the only package in pam that runs tmux (docs/architecture.md#worker-duties,
// docs/architecture.md#tmux). Every invocation is `tmux -L pam -f /dev/null …`, built as
// an argv (never a shell), with a clean environment, and every target is
// a validated SessionName addressed by exact match. There is no
// kill-server here: pam only ever removes sessions it names.
package tmux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"sync"
	"time"
)

// Socket is the name of pam's dedicated tmux socket (tmux -L pam): the
// user's own tmux server is never addressed.
const Socket = "pam"

// Errors callers branch on.
var (
	// ErrNoSession: the named session does not exist (or the server is
	// not running, which means the same thing to a caller).
	ErrNoSession = errors.New("no such session")
	// errNoServer: no tmux server listens on the socket.
	errNoServer = errors.New("no tmux server running")
	// ErrSessionExists: NewSession found a session of that name.
	ErrSessionExists = errors.New("session already exists")
)

// Options configures how tmux is run. The zero value runs "tmux" from
// PATH with the TMUX_TMPDIR this process inherited.
type Options struct {
	// Binary is the tmux executable; default "tmux" looked up on PATH.
	Binary string
	// TmuxTmpDir, when set, is passed to tmux as TMUX_TMPDIR, so that
	// tests (and unusual hosts) get a private socket directory. Empty
	// means the inherited TMUX_TMPDIR, if any.
	TmuxTmpDir string
	// Timeout bounds one tmux invocation; default 10s.
	Timeout time.Duration
}

// Tmux runs tmux on pam's socket. It is safe for concurrent use.
type Tmux struct {
	bin     string
	env     []string
	timeout time.Duration
	// quiet keeps every invocation of this Tmux (shared) from running
	// while a control client connects (exclusive): tmux 3.3 crashes when
	// a control client is notified of anything before it has finished
	// connecting (docs/architecture.md#capture-by-control-mode).
	quiet sync.RWMutex
}

// New resolves the tmux binary and prepares the clean environment every
// invocation runs with.
func New(o Options) (*Tmux, error) {
	bin := o.Binary
	if bin == "" {
		bin = "tmux"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("tmux: %w (install tmux 3.0 or later)", err)
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	tmp := o.TmuxTmpDir
	if tmp == "" {
		tmp = os.Getenv("TMUX_TMPDIR")
	}
	return &Tmux{bin: path, env: cleanEnv(os.Getenv, tmp), timeout: timeout}, nil
}

// cleanEnv is the whole environment of every tmux invocation: PATH, HOME,
// USER, SHELL, LANG and TERM (from getenv, else sane defaults), plus
// TMUX_TMPDIR when set. The first invocation starts the server, whose
// global environment is this one, so no token the worker holds reaches
// the server or any session. TMUX is left out on purpose: a worker started
// from inside tmux must not look nested.
func cleanEnv(getenv func(string) string, tmuxTmpDir string) []string {
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	if home == "" {
		home = "/"
	}
	usr := getenv("USER")
	if usr == "" {
		if u, err := user.Current(); err == nil {
			usr = u.Username
		}
	}
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	env := []string{
		"PATH=" + def(getenv("PATH"), "/usr/local/bin:/usr/bin:/bin"),
		"HOME=" + home,
		"USER=" + usr,
		"SHELL=" + def(getenv("SHELL"), "/bin/sh"),
		"LANG=" + def(getenv("LANG"), "C.UTF-8"),
		"TERM=" + def(getenv("TERM"), "xterm-256color"),
	}
	if tmuxTmpDir != "" {
		env = append(env, "TMUX_TMPDIR="+tmuxTmpDir)
	}
	return env
}

// Error is a failed tmux invocation.
type Error struct {
	Args   []string // argv after the binary
	Stderr string
	Err    error
}

func (e *Error) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("tmux %s: %s", strings.Join(e.Args, " "), msg)
}

func (e *Error) Unwrap() error { return e.Err }

// escapeArg protects an argument from tmux's command splitting: tmux
// treats any argument ending in ";" as the end of a command (so "x;"
// followed by "kill-server" would be a second command). A trailing ";"
// is written as "\;", which tmux turns back into ";" — exactly, for any
// argument, including one that already ends in "\;".
func escapeArg(a string) string {
	if strings.HasSuffix(a, ";") {
		return a[:len(a)-1] + `\;`
	}
	return a
}

// commandLine is the argv (after the binary) of one tmux invocation
// running cmds in order on pam's socket: each argument escaped, the
// separators ours.
func commandLine(cmds ...[]string) []string {
	args := []string{"-L", Socket, "-f", os.DevNull}
	for i, c := range cmds {
		if i > 0 {
			args = append(args, ";")
		}
		for _, a := range c {
			args = append(args, escapeArg(a))
		}
	}
	return args
}

// run executes one tmux invocation holding the given commands, in order,
// in the server's command queue (so a sequence is atomic with respect to
// panes exiting). Arguments are escaped; the separators are ours.
func (t *Tmux) run(ctx context.Context, cmds ...[]string) (string, error) {
	args := commandLine(cmds...)
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.bin, args...)
	cmd.Env = t.env
	// The first client's directory becomes the server's; "/" keeps the
	// server from pinning wherever the worker happened to start.
	cmd.Dir = "/"
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	t.quiet.RLock()
	err := cmd.Run()
	t.quiet.RUnlock()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return stdout.String(), classify(&Error{Args: args, Stderr: stderr.String(), Err: err})
	}
	return stdout.String(), nil
}

// classify maps tmux's messages to the errors callers branch on.
func classify(e *Error) error {
	s := e.Stderr
	switch {
	case strings.Contains(s, "no server running"),
		// The server went away while answering: its last session ended
		// (or it crashed) under our feet.
		strings.Contains(s, "server exited unexpectedly"),
		strings.Contains(s, "lost server"),
		strings.Contains(s, "error connecting to") && strings.Contains(s, "No such file or directory"):
		return fmt.Errorf("%w: %w", errNoServer, e)
	case strings.Contains(s, "can't find session"),
		strings.Contains(s, "can't find window"),
		strings.Contains(s, "can't find pane"),
		strings.Contains(s, "no such session"),
		// The last session is going and the server with it.
		strings.Contains(s, "no current target"):
		return fmt.Errorf("%w: %w", ErrNoSession, e)
	case strings.Contains(s, "duplicate session"):
		return fmt.Errorf("%w: %w", ErrSessionExists, e)
	}
	return e
}

// gone reports whether err means the session (or the whole server) is
// not there.
func gone(err error) bool {
	return errors.Is(err, ErrNoSession) || errors.Is(err, errNoServer)
}
