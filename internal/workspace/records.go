package workspace

// What the worker records of each run's worktree, and when a record is
// trusted (docs/architecture.md#workspaces): a record names only its own
// run's folder, in its project's mirror.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"pam/internal/datadir"
	"pam/internal/wire"
)

// Record returns what the worker knows of a run's worktree; ok is false
// when it has none, or when its record is not trusted (logged).
func (m *Manager) Record(runID string) (Record, bool) {
	r, err := m.readRecord(runID)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("workspace record refused: its worktree is left alone", "run_id", runID, "err", err)
	}
	return r, err == nil
}

// ErrUntrusted is a workspace record pam will not act on: nothing is
// removed, diffed or pushed on its word.
var ErrUntrusted = errors.New("workspace record not trusted")

// readRecord reads and checks a run's record: fs.ErrNotExist when there
// is none, ErrUntrusted (wrapped, saying why) when there is one that
// must not be acted on. Agents run as the worker's user and can write
// these files: a record is trusted only when it names this run, a
// project id, and as its path this host's worktree folder of the run
// (its own, or the one it took over) — a real directory there, not a
// symlink out of it — and that checkout, when there, belongs to the
// record's project's mirror.
func (m *Manager) readRecord(runID string) (Record, error) {
	if !wire.ValidUUID(runID) {
		return Record{}, fs.ErrNotExist
	}
	b, err := os.ReadFile(m.recordPath(runID))
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, err
	}
	untrusted := func(why string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrUntrusted, m.recordPath(runID), fmt.Sprintf(why, a...))
	}
	if err != nil {
		return Record{}, untrusted("%v", err)
	}
	var r Record
	switch {
	case json.Unmarshal(b, &r) != nil:
		return Record{}, untrusted("not a record")
	case r.RunID != runID:
		return Record{}, untrusted("it names run %q", r.RunID)
	case !wire.ValidUUID(r.ProjectID):
		return Record{}, untrusted("project %q is not a project id", r.ProjectID)
	case !wire.ValidUUID(r.folder()):
		return Record{}, untrusted("folder %q is not a run id", r.Folder)
	case r.Workspace.Path != m.Path(r.folder()):
		return Record{}, untrusted("path %q is not the worktree folder %s", r.Workspace.Path, m.Path(r.folder()))
	}
	if err := m.checkFolder(r); err != nil {
		return Record{}, untrusted("%v", err)
	}
	return r, nil
}

// checkFolder checks what is at a record's worktree path: nothing (the
// checkout is gone), or a directory that is not a symlink, whose
// resolved path is the folder under the resolved worktrees directory,
// and whose checkout, if it has one, is a worktree of the record's
// project's mirror.
func (m *Manager) checkFolder(r Record) error {
	path := r.Workspace.Path
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory (%s)", path, st.Mode().Type())
	}
	dir, err := filepath.EvalSymlinks(m.worktreesDir())
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(path); err != nil || real != filepath.Join(dir, r.folder()) {
		return fmt.Errorf("%s resolves to %q, outside %s (%v)", path, real, dir, err)
	}
	gitdir, ok := worktreeGitDir(path)
	if !ok {
		return nil // not (or no longer) a checkout: nothing of a mirror's
	}
	mirror, err := filepath.EvalSymlinks(m.MirrorPath(r.ProjectID))
	if errors.Is(err, fs.ErrNotExist) {
		// The mirror went (an operator removed it): the checkout must
		// still name it.
		want := filepath.Join(m.MirrorPath(r.ProjectID), "worktrees")
		if repos, err := filepath.EvalSymlinks(m.reposDir()); err == nil {
			want = filepath.Join(repos, r.ProjectID+".git", "worktrees")
		}
		if d := filepath.Dir(filepath.Clean(gitdir)); d != want && d != filepath.Join(m.MirrorPath(r.ProjectID), "worktrees") {
			return fmt.Errorf("the checkout %s belongs to %s, not to the mirror of project %s", path, gitdir, r.ProjectID)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(gitdir); err != nil || filepath.Dir(real) != filepath.Join(mirror, "worktrees") {
		return fmt.Errorf("the checkout %s belongs to %s, not to the mirror of project %s", path, gitdir, r.ProjectID)
	}
	return nil
}

// worktreeGitDir reads the "gitdir:" line of a worktree's .git file: the
// administrative directory in the mirror that the checkout belongs to.
func worktreeGitDir(path string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(path, ".git"))
	if err != nil {
		return "", false
	}
	dir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
	dir = strings.TrimSpace(dir)
	if !ok || dir == "" {
		return "", false
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(path, dir)
	}
	return dir, true
}

