package pamtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitRemote makes a bare repository holding one commit of files on main,
// in the test's temporary directory: a project's remote without a network
// (workspaces, docs/architecture.md#workspaces). files maps a slash path
// to its content; folders are made as needed.
func GitRemote(t testing.TB, files map[string]string) string {
	t.Helper()
	Require(t, "git")
	dir := t.TempDir()
	src, bare := filepath.Join(dir, "src"), filepath.Join(dir, "remote.git")
	Git(t, dir, "init", "--quiet", "-b", "main", src)
	for name, body := range files {
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, src, "add", "-A")
	Git(t, src, "commit", "--quiet", "-m", "initial")
	Git(t, dir, "clone", "--quiet", "--bare", src, bare)
	return bare
}

// Git runs git in dir with a fixed author and returns its trimmed output;
// a failure fails the test with git's output.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
