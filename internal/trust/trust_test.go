package trust

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// env is a CLI's environment with HOME at home.
func env(home string, kv ...string) func(string) string {
	m := map[string]string{"HOME": home}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func write(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// trusted reads, the way each CLI does, whether dir is trusted in file.
func trusted(t *testing.T, kind, file, dir string) bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	switch kind {
	case Claude:
		var c struct {
			Projects map[string]struct {
				HasTrustDialogAccepted bool `json:"hasTrustDialogAccepted"`
			} `json:"projects"`
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return c.Projects[dir].HasTrustDialogAccepted
	case Codex:
		var c struct {
			Projects map[string]struct {
				TrustLevel string `toml:"trust_level"`
			} `toml:"projects"`
		}
		if _, err := toml.Decode(string(b), &c); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return c.Projects[dir].TrustLevel == "trusted"
	default:
		var c map[string]string
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return c[dir] == "TRUST_FOLDER"
	}
}

func TestFile(t *testing.T) {
	home := t.TempDir()
	for _, c := range []struct {
		kind string
		env  func(string) string
		want string
	}{
		{Claude, env(home), home + "/.claude.json"},
		{Claude, env(home, "CLAUDE_CONFIG_DIR", "/etc/cc"), "/etc/cc/.claude.json"},
		{Codex, env(home), home + "/.codex/config.toml"},
		{Codex, env(home, "CODEX_HOME", "/srv/codex"), "/srv/codex/config.toml"},
		{Gemini, env(home), home + "/.gemini/trustedFolders.json"},
		{Gemini, env(home, "GEMINI_CLI_HOME", "/srv/g"), "/srv/g/.gemini/trustedFolders.json"},
		{Gemini, env(home, "GEMINI_CLI_TRUSTED_FOLDERS_PATH", "/srv/t.json"), "/srv/t.json"},
	} {
		got, err := File(c.kind, c.env)
		if err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.kind, got, err, c.want)
		}
	}
	// Claude Code's old layout wins when it is there.
	write(t, filepath.Join(home, ".claude", ".config.json"), "{}", 0o600)
	if got, _ := File(Claude, env(home)); got != filepath.Join(home, ".claude", ".config.json") {
		t.Errorf("legacy claude config: %s", got)
	}
	if _, err := File(Codex, env("")); err == nil {
		t.Error("no HOME: no error")
	}
	if _, err := File("grok", env(home)); err == nil {
		t.Error("unknown kind: no error")
	}
}

func TestClaudeKeepsEverythingElse(t *testing.T) {
	home, dir := t.TempDir(), "/data/worktrees/0b8e0c3e-1111-4222-8333-444455556666"
	file := filepath.Join(home, ".claude.json")
	orig := `{
  "numStartups": 3,
  "customApiKeyResponses": {"approved": ["abcdefghij0123456789"], "rejected": []},
  "futureField": {"nested": [1, 2.50, {"x": null}]},
  "projects": {
    "/home/me/code": {"allowedTools": ["Bash(ls)"], "hasTrustDialogAccepted": true},
    "` + dir + `": {"allowedTools": [], "hasTrustDialogAccepted": false, "unknownKey": "kept"}
  },
  "hasCompletedOnboarding": true
}`
	write(t, file, orig, 0o644)
	got, err := Mark(Claude, env(home), dir, Options{})
	if err != nil || got != file {
		t.Fatalf("Mark: %q %v", got, err)
	}
	if !trusted(t, Claude, file, dir) {
		t.Fatalf("not trusted:\n%s", read(t, file))
	}
	// Every other value as it was, in its order; the mode too.
	var before, after map[string]any
	json.Unmarshal([]byte(orig), &before)
	json.Unmarshal([]byte(read(t, file)), &after)
	before["projects"].(map[string]any)[dir].(map[string]any)["hasTrustDialogAccepted"] = true
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("content changed:\n%v\n%v", before, after)
	}
	text := read(t, file)
	if i, j, k := strings.Index(text, "numStartups"), strings.Index(text, "futureField"), strings.Index(text, "hasCompletedOnboarding"); !(i < j && j < k) {
		t.Errorf("order of members lost:\n%s", text)
	}
	if !strings.Contains(text, "2.50") {
		t.Errorf("a number was rewritten:\n%s", text)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
	// Already trusted: the file is not written again.
	st1, _ := os.Stat(file)
	if _, err := Mark(Claude, env(home), dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(file); !os.SameFile(st1, st2) {
		t.Error("a second Mark rewrote the file")
	}
}

func TestMarkCreatesFiles(t *testing.T) {
	for _, kind := range Kinds() {
		home, dir := t.TempDir(), t.TempDir()
		file, err := Mark(kind, env(home), dir, Options{})
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if !trusted(t, kind, file, dir) {
			t.Errorf("%s: not trusted:\n%s", kind, read(t, file))
		}
		if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
			t.Errorf("%s: new file mode %v", kind, st.Mode())
		}
		if _, err := os.Stat(file + ".lock"); !os.IsNotExist(err) {
			t.Errorf("%s: the CLI's lock directory was left: %v", kind, err)
		}
	}
}

