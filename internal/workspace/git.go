package workspace

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
	"unicode/utf8"

	"pam/internal/wire"
)

// maxStderr bounds the stderr kept from one git command: enough for
// git's own message, never a flood in a frame or the journal.
const maxStderr = 4 << 10

// GitError is a git command that failed: which command (argv after
// "git", never through a shell), how, and the end of its stderr. Its
// message is what a run's failure detail and a push's outcome show.
type GitError struct {
	Args   []string
	Err    error
	Stderr string
}

func (e *GitError) Error() string {
	msg := "git " + strings.Join(e.Args, " ") + ": " + e.Err.Error()
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

func (e *GitError) Unwrap() error { return e.Err }

// tailBuffer keeps the last n bytes written to it.
type tailBuffer struct {
	n int
	b []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.n {
		t.b = t.b[len(t.b)-t.n:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	return strings.ToValidUTF8(string(t.b), "")
}

// gitPassEnv names the worker's variables git gets: where to find
// programs and its own config (PATH, HOME, XDG_CONFIG_HOME, GIT_CONFIG_*),
// who it runs as, the host's credentials for pushes and fetches (its ssh
// agent, its CA bundles, its proxies, a desktop keyring's bus) and the
// time zone. Nothing else reaches git: the worker's environment may hold
// secrets (PAM_WORKER_TOKEN, an operator's PAM_TOKEN, API keys) that a
// repository's config (an alias, a credential helper, core.sshCommand,
// a filter) could hand to a program of the repository's choosing.
var gitPassEnv = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "TMPDIR": true, "TZ": true,
	"XDG_CONFIG_HOME": true, "XDG_RUNTIME_DIR": true, "DBUS_SESSION_BUS_ADDRESS": true,
	"GIT_CONFIG_GLOBAL": true, "GIT_CONFIG_SYSTEM": true, "GIT_CONFIG_NOSYSTEM": true,
	"GIT_SSH": true, "GIT_SSH_COMMAND": true, "GIT_SSH_VARIANT": true, "SSH_AUTH_SOCK": true,
	"GIT_SSL_CAINFO": true, "GIT_SSL_CAPATH": true, "SSL_CERT_FILE": true, "SSL_CERT_DIR": true,
	"GIT_AUTHOR_NAME": true, "GIT_AUTHOR_EMAIL": true, "GIT_COMMITTER_NAME": true, "GIT_COMMITTER_EMAIL": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true,
	"http_proxy": true, "https_proxy": true, "no_proxy": true, "all_proxy": true,
}

// gitEnv is the environment of every git command: the few variables of
// the worker's own that git needs (gitPassEnv: its HOME, its credential
// helpers, its ssh agent), never interactive (a prompt would hang a run's
// start), only the transports a repo URL may use, and untranslated so
// that messages read the same everywhere.
func gitEnv(extra ...string) []string {
	return gitEnvFrom(os.Environ(), extra...)
}

// gitEnvFrom is gitEnv of the worker environment environ.
func gitEnvFrom(environ []string, extra ...string) []string {
	env := make([]string, 0, len(gitPassEnv)+8)
	ssh := false
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if !gitPassEnv[k] {
			continue
		}
		if (k == "GIT_SSH" || k == "GIT_SSH_COMMAND") && v != "" {
			ssh = true
		}
		env = append(env, kv)
	}
	env = append(env,
		"GIT_TERMINAL_PROMPT=0",
		"GCM_INTERACTIVE=never",
		"GIT_ALLOW_PROTOCOL=file:git:http:https:ssh",
		"LC_ALL=C",
	)
	if !ssh {
		env = append(env, "GIT_SSH_COMMAND=ssh -o BatchMode=yes")
	}
	return append(env, extra...)
}

// cmd is one git command to run.
type cmd struct {
	dir     string
	args    []string
	env     []string // added to gitEnv
	stdout  io.Writer
	timeout time.Duration
}

// run runs git with argv only (no shell), in dir, within the timeout,
// hooks disabled (a hook planted by an agent in its worktree never runs
// as the worker). stdout goes to c.stdout or is returned.
func (m *Manager) run(ctx context.Context, c cmd) ([]byte, error) {
	timeout := c.timeout
	if timeout <= 0 {
		timeout = m.o.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := append([]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"}, c.args...)
	x := exec.CommandContext(ctx, m.o.Git, argv...)
	x.Dir = c.dir
	x.Env = gitEnv(c.env...)
	x.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	if c.stdout != nil {
		x.Stdout = c.stdout
	} else {
		x.Stdout = &out
	}
	stderr := &tailBuffer{n: maxStderr}
	x.Stderr = stderr
	err := x.Run()
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("timed out after %s", timeout)
		}
		return out.Bytes(), &GitError{Args: c.args, Err: err, Stderr: stderr.String()}
	}
	return out.Bytes(), nil
}

// git runs a command in dir and returns its trimmed stdout.
func (m *Manager) git(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := m.run(ctx, cmd{dir: dir, args: args})
	return strings.TrimSpace(string(out)), err
}

// Detail is err as one bounded line of text for a run's failure detail,
// a frame or the journal.
func Detail(err error) string {
	if err == nil {
		return ""
	}
	s := strings.Join(strings.Fields(err.Error()), " ")
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "")
	}
	return wire.BoundText(s)
}
