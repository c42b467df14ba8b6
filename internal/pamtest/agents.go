package pamtest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// agentCLIDir is where make deps-test installs the pinned agent CLIs
// (docs/agents.md): <repo>/internal/agentrig/testdata/clis/node_modules/.bin.
func agentCLIDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	return filepath.Join(filepath.Dir(file), "..", "agentrig", "testdata", "clis", "node_modules", ".bin")
}

// agentCLIInstall is how to get the pinned agent CLIs.
const agentCLIInstall = "make deps-test (npm ci in internal/agentrig/testdata/clis; needs Node.js 20 and npm)"

func init() {
	for _, name := range []string{"claude", "codex", "gemini"} {
		tools[name] = tool{found: func() bool { return agentCLIFound(name) }, install: agentCLIInstall}
	}
}

// agentCLIFound reports whether the pinned CLI name is installed and can
// run (codex's and gemini's entry points are Node scripts).
func agentCLIFound(name string) bool {
	p := filepath.Join(agentCLIDir(), name)
	st, err := os.Stat(p)
	if err != nil || st.Mode()&0o111 == 0 {
		return false
	}
	return name == "claude" || onPath("node")
}

// AgentCLI returns the absolute path of the pinned release of the agent
// CLI name ("claude", "codex" or "gemini") that make deps-test installs
// from the repository's lockfile. Like Require, it fails the test under
// CI when the CLI is not installed and skips it elsewhere, saying how to
// install it.
func AgentCLI(t testing.TB, name string) string {
	t.Helper()
	Require(t, name)
	p, err := filepath.Abs(filepath.Join(agentCLIDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
