package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"pam/internal/pamtest"
	"pam/internal/wire"
)

func newManager(t testing.TB, git string) *Manager {
	t.Helper()
	m, err := New(Options{DataDir: t.TempDir(), Git: git, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func spec(project, url string) Spec {
	run := uuid.NewString()
	return Spec{RunID: run, ProjectID: project, URL: url, Branch: "pam/task-" + run[:8]}
}

func write(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentRunsOwnWorktrees: two runs of one project at once get a
// worktree and a branch each; what one writes is not in the other.
func TestConcurrentRunsOwnWorktrees(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})
	m := newManager(t, "")
	project := uuid.NewString()
	a, b := spec(project, remote), spec(project, remote)
	var wsA, wsB wire.Workspace
	var errA, errB error
	var wg sync.WaitGroup
	wg.Go(func() { wsA, errA = m.Prepare(t.Context(), a) })
	wg.Go(func() { wsB, errB = m.Prepare(t.Context(), b) })
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("prepare: %v, %v", errA, errB)
	}
	if wsA.Path == wsB.Path || wsA.Branch == wsB.Branch {
		t.Fatalf("shared workspace: %+v %+v", wsA, wsB)
	}
	if wsA.BaseCommit != pamtest.Git(t, remote, "rev-parse", "main") {
		t.Errorf("base commit %s is not main's", wsA.BaseCommit)
	}
	for _, ws := range []wire.Workspace{wsA, wsB} {
		if got := pamtest.Git(t, ws.Path, "rev-parse", "--abbrev-ref", "HEAD"); got != ws.Branch {
			t.Errorf("%s is on %s, want %s", ws.Path, got, ws.Branch)
		}
		if _, err := os.Stat(filepath.Join(ws.Path, "README")); err != nil {
			t.Errorf("checkout: %v", err)
		}
	}
	write(t, filepath.Join(wsA.Path, "only-a.txt"), "a\n")
	if _, err := os.Stat(filepath.Join(wsB.Path, "only-a.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file written by run A is visible in run B: %v", err)
	}
}

// TestDiffAllFourKinds: a commit, an unstaged edit of a tracked file, a
// staged new file and an untracked file all show in the diff; binaries are
// named, not dumped; the stat matches git's own numstat.
func TestDiffAllFourKinds(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"tracked.txt": "one\ntwo\nthree\n", "gone.txt": "bye\n"})
	m := newManager(t, "")
	s := spec(uuid.NewString(), remote)
	ws, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ws.Path, "committed.txt"), "c1\nc2\n")
	pamtest.Git(t, ws.Path, "add", "committed.txt")
	pamtest.Git(t, ws.Path, "commit", "--quiet", "-m", "agent commit")
	write(t, filepath.Join(ws.Path, "tracked.txt"), "one\nTWO\nthree\nfour\n")
	write(t, filepath.Join(ws.Path, "staged.txt"), "s\n")
	pamtest.Git(t, ws.Path, "add", "staged.txt")
	write(t, filepath.Join(ws.Path, "untracked.txt"), "u1\nu2\nu3\n")
	if err := os.WriteFile(filepath.Join(ws.Path, "blob.bin"), []byte{0, 1, 2, 0, 255, 0, 'x'}, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ws.Path, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	stagedBefore := pamtest.Git(t, ws.Path, "diff", "--cached", "--name-only")

	var buf bytes.Buffer
	if _, err := m.Diff(t.Context(), s.RunID, "", &buf, wire.MaxDiff); err != nil {
		t.Fatal(err)
	}
	diff := buf.String()
	for _, want := range []string{
		"+++ b/committed.txt", "+c2", "+++ b/tracked.txt", "+TWO", "-two", "+four",
		"+++ b/staged.txt", "+++ b/untracked.txt", "+u3", "--- a/gone.txt", "Binary files /dev/null and b/blob.bin differ",
	} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	if strings.Contains(diff, "\x00") || strings.Contains(diff, "\xff") {
		t.Errorf("the binary file was dumped")
	}
	if got := pamtest.Git(t, ws.Path, "diff", "--cached", "--name-only"); got != stagedBefore {
		t.Errorf("the diff changed the agent's index: %q, was %q", got, stagedBefore)
	}

	st, err := m.Stat(t.Context(), s.RunID, "")
	if err != nil {
		t.Fatal(err)
	}
	files := st.Files
	// git's own count, from the real index with everything staged.
	pamtest.Git(t, ws.Path, "add", "-A")
	want := map[string]string{}
	for _, line := range strings.Split(pamtest.Git(t, ws.Path, "diff", "--cached", "--numstat", ws.BaseCommit), "\n") {
		f := strings.SplitN(line, "\t", 3)
		want[f[2]] = f[0] + "/" + f[1]
	}
	got := map[string]string{}
	status := map[string]string{}
	for _, f := range files {
		c := func(p *int) string {
			if p == nil {
				return "-"
			}
			return fmt.Sprint(*p)
		}
		got[f.Path] = c(f.Added) + "/" + c(f.Deleted)
		status[f.Path] = f.Status
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stat %v, git numstat %v", got, want)
	}
	if status["gone.txt"] != "deleted" || status["untracked.txt"] != "added" || status["tracked.txt"] != "modified" {
		t.Errorf("statuses %v", status)
	}
	for _, f := range files {
		if f.Committed != (f.Path == "committed.txt") {
			t.Errorf("%s: committed %v", f.Path, f.Committed)
		}
	}
}

