package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"pam/internal/wire"
)

// ErrNoWorkspace is the answer for a run without a worktree on this host.
var ErrNoWorkspace = errors.New("the run has no worktree on this host")

// TruncatedNotice ends a diff cut at wire.MaxDiff.
const TruncatedNotice = "\n[pam: diff truncated at 8 MiB]\n"

// snapshotIndex stages everything the run changed — commits on its
// branch, staged, unstaged and untracked files (.gitignore respected) —
// in a copy of its worktree's index, so that one `git diff --cached
// <base_commit>` shows it all and the agent's own index is left as it
// is. It returns the GIT_INDEX_FILE setting and a cleanup.
func (m *Manager) snapshotIndex(ctx context.Context, ws wire.Workspace) ([]string, func(), error) {
	idx, err := m.git(ctx, ws.Path, "rev-parse", "--path-format=absolute", "--git-path", "index")
	if err != nil {
		return nil, nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(idx), "pam-diff-index-*")
	if err != nil {
		return nil, nil, fmt.Errorf("diff: %w", err)
	}
	tmpName := tmp.Name()
	cleanup := func() { _ = os.Remove(tmpName) }
	// A copy keeps the stat cache: only changed files are hashed again.
	if src, err := os.Open(idx); err == nil {
		_, err = io.Copy(tmp, src)
		src.Close()
		if err != nil {
			tmp.Close()
			cleanup()
			return nil, nil, fmt.Errorf("diff: copy the index: %w", err)
		}
	}
	tmp.Close()
	env := []string{"GIT_INDEX_FILE=" + tmpName}
	if _, err := m.run(ctx, cmd{dir: ws.Path, env: env, args: []string{"add", "--all", "--", "."}}); err != nil {
		cleanup()
		return nil, nil, err
	}
	return env, cleanup, nil
}

// diffArgs are the options every diff of a run uses: no external or
// textconv drivers (nothing configured in the repository runs), no
// colour, no rename detection (a file is added, modified, deleted).
var diffArgs = []string{"diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames"}

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

// Diff writes the unified diff of everything a run changed since its
// base commit to w: at most limit bytes, then TruncatedNotice. Binary
// files are named ("Binary files … differ"), never dumped.
func (m *Manager) Diff(ctx context.Context, runID string, w io.Writer, limit int64) error {
	rec, ok := m.Record(runID)
	if !ok || !isWorktree(rec.Workspace.Path) {
		return ErrNoWorkspace
	}
	env, cleanup, err := m.snapshotIndex(ctx, rec.Workspace)
	if err != nil {
		return err
	}
	defer cleanup()
	lw := &limitWriter{w: w, n: limit}
	args := append(append([]string{}, diffArgs...), rec.Workspace.BaseCommit, "--")
	_, err = m.run(ctx, cmd{dir: rec.Workspace.Path, env: env, args: args, stdout: lw})
	if lw.full {
		_, werr := io.WriteString(w, TruncatedNotice)
		return werr
	}
	return err
}

// Stat counts the lines each changed file gains and loses, as `git diff
// --numstat` does, with its status; a binary file's counts are null.
func (m *Manager) Stat(ctx context.Context, runID string) ([]wire.DiffFile, error) {
	rec, ok := m.Record(runID)
	if !ok || !isWorktree(rec.Workspace.Path) {
		return nil, ErrNoWorkspace
	}
	env, cleanup, err := m.snapshotIndex(ctx, rec.Workspace)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	base := rec.Workspace.BaseCommit
	status, err := m.run(ctx, cmd{dir: rec.Workspace.Path, env: env, args: append(append([]string{}, diffArgs...), "--name-status", "-z", base, "--")})
	if err != nil {
		return nil, err
	}
	numstat, err := m.run(ctx, cmd{dir: rec.Workspace.Path, env: env, args: append(append([]string{}, diffArgs...), "--numstat", "-z", base, "--")})
	if err != nil {
		return nil, err
	}
	return parseStat(status, numstat)
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
// never the operator's. It returns the workspace pushed and git's
// report, bounded.
func (m *Manager) Push(ctx context.Context, runID string) (wire.Workspace, string, error) {
	rec, ok := m.Record(runID)
	if !ok {
		return wire.Workspace{}, "", ErrNoWorkspace
	}
	mirror := m.MirrorPath(rec.ProjectID)
	ref := "refs/heads/" + rec.Workspace.Branch
	var out bytes.Buffer
	_, err := m.run(ctx, cmd{dir: mirror, stdout: &out, args: []string{"push", "--porcelain", "origin", ref + ":" + ref}})
	if err != nil {
		return rec.Workspace, "", err
	}
	return rec.Workspace, Detail(errors.New(strings.TrimSpace(out.String()))), nil
}
