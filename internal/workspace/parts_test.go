package workspace

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"pam/internal/pamtest"
	"pam/internal/wire"
)

// TestDiffCommittedThenReverted: an agent commits a change and undoes it
// in its working tree. The working tree alone shows nothing, but the
// branch — what a push sends — holds the change: the stat names the
// branch's head and lists the change as committed, the committed part
// alone is what the push would send, and the undoing is the uncommitted
// part.
func TestDiffCommittedThenReverted(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"tracked.txt": "one\ntwo\n"})
	m := newManager(t, "")
	s := spec(uuid.NewString(), remote)
	ws, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ws.Path, "tracked.txt"), "one\nTWO\n")
	write(t, filepath.Join(ws.Path, "secret.txt"), "shipped\n")
	pamtest.Git(t, ws.Path, "add", "-A")
	pamtest.Git(t, ws.Path, "commit", "--quiet", "-m", "the change")
	head := pamtest.Git(t, ws.Path, "rev-parse", "HEAD")
	// Undone in the working tree only.
	write(t, filepath.Join(ws.Path, "tracked.txt"), "one\ntwo\n")
	if err := os.Remove(filepath.Join(ws.Path, "secret.txt")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ws.Path, "wip.txt"), "not committed\n")

	st, err := m.Stat(t.Context(), s.RunID, "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Head != head {
		t.Errorf("head %q, want the branch's %s", st.Head, head)
	}
	got := map[string]string{}
	for _, f := range st.Files {
		part := "uncommitted"
		if f.Committed {
			part = "committed"
		}
		got[part+" "+f.Path] = f.Status
	}
	want := map[string]string{
		"committed tracked.txt": "modified", "committed secret.txt": "added",
		"uncommitted tracked.txt": "modified", "uncommitted secret.txt": "deleted", "uncommitted wip.txt": "added",
	}
	if len(got) != len(want) || len(st.Files) != len(want) {
		t.Errorf("stat %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (stat %v)", k, got[k], v, got)
		}
	}

	st, err = m.Stat(t.Context(), s.RunID, wire.DiffPartCommitted)
	if err != nil {
		t.Fatal(err)
	}
	if st.Head != head || len(st.Files) != 2 {
		t.Errorf("committed part: %+v", st)
	}
	for _, f := range st.Files {
		if !f.Committed {
			t.Errorf("committed part lists %s as uncommitted", f.Path)
		}
	}

	var buf bytes.Buffer
	dh, err := m.Diff(t.Context(), s.RunID, wire.DiffPartCommitted, &buf, wire.MaxDiff)
	if err != nil {
		t.Fatal(err)
	}
	committed := buf.String()
	if dh != head || !strings.Contains(committed, "+++ b/secret.txt") || !strings.Contains(committed, "+TWO") || strings.Contains(committed, "wip.txt") {
		t.Errorf("committed part at %s:\n%s", dh, committed)
	}
	// Exactly git's own diff of what a push sends.
	if want := pamtest.Git(t, ws.Path, "diff", "--no-color", "--no-renames", ws.BaseCommit, head); strings.TrimSpace(committed) != want {
		t.Errorf("committed part differs from git diff base..head:\n%s\nwant\n%s", committed, want)
	}
	buf.Reset()
	if _, err := m.Diff(t.Context(), s.RunID, wire.DiffPartUncommitted, &buf, wire.MaxDiff); err != nil {
		t.Fatal(err)
	}
	if u := buf.String(); !strings.Contains(u, "--- a/secret.txt") || !strings.Contains(u, "+++ b/wip.txt") || !strings.Contains(u, "-TWO") {
		t.Errorf("uncommitted part:\n%s", u)
	}
	buf.Reset()
	if _, err := m.Diff(t.Context(), s.RunID, "", &buf, wire.MaxDiff); err != nil {
		t.Fatal(err)
	}
	if all := buf.String(); !strings.HasPrefix(all, committed) || !strings.Contains(all, "+++ b/wip.txt") {
		t.Errorf("the whole diff is not the committed part then the rest:\n%s", all)
	}
}

// TestPushReviewedCommit: a push naming the head that was reviewed is
// refused head_moved, pushing nothing, once the branch moved on; naming
// the head it is at, it pushes exactly that commit.
func TestPushReviewedCommit(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"a": "a\n"})
	m := newManager(t, "")
	s := spec(uuid.NewString(), remote)
	ws, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(name string) string {
		write(t, filepath.Join(ws.Path, name), name+"\n")
		pamtest.Git(t, ws.Path, "add", name)
		pamtest.Git(t, ws.Path, "commit", "--quiet", "-m", name)
		return pamtest.Git(t, ws.Path, "rev-parse", "HEAD")
	}
	reviewed := commit("reviewed.txt")
	st, err := m.Stat(t.Context(), s.RunID, "")
	if err != nil || st.Head != reviewed {
		t.Fatalf("stat head %q, %v; want %s", st.Head, err, reviewed)
	}
	moved := commit("sneaked-in.txt")

	_, head, _, err := m.Push(t.Context(), s.RunID, reviewed)
	if !wire.HasCode(err, wire.CodeHeadMoved) || head != moved {
		t.Fatalf("push of the stale head: head %q, err %v", head, err)
	}
	if e, _ := wire.AsError(err); e.Details["head"] != moved {
		t.Errorf("head_moved details %v", e.Details)
	}
	if out, err := exec.Command("git", "-C", remote, "rev-parse", "--verify", "--quiet", "refs/heads/"+ws.Branch).CombinedOutput(); err == nil {
		t.Fatalf("a refused push pushed the branch: %s", out)
	}

	_, pushed, _, err := m.Push(t.Context(), s.RunID, moved)
	if err != nil || pushed != moved {
		t.Fatalf("push of the head: %q, %v", pushed, err)
	}
	if got := pamtest.Git(t, remote, "rev-parse", "refs/heads/"+ws.Branch); got != moved {
		t.Errorf("remote branch at %s, want %s", got, moved)
	}
}

