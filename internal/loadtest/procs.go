package loadtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"pam/internal/benchproc"
	"pam/internal/holder"
	"pam/internal/procfs"
	"pam/internal/tmux"
)

// startProc runs `pam args...` with env in dir, its output going to
// <dir>/<name>.log.
func startProc(name, bin, dir string, env []string, args ...string) (*benchproc.Proc, error) {
	return benchproc.Start(name, bin, dir, filepath.Join(dir, name+".log"), env, args...)
}

// childEnv is base without any PAM_* or tmux variable of the caller's
// (the driver's processes get exactly the settings it gives them), plus
// extra.
func childEnv(base []string, extra ...string) []string {
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PAM_") || k == "TMUX" || k == "TMUX_TMPDIR" || k == "TMUX_PANE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// waitFor checks cond every 20 ms until it holds, fails, ctx ends or d
// passes.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", d, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// sessions finds what holds the worker's sessions: the tmux server on the
// driver's private socket folder — the parent of a pane's process, which
// list-sessions names; package tmux has no kill-server and needs none,
// the driver ends that server with a signal — or the PTY holders.
type sessions struct {
	executor   string
	tmux       *tmux.Tmux
	holdersDir string

	mu     sync.Mutex
	server int // last tmux server pid seen
}

func newSessions(executor, tmuxDir, workerData string) (*sessions, error) {
	s := &sessions{executor: executor, holdersDir: filepath.Join(workerData, "worker", "holders")}
	if executor == "tmux" {
		t, err := tmux.New(tmux.Options{TmuxTmpDir: tmuxDir})
		if err != nil {
			return nil, err
		}
		s.tmux = t
	}
	return s, nil
}

// pids returns the processes that hold the sessions now.
func (s *sessions) pids(ctx context.Context) []int {
	if s.executor != "tmux" {
		notes, _ := holder.List(s.holdersDir)
		var out []int
		for _, n := range notes {
			out = append(out, n.PID)
		}
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if list, err := s.tmux.ListSessions(ctx); err == nil {
		for _, l := range list {
			if st, ok := procfs.ReadStat(l.PanePID); ok && st.PPID > 1 {
				s.server = st.PPID
				break
			}
		}
	}
	if procfs.Alive(s.server) {
		return []int{s.server}
	}
	return nil
}

// rss is the resident memory of what holds the sessions: the tmux
// server, or every holder together.
func (s *sessions) rss(ctx context.Context) int64 {
	var total int64
	for _, p := range s.pids(ctx) {
		total += rssBytes(p)
	}
	return total
}

// kill ends every session: SIGTERM to the tmux server (it hangs up every
// pane as it exits), SIGKILL after 5 s; or, for PTY holders, SIGKILL to
// each program's process group and to its holder.
func (s *sessions) kill(ctx context.Context) error {
	if s.executor != "tmux" {
		notes, _ := holder.List(s.holdersDir)
		for _, n := range notes {
			if n.ChildPID > 1 {
				_ = syscall.Kill(-n.ChildPID, syscall.SIGKILL)
			}
			if n.PID > 1 {
				_ = syscall.Kill(n.PID, syscall.SIGKILL)
			}
		}
		return nil
	}
	pids := s.pids(ctx) // the last server seen, when no session is left to name it
	var errs []error
	for _, pid := range pids {
		errs = append(errs, endProcess(pid, syscall.SIGTERM, 5*time.Second))
	}
	return errors.Join(errs...)
}

// endProcess sends sig to a process that is not the driver's child, and
// SIGKILL if it is still there after grace.
func endProcess(pid int, sig syscall.Signal, grace time.Duration) error {
	if !procfs.Alive(pid) {
		return nil
	}
	_ = syscall.Kill(pid, sig)
	if waitFor(context.Background(), grace, "exit", func() (bool, error) { return !procfs.Alive(pid), nil }) == nil {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if err := waitFor(context.Background(), 5*time.Second, "exit", func() (bool, error) { return !procfs.Alive(pid), nil }); err != nil {
		return fmt.Errorf("process %d survived SIGKILL", pid)
	}
	return nil
}

// shortTempDir makes the driver's folder. It is short (the tmux and
// PostgreSQL sockets inside must stay under ~100 bytes) and 0755 (as root
// the embedded database runs as the postgres user, which must traverse
// it).
func shortTempDir(parent string) (string, error) {
	if parent == "" {
		parent = os.TempDir()
		if len(parent) > 40 {
			parent = "/tmp"
		}
	}
	d, err := os.MkdirTemp(parent, "pamload-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(d, 0o755); err != nil {
		os.RemoveAll(d)
		return "", err
	}
	for _, sub := range []string{"serve", "worker", "tmux"} {
		if err := os.Mkdir(filepath.Join(d, sub), 0o755); err != nil {
			os.RemoveAll(d)
			return "", err
		}
	}
	return d, nil
}

// sweep ends every process left that names dir on its command line or
// in its environment: what the ordered shutdown missed (a PTY holder
// that a stopping worker had just started, a session's process that
// outlived its server). Nothing outside the driver's folder is touched.
func sweep(dir string) error {
	self := os.Getpid()
	var left []int
	for range 5 {
		left = left[:0]
		for _, pid := range procfs.PIDs() {
			if pid == self || !procfs.Alive(pid) {
				continue
			}
			if bytes.Contains(procfs.File(pid, "cmdline"), []byte(dir)) || bytes.Contains(procfs.File(pid, "environ"), []byte(dir)) {
				left = append(left, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if len(left) == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("processes %v survived SIGKILL", left)
}