// TestDiffBounded: a diff past the limit is cut, with a final notice.
func TestDiffBounded(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"a": "a\n"})
	m := newManager(t, "")
	s := spec(uuid.NewString(), remote)
	ws, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ws.Path, "big.txt"), strings.Repeat("a line of text\n", 20000))
	var buf bytes.Buffer
	if _, err := m.Diff(t.Context(), s.RunID, "", &buf, 64<<10); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 64<<10+len(TruncatedNotice) || !strings.HasSuffix(buf.String(), TruncatedNotice) {
		t.Errorf("diff of %d bytes, ends %q", buf.Len(), buf.String()[max(0, buf.Len()-60):])
	}
}

// TestRetryReusesWorktree: a later attempt of the run gets the same
// checkout, with what the first attempt left in it.
func TestRetryReusesWorktree(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"a": "a\n"})
	m := newManager(t, "")
	s := spec(uuid.NewString(), remote)
	ws1, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ws1.Path, "attempt1.txt"), "left by attempt 1\n")
	s.BaseCommit = ws1.BaseCommit
	ws2, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if ws2 != ws1 {
		t.Fatalf("attempt 2 got %+v, attempt 1 had %+v", ws2, ws1)
	}
	if b, err := os.ReadFile(filepath.Join(ws2.Path, "attempt1.txt")); err != nil || string(b) != "left by attempt 1\n" {
		t.Fatalf("attempt 1's file in attempt 2: %q, %v", b, err)
	}

	// The checkout deleted behind pam's back (the record stays): made
	// again on the run's branch.
	if err := os.RemoveAll(ws1.Path); err != nil {
		t.Fatal(err)
	}
	if ws, err := m.Prepare(t.Context(), s); err != nil || ws != ws1 {
		t.Fatalf("after the checkout was deleted: %+v %v", ws, err)
	}

	// Removed (clean-up), then asked again: the branch stayed, so the
	// run's commits come back.
	write(t, filepath.Join(ws1.Path, "c.txt"), "c\n")
	pamtest.Git(t, ws1.Path, "add", "c.txt")
	pamtest.Git(t, ws1.Path, "commit", "--quiet", "-m", "c")
	if _, ok, err := m.Remove(t.Context(), s.RunID); err != nil || !ok {
		t.Fatalf("remove: %v %v", ok, err)
	}
	if _, err := os.Stat(ws1.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("worktree still there: %v", err)
	}
	ws3, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if ws3.BaseCommit != ws1.BaseCommit {
		t.Errorf("base commit %s, was %s", ws3.BaseCommit, ws1.BaseCommit)
	}
	if _, err := os.Stat(filepath.Join(ws3.Path, "c.txt")); err != nil {
		t.Errorf("the run's commit is not on its branch again: %v", err)
	}
}

