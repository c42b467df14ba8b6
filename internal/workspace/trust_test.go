package workspace

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"pam/internal/pamtest"
)

// work leaves in a worktree what exists nowhere else: a commit that was
// never pushed and a file that was never committed. It returns the
// commit.
func work(t *testing.T, path string) string {
	t.Helper()
	write(t, filepath.Join(path, "done.txt"), "committed, not pushed\n")
	pamtest.Git(t, path, "add", "done.txt")
	pamtest.Git(t, path, "commit", "--quiet", "-m", "unpushed work")
	write(t, filepath.Join(path, "wip.txt"), "not committed\n")
	return pamtest.Git(t, path, "rev-parse", "HEAD")
}

// survived checks that a worktree still holds the work work left.
func survived(t *testing.T, what, path, commit string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(path, "wip.txt")); err != nil || string(b) != "not committed\n" {
		t.Errorf("%s: the uncommitted file is gone: %v", what, err)
		return
	}
	if head := pamtest.Git(t, path, "rev-parse", "HEAD"); head != commit {
		t.Errorf("%s: HEAD %s, want the unpushed commit %s", what, head, commit)
	}
}

// rewrite changes a run's record file as an agent (same user) could.
func rewrite(t *testing.T, m *Manager, runID string, change func(r *Record)) {
	t.Helper()
	b, err := os.ReadFile(m.recordPath(runID))
	if err != nil {
		t.Fatal(err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	change(&r)
	b, _ = json.Marshal(r)
	if err := os.WriteFile(m.recordPath(runID), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestUntrustedRecordRemovesNothing: clean-up trusts a record only when
// its path is this host's worktree folder of its run (resolved: no
// symlink out of <data>/worktrees) and its checkout belongs to the
// mirror of the project it names. A record naming another run's folder,
// another project, a project id that is not one, or a folder replaced by
// a symlink is refused: Remove fails and deletes nothing — the worktrees
// keep their unpushed commits and uncommitted files — List marks it so
// clean-up leaves it alone, and a new attempt does not make the worktree
// again over it.
func TestUntrustedRecordRemovesNothing(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})
	m := newManager(t, "")
	project, other := uuid.NewString(), uuid.NewString()
	// The other project has a mirror (and a worktree) on this host too.
	if _, err := m.Prepare(t.Context(), spec(other, remote)); err != nil {
		t.Fatal(err)
	}
	victim := spec(project, remote)
	vws, err := m.Prepare(t.Context(), victim)
	if err != nil {
		t.Fatal(err)
	}
	vcommit := work(t, vws.Path)

	outside := t.TempDir()
	write(t, filepath.Join(outside, "wip.txt"), "not committed\n")

	for _, c := range []struct {
		name   string
		change func(t *testing.T, s Spec, r *Record)
	}{
		{"path of another run's folder", func(_ *testing.T, _ Spec, r *Record) { r.Workspace.Path = vws.Path }},
		{"another project", func(_ *testing.T, _ Spec, r *Record) { r.ProjectID = other }},
		{"project id that is not one", func(_ *testing.T, _ Spec, r *Record) { r.ProjectID = "../" + other }},
		{"folder replaced by a symlink", func(t *testing.T, s Spec, r *Record) {
			if err := os.Rename(r.Workspace.Path, filepath.Join(outside, s.RunID)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(outside, s.RunID), r.Workspace.Path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := spec(project, remote)
			ws, err := m.Prepare(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			commit := work(t, ws.Path)
			rewrite(t, m, s.RunID, func(r *Record) { c.change(t, s, r) })
			own := ws.Path
			if st, err := os.Lstat(ws.Path); err == nil && st.Mode()&os.ModeSymlink != 0 {
				own = filepath.Join(outside, s.RunID)
			}

			if _, ok := m.Record(s.RunID); ok {
				t.Error("the record is trusted")
			}
			var listed bool
			for _, e := range mustList(t, m) {
				if e.RunID == s.RunID {
					listed = true
					if !e.Untrusted || e.Recorded {
						t.Errorf("listed %+v, want untrusted", e)
					}
				}
			}
			if !listed && own == ws.Path {
				t.Error("the folder is not listed") // a symlink is not a worktree folder: not listed at all
			}
			if _, _, err := m.Remove(t.Context(), s.RunID); !errors.Is(err, ErrUntrusted) {
				t.Errorf("remove: %v, want ErrUntrusted", err)
			}
			if _, err := m.Prepare(t.Context(), s); !errors.Is(err, ErrUntrusted) {
				t.Errorf("a new attempt over it: %v, want ErrUntrusted", err)
			}
			survived(t, "the run's own worktree", own, commit)
			survived(t, "another run's worktree", vws.Path, vcommit)
			if _, err := os.Lstat(ws.Path); err != nil {
				t.Errorf("the folder is gone: %v", err)
			}
		})
	}
	// The victim's own record is still good: it is removed on request.
	if _, ok, err := m.Remove(t.Context(), victim.RunID); err != nil || !ok {
		t.Fatalf("remove the victim's worktree on request: %v %v", ok, err)
	}
}

// TestRecordTrustedWithoutMirror: a worktree whose project's mirror an
// operator removed still names that mirror: its record is trusted, and
// it can be removed.
func TestRecordTrustedWithoutMirror(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})
	m := newManager(t, "")
	s := spec(uuid.NewString(), remote)
	ws, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(m.MirrorPath(s.ProjectID)); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Record(s.RunID); !ok {
		t.Fatal("the record is not trusted once the mirror is gone")
	}
	if _, ok, err := m.Remove(t.Context(), s.RunID); err != nil || !ok {
		t.Fatalf("remove: %v %v", ok, err)
	}
	if _, err := os.Stat(ws.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the worktree is still there: %v", err)
	}
}
