package wrap

import (
	"path/filepath"

	"github.com/google/uuid"

	"pam/internal/provider"
	"pam/internal/trust"
)

// markTrust marks the run's worktree trusted in the CLI's own
// configuration (the provider's trust key), just before the CLI starts
// in it, so that it asks no folder-trust question
// (docs/agents.md#trust). The wrapper does it rather than the worker
// because it runs with the CLI's environment: env is what the CLI gets,
// so HOME (and CLAUDE_CONFIG_DIR, CODEX_HOME, …) name the file the CLI
// will read.
//
// Only a worktree pam made is marked: the dispatch names it as the run's
// worktree, it is the cwd, and it is <data>/worktrees/<uuid> of this
// worker's data dir. A failure is shown in the pane and the CLI starts
// anyway: it asks its question, which the screen reading flags.
func (w *wrapper) markTrust(p provider.Provider, env []string) {
	d := w.d
	if p.Trust == "" || d.Worktree == "" {
		return
	}
	if !pamWorktree(w.o.WorkerDataDir, d.Worktree) || filepath.Clean(d.Cwd) != filepath.Clean(d.Worktree) {
		w.printf("not marking %s trusted for %s: it is not a worktree pam made in %s", d.Worktree, d.Provider, worktreesDir(w.o.WorkerDataDir))
		return
	}
	getenv := func(key string) string { v, _ := lookupEnv(env, key); return v }
	file, err := trust.Mark(p.Trust, getenv, d.Worktree, trust.Options{})
	if err != nil {
		w.printf("could not mark this worktree trusted for %s, so it may ask whether to trust it: %v", d.Provider, err)
		return
	}
	w.o.Logger.Debug("worktree marked trusted", "run_id", w.runID, "provider", d.Provider, "file", file)
}

// worktreesDir is <data>/worktrees for the worker data dir <data>/worker.
func worktreesDir(workerDataDir string) string {
	return filepath.Join(filepath.Dir(workerDataDir), "worktrees")
}

// pamWorktree reports whether path is <data>/worktrees/<uuid>: a worktree
// of this worker's (a run's own, or one a continuation took over).
func pamWorktree(workerDataDir, path string) bool {
	if !filepath.IsAbs(path) || filepath.Dir(filepath.Clean(path)) != worktreesDir(workerDataDir) {
		return false
	}
	base := filepath.Base(path)
	_, err := uuid.Parse(base)
	return err == nil && len(base) == 36
}
