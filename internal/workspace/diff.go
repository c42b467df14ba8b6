package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"pam/internal/datadir"
	"pam/internal/wire"
)

// ErrNoWorkspace is the answer for a run without a worktree on this host.
var ErrNoWorkspace = errors.New("the run has no worktree on this host")

// TruncatedNotice ends a diff cut at wire.MaxDiff.
const TruncatedNotice = "\n[pam: diff truncated at 8 MiB]\n"

// snapshot stages what a run's working tree holds — staged, unstaged
// and untracked files (.gitignore respected) — in a copy of its
// worktree's index, so that one `git diff --cached <head>` shows it all
// and the agent's own index is left as it is. Nothing is written into
// the project's mirror: the index copy and the blobs `git add` makes go
// to a scratch directory (GIT_OBJECT_DIRECTORY), which reads the
// mirror's objects as an alternate, and which the returned cleanup
// removes. It returns the environment of the git commands that read the
// snapshot.
func (m *Manager) snapshot(ctx context.Context, ws wire.Workspace) ([]string, func(), error) {
	paths, err := m.git(ctx, ws.Path, "rev-parse", "--path-format=absolute", "--git-path", "index", "--git-path", "objects")
	if err != nil {
		return nil, nil, err
	}
	idx, objects, ok := strings.Cut(paths, "\n")
	if !ok {
		return nil, nil, fmt.Errorf("diff: git rev-parse --git-path printed %q", paths)
	}
	if err := datadir.Ensure(m.reposDir(), false); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp(m.reposDir(), scratchPrefix+"*")
	if err != nil {
		return nil, nil, fmt.Errorf("diff: %w", err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	tmpIdx := filepath.Join(dir, "index")
	if err := os.Mkdir(filepath.Join(dir, "objects"), 0o700); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("diff: %w", err)
	}
	// A copy keeps the stat cache: only changed files are hashed again.
	if err := copyFile(idx, tmpIdx); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("diff: copy the index: %w", err)
	}
	env := []string{
		"GIT_INDEX_FILE=" + tmpIdx,
		"GIT_OBJECT_DIRECTORY=" + filepath.Join(dir, "objects"),
		"GIT_ALTERNATE_OBJECT_DIRECTORIES=" + strings.TrimSpace(objects),
	}
	if _, err := m.run(ctx, cmd{dir: ws.Path, env: env, args: []string{"-c", "core.splitIndex=false", "add", "--all", "--", "."}}); err != nil {
		cleanup()
		return nil, nil, err
	}
	return env, cleanup, nil
}

// scratchPrefix names the scratch directories of diffs under
// <data>/repos; one a killed worker left is removed by PruneMirrors.
const scratchPrefix = ".diff-"

// copyFile copies src to dst; a src that does not exist (a worktree
// whose index was never written) leaves dst absent too.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	// The copy keeps the index's own mtime: git takes an entry whose file
	// changed in the same second as the index was written ("racily
	// clean") as one to hash again only by comparing it with the index
	// file's mtime. A copy stamped now would make such a file, rewritten
	// with the same size just after a commit, look unchanged.
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	return os.Chtimes(dst, fi.ModTime(), fi.ModTime())
}

// head is the commit the run's branch is at: what a push sends.
func (m *Manager) head(ctx context.Context, ws wire.Workspace) (string, error) {
	c, err := m.commit(ctx, ws.Path, "refs/heads/"+ws.Branch)
	if err != nil || c == "" {
		return "", fmt.Errorf("the run's branch %s is gone: %w", ws.Branch, err)
	}
	return c, nil
}

// diffOpts are the options every diff of a run uses: no external or
// textconv drivers (nothing configured in the repository runs), no
// colour, no rename detection (a file is added, modified, deleted).
var diffOpts = []string{"--no-color", "--no-ext-diff", "--no-textconv", "--no-renames"}

// part is one part of a run's diff: the git diff command that shows it
// (after "diff" and diffOpts, before extra options), the environment it
// needs, and whether it is the committed part.
type part struct {
	committed bool
	env       []string
	args      []string
}

// parts resolves the run's head and returns the parts of its diff that
// which asks for ("" = both), committed first, and a cleanup.
func (m *Manager) parts(ctx context.Context, ws wire.Workspace, which string) (head string, ps []part, cleanup func(), err error) {
	head, err = m.head(ctx, ws)
	if err != nil {
		return "", nil, nil, err
	}
	cleanup = func() {}
	if which != wire.DiffPartUncommitted {
		ps = append(ps, part{committed: true, args: []string{ws.BaseCommit, head}})
	}
	if which != wire.DiffPartCommitted {
		env, done, err := m.snapshot(ctx, ws)
		if err != nil {
			return "", nil, nil, err
		}
		cleanup = done
		ps = append(ps, part{env: env, args: []string{"--cached", head}})
	}
	return head, ps, cleanup, nil
}

func (p part) argv(extra ...string) []string {
	a := append(append([]string{"diff"}, diffOpts...), extra...)
	return append(append(a, p.args...), "--")
}

// limitWriter passes at most n bytes and then says it was full.
type limitWriter struct {
	w    io.Writer
	n    int64
	full bool
}

var errFull = errors.New("diff limit reached")

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		p = p[:l.n]
		l.full = true
	}
	n, err := l.w.Write(p)
	l.n -= int64(n)
	if err == nil && l.full {
		err = errFull
	}
	return n, err
}

