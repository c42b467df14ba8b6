// Package workspace gives each run its own git checkout on a worker host
// (docs/architecture.md#workspaces): a bare mirror per project at
// <data>/repos/<project_id>.git, cloned once and fetched before each run
// under one lock per mirror, and a worktree per run at
// <data>/worktrees/<run_id> on its own branch. It is the only package
// that runs git; git runs as a subprocess with argv only, never
// interactive, within a timeout.
package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"pam/internal/datadir"
	"pam/internal/wire"
)

// Options configure a Manager.
type Options struct {
	// DataDir is PAM_DATA_DIR: mirrors go to <DataDir>/repos, worktrees
	// to <DataDir>/worktrees, and what the worker knows of each worktree
	// to <DataDir>/worker/workspaces.
	DataDir string
	// Git is the git binary; empty means "git" on PATH.
	Git string
	// Timeout bounds each git command; default 10 minutes (a first clone
	// of a large repository).
	Timeout time.Duration
	// Logger gets the manager's events; nil discards them.
	Logger *slog.Logger
}

// Spec is what a run's dispatch asks for: the project's repository and
// the run's branch. BaseCommit is set on a later attempt whose worktree
// was made before (on this host or another).
type Spec struct {
	RunID      string
	ProjectID  string
	URL        string
	Base       string
	Branch     string
	BaseCommit string
	// Path is the worktree the dispatch names, when one was made before:
	// the run's own folder, or — for a run that continues another — the
	// folder of the run it continues, which this run takes over
	// (docs/architecture.md#resume-and-continue).
	Path string
}

// Record is what the worker keeps about one worktree it made, in
// <data>/worker/workspaces/<run_id>.json: enough to diff, push and
// remove it without asking anyone.
type Record struct {
	RunID     string         `json:"run_id"`
	ProjectID string         `json:"project_id"`
	URL       string         `json:"url"`
	Workspace wire.Workspace `json:"workspace"`
	CreatedAt time.Time      `json:"created_at"`
	// Folder is the run whose folder under <data>/worktrees the worktree
	// is, when it is not RunID's own: the run RunID continues, whose
	// worktree it took over (docs/architecture.md#resume-and-continue).
	// The worktree belongs to RunID all the same.
	Folder string `json:"folder,omitempty"`
}

// folder is the run whose folder the record's worktree is.
func (r Record) folder() string {
	if r.Folder != "" {
		return r.Folder
	}
	return r.RunID
}

// Manager makes, diffs, pushes and removes worktrees.
type Manager struct {
	o   Options
	log *slog.Logger

	mu      sync.Mutex
	mirrors map[string]*mirrorLock // by project id
}

// mirrorLock orders this process's users of one mirror before they take
// its flock (which orders processes): a channel so a wait honours ctx.
type mirrorLock struct{ ch chan struct{} }