// TestUnreachableRepo: a repository that cannot be fetched fails with
// the git command and its stderr, and leaves nothing behind.
func TestUnreachableRepo(t *testing.T) {
	m := newManager(t, "")
	s := spec(uuid.NewString(), filepath.Join(t.TempDir(), "no-such-repo.git"))
	_, err := m.Prepare(t.Context(), s)
	var ge *GitError
	if !errors.As(err, &ge) {
		t.Fatalf("error %v is not a git error", err)
	}
	if d := Detail(err); !strings.Contains(d, "git fetch") || !strings.Contains(d, "no-such-repo.git") {
		t.Errorf("detail %q names neither the command nor the repository", d)
	}
	for _, dir := range []string{m.worktreesDir(), m.reposDir(), m.recordsDir()} {
		des, _ := os.ReadDir(dir)
		for _, de := range des {
			if !strings.HasSuffix(de.Name(), ".lock") {
				t.Errorf("left behind in %s: %s", dir, de.Name())
			}
		}
	}
	// A bad base fails the same way, before any worktree exists.
	remote := pamtest.GitRemote(t, map[string]string{"a": "a\n"})
	s = spec(uuid.NewString(), remote)
	s.Base = "no-such-branch"
	if _, err := m.Prepare(t.Context(), s); err == nil || !strings.Contains(err.Error(), "no-such-branch") {
		t.Fatalf("bad base: %v", err)
	}
	if des, _ := os.ReadDir(m.worktreesDir()); len(des) != 0 {
		t.Errorf("worktrees left: %d", len(des))
	}
}

// TestPush: the run's branch lands in the remote with its commits.
func TestPush(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"a": "a\n"})
	m := newManager(t, "")
	s := spec(uuid.NewString(), remote)
	ws, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ws.Path, "feature.txt"), "f\n")
	pamtest.Git(t, ws.Path, "add", "feature.txt")
	pamtest.Git(t, ws.Path, "commit", "--quiet", "-m", "the feature")
	head := pamtest.Git(t, ws.Path, "rev-parse", "HEAD")
	pushed, commit, detail, err := m.Push(t.Context(), s.RunID, "")
	if err != nil {
		t.Fatal(err)
	}
	if pushed.Branch != ws.Branch || commit != head || !strings.Contains(detail, ws.Branch) {
		t.Errorf("pushed %+v, detail %q", pushed, detail)
	}
	if got := pamtest.Git(t, remote, "rev-parse", "refs/heads/"+ws.Branch); got != head {
		t.Errorf("remote branch at %s, want %s", got, head)
	}
}

// fetchLog is a git wrapper that records the start and the end of every
// fetch it runs, so a test can see from outside whether two fetches of
// one mirror ever ran at once.
func fetchLog(t *testing.T) (git, log string) {
	t.Helper()
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log = filepath.Join(dir, "fetches.log")
	git = filepath.Join(dir, "git")
	script := fmt.Sprintf(`#!/bin/sh
case " $* " in *" fetch "*) echo "start $$" >> %[1]q; "%[2]s" "$@"; rc=$?; echo "end $$" >> %[1]q; exit $rc;; esac
exec "%[2]s" "$@"
`, log, real)
	if err := os.WriteFile(git, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return git, log
}

// TestMirrorFetchSerialised: ten runs of one project start at once, on a
// cold mirror and then on a warm one: every run gets its worktree, the
// mirror's fetches never overlap, and runs that waited share a fetch.
func TestMirrorFetchSerialised(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"a": "a\n"})
	git, log := fetchLog(t)
	m := newManager(t, git)
	project := uuid.NewString()
	for _, round := range []string{"cold", "warm"} {
		if err := os.Remove(log); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 10)
		for i := range errs {
			wg.Go(func() { _, errs[i] = m.Prepare(t.Context(), spec(project, remote)) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", round, err)
			}
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Fields(strings.ReplaceAll(string(b), "\n", " "))
		open := ""
		fetches := 0
		for i := 0; i+1 < len(lines); i += 2 {
			what, pid := lines[i], lines[i+1]
			switch {
			case what == "start" && open == "":
				open = pid
				fetches++
			case what == "end" && open == pid:
				open = ""
			default:
				t.Fatalf("%s: fetches overlap: %q", round, b)
			}
		}
		if fetches == 0 || fetches >= 10 {
			t.Errorf("%s: %d fetches for 10 runs started at once; want them shared", round, fetches)
		}
		t.Logf("%s mirror: 10 concurrent starts, %d fetch(es), one at a time", round, fetches)
	}
	if n := len(mustList(t, m)); n != 20 {
		t.Errorf("%d worktrees, want 20", n)
	}
}