// Diff writes the unified diff of what a run changed since its base
// commit to w: its committed part (base_commit..head, what a push
// sends), then its uncommitted part (head to the working tree), or only
// the part which names; at most limit bytes, then TruncatedNotice.
// Binary files are named ("Binary files … differ"), never dumped. It
// returns the head the diff was taken at.
func (m *Manager) Diff(ctx context.Context, runID, which string, w io.Writer, limit int64) (string, error) {
	rec, ok := m.Record(runID)
	if !ok || !isWorktree(rec.Workspace.Path) {
		return "", ErrNoWorkspace
	}
	head, ps, cleanup, err := m.parts(ctx, rec.Workspace, which)
	if err != nil {
		return "", err
	}
	defer cleanup()
	lw := &limitWriter{w: w, n: limit}
	for _, p := range ps {
		_, err = m.run(ctx, cmd{dir: rec.Workspace.Path, env: p.env, args: p.argv(), stdout: lw})
		if lw.full {
			_, werr := io.WriteString(w, TruncatedNotice)
			return head, werr
		}
		if err != nil {
			return head, err
		}
	}
	return head, nil
}

// Stat counts the lines each changed file gains and loses, as `git diff
// --numstat` does, with its status and its part; a binary file's counts
// are null. which is as Diff's.
func (m *Manager) Stat(ctx context.Context, runID, which string) (wire.DiffStat, error) {
	rec, ok := m.Record(runID)
	if !ok || !isWorktree(rec.Workspace.Path) {
		return wire.DiffStat{}, ErrNoWorkspace
	}
	head, ps, cleanup, err := m.parts(ctx, rec.Workspace, which)
	if err != nil {
		return wire.DiffStat{}, err
	}
	defer cleanup()
	out := wire.DiffStat{Head: head, Files: []wire.DiffFile{}}
	for _, p := range ps {
		status, err := m.run(ctx, cmd{dir: rec.Workspace.Path, env: p.env, args: p.argv("--name-status", "-z")})
		if err != nil {
			return wire.DiffStat{}, err
		}
		numstat, err := m.run(ctx, cmd{dir: rec.Workspace.Path, env: p.env, args: p.argv("--numstat", "-z")})
		if err != nil {
			return wire.DiffStat{}, err
		}
		files, err := parseStat(status, numstat)
		if err != nil {
			return wire.DiffStat{}, err
		}
		for i := range files {
			files[i].Committed = p.committed
		}
		out.Files = append(out.Files, files...)
	}
	return out, nil
}

// parseStat joins `--name-status -z` ("M\0path\0…") and `--numstat -z`
// ("added\tdeleted\tpath\0…", "-" for binary) by path.
func parseStat(status, numstat []byte) ([]wire.DiffFile, error) {
	names := map[string]string{
		"A": "added", "M": "modified", "D": "deleted", "T": "typechange", "U": "unmerged",
	}
	var files []wire.DiffFile
	index := map[string]int{}
	parts := bytes.Split(bytes.TrimSuffix(status, []byte{0}), []byte{0})
	for i := 0; i+1 < len(parts); i += 2 {
		st, path := string(parts[i]), string(parts[i+1])
		word, ok := names[st]
		if !ok {
			word = strings.ToLower(st)
		}
		index[path] = len(files)
		files = append(files, wire.DiffFile{Path: path, Status: word})
	}
	for _, rec := range bytes.Split(bytes.TrimSuffix(numstat, []byte{0}), []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		f := strings.SplitN(string(rec), "\t", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("diff --numstat: unexpected line %q", rec)
		}
		i, ok := index[f[2]]
		if !ok {
			return nil, fmt.Errorf("diff --numstat: %q is not in --name-status", f[2])
		}
		if a, err := strconv.Atoi(f[0]); err == nil {
			files[i].Added = &a
		}
		if d, err := strconv.Atoi(f[1]); err == nil {
			files[i].Deleted = &d
		}
	}
	if files == nil {
		files = []wire.DiffFile{}
	}
	return files, nil
}

// Push pushes the run's branch to the project's repository with the
// worker's own git credentials (its credential helper, its ssh keys),
// never the operator's. With commit (the head a person reviewed), the
// branch must be at that commit — else a *wire.Error head_moved naming
// the head, and nothing is pushed — and exactly that commit is pushed,
// whatever the branch does meanwhile. It returns the workspace and the
// commit pushed, and git's report, bounded.
func (m *Manager) Push(ctx context.Context, runID, commit string) (wire.Workspace, string, string, error) {
	rec, ok := m.Record(runID)
	if !ok {
		return wire.Workspace{}, "", "", ErrNoWorkspace
	}
	mirror := m.MirrorPath(rec.ProjectID)
	ref := "refs/heads/" + rec.Workspace.Branch
	head, err := m.commit(ctx, mirror, ref)
	if err != nil || head == "" {
		return rec.Workspace, "", "", fmt.Errorf("the run's branch %s is gone: %w", rec.Workspace.Branch, err)
	}
	if commit != "" && commit != head {
		return rec.Workspace, head, "", wire.Conflict(wire.CodeHeadMoved,
			"the branch %s is at %.12s now, not at the reviewed %.12s: review it again", rec.Workspace.Branch, head, commit).With("head", head)
	}
	var out bytes.Buffer
	_, err = m.run(ctx, cmd{dir: mirror, stdout: &out, args: []string{"push", "--porcelain", "origin", head + ":" + ref}})
	if err != nil {
		return rec.Workspace, head, "", err
	}
	return rec.Workspace, head, Detail(errors.New(strings.TrimSpace(out.String()))), nil
}
