package workspace

// Removing worktrees, listing them for the clean-up pass, and keeping the
// mirrors small (docs/architecture.md#workspaces).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"pam/internal/datadir"
	"pam/internal/wire"
)

// removeDir removes whatever is at a worktree path and lets the mirror
// forget it (git worktree prune), so that the mirror stays consistent.
func (m *Manager) removeDir(ctx context.Context, projectID, path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil && !st.IsDir() {
		// Not a checkout (a symlink, a file): only the entry itself
		// goes, never what a link points at.
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		return nil
	}
	mirror := m.MirrorPath(projectID)
	if _, err := os.Stat(mirror); err == nil {
		if _, err := m.git(ctx, mirror, "worktree", "remove", "--force", "--force", "--", path); err == nil {
			return nil
		}
	}
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if _, err := os.Stat(mirror); err == nil {
		if _, err := m.git(ctx, mirror, "worktree", "prune"); err != nil {
			m.log.Warn("worktree prune", "mirror", mirror, "err", err)
		}
	}
	return nil
}

// Remove removes a run's worktree and its record; the branch stays in
// the mirror. It returns the workspace removed, and ok false when the
// run had none here.
func (m *Manager) Remove(ctx context.Context, runID string) (ws wire.Workspace, ok bool, err error) {
	owners, err := m.owners()
	if err != nil {
		return wire.Workspace{}, false, err
	}
	rec, err := m.readRecord(runID)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("workspace record refused: nothing removed", "run_id", runID, "err", err)
		return wire.Workspace{}, false, err
	}
	if err != nil {
		// A directory without a record is half-made: remove it all the
		// same — unless a run that continues this one took it over. A
		// symlink there goes, never what it points at.
		if _, taken := owners[runID]; wire.ValidUUID(runID) && !taken {
			if _, err := os.Lstat(m.Path(runID)); err == nil {
				if err := os.RemoveAll(m.Path(runID)); err != nil {
					return wire.Workspace{}, false, err
				}
				m.PruneAll(ctx)
			}
		}
		return wire.Workspace{}, false, nil
	}
	if o := owners[rec.folder()]; o.RunID != runID {
		// Another run took the worktree over since: only the stale
		// record goes.
		if err := os.Remove(m.recordPath(runID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return wire.Workspace{}, false, err
		}
		return wire.Workspace{}, false, nil
	}
	if err := m.removeLocked(ctx, rec.ProjectID, rec.Workspace.Path); err != nil {
		return wire.Workspace{}, true, err
	}
	if err := os.Remove(m.recordPath(runID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wire.Workspace{}, true, err
	}
	m.log.Info("worktree removed", "run_id", runID, "path", rec.Workspace.Path)
	return rec.Workspace, true, nil
}

// removeLocked is removeDir under the project's mirror lock, for callers
// that do not hold it: git's worktree bookkeeping in the mirror is not
// safe against a worktree being added to it at the same time.
func (m *Manager) removeLocked(ctx context.Context, projectID, path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := datadir.Ensure(m.reposDir(), false); err != nil {
		return err
	}
	unlock, err := m.lock(ctx, projectID)
	if err != nil {
		return err
	}
	defer unlock()
	return m.removeDir(ctx, projectID, path)
}

// PruneAll runs git worktree prune in every mirror, each under its lock.
func (m *Manager) PruneAll(ctx context.Context) {
	list, _ := filepath.Glob(filepath.Join(m.reposDir(), "*.git"))
	for _, mirror := range list {
		project := strings.TrimSuffix(filepath.Base(mirror), ".git")
		if !wire.ValidUUID(project) {
			continue
		}
		unlock, err := m.lock(ctx, project)
		if err != nil {
			m.log.Warn("worktree prune", "mirror", mirror, "err", err)
			continue
		}
		if _, err := m.git(ctx, mirror, "worktree", "prune"); err != nil {
			m.log.Warn("worktree prune", "mirror", mirror, "err", err)
		}
		unlock()
	}
}

// Entry is one worktree on disk, as clean-up sees it.
type Entry struct {
	RunID string
	// Record is false for a directory without a record (half-made).
	Recorded bool
	Record   Record
	// Untrusted says the folder's record is there but not trusted
	// (ErrUntrusted): clean-up must leave it alone.
	Untrusted bool
	// Size is the bytes of its files; Modified, the newest change to
	// any of them (or to a directory), which is when the worktree was
	// last worked in.
	Size     int64
	Modified time.Time
}

// List returns every worktree directory under <data>/worktrees with its
// size, as the worktree of the run that owns it (a continuation that took
// it over, or the run it is named after), and every record whose checkout
// is gone (size 0); a name that is not a run id is left alone (not
// pam's).
func (m *Manager) List() ([]Entry, error) {
	des, err := os.ReadDir(m.worktreesDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	owners, err := m.owners()
	if err != nil {
		return nil, err
	}
	var out []Entry
	seen := map[string]bool{} // folders
	for _, de := range des {
		if !de.IsDir() || !wire.ValidUUID(de.Name()) {
			continue
		}
		// A folder a continuation took over is listed as its run's.
		e := Entry{RunID: de.Name()}
		e.Size, e.Modified = dirStat(filepath.Join(m.worktreesDir(), de.Name()))
		if o, ok := owners[de.Name()]; ok {
			e.RunID, e.Record, e.Recorded = o.RunID, o, true
		} else if _, err := m.readRecord(de.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			e.Untrusted = true
		}
		out = append(out, e)
		seen[de.Name()] = true
	}
	for folder, rec := range owners {
		if !seen[folder] {
			out = append(out, Entry{RunID: rec.RunID, Recorded: true, Record: rec, Modified: rec.CreatedAt})
		}
	}
	return out, nil
}

// dirStat adds up the sizes of the files under dir and finds the newest
// modification time of anything there (not following symlinks).
func dirStat(dir string) (size int64, newest time.Time) {
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			size += info.Size()
		}
		if info.ModTime().After(newest) {
			newest = info.ModTime()
		}
		return nil
	})
	return size, newest
}

