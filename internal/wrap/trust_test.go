package wrap

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// trustRun runs a provider with trust = kind whose CLI writes "ran" in
// its cwd, with the dispatch's worktree and cwd as given, and HOME at a
// fresh folder; it returns that HOME.
func trustRun(t *testing.T, kind string, setup func(f *fixture)) (*fixture, string) {
	t.Helper()
	orch := newOrchestrator(t)
	f := newFixture(t, orch.URL, "agent", "/bin/sh", "")
	f.writeCatalog(t, "[providers.agent]\nbinary = \"/bin/sh\"\nargs = [\"-c\", \"echo ran > ran\"]\ntrust = \""+kind+"\"\n")
	setup(f)
	if err := os.MkdirAll(f.d.Cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	f.writeDispatch(t)
	home := t.TempDir()
	o := f.options()
	o.Environ = []string{"PATH=/usr/bin:/bin", "HOME=" + home}
	if code := Run(t.Context(), o); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	if _, err := os.Stat(filepath.Join(f.d.Cwd, "ran")); err != nil {
		t.Fatalf("the CLI did not run in its cwd: %v\n%s", err, f.stderr)
	}
	return f, home
}

// TestTrustMarksPamWorktree: the worktree pam made for the run is marked
// trusted in the CLI's config under the CLI's HOME before the CLI starts.
func TestTrustMarksPamWorktree(t *testing.T) {
	t.Parallel()
	f, home := trustRun(t, "claude", func(f *fixture) {
		f.d.Cwd = filepath.Join(filepath.Dir(f.workerDir), "worktrees", f.runID)
		f.d.Worktree = f.d.Cwd
	})
	b, err := os.ReadFile(filepath.Join(home, ".claude.json"))
	if err != nil {
		t.Fatalf("no claude config: %v\n%s", err, f.stderr)
	}
	var c struct {
		Projects map[string]map[string]any `json:"projects"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.Projects[f.d.Cwd]["hasTrustDialogAccepted"] != true {
		t.Errorf("not trusted: %s %v", b, err)
	}
}

// TestTrustOnlyPamWorktrees: a run without a worktree of pam's, or with a
// dispatch naming a folder that is not one, marks nothing.
func TestTrustOnlyPamWorktrees(t *testing.T) {
	t.Parallel()
	for name, setup := range map[string]func(f *fixture){
		"no worktree": func(f *fixture) {},
		"worktree elsewhere": func(f *fixture) {
			f.d.Cwd = filepath.Join(t.TempDir(), "repo")
			f.d.Worktree = f.d.Cwd
		},
		"worktree not the cwd": func(f *fixture) {
			f.d.Worktree = filepath.Join(filepath.Dir(f.workerDir), "worktrees", f.runID)
		},
		"not a run's folder": func(f *fixture) {
			f.d.Cwd = filepath.Join(filepath.Dir(f.workerDir), "worktrees", "not-a-run")
			f.d.Worktree = f.d.Cwd
		},
	} {
		f, home := trustRun(t, "gemini", setup)
		if ents, _ := os.ReadDir(home); len(ents) != 0 {
			t.Errorf("%s: HOME holds %v", name, ents)
		}
		if f.d.Worktree != "" && !strings.Contains(f.stderr.String(), "not marking") {
			t.Errorf("%s: no word of it in the pane:\n%s", name, f.stderr)
		}
	}
}

// TestTrustFailureStillStarts: a config the wrapper cannot parse is left
// as it was, the pane says so, and the CLI starts anyway.
func TestTrustFailureStillStarts(t *testing.T) {
	t.Parallel()
	f, _ := trustRun(t, "codex", func(f *fixture) {
		f.d.Cwd = filepath.Join(filepath.Dir(f.workerDir), "worktrees", f.runID)
		f.d.Worktree = f.d.Cwd
	})
	// The run again, with a HOME whose codex config is torn.
	home := t.TempDir()
	cfg := filepath.Join(home, ".codex", "config.toml")
	os.MkdirAll(filepath.Dir(cfg), 0o700)
	os.WriteFile(cfg, []byte("[projects.\"/x\"\ntrust"), 0o600)
	o := f.options()
	o.Environ = []string{"PATH=/usr/bin:/bin", "HOME=" + home}
	os.Remove(filepath.Join(f.d.Cwd, "ran"))
	if code := Run(t.Context(), o); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	if _, err := os.Stat(filepath.Join(f.d.Cwd, "ran")); err != nil {
		t.Errorf("the CLI did not start: %v", err)
	}
	if b, _ := os.ReadFile(cfg); string(b) != "[projects.\"/x\"\ntrust" {
		t.Errorf("the torn config changed: %q", b)
	}
	if !strings.Contains(f.stderr.String(), "could not mark this worktree trusted for agent") || !strings.Contains(f.stderr.String(), cfg) {
		t.Errorf("pane:\n%s", f.stderr)
	}
}
