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
	"path/filepath"
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
