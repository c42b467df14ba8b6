package pamtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// tool is an outside program some tests need, how to find it and how to
// install it.
type tool struct {
	found   func() bool
	install string
}

// tools are the names Require knows.
var tools = map[string]tool{
	"tmux": {
		found:   func() bool { return onPath("tmux") },
		install: "apt-get install -y tmux (or make deps)",
	},
	"postgres": {
		found:   postgresFound,
		install: "apt-get install -y postgresql (or make deps; or point PAM_TEST_DATABASE_URL at a server)",
	},
	"chromium": {
		found:   func() bool { return onPath("chromium") || onPath("chromium-browser") || onPath("google-chrome") },
		install: "apt-get install -y chromium",
	},
	"git": {
		found:   func() bool { return onPath("git") },
		install: "apt-get install -y git (or make deps)",
	},
	"jq": {
		found:   func() bool { return onPath("jq") },
		install: "apt-get install -y jq (or make deps-test)",
	},
}

// Require stops the test when one of the named tools (tmux, postgres,
// chromium, git, jq, and the pinned agent CLIs claude, codex and gemini)
// is missing: under CI it fails, since a green CI run must not
// hide tests that never ran; elsewhere it skips, saying what to install,
// and Main repeats that when the package's tests end.
func Require(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		tl, ok := tools[name]
		if !ok {
			t.Fatalf("pamtest.Require: unknown tool %q", name)
		}
		if tl.found() {
			continue
		}
		msg := fmt.Sprintf("%s is not installed; install it with: %s", name, tl.install)
		if InCI() {
			t.Fatalf("%s (CI=%s: a missing tool fails instead of skipping)", msg, os.Getenv("CI"))
		}
		mainMu.Lock()
		skipped[name]++
		mainMu.Unlock()
		t.Skip("SKIP: " + msg)
	}
}

// InCI reports whether the tests run under CI (CI=true), where nothing
// may be skipped for want of a tool.
func InCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

func onPath(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// pgBinGlobs are where PostgreSQL's server binaries are looked for after
// PATH: the folders internal/embeddb searches (which this leaf package
// cannot import, since embeddb's own tests use it).
var pgBinGlobs = []string{
	"/usr/lib/postgresql/*/bin",
	"/opt/homebrew/opt/postgresql*/bin",
	"/usr/local/opt/postgresql*/bin",
}

// postgresFound reports whether some folder holds both initdb and
// postgres, as a private cluster needs.
func postgresFound() bool {
	dirs := filepath.SplitList(os.Getenv("PATH"))
	for _, g := range pgBinGlobs {
		found, _ := filepath.Glob(g)
		dirs = append(dirs, found...)
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return true
		}
	}
	return false
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
