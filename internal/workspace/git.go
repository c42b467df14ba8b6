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

// gitEnv is the environment of every git command: the worker's own
// (its HOME, its credential helpers, its ssh agent), never interactive
// (a prompt would hang a run's start), only the transports a repo URL may
// use, and untranslated so that messages read the same everywhere.
func gitEnv(extra ...string) []string {
	env := make([]string, 0, len(os.Environ())+8)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
			"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_NAMESPACE",
			"GIT_TERMINAL_PROMPT", "GIT_ALLOW_PROTOCOL", "LC_ALL", "LANGUAGE":
			continue // set below, or never inherited: they would point git elsewhere
		}
		env = append(env, kv)
	}
	env = append(env,
		"GIT_TERMINAL_PROMPT=0",
		"GCM_INTERACTIVE=never",
		"GIT_ALLOW_PROTOCOL=file:git:http:https:ssh",
		"LC_ALL=C",
	)
	if os.Getenv("GIT_SSH_COMMAND") == "" && os.Getenv("GIT_SSH") == "" {
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