func mustList(t *testing.T, m *Manager) []Entry {
	t.Helper()
	l, err := m.List()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRemoveHalfMade: a worktree directory without a record (a worker
// killed while making it) is removed and the mirror pruned, then made
// again on the next attempt.
func TestRemoveHalfMade(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"a": "a\n"})
	m := newManager(t, "")
	s := spec(uuid.NewString(), remote)
	ws, err := m.Prepare(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.recordPath(s.RunID)); err != nil {
		t.Fatal(err)
	}
	l := mustList(t, m)
	if len(l) != 1 || l[0].Recorded {
		t.Fatalf("list %+v", l)
	}
	if _, ok, err := m.Remove(t.Context(), s.RunID); err != nil || ok {
		t.Fatalf("remove: %v %v", ok, err)
	}
	if _, err := os.Stat(ws.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("half-made worktree left: %v", err)
	}
	if out := pamtest.Git(t, m.MirrorPath(s.ProjectID), "worktree", "list"); strings.Contains(out, s.RunID) {
		t.Errorf("mirror still lists it: %s", out)
	}

	// A record whose checkout is gone is listed too, so clean-up can
	// drop it.
	s2 := spec(s.ProjectID, remote)
	ws2, err := m.Prepare(t.Context(), s2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(ws2.Path); err != nil {
		t.Fatal(err)
	}
	if l := mustList(t, m); len(l) != 1 || l[0].RunID != s2.RunID || !l[0].Recorded || l[0].Size != 0 {
		t.Fatalf("list %+v", l)
	}
	if _, ok, err := m.Remove(t.Context(), s2.RunID); err != nil || !ok {
		t.Fatalf("remove: %v %v", ok, err)
	}
	if l := mustList(t, m); len(l) != 0 {
		t.Errorf("list after removal %+v", l)
	}
}

// makeFiles writes n small files in a tree of directories.
func makeFiles(n int) map[string]string {
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("pkg%02d/sub%d/file%04d.go", i%40, i%7, i)] = fmt.Sprintf("package p\n\n// File %d.\nvar X%d = %d\n", i, i, i)
	}
	return files
}