func TestCodexKeepsCommentsAndLayout(t *testing.T) {
	home := t.TempDir()
	file := filepath.Join(home, ".codex", "config.toml")
	a, b, c := "/w/a", "/w/b \"quoted\"", "/w/c"
	orig := `# my codex settings
model = "gpt-fake"   # the model
model_provider = "fake"

[model_providers.fake]
name = "Fake"
base_url = "http://127.0.0.1:1/v1"

[projects."/w/a"]
trust_level = "untrusted"  # was asked

[projects."/w/b \"quoted\""]
other = 1

[tui]
screen_reader_detection_done = true
`
	write(t, file, orig, 0o600)
	for _, dir := range []string{a, b, c} {
		if _, err := Mark(Codex, env(home), dir, Options{}); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
	}
	text := read(t, file)
	for _, dir := range []string{a, b, c} {
		if !trusted(t, Codex, file, dir) {
			t.Errorf("%s not trusted:\n%s", dir, text)
		}
	}
	for _, keep := range []string{"# my codex settings", "# the model", "[tui]", "screen_reader_detection_done = true", "other = 1", `base_url = "http://127.0.0.1:1/v1"`} {
		if !strings.Contains(text, keep) {
			t.Errorf("lost %q:\n%s", keep, text)
		}
	}
	if strings.Contains(text, "untrusted") || strings.Count(text, `[projects."/w/a"]`) != 1 || !strings.HasSuffix(text, "[projects.\"/w/c\"]\ntrust_level = \"trusted\"\n") {
		t.Errorf("edit:\n%s", text)
	}
}

func TestTornFilesLeftUntouched(t *testing.T) {
	for _, c := range []struct {
		kind, rel, body, want string
	}{
		{Claude, ".claude.json", `{"projects": {"/x": {"hasTrust`, "not valid JSON"},
		{Claude, ".claude.json", `["not", "an", "object"]`, "not a JSON object"},
		{Claude, ".claude.json", `{"projects": []}`, "projects"},
		{Claude, ".claude.json", `{"a": 1} {"b": 2}`, "data after"},
		{Codex, ".codex/config.toml", "model = \"x\"\n[projects.\"/y\"\ntrust", "not valid TOML"},
		{Codex, ".codex/config.toml", "projects = { \"/dir\" = { other = 1 } }\n", "is not written as its own"},
		{Codex, ".codex/config.toml", "projects = 3\n", "not a table"},
		{Gemini, ".gemini/trustedFolders.json", `{"/x": "TRUST_FOLDER",`, "not valid JSON"},
	} {
		home := t.TempDir()
		file := filepath.Join(home, c.rel)
		write(t, file, c.body, 0o600)
		_, err := Mark(c.kind, env(home), "/dir", Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), file) {
			t.Errorf("%s %q: error %v, want one naming the file and %q", c.kind, c.body, err, c.want)
		}
		if got := read(t, file); got != c.body {
			t.Errorf("%s: the file changed:\n%s", c.kind, got)
		}
	}
}