// New checks the options and returns a Manager. It does not need git
// until the first worktree is asked for.
func New(o Options) (*Manager, error) {
	if o.DataDir == "" {
		return nil, errors.New("workspace: no data dir")
	}
	if o.Git == "" {
		o.Git = "git"
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{o: o, log: o.Logger, mirrors: map[string]*mirrorLock{}}, nil
}

// Dirs of a Manager.
func (m *Manager) reposDir() string     { return filepath.Join(m.o.DataDir, "repos") }
func (m *Manager) worktreesDir() string { return filepath.Join(m.o.DataDir, "worktrees") }
func (m *Manager) recordsDir() string   { return filepath.Join(m.o.DataDir, "worker", "workspaces") }

// MirrorPath is the bare mirror of a project.
func (m *Manager) MirrorPath(projectID string) string {
	return filepath.Join(m.reposDir(), projectID+".git")
}

// Path is where a run's worktree is.
func (m *Manager) Path(runID string) string { return filepath.Join(m.worktreesDir(), runID) }

func (m *Manager) recordPath(runID string) string {
	return filepath.Join(m.recordsDir(), runID+".json")
}

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

// lock takes the mirror of a project for this caller: first in this
// process, then the flock <data>/repos/<project_id>.lock across
// processes. The returned func releases both.
func (m *Manager) lock(ctx context.Context, projectID string) (func(), error) {
	m.mu.Lock()
	l := m.mirrors[projectID]
	if l == nil {
		l = &mirrorLock{ch: make(chan struct{}, 1)}
		m.mirrors[projectID] = l
	}
	m.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	fl := flock.New(filepath.Join(m.reposDir(), projectID+".lock"))
	ok, err := fl.TryLockContext(ctx, 20*time.Millisecond)
	if err != nil || !ok {
		<-l.ch
		if err == nil {
			err = errors.New("mirror lock not taken")
		}
		return nil, fmt.Errorf("lock the mirror of project %s: %w", projectID, err)
	}
	return func() {
		_ = fl.Unlock()
		<-l.ch
	}, nil
}

// Prepare makes the worktree of a run, or finds the one an earlier
// attempt made, and returns it. The mirror is cloned on first use and
// fetched before each worktree is made; runs that ask at once share one
// fetch. Any failure leaves nothing half-made behind: no worktree
// directory, no record, no branch this call created.
func (m *Manager) Prepare(ctx context.Context, s Spec) (wire.Workspace, error) {
	if !wire.ValidUUID(s.RunID) || !wire.ValidUUID(s.ProjectID) {
		return wire.Workspace{}, errors.New("workspace: run and project ids must be UUIDs")
	}
	if err := wire.ValidateRepoURL(s.URL); err != nil {
		return wire.Workspace{}, err
	}
	if s.Base != "" {
		if err := wire.ValidateRef("repo.base", s.Base); err != nil {
			return wire.Workspace{}, err
		}
	}
	if err := wire.ValidateRef("branch", s.Branch); err != nil {
		return wire.Workspace{}, err
	}
	path := m.Path(s.RunID)
	rec, err := m.readRecord(s.RunID)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wire.Workspace{}, err // never make again over what a record we do not trust names
	}
	recorded := err == nil
	if recorded && isWorktree(rec.Workspace.Path) {
		return rec.Workspace, nil // a later attempt: the same checkout
	}
	if s.Path != "" && s.Path != path {
		return m.takeOver(s) // a continuation: the worktree of the run it continues
	}
	// The folder may have gone to a run that continues this one: never
	// make it again under that run's feet.
	if by, err := m.takenBy(s.RunID); err != nil || by != "" {
		if err == nil {
			err = fmt.Errorf("the worktree of run %s belongs to run %s, which continues it", s.RunID, by)
		}
		return wire.Workspace{}, err
	}
	for _, d := range []string{m.reposDir(), m.worktreesDir(), m.recordsDir()} {
		if err := datadir.Ensure(d, false); err != nil {
			return wire.Workspace{}, err
		}
	}
	asked := time.Now()
	unlock, err := m.lock(ctx, s.ProjectID)
	if err != nil {
		return wire.Workspace{}, err
	}
	// Whatever is there without a record was left half-made (a worker
	// killed while making it): start again.
	if err := m.removeDir(ctx, s.ProjectID, path); err != nil {
		unlock()
		return wire.Workspace{}, err
	}
	mirror, base, err := m.sync(ctx, s, asked)
	if err == nil && recorded {
		// The checkout went away behind pam's back: the mirror still
		// lists it (and its branch as checked out) until pruned.
		_, err = m.git(ctx, mirror, "worktree", "prune")
	}
	if err != nil {
		unlock()
		return wire.Workspace{}, err
	}
	ws, err := m.addWorktree(ctx, mirror, s, path, base)
	unlock()
	if err != nil {
		return wire.Workspace{}, err
	}
	made := Record{RunID: s.RunID, ProjectID: s.ProjectID, URL: s.URL, Workspace: ws, CreatedAt: time.Now().UTC()}
	b, _ := json.MarshalIndent(made, "", "  ")
	if err := datadir.WriteFileAtomic(m.recordPath(s.RunID), append(b, '\n'), 0o600); err != nil {
		_ = m.removeLocked(context.WithoutCancel(ctx), s.ProjectID, path)
		return wire.Workspace{}, fmt.Errorf("record the worktree: %w", err)
	}
	return ws, nil
}

// sync makes sure the project's mirror exists, points at url and has
// fetched since asked, and resolves the commit to branch from. Called
// with the mirror locked.
func (m *Manager) sync(ctx context.Context, s Spec, asked time.Time) (mirror, base string, err error) {
	mirror = m.MirrorPath(s.ProjectID)
	if _, err := os.Stat(filepath.Join(mirror, "HEAD")); err != nil {
		if err := m.clone(ctx, mirror, s.URL); err != nil {
			return "", "", err
		}
	} else {
		url, _ := m.git(ctx, mirror, "config", "--get", "remote.origin.url")
		if url != s.URL {
			if _, err := m.git(ctx, mirror, "config", "remote.origin.url", s.URL); err != nil {
				return "", "", err
			}
		}
		// Runs that asked while another fetched share its fetch.
		if st, err := os.Stat(filepath.Join(mirror, "FETCH_HEAD")); err != nil || st.ModTime().Before(asked) {
			if err := m.fetch(ctx, mirror); err != nil {
				return "", "", err
			}
		}
	}
	if s.BaseCommit != "" {
		if c, err := m.commit(ctx, mirror, s.BaseCommit); err == nil {
			return mirror, c, nil
		}
	}
	base, err = m.resolveBase(ctx, mirror, s.Base)
	return mirror, base, err
}