// BenchmarkWorktreeStart measures what a worktree adds to a run's start
// on a repository of 3,000 files: cold (the project's mirror is cloned
// first) and warm (fetch, then worktree). `make bench` and
// `go test -run X -bench WorktreeStart ./internal/workspace` print it.
func BenchmarkWorktreeStart(b *testing.B) {
	remote := pamtest.GitRemote(b, makeFiles(3000))
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			m := newManager(b, "")
			b.StartTimer()
			if _, err := m.Prepare(context.Background(), spec(uuid.NewString(), remote)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("warm", func(b *testing.B) {
		m := newManager(b, "")
		project := uuid.NewString()
		if _, err := m.Prepare(context.Background(), spec(project, remote)); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := m.Prepare(context.Background(), spec(project, remote)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestTakeOver: a continuation takes over the worktree of the run it
// continues (docs/architecture.md#resume-and-continue): the same folder
// and branch, the record moves, so the old run's removal, clean-up
// listing and a retry of it never reach the worktree; a continuation of
// the continuation takes it over again; a worktree that is gone, or a
// path that is not this host's worktree, is refused.
func TestTakeOver(t *testing.T) {
	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})
	m := newManager(t, "")
	project := uuid.NewString()
	old := spec(project, remote)
	ws, err := m.Prepare(t.Context(), old)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ws.Path, "work.txt"), "the old run's work\n")

	cont := spec(project, remote)
	cont.Branch, cont.BaseCommit, cont.Path = ws.Branch, ws.BaseCommit, ws.Path
	if m.Exists(cont.RunID) {
		t.Fatal("the continuation has a worktree before it took one")
	}
	got, err := m.Prepare(t.Context(), cont)
	if err != nil || got != ws {
		t.Fatalf("take over: %+v, %v; want %+v", got, err, ws)
	}
	if !m.Exists(cont.RunID) || m.Exists(old.RunID) {
		t.Errorf("exists: continuation %v, old run %v", m.Exists(cont.RunID), m.Exists(old.RunID))
	}
	if _, err := os.Stat(filepath.Join(ws.Path, "work.txt")); err != nil {
		t.Errorf("the old run's work is gone: %v", err)
	}
	// A later attempt of the continuation finds it again.
	if again, err := m.Prepare(t.Context(), cont); err != nil || again != ws {
		t.Errorf("a later attempt: %+v, %v", again, err)
	}
	// The old run's removal, or a new attempt of it, never reaches it.
	if _, ok, err := m.Remove(t.Context(), old.RunID); ok || err != nil {
		t.Errorf("remove of the old run: ok %v, %v", ok, err)
	}
	if _, err := m.Prepare(t.Context(), old); err == nil || !strings.Contains(err.Error(), cont.RunID) {
		t.Errorf("a new attempt of the old run: %v", err)
	}
	if !isWorktree(ws.Path) {
		t.Fatal("the worktree went with the old run")
	}
	list, err := m.List()
	if err != nil || len(list) != 1 || list[0].RunID != cont.RunID || !list[0].Recorded || list[0].Size == 0 {
		t.Fatalf("list %+v, %v", list, err)
	}
	for _, op := range []func() error{
		func() error { _, err := m.Diff(t.Context(), cont.RunID, "", io.Discard, wire.MaxDiff); return err },
		func() error { _, err := m.Stat(t.Context(), cont.RunID, ""); return err },
	} {
		if err := op(); err != nil {
			t.Errorf("the continuation's diff: %v", err)
		}
	}

	// A continuation of the continuation takes it over in turn.
	next := spec(project, remote)
	next.Branch, next.Path = ws.Branch, ws.Path
	if got, err := m.Prepare(t.Context(), next); err != nil || got != ws {
		t.Fatalf("second take-over: %+v, %v", got, err)
	}
	if m.Exists(cont.RunID) || !m.Exists(next.RunID) {
		t.Error("the first continuation still owns the worktree")
	}
	// A take-over cut short between its two writes leaves two records:
	// the newer run owns the worktree, the stale record removes only
	// itself.
	rec, _ := m.Record(next.RunID)
	stale := rec
	stale.RunID, stale.CreatedAt = cont.RunID, rec.CreatedAt.Add(-time.Minute)
	b, _ := json.Marshal(stale)
	write(t, m.recordPath(cont.RunID), string(b))
	if list, _ := m.List(); len(list) != 1 || list[0].RunID != next.RunID {
		t.Errorf("list with a stale record: %+v", list)
	}
	if _, ok, err := m.Remove(t.Context(), cont.RunID); ok || err != nil || !isWorktree(ws.Path) {
		t.Errorf("removing the stale record: ok %v, %v", ok, err)
	}
	if _, ok := m.Record(cont.RunID); ok {
		t.Error("the stale record stayed")
	}

	// The owner's removal removes it.
	if removed, ok, err := m.Remove(t.Context(), next.RunID); !ok || err != nil || removed != ws || isWorktree(ws.Path) {
		t.Fatalf("remove by its owner: %+v %v %v", removed, ok, err)
	}
	gone := spec(project, remote)
	gone.Branch, gone.Path = ws.Branch, ws.Path
	if _, err := m.Prepare(t.Context(), gone); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("take-over of a removed worktree: %v", err)
	}
	foreign := spec(project, remote)
	foreign.Path = "/etc/" + uuid.NewString()
	if _, err := m.Prepare(t.Context(), foreign); err == nil || !strings.Contains(err.Error(), "not a worktree of this host") {
		t.Errorf("take-over of another path: %v", err)
	}
}

// git runs with a minimal environment: a secret in the worker's
// environment (an operator's PAM_TOKEN, the worker's own token, an API
// key) never reaches it, nor whatever a repository's config makes git
// run; what git needs (PATH, HOME, the ssh agent) still does. An alias
// that prints its environment stands for any program git starts.
func TestGitEnvMinimal(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	t.Setenv("PAM_TOKEN", secret)
	t.Setenv("PAM_WORKER_TOKEN", secret)
	t.Setenv("ANTHROPIC_API_KEY", secret)
	t.Setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
	m := newManager(t, "")
	out, err := m.run(t.Context(), cmd{dir: t.TempDir(), args: []string{"-c", "alias.pamenv=!env", "pamenv"}})
	if err != nil {
		t.Fatal(err)
	}
	env := string(out)
	if strings.Contains(env, secret) || strings.Contains(env, "PAM_") {
		t.Fatalf("git saw the worker's secrets:\n%s", env)
	}
	for _, want := range []string{"PATH=", "HOME=", "SSH_AUTH_SOCK=/tmp/agent.sock", "LC_ALL=C", "GIT_TERMINAL_PROMPT=0"} {
		if !strings.Contains(env, "\n"+want) && !strings.HasPrefix(env, want) {
			t.Errorf("git lacks %s:\n%s", want, env)
		}
	}
}
