package pamtest

import (
	"path/filepath"
	"syscall"
	"testing"

	"pam/internal/holder"
)

// WorkerOptions says how to run `pam worker`.
type WorkerOptions struct {
	// URL is serve's (or a proxy's) address, PAM_URL.
	URL string
	// Token is the host's worker token, PAM_WORKER_TOKEN.
	Token string
	// Name is the host's name, PAM_HOST_NAME.
	Name string
	// DataDir is PAM_DATA_DIR and PAM_CONFIG_DIR (built-in providers
	// only); a fresh ShortDir when empty. A worker restarted on its data
	// dir adopts its sessions.
	DataDir string
	// Tmux is where its sessions live; a fresh NewTmux when nil.
	Tmux *Tmux
	// Env is added last, overriding the defaults (PAM_LOG_LEVEL=debug).
	Env []string
}

// StartWorker runs `pam worker` (with PAM_EXECUTOR=tmux, the default,
// requiring tmux). It is ended when the
// test ends; its tmux servers are killed after it.
func StartWorker(t testing.TB, opts WorkerOptions) *Proc {
	t.Helper()
	if opts.Tmux == nil {
		opts.Tmux = NewTmux(t)
	}
	if opts.DataDir == "" {
		opts.DataDir = ShortDir(t, "pamw-")
	}
	// Registered before the worker's own cleanup, so it runs after the
	// worker stopped: holders (PAM_EXECUTOR=pty, from the test's
	// environment or opts.Env) are detached and outlive their worker, as
	// tmux sessions do, and are killed here as the tmux servers are.
	t.Cleanup(func() { KillHolders(filepath.Join(opts.DataDir, "worker", "holders")) })
	env := append([]string{"PAM_URL=" + opts.URL, "PAM_WORKER_TOKEN=" + opts.Token, "PAM_HOST_NAME=" + opts.Name,
		"PAM_DATA_DIR=" + opts.DataDir, "PAM_CONFIG_DIR=" + opts.DataDir, opts.Tmux.Env(), "PAM_LOG_LEVEL=debug"}, opts.Env...)
	return Start(t, "worker "+opts.Name, env, "worker")
}

// KillHolders ends every live PTY holder in dir and its program: SIGKILL
// to the program's process group, then to the holder.
func KillHolders(dir string) {
	notes, _ := holder.List(dir)
	for _, n := range notes {
		if n.ChildPID > 1 {
			_ = syscall.Kill(-n.ChildPID, syscall.SIGKILL)
		}
		if n.PID > 1 {
			_ = syscall.Kill(n.PID, syscall.SIGKILL)
		}
	}
}
