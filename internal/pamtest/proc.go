package pamtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pam/internal/benchproc"
)

// StopGrace is how long a process has to exit after SIGTERM when a test
// ends before it is killed.
const StopGrace = 20 * time.Second

// Buffer collects a process's output while a test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// String is everything written so far.
func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Proc is a pam process under test, started by benchproc (the one
// process helper of the tests and the bench drivers). It runs in its own
// process group, so a terminal's Ctrl-C reaches only the test binary,
// which then ends it.
type Proc struct {
	t      testing.TB
	name   string
	Cmd    *exec.Cmd
	Stdout *Buffer
	Stderr *Buffer
	proc   *benchproc.Proc
}

// Start runs `pam args...` with the environment plus env, and ends it when
// the test does: SIGTERM, then SIGKILL after StopGrace. Its stderr is
// logged if the test failed. name labels it in messages.
func Start(t testing.TB, name string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := Command(t, args...)
	cmd.Env = append(cmd.Env, env...)
	p := &Proc{t: t, name: name, Cmd: cmd, Stdout: &Buffer{}, Stderr: &Buffer{}}
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	proc, err := benchproc.StartCmd(name, cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.proc = proc
	t.Cleanup(func() {
		p.Stop(syscall.SIGTERM, StopGrace)
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.Stderr.String())
		}
	})
	return p
}

// Command is `pam args...` with the harness's environment (coverage and
// race report folders), for a test that runs the process itself (on a
// PTY, with CombinedOutput). Its race reports fail the test at its end.
func Command(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(Pam(t), args...)
	cmd.Env = append(os.Environ(), procEnv(t)...)
	return cmd
}

// Done is closed when the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.proc.Done() }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool { return p.proc.Exited() }

// Signal sends sig to the process (not its group).
func (p *Proc) Signal(sig syscall.Signal) error {
	return p.Cmd.Process.Signal(sig)
}

// Stop sends sig and waits up to d for the exit, then kills the process.
// It returns once the process is reaped.
func (p *Proc) Stop(sig syscall.Signal, d time.Duration) { p.proc.StopWith(sig, d) }

// Kill9 kills the process with SIGKILL (no cleanup of any kind) and waits
// until it is reaped.
func (p *Proc) Kill9() {
	p.t.Helper()
	if err := syscall.Kill(p.Cmd.Process.Pid, syscall.SIGKILL); err != nil && !p.Exited() {
		p.t.Fatalf("kill -9 %s (pid %d): %v", p.name, p.Cmd.Process.Pid, err)
	}
	<-p.Done()
}

// Wait waits up to d for the process to exit and returns its exit code,
// failing the test at the deadline.
func (p *Proc) Wait(d time.Duration) int {
	p.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.Done():
		return p.Cmd.ProcessState.ExitCode()
	case <-timer.C:
		p.t.Fatalf("%s did not exit within %s: %s", p.name, d, p.Stderr.String())
		return -1
	}
}

// raceDirs holds each test's folder for race reports (GORACE log_path).
var raceDirs sync.Map // testing.TB → string

// procEnv is what every pam process of t gets on top of the environment:
// a GOCOVERDIR when coverage is collected, and with -race a log_path for
// race reports, which t checks when it ends (the processes' children,
// such as the wrappers in tmux sessions, inherit both).
func procEnv(t testing.TB) []string {
	t.Helper()
	var env []string
	if d := coverDir(); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("coverage folder: %v", err)
		}
		env = append(env, "GOCOVERDIR="+d)
	}
	if raceEnabled {
		env = append(env, "GORACE=log_path="+filepath.Join(raceDir(t), "race"))
	}
	return env
}

// raceDir returns t's race report folder, made on first use. The check
// is registered then, before the cleanups of the processes started
// after, so it runs once they have all stopped.
func raceDir(t testing.TB) string {
	t.Helper()
	if d, ok := raceDirs.Load(t); ok {
		return d.(string)
	}
	d := ShortDir(t, "pamrace-")
	if prev, loaded := raceDirs.LoadOrStore(t, d); loaded {
		return prev.(string)
	}
	t.Cleanup(func() {
		raceDirs.Delete(t)
		reports, _ := filepath.Glob(filepath.Join(d, "race.*"))
		for _, f := range reports {
			b, _ := os.ReadFile(f)
			if strings.TrimSpace(string(b)) != "" {
				t.Errorf("a pam process found a data race (%s):\n%s", filepath.Base(f), b)
			}
		}
	})
	return d
}

// ShortDir makes a folder for t and removes it when t ends. Unlike
// t.TempDir it is short (a Unix socket path in it, tmux's or
// PostgreSQL's, must stay under ~100 bytes) and 0755 (the postgres user
// must traverse it when the tests run as root).
func ShortDir(t testing.TB, prefix string) string {
	t.Helper()
	base := os.TempDir()
	if len(base) > 40 {
		base = "/tmp"
	}
	d, err := os.MkdirTemp(base, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
