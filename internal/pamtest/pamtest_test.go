package pamtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"pam/internal/eventually"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(M(m)) }

// fakeTB records what Require, raceDir and ShortDir do to a test, so
// that a failing or skipping path can be checked without failing this
// test. Skip and Fatal end the calling goroutine as the real ones do.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	fatal    string
	skip     string
	errs     []string
	cleanups []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fakeTB) Skip(args ...any) {
	f.mu.Lock()
	f.skip = fmt.Sprint(args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

// run calls fn as a test body on its own goroutine, then the cleanups.
func (f *fakeTB) run(fn func()) {
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestRequireFailsUnderCISkipsElsewhere(t *testing.T) {
	tools["missing-tool"] = tool{found: func() bool { return false }, install: "apt-get install -y missing-tool"}
	t.Cleanup(func() { delete(tools, "missing-tool") })
	for _, ci := range []string{"true", ""} {
		t.Setenv("CI", ci)
		f := &fakeTB{TB: t}
		reached := false
		f.run(func() { Require(f, "missing-tool"); reached = true })
		switch {
		case reached:
			t.Errorf("CI=%q: Require returned for a missing tool", ci)
		case ci == "true" && (f.fatal == "" || f.skip != ""):
			t.Errorf("CI=true: fatal %q, skip %q; want a failure", f.fatal, f.skip)
		case ci == "" && (f.skip == "" || f.fatal != ""):
			t.Errorf("CI unset: fatal %q, skip %q; want a skip", f.fatal, f.skip)
		}
		if msg := f.fatal + f.skip; !strings.Contains(msg, "apt-get install -y missing-tool") {
			t.Errorf("CI=%q: the message does not say what to install: %q", ci, msg)
		}
	}
	mainMu.Lock()
	n := skipped["missing-tool"]
	delete(skipped, "missing-tool")
	mainMu.Unlock()
	if n != 1 {
		t.Errorf("%d skips counted for the summary, want 1", n)
	}
}

func TestRequireUnknownToolFails(t *testing.T) {
	f := &fakeTB{TB: t}
	f.run(func() { Require(f, "no-such-tool") })
	if !strings.Contains(f.fatal, "unknown tool") {
		t.Fatalf("fatal %q", f.fatal)
	}
}

func TestRequireFindsInstalledTool(t *testing.T) {
	tools["present-tool"] = tool{found: func() bool { return true }}
	t.Cleanup(func() { delete(tools, "present-tool") })
	f := &fakeTB{TB: t}
	reached := false
	f.run(func() { Require(f, "present-tool"); reached = true })
	if !reached || f.fatal != "" || f.skip != "" {
		t.Fatalf("reached %v, fatal %q, skip %q", reached, f.fatal, f.skip)
	}
}

// A race report a pam process leaves in the test's folder fails the test
// once its processes have stopped.
func TestRaceReportFailsTheTest(t *testing.T) {
	f := &fakeTB{TB: t}
	var dir string
	f.run(func() {
		dir = raceDir(f)
		if again := raceDir(f); again != dir {
			t.Errorf("second raceDir %s, first %s", again, dir)
		}
		if err := os.WriteFile(filepath.Join(dir, "race.4242"), []byte("WARNING: DATA RACE\nWrite at 0x00c000123456 by goroutine 7:\n"), 0o644); err != nil {
			t.Error(err)
		}
	})
	if len(f.errs) != 1 || !strings.Contains(f.errs[0], "WARNING: DATA RACE") || !strings.Contains(f.errs[0], "race.4242") {
		t.Fatalf("errors %q", f.errs)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("race folder left behind: %v", err)
	}
}

// The binary the tests start is built as the tests are: with -race under
// -race, so the detector also watches the processes.
func TestPamBuiltLikeTheTests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pam")
	}
	bin := Pam(t)
	if again := Pam(t); again != bin {
		t.Fatalf("built twice: %s then %s", bin, again)
	}
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	if got := strings.Contains(string(out), "-race=true"); got != raceEnabled {
		t.Fatalf("binary built with -race: %v, tests run with -race: %v\n%s", got, raceEnabled, out)
	}
	if got, want := strings.Contains(string(out), "-cover"), coverDir() != ""; got != want {
		t.Fatalf("binary built with -cover: %v, coverage wanted: %v\n%s", got, want, out)
	}
}

// A process's environment names the coverage folder when coverage is
// collected, and nothing is said about it otherwise.
func TestProcEnvCoverDir(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(CoverDirEnv, dir)
	if env := strings.Join(procEnv(t), " "); !strings.Contains(env, "GOCOVERDIR="+dir) {
		t.Fatalf("with %s=%s: env %q", CoverDirEnv, dir, env)
	}
	t.Setenv(CoverDirEnv, "")
	if env := strings.Join(procEnv(t), " "); strings.Contains(env, "GOCOVERDIR") {
		t.Fatalf("without %s: env %q", CoverDirEnv, env)
	}
}

// Whatever tmux servers run in a private folder end with the test.
func TestTmuxServersEndWithTheTest(t *testing.T) {
	var pid int
	t.Run("inner", func(t *testing.T) {
		x := NewTmux(t)
		if out, err := x.Run("-f", os.DevNull, "new-session", "-d", "-s", "probe", "sleep 600"); err != nil {
			t.Fatalf("new-session: %v %s", err, out)
		}
		out, err := x.Run("display-message", "-p", "#{pid}")
		if err != nil {
			t.Fatalf("server pid: %v %s", err, out)
		}
		pid, _ = strconv.Atoi(strings.TrimSpace(out))
	})
	if pid == 0 {
		t.Fatal("no tmux server pid")
	}
	eventually.Wait(t, eventually.Medium, fmt.Sprintf("tmux server %d to end", pid), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// Gone, or a zombie waiting for its reaper.
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}

// The harness is for tests only: the pam binary does not link it.
func TestNotLinkedIntoPam(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "pam/cmd/pam").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "pam/internal/pamtest" || p == "pam/internal/store/storetest" {
			t.Fatalf("cmd/pam depends on %s", p)
		}
	}
}

// TestAgentCLI: the pinned CLIs make deps-test installs are found and
// run (skipped, saying how to install them, when they are not there).
func TestAgentCLI(t *testing.T) {
	for _, name := range []string{"claude", "codex", "gemini"} {
		p := AgentCLI(t, name)
		out, err := exec.Command(p, "--version").CombinedOutput()
		if err != nil || len(out) == 0 {
			t.Errorf("%s --version: %v %s", p, err, out)
		}
	}
}