// objectFiles lists the object files of a repository: loose objects and
// packs, each with its size.
func objectFiles(t *testing.T, repo string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(filepath.Join(repo, "objects"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			out[path] = info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDiffWritesNoObjects: a diff and a stat of a worktree with new and
// changed files leave the project's mirror as they found it — not one
// object more — and leave no scratch behind, though the diff shows the
// new files' contents.
func TestDiffWritesNoObjects(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"tracked.txt": "one\n"})
	m := newManager(t, "")
	s := spec(uuid.NewString(), remote)
	ws, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	mirror := m.MirrorPath(s.ProjectID)
	write(t, filepath.Join(ws.Path, "tracked.txt"), "one\nchanged "+uuid.NewString()+"\n")
	for i := range 5 {
		write(t, filepath.Join(ws.Path, "untracked-"+string(rune('a'+i))+".txt"), uuid.NewString()+"\n")
	}
	before := objectFiles(t, mirror)
	for range 3 {
		var buf bytes.Buffer
		if _, err := m.Diff(t.Context(), s.RunID, "", &buf, wire.MaxDiff); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "+++ b/untracked-e.txt") || !strings.Contains(buf.String(), "+changed ") {
			t.Fatalf("the diff does not show the new files:\n%s", buf.String())
		}
		if _, err := m.Stat(t.Context(), s.RunID, ""); err != nil {
			t.Fatal(err)
		}
	}
	after := objectFiles(t, mirror)
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("the diff wrote %s into the mirror", p)
		}
	}
	if len(after) != len(before) {
		t.Errorf("mirror objects: %d before, %d after", len(before), len(after))
	}
	if left, _ := filepath.Glob(filepath.Join(m.reposDir(), scratchPrefix+"*")); len(left) > 0 {
		t.Errorf("scratch left behind: %v", left)
	}
	if st := pamtest.Git(t, ws.Path, "status", "--porcelain"); !strings.Contains(st, "?? untracked-a.txt") {
		t.Errorf("the agent's index changed: %q", st)
	}
}

// TestPruneMirrors: pruning a mirror removes objects nothing reaches
// (what diffs used to leave), and keeps everything a live worktree
// holds — its commits on a detached HEAD, its staged files — though
// they are just as old; the worktree still works. The schedule prunes a
// mirror once per period.
func TestPruneMirrors(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"a": "a\n"})
	m := newManager(t, "")
	s := spec(uuid.NewString(), remote)
	ws, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	mirror := m.MirrorPath(s.ProjectID)
	hashObject := func(dir, body string) string {
		t.Helper()
		c := exec.Command("git", "-C", dir, "hash-object", "-w", "--stdin")
		c.Stdin = strings.NewReader(body)
		out, err := c.Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	garbage := hashObject(mirror, "left by an old diff "+uuid.NewString())
	// The live worktree: a commit only its detached HEAD reaches, and a
	// staged file no commit has.
	pamtest.Git(t, ws.Path, "checkout", "--quiet", "--detach")
	write(t, filepath.Join(ws.Path, "detached.txt"), uuid.NewString())
	pamtest.Git(t, ws.Path, "add", "detached.txt")
	pamtest.Git(t, ws.Path, "commit", "--quiet", "-m", "detached")
	detached := pamtest.Git(t, ws.Path, "rev-parse", "HEAD")
	write(t, filepath.Join(ws.Path, "staged.txt"), "staged "+uuid.NewString())
	pamtest.Git(t, ws.Path, "add", "staged.txt")
	staged := pamtest.Git(t, ws.Path, "rev-parse", ":staged.txt")
	// Everything is old enough to go, unless something reaches it.
	old := time.Now().Add(-3 * time.Hour)
	for p := range objectFiles(t, mirror) {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	has := func(id string) bool {
		return exec.Command("git", "-C", mirror, "cat-file", "-e", id).Run() == nil
	}
	if !has(garbage) || !has(staged) || !has(detached) {
		t.Fatal("objects missing before the prune")
	}
	m.PruneMirrors(t.Context(), PruneEvery)
	if has(garbage) {
		t.Error("an unreachable object survived the prune")
	}
	if !has(staged) || !has(detached) {
		t.Errorf("the prune removed a live worktree's objects: staged %v, detached commit %v", has(staged), has(detached))
	}
	if out, err := exec.Command("git", "-C", ws.Path, "fsck", "--no-dangling").CombinedOutput(); err != nil {
		t.Errorf("fsck in the worktree: %v\n%s", err, out)
	}
	if st := pamtest.Git(t, ws.Path, "status", "--porcelain"); st != "A  staged.txt" {
		t.Errorf("worktree status after the prune: %q", st)
	}
	var buf bytes.Buffer
	if _, err := m.Diff(t.Context(), s.RunID, "", &buf, wire.MaxDiff); err != nil || !strings.Contains(buf.String(), "+++ b/staged.txt") {
		t.Errorf("diff after the prune: %v\n%s", err, buf.String())
	}

	// Within the period a mirror is left alone; past it, pruned again.
	garbage = hashObject(mirror, "more garbage "+uuid.NewString())
	for p := range objectFiles(t, mirror) {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	m.PruneMirrors(t.Context(), PruneEvery)
	if !has(garbage) {
		t.Error("pruned again within the period")
	}
	if err := os.Chtimes(filepath.Join(mirror, pruneStamp), old, old); err != nil {
		t.Fatal(err)
	}
	m.PruneMirrors(t.Context(), time.Hour)
	if has(garbage) {
		t.Error("not pruned once the period passed")
	}
}