// Unsaved says what in a worktree exists nowhere else, "" when nothing
// does: commits at its HEAD that no remote branch has (as the mirror
// last fetched or pushed), and uncommitted or untracked files. A
// checkout that is gone has nothing unsaved (its branch stays in the
// mirror). An error means it could not be told: treat it as unsaved.
func (m *Manager) Unsaved(ctx context.Context, rec Record) (string, error) {
	path := rec.Workspace.Path
	if !isWorktree(path) {
		return "", nil
	}
	var out []string
	n, err := m.git(ctx, path, "rev-list", "--count", "HEAD", "--not", "--remotes")
	if err != nil {
		return "", err
	}
	if n != "0" {
		out = append(out, n+" commit(s) not on the remote")
	}
	st, err := m.git(ctx, path, "--no-optional-locks", "status", "--porcelain", "--untracked-files=normal")
	if err != nil {
		return "", err
	}
	if st != "" {
		out = append(out, fmt.Sprintf("%d uncommitted or untracked path(s)", strings.Count(st, "\n")+1))
	}
	return strings.Join(out, ", "), nil
}

// Available reports whether the git binary can be found.
func (m *Manager) Available() error {
	if _, err := exec.LookPath(m.o.Git); err != nil {
		return fmt.Errorf("git: %w", err)
	}
	return nil
}

// Mirror upkeep. The mirrors are made with gc.auto=0 (no git command of
// a run's or of the worker's starts a gc in them at a moment nobody
// chose); PruneMirrors is the schedule instead.
const (
	// PruneEvery is how often a mirror is pruned.
	PruneEvery = 24 * time.Hour
	// pruneGrace is how old an unreachable object must be to go: git's
	// answer to a writer racing the prune (an agent's `git add` whose
	// blob no index names yet, a fetch whose refs are not written yet).
	pruneGrace = "1.hour.ago"
	// pruneStamp, in a mirror, is touched by each prune.
	pruneStamp = "pam-pruned"
)

// PruneMirrors removes the unreachable objects of every mirror not
// pruned within every (0: all of them now) with `git gc --prune`, and
// the scratch directories of diffs a killed worker left. What a live
// worktree holds is reachable to git — its HEAD, its index (staged
// files), its reflogs — so its work is kept; objects written within the
// last hour are kept whatever they are.
func (m *Manager) PruneMirrors(ctx context.Context, every time.Duration) {
	scratch, _ := filepath.Glob(filepath.Join(m.reposDir(), scratchPrefix+"*"))
	for _, dir := range scratch {
		if st, err := os.Stat(dir); err == nil && time.Since(st.ModTime()) > time.Hour {
			_ = os.RemoveAll(dir)
		}
	}
	list, _ := filepath.Glob(filepath.Join(m.reposDir(), "*.git"))
	for _, mirror := range list {
		if ctx.Err() != nil {
			return
		}
		if !wire.ValidUUID(strings.TrimSuffix(filepath.Base(mirror), ".git")) {
			continue
		}
		stamp := filepath.Join(mirror, pruneStamp)
		if st, err := os.Stat(stamp); err == nil && every > 0 && time.Since(st.ModTime()) < every {
			continue
		}
		start := time.Now()
		// Not under the mirror's lock: gc takes its own (gc.pid) and is
		// safe beside other git commands; a run's start never waits
		// for a repack.
		if _, err := m.git(ctx, mirror, "-c", "gc.autoDetach=false", "gc", "--quiet", "--prune="+pruneGrace); err != nil {
			m.log.Warn("mirror prune", "mirror", mirror, "err", err)
			continue
		}
		now := time.Now()
		err := os.Chtimes(stamp, now, now)
		if errors.Is(err, fs.ErrNotExist) {
			err = os.WriteFile(stamp, nil, 0o600)
		}
		if err != nil {
			// Without its stamp the mirror is only pruned again sooner.
			m.log.Warn("mirror prune stamp", "mirror", mirror, "err", err)
		}
		m.log.Info("mirror pruned", "mirror", mirror, "took", time.Since(start).Round(time.Millisecond))
	}
}

// MirrorsSize is the bytes of the mirrors (and whatever else is under
// <data>/repos): they count in the worktree budget with the worktrees.
func (m *Manager) MirrorsSize() int64 {
	size, _ := dirStat(m.reposDir())
	return size
}