// Exists reports whether the run has a worktree here now: a record and
// its checkout. A new attempt that finds it resumes in it.
func (m *Manager) Exists(runID string) bool {
	rec, ok := m.Record(runID)
	return ok && isWorktree(rec.Workspace.Path)
}

// owners maps each worktree folder to the record that owns it: the run
// itself, or the newest run that took it over. A record another run took
// its folder from since (a takeover cut short between its two writes) is
// nobody's.
func (m *Manager) owners() (map[string]Record, error) {
	des, err := os.ReadDir(m.recordsDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	out := map[string]Record{}
	for _, de := range des {
		id, ok := strings.CutSuffix(de.Name(), ".json")
		if !ok {
			continue
		}
		rec, ok := m.Record(id)
		if !ok {
			continue
		}
		if cur, ok := out[rec.folder()]; ok && !owns(rec, cur) {
			continue
		}
		out[rec.folder()] = rec
	}
	return out, nil
}

// owns reports whether record a owns a folder record b claims too: a run
// that took it over beats the folder's own run, and the newer of two
// takers wins.
func owns(a, b Record) bool {
	if (a.Folder != "") != (b.Folder != "") {
		return a.Folder != ""
	}
	return a.CreatedAt.After(b.CreatedAt)
}

// takeOver makes the worktree in the folder that s.Path names the
// worktree of s.RunID: a continuation takes over the worktree of the run
// it continues (docs/architecture.md#resume-and-continue). The worktree
// must be there, owned by a run of this host; its record moves to the
// new run, so that clean-up of the old run never removes it.
func (m *Manager) takeOver(s Spec) (wire.Workspace, error) {
	folder := filepath.Base(s.Path)
	if filepath.Dir(s.Path) != m.worktreesDir() || !wire.ValidUUID(folder) {
		return wire.Workspace{}, fmt.Errorf("workspace %s is not a worktree of this host's", s.Path)
	}
	owners, err := m.owners()
	if err != nil {
		return wire.Workspace{}, err
	}
	owner, ok := owners[folder]
	if !ok || !isWorktree(s.Path) {
		return wire.Workspace{}, fmt.Errorf("the worktree %s of the run this one continues is gone from this host", s.Path)
	}
	if err := datadir.Ensure(m.recordsDir(), false); err != nil {
		return wire.Workspace{}, err
	}
	taken := Record{RunID: s.RunID, ProjectID: owner.ProjectID, URL: owner.URL, Workspace: owner.Workspace, Folder: folder, CreatedAt: time.Now().UTC()}
	if taken.Folder == taken.RunID {
		taken.Folder = ""
	}
	b, _ := json.MarshalIndent(taken, "", "  ")
	if err := datadir.WriteFileAtomic(m.recordPath(s.RunID), append(b, '\n'), 0o600); err != nil {
		return wire.Workspace{}, fmt.Errorf("record the worktree taken over: %w", err)
	}
	if owner.RunID != s.RunID {
		if err := os.Remove(m.recordPath(owner.RunID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return wire.Workspace{}, fmt.Errorf("hand the worktree over: %w", err)
		}
	}
	m.log.Info("worktree taken over", "run_id", s.RunID, "from_run_id", owner.RunID, "path", owner.Workspace.Path)
	return owner.Workspace, nil
}

// takenBy is the run that took over runID's folder, or "".
func (m *Manager) takenBy(runID string) (string, error) {
	owners, err := m.owners()
	if err != nil {
		return "", err
	}
	if o, ok := owners[runID]; ok && o.RunID != runID {
		return o.RunID, nil
	}
	return "", nil
}