func TestSymlinks(t *testing.T) {
	// The configuration file is a link: its target is edited and the link
	// stays. The folder is reached through a link: both paths are marked.
	home, real := t.TempDir(), t.TempDir()
	target := filepath.Join(real, "claude.json")
	write(t, target, `{"keep": 1}`, 0o600)
	if err := os.Symlink(target, filepath.Join(home, ".claude.json")); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	link := filepath.Join(t.TempDir(), "wt")
	if err := os.Symlink(work, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Mark(Claude, env(home), link, Options{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(home, ".claude.json")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi, err)
	}
	workReal, _ := filepath.EvalSymlinks(work)
	if !trusted(t, Claude, target, workReal) || !trusted(t, Claude, target, link) || !strings.Contains(read(t, target), `"keep": 1`) {
		t.Errorf("target:\n%s", read(t, target))
	}
}

// TestConcurrentMarksAllLand: 20 goroutines mark 20 folders in one file
// at once, for each kind; every entry lands.
func TestConcurrentMarksAllLand(t *testing.T) {
	for _, kind := range Kinds() {
		home := t.TempDir()
		var wg sync.WaitGroup
		dirs := make([]string, 20)
		for i := range dirs {
			dirs[i] = fmt.Sprintf("/data/worktrees/run-%02d", i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := Mark(kind, env(home), dirs[i], Options{}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		file, _ := File(kind, env(home))
		for _, d := range dirs {
			if !trusted(t, kind, file, d) {
				t.Errorf("%s: %s lost:\n%s", kind, d, read(t, file))
			}
		}
	}
}

// TestConcurrentProcessesAllLand: the same across processes (the test
// binary run again as a marker), which pam's flock orders.
func TestConcurrentProcessesAllLand(t *testing.T) {
	if os.Getenv("TRUST_TEST_MARKER") != "" {
		return
	}
	for _, kind := range Kinds() {
		home := t.TempDir()
		var cmds []*exec.Cmd
		for i := range 20 {
			c := exec.Command(os.Args[0], "-test.run=^TestMarkerProcess$")
			c.Env = append(os.Environ(), "TRUST_TEST_MARKER=1", "TRUST_KIND="+kind, "HOME="+home, fmt.Sprintf("TRUST_DIR=/data/worktrees/p-%02d", i))
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, c)
		}
		for _, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Errorf("%s: marker process: %v", kind, err)
			}
		}
		file, _ := File(kind, env(home))
		for i := range 20 {
			if d := fmt.Sprintf("/data/worktrees/p-%02d", i); !trusted(t, kind, file, d) {
				t.Errorf("%s: %s lost:\n%s", kind, d, read(t, file))
			}
		}
	}
}

// TestMarkerProcess is the body of a marker process of
// TestConcurrentProcessesAllLand.
func TestMarkerProcess(t *testing.T) {
	if os.Getenv("TRUST_TEST_MARKER") == "" {
		t.Skip("run by TestConcurrentProcessesAllLand")
	}
	if _, err := Mark(os.Getenv("TRUST_KIND"), os.Getenv, os.Getenv("TRUST_DIR"), Options{}); err != nil {
		t.Fatal(err)
	}
}

// TestCLILock: a live lock directory of the CLI's makes Mark wait (and
// give up at its timeout); one left over (older than the CLI's stale
// time) is taken over.
func TestCLILock(t *testing.T) {
	home := t.TempDir()
	file := filepath.Join(home, ".claude.json")
	write(t, file, "{}", 0o600)
	if err := os.Mkdir(file+".lock", 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := Mark(Claude, env(home), "/w", Options{LockTimeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "locked by another process") || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("held lock: %v after %s", err, time.Since(start))
	}
	if read(t, file) != "{}" {
		t.Error("written without the lock")
	}
	// The holder lets go while Mark waits.
	release := time.AfterFunc(100*time.Millisecond, func() { os.Remove(file + ".lock") })
	defer release.Stop()
	if _, err := Mark(Claude, env(home), "/w", Options{LockTimeout: 5 * time.Second}); err != nil || !trusted(t, Claude, file, "/w") {
		t.Fatalf("after release: %v", err)
	}
	// A stale lock.
	if err := os.Mkdir(file+".lock", 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	os.Chtimes(file+".lock", old, old)
	if _, err := Mark(Claude, env(home), "/v", Options{LockTimeout: time.Second}); err != nil || !trusted(t, Claude, file, "/v") {
		t.Fatalf("stale lock: %v", err)
	}
}

func TestRelativeDirRefused(t *testing.T) {
	if _, err := Mark(Claude, env(t.TempDir()), "rel/dir", Options{}); err == nil {
		t.Error("a relative folder was marked")
	}
}