// clone makes the bare mirror: init in a temporary directory, fetch,
// then rename into place, so that a failed clone leaves nothing.
// Remote branches land in refs/remotes/origin/*, never in refs/heads/*
// where the runs' branches live (a fetch must not touch those).
func (m *Manager) clone(ctx context.Context, mirror, url string) error {
	tmp, err := os.MkdirTemp(m.reposDir(), ".clone-*")
	if err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	defer os.RemoveAll(tmp)
	steps := [][]string{
		{"init", "--quiet", "--bare", "--", tmp},
		{"-C", tmp, "config", "remote.origin.url", url},
		{"-C", tmp, "config", "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"},
		{"-C", tmp, "config", "gc.auto", "0"},
	}
	for _, a := range steps {
		if _, err := m.git(ctx, "", a...); err != nil {
			return err
		}
	}
	if err := m.fetch(ctx, tmp); err != nil {
		return err
	}
	// origin/HEAD names the remote's default branch, the base when a
	// project names none.
	if _, err := m.git(ctx, tmp, "remote", "set-head", "origin", "--auto"); err != nil {
		m.log.Warn("mirror: the remote's default branch is unknown", "url", url, "err", err)
	}
	if err := os.Rename(tmp, mirror); err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	m.log.Info("mirror cloned", "mirror", mirror)
	return nil
}

// fetch updates the mirror's remote branches and tags.
func (m *Manager) fetch(ctx context.Context, mirror string) error {
	start := time.Now()
	_, err := m.git(ctx, mirror, "fetch", "--quiet", "--prune", "--tags", "origin")
	if err == nil {
		m.log.Debug("mirror fetched", "mirror", mirror, "took", time.Since(start).Round(time.Millisecond))
	}
	return err
}

// commit resolves rev to a commit id in the mirror.
func (m *Manager) commit(ctx context.Context, mirror, rev string) (string, error) {
	return m.git(ctx, mirror, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
}

// resolveBase finds the commit a run branches from: the remote's
// default branch when base is empty, else the remote branch, tag or
// commit id it names.
func (m *Manager) resolveBase(ctx context.Context, mirror, base string) (string, error) {
	var tries []string
	if base == "" {
		tries = []string{"refs/remotes/origin/HEAD"}
	} else {
		tries = []string{"refs/remotes/origin/" + base, "refs/tags/" + base, base}
	}
	for _, ref := range tries {
		if c, err := m.commit(ctx, mirror, ref); err == nil && c != "" {
			return c, nil
		}
	}
	if base == "" {
		// The default branch may have been unknown at clone time.
		if _, err := m.git(ctx, mirror, "remote", "set-head", "origin", "--auto"); err != nil {
			return "", err
		}
		if c, err := m.commit(ctx, mirror, "refs/remotes/origin/HEAD"); err == nil && c != "" {
			return c, nil
		}
		return "", errors.New("the repository's default branch is unknown: set the project's repo base")
	}
	return "", fmt.Errorf("base %q is not a branch, tag or commit of the repository", base)
}

// addWorktree adds the run's worktree on its branch: a new branch from
// base, or the branch an earlier attempt made (kept in the mirror when
// its worktree was removed). Called with the mirror locked.
func (m *Manager) addWorktree(ctx context.Context, mirror string, s Spec, path, base string) (wire.Workspace, error) {
	ws := wire.Workspace{Path: path, Branch: s.Branch, BaseCommit: base}
	ref := "refs/heads/" + s.Branch
	_, err := m.git(ctx, mirror, "show-ref", "--verify", "--quiet", ref)
	existing := err == nil
	if existing {
		if s.BaseCommit == "" {
			// The branch outlived its worktree and its record: diff from
			// where it left the base.
			if mb, err := m.git(ctx, mirror, "merge-base", "--", base, ref); err == nil && mb != "" {
				ws.BaseCommit = mb
			}
		}
		_, err = m.git(ctx, mirror, "-c", parallelCheckout, "worktree", "add", "--quiet", "--", path, s.Branch)
	} else {
		_, err = m.git(ctx, mirror, "-c", parallelCheckout, "worktree", "add", "--quiet", "--no-track", "-b", s.Branch, "--", path, base)
	}
	if err != nil {
		cleanup := context.WithoutCancel(ctx)
		_ = m.removeDir(cleanup, s.ProjectID, path)
		if !existing {
			_, _ = m.git(cleanup, mirror, "branch", "--quiet", "-D", "--", s.Branch)
		}
		return wire.Workspace{}, err
	}
	return ws, nil
}

// parallelCheckout writes a worktree's files with one worker per core:
// the checkout is most of what a worktree adds to a run's start, and it
// is file creation, which parallel workers nearly halve on two cores.
const parallelCheckout = "checkout.workers=0"

// isWorktree reports whether path looks like a checked-out worktree.
func isWorktree(path string) bool {
	st, err := os.Stat(filepath.Join(path, ".git"))
	return err == nil && st.Mode().IsRegular()
}

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
