package worker

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
	"pam/internal/workspace"
)

const testProjectID = "9e0e0e0e-7777-4777-8777-777777777777"

// worktreeDispatch is a run_dispatch that asks for a worktree of url.
func (h *harness) worktreeDispatch(runID string, attempt int, url string) wire.RunDispatchFrame {
	f := h.dispatchFrame(runID, attempt)
	f.Cwd = ""
	f.Repo = &wire.Repo{URL: url}
	f.ProjectID = testProjectID
	f.Workspace = &wire.Workspace{Branch: "pam/fix-the-login-bug-" + runID[:8]}
	return f
}

// sessionPath is the directory a session was started in.
func (h *harness) sessionPath(runID string) string {
	h.t.Helper()
	out, err := exec.Command("tmux", "-L", "pam", "display-message", "-p", "-t", "pam-"+runID[:8], "#{session_path}").CombinedOutput()
	if err != nil {
		h.t.Fatalf("session path: %v %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestWorkspaceMadeBeforeSpawn: a run that asks for a worktree gets one
// of its own, reported by workspace_ready, and its session starts in
// it; two runs of the project at once do not share; the orchestrator's
// requests for the diff are answered from it; a live run's worktree is
// not removed.
func TestWorkspaceMadeBeforeSpawn(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	t.Setenv("TMUX_TMPDIR", h.tmuxDir)
	h.start()
	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})
	a, b := uuid.NewString(), uuid.NewString()
	from := orch.mark()
	orch.send(h.worktreeDispatch(a, 1, remote))
	orch.send(h.worktreeDispatch(b, 1, remote))
	var ws [2]wire.Workspace
	for i, id := range []string{a, b} {
		f, _ := orch.wait(from, "workspace_ready of "+id, isType(wire.FrameWorkspaceReady, id))
		ws[i] = *f.Workspace
		if ws[i].Path != filepath.Join(h.opts.DataDir, "worktrees", id) || ws[i].Branch != "pam/fix-the-login-bug-"+id[:8] || len(ws[i].BaseCommit) != 40 {
			t.Fatalf("workspace %+v", ws[i])
		}
		orch.wait(from, "a snapshot of "+id, func(f wiretest.Frame) bool { return f.Type == wire.FrameSnapshot && f.RunID == id })
		if got := h.sessionPath(id); got != ws[i].Path {
			t.Errorf("session of %s started in %s, want its worktree %s", id, got, ws[i].Path)
		}
		// The dispatch names it as the run's worktree: the wrapper marks
		// only such a folder trusted for the CLI.
		var d wire.Dispatch
		if b, err := os.ReadFile(filepath.Join(h.opts.DataDir, "worker", "dispatch", id+".json")); err != nil || json.Unmarshal(b, &d) != nil || d.Worktree != ws[i].Path || d.Cwd != ws[i].Path {
			t.Errorf("dispatch of %s: worktree %q cwd %q (%v)", id, d.Worktree, d.Cwd, err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws[0].Path, "only-a.txt"), []byte("from a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws[1].Path, "only-a.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run a's file in run b's worktree: %v", err)
	}

	// The diff, on request, in workspace_reply chunks.
	req := uuid.NewString()
	mark := orch.mark()
	orch.send(wire.WorkspaceRequestFrame{RequestID: req, RunID: a, Op: wire.WorkspaceOpDiff})
	reply, _ := orch.wait(mark, "the diff", func(f wiretest.Frame) bool { return f.Type == wire.FrameWorkspaceReply && f.RequestID == req })
	if !reply.EOF || reply.Code != "" || !strings.Contains(reply.Text, "+++ b/only-a.txt") || !strings.Contains(reply.Text, "+from a") {
		t.Errorf("diff reply %+v", reply)
	}
	// The committed part and the head it was taken at; a push of a head
	// the branch has left is refused and pushes nothing; of the head it
	// is at, it pushes.
	reviewed := pamtest.Git(t, ws[0].Path, "rev-parse", "HEAD")
	pamtest.Git(t, ws[0].Path, "add", "only-a.txt")
	pamtest.Git(t, ws[0].Path, "commit", "--quiet", "-m", "a")
	head := pamtest.Git(t, ws[0].Path, "rev-parse", "HEAD")
	req = uuid.NewString()
	orch.send(wire.WorkspaceRequestFrame{RequestID: req, RunID: a, Op: wire.WorkspaceOpDiff, Part: wire.DiffPartCommitted})
	reply, _ = orch.wait(mark, "the committed part", func(f wiretest.Frame) bool { return f.Type == wire.FrameWorkspaceReply && f.RequestID == req })
	if !reply.EOF || reply.Commit != head || !strings.Contains(reply.Text, "+++ b/only-a.txt") {
		t.Errorf("committed part reply %+v", reply)
	}
	req = uuid.NewString()
	orch.send(wire.WorkspaceRequestFrame{RequestID: req, RunID: a, Op: wire.WorkspaceOpPush, Commit: reviewed})
	reply, _ = orch.wait(mark, "head_moved", func(f wiretest.Frame) bool { return f.Type == wire.FrameWorkspaceReply && f.RequestID == req })
	if reply.Code != wire.CodeHeadMoved || reply.Commit != head {
		t.Errorf("push of a stale head: %+v", reply)
	}
	if out, err := exec.Command("git", "-C", remote, "rev-parse", "--verify", "--quiet", "refs/heads/"+ws[0].Branch).CombinedOutput(); err == nil {
		t.Errorf("the refused push pushed: %s", out)
	}
	req = uuid.NewString()
	orch.send(wire.WorkspaceRequestFrame{RequestID: req, RunID: a, Op: wire.WorkspaceOpPush, Commit: head})
	reply, _ = orch.wait(mark, "the push", func(f wiretest.Frame) bool { return f.Type == wire.FrameWorkspaceReply && f.RequestID == req })
	var pushed wire.PushResult
	if reply.Code != "" || json.Unmarshal([]byte(reply.Text), &pushed) != nil || !pushed.OK || pushed.Commit != head {
		t.Errorf("push of the head: %+v", reply)
	}
	if got := pamtest.Git(t, remote, "rev-parse", "refs/heads/"+ws[0].Branch); got != head {
		t.Errorf("remote branch at %s, want %s", got, head)
	}

	// A live run's worktree stays.
	req = uuid.NewString()
	orch.send(wire.WorkspaceRequestFrame{RequestID: req, RunID: a, Op: wire.WorkspaceOpRemove})
	reply, _ = orch.wait(mark, "the refusal", func(f wiretest.Frame) bool { return f.Type == wire.FrameWorkspaceReply && f.RequestID == req })
	if reply.Code != wire.CodeIllegalTransition {
		t.Errorf("remove of a live run's worktree: %+v", reply)
	}
	if _, err := os.Stat(ws[0].Path); err != nil {
		t.Errorf("worktree gone: %v", err)
	}
	// Another run's id: no worktree here.
	req = uuid.NewString()
	orch.send(wire.WorkspaceRequestFrame{RequestID: req, RunID: uuid.NewString(), Op: wire.WorkspaceOpStat})
	reply, _ = orch.wait(mark, "no_workspace", func(f wiretest.Frame) bool { return f.Type == wire.FrameWorkspaceReply && f.RequestID == req })
	if reply.Code != wire.CodeNoWorkspace {
		t.Errorf("stat of an unknown run: %+v", reply)
	}
}

// TestWorkspaceFailureFailsAttempt: an unreachable repository fails the
// attempt workspace_failed naming the git command and its error; no
// session is created and nothing is left in <data>/worktrees.
func TestWorkspaceFailureFailsAttempt(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	run := uuid.NewString()
	from := orch.mark()
	orch.send(h.worktreeDispatch(run, 1, filepath.Join(t.TempDir(), "gone.git")))
	f, _ := orch.wait(from, "workspace_failed", isState(wire.StateWorkspaceFailed, run))
	if !strings.Contains(f.Detail, "git fetch") || !strings.Contains(f.Detail, "gone.git") {
		t.Errorf("detail %q", f.Detail)
	}
	if _, ok := h.session(run); ok {
		t.Error("a session was created")
	}
	des, _ := os.ReadDir(filepath.Join(h.opts.DataDir, "worktrees"))
	if len(des) != 0 {
		t.Errorf("%d entries left in worktrees", len(des))
	}
	if n := orch.count(from, isType(wire.FrameWorkspaceReady, run)); n != 0 {
		t.Errorf("%d workspace_ready", n)
	}
}

// TestWorkspaceCleanup: after a restart the worker finds the worktrees on
// its disk. A live run's stays whatever the limits; so does one whose run
// the orchestrator says is pending again, and one whose run it does not
// know (until retention); one left half-made is removed; one of a run
// that ended longer ago than the retention is removed; past the budget
// the oldest finished go first until the rest fits.
func TestWorkspaceCleanup(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.ReconcileInterval = 50 * time.Millisecond
	h.opts.WorktreeRetention = time.Hour
	var passes atomic.Int64
	h.opts.hooks = &hooks{workspacesPass: func() { passes.Add(1) }}
	// A README large enough that the mirror's own small changes (a
	// worktree's admin files, a prune) are nothing beside a worktree.
	remote := pamtest.GitRemote(t, map[string]string{"README": strings.Repeat("hello\n", 40000)})

	// Worktrees an earlier worker made.
	m, err := workspace.New(workspace.Options{DataDir: h.opts.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]string{}
	for _, name := range []string{"gone", "expired", "older", "newer", "requeued", "halfmade", "continued"} {
		id := uuid.NewString()
		made[name] = id
		if _, err := m.Prepare(t.Context(), workspace.Spec{RunID: id, ProjectID: testProjectID, URL: remote, Branch: "pam/" + name + "-" + id[:8]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(h.opts.DataDir, "worker", "workspaces", made["halfmade"]+".json")); err != nil {
		t.Fatal(err)
	}
	size := func(id string) int64 {
		var n int64
		filepath.WalkDir(m.Path(id), func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				info, _ := d.Info()
				n += info.Size()
			}
			return nil
		})
		return n
	}
	now := time.Now().UTC()
	ended := func(ago time.Duration) *time.Time { t := now.Add(-ago); return &t }
	live := uuid.NewString()
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		r.known[made["expired"]] = wire.WorkerRun{RunID: made["expired"], Attempt: 1, Status: wire.RunExited, FinishedAt: ended(2 * time.Hour)}
		r.known[made["older"]] = wire.WorkerRun{RunID: made["older"], Attempt: 1, Status: wire.RunFailed, FinishedAt: ended(30 * time.Minute)}
		r.known[made["newer"]] = wire.WorkerRun{RunID: made["newer"], Attempt: 1, Status: wire.RunStopped, FinishedAt: ended(10 * time.Minute)}
		r.known[made["requeued"]] = wire.WorkerRun{RunID: made["requeued"], Attempt: 2, Status: wire.RunPending}
		r.known[made["halfmade"]] = wire.WorkerRun{RunID: made["halfmade"], Attempt: 1, Status: wire.RunRunning}
		// Ended long ago, but a live continuation is about to take its
		// worktree over (docs/architecture.md#resume-and-continue).
		next := uuid.NewString()
		r.known[made["continued"]] = wire.WorkerRun{RunID: made["continued"], Attempt: 1, Status: wire.RunExited, FinishedAt: ended(2 * time.Hour),
			ContinuedBy: &next}
		r.known[live] = workerRun(live, 1, wire.RunRunning, testHostID)
		r.desired = []wire.WorkerRun{r.known[live]}
	})
	// Room for the mirror and the live run's, the requeued run's, the
	// continued run's, the unknown run's and one finished run's worktree
	// (they are all about the same size), not two.
	per := size(made["older"])
	h.opts.WorktreeBudget = m.MirrorsSize() + 5*per + per/2
	h.start()
	// The live run: a worktree of its own, made by this worker.
	from := orch.mark()
	orch.send(h.worktreeDispatch(live, 1, remote))
	orch.wait(from, "workspace_ready of the live run", isType(wire.FrameWorkspaceReady, live))
	start := passes.Load()
	eventually.Wait(t, 15*time.Second, "two clean-up passes", func() bool { return passes.Load() >= start+2 })

	exists := func(id string) bool { _, err := os.Stat(m.Path(id)); return err == nil }
	// The "gone" run's (the orchestrator does not know it) stays until
	// retention, counted as ended when it was last changed: just now, so
	// the budget takes "older" first.
	for name, want := range map[string]bool{"gone": true, "halfmade": false, "expired": false, "older": false, "newer": true, "requeued": true, "continued": true} {
		if got := exists(made[name]); got != want {
			t.Errorf("worktree of the %s run: exists %v, want %v", name, got, want)
		}
	}
	if !exists(live) {
		t.Error("the live run's worktree was removed")
	}
	// The pass sent its reports before it ended; they reach the
	// orchestrator over the uplink a moment later.
	for _, name := range []string{"expired", "older"} {
		orch.wait(0, "workspace_removed of the "+name+" run", isType(wire.FrameWorkspaceRemoved, made[name]))
	}
	reasons := map[string]string{}
	orch.count(0, func(f wiretest.Frame) bool {
		if f.Type == wire.FrameWorkspaceRemoved {
			reasons[f.RunID] = f.Reason
		}
		return false
	})
	for name, want := range map[string]string{"expired": "retention", "older": "budget"} {
		if reasons[made[name]] != want {
			t.Errorf("%s: removed because %q, want %q", name, reasons[made[name]], want)
		}
	}
	if _, ok := reasons[made["halfmade"]]; ok {
		t.Error("a half-made worktree (no record) was reported removed")
	}
	// The mirror forgot what was removed.
	out, err := exec.Command("git", "-C", m.MirrorPath(testProjectID), "worktree", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"expired", "older", "halfmade"} {
		if strings.Contains(string(out), made[name]) {
			t.Errorf("the mirror still lists the %s run's worktree:\n%s", name, out)
		}
	}

	// A restart: the live run's session is adopted, its worktree kept.
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h.opts.WorktreeBudget = 1 // everything finished must go; the live one stays
	h.start()
	start = passes.Load()
	eventually.Wait(t, 15*time.Second, "a clean-up pass after the restart", func() bool { return passes.Load() >= start+1 })
	if !exists(live) {
		t.Error("the live run's worktree was removed after a restart")
	}
	if exists(made["newer"]) {
		t.Error("the finished run's worktree survived a budget of 1 byte")
	}
	if !exists(made["requeued"]) {
		t.Error("the requeued run's worktree was removed")
	}
	if !exists(made["continued"]) {
		t.Error("the worktree a continuation is to take over was removed")
	}
}

// TestWorkspaceTenRunsOneFetchAtATime: ten runs of one project dispatched
// at once all start, each in its own worktree, while the project's mirror
// is fetched one fetch at a time (a git wrapper on the worker's side
// records when each fetch process starts and ends).
func TestWorkspaceTenRunsOneFetchAtATime(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.MaxRuns = 11
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	log := filepath.Join(bin, "fetches.log")
	h.opts.Git = filepath.Join(bin, "git")
	script := "#!/bin/sh\ncase \" $* \" in *\" fetch \"*) echo \"start $$\" >> " + log + "; \"" + real + "\" \"$@\"; rc=$?; echo \"end $$\" >> " + log +
		"; exit $rc;; esac\nexec \"" + real + "\" \"$@\"\n"
	if err := os.WriteFile(h.opts.Git, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h.start()
	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})
	// A warm mirror first: the project's first run clones it.
	first := uuid.NewString()
	from := orch.mark()
	orch.send(h.worktreeDispatch(first, 1, remote))
	orch.wait(from, "the first run's worktree", isType(wire.FrameWorkspaceReady, first))
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	var ids []string
	from = orch.mark()
	for range 10 {
		id := uuid.NewString()
		ids = append(ids, id)
		orch.send(h.worktreeDispatch(id, 1, remote))
	}
	paths := map[string]bool{}
	for _, id := range ids {
		f, _ := orch.wait(from, "workspace_ready of "+id, isType(wire.FrameWorkspaceReady, id))
		paths[f.Workspace.Path] = true
		orch.wait(from, "a snapshot of "+id, func(f wiretest.Frame) bool { return f.Type == wire.FrameSnapshot && f.RunID == id })
	}
	if len(paths) != 10 {
		t.Errorf("%d distinct worktrees for 10 runs", len(paths))
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	open, fetches := "", 0
	for i := 0; i+1 < len(lines); i += 2 {
		switch what, pid := lines[i], lines[i+1]; {
		case what == "start" && open == "":
			open, fetches = pid, fetches+1
		case what == "end" && open == pid:
			open = ""
		default:
			t.Fatalf("two fetches of the mirror at once:\n%s", b)
		}
	}
	if fetches == 0 || fetches >= 10 {
		t.Errorf("%d fetches for 10 runs dispatched at once; want them shared", fetches)
	}
	t.Logf("10 runs dispatched at once on a warm mirror: all started, %d fetch(es), one at a time", fetches)
}

// work leaves in a worktree what exists nowhere else: a commit never
// pushed and, when dirty, a file never committed. It returns the commit.
func work(t *testing.T, path string, dirty bool) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(path, "done.txt"), []byte("committed, not pushed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pamtest.Git(t, path, "add", "done.txt")
	pamtest.Git(t, path, "commit", "--quiet", "-m", "unpushed work in "+filepath.Base(path)) // a commit of its own
	if dirty {
		if err := os.WriteFile(filepath.Join(path, "wip.txt"), []byte("not committed\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return pamtest.Git(t, path, "rev-parse", "HEAD")
}

// intact checks that a worktree still holds its work: HEAD at the
// unpushed commit and, when dirty, the uncommitted file.
func intact(t *testing.T, what, path, commit string, dirty bool) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("%s: the worktree is gone: %v", what, err)
		return
	}
	if head := pamtest.Git(t, path, "rev-parse", "HEAD"); head != commit {
		t.Errorf("%s: HEAD %s, want the unpushed commit %s", what, head, commit)
	}
	if b, err := os.ReadFile(filepath.Join(path, "wip.txt")); dirty && (err != nil || string(b) != "not committed\n") {
		t.Errorf("%s: the uncommitted file is gone: %v", what, err)
	}
}

// TestWorkspaceCleanupKeepsUnsavedWork: clean-up never loses work that
// exists nowhere else, except by retention (docs/architecture.md#workspaces).
// Worktrees of runs the orchestrator no longer knows (their host was
// removed and added again) are kept until retention, with their
// unpushed commits and uncommitted files. When finished runs' worktrees
// pass the budget, only pushed, clean ones go: one that finished a
// minute ago with an unpushed commit, and one with an uncommitted file,
// stay, however far over the budget the host is. Retention removes them
// all.
func TestWorkspaceCleanupKeepsUnsavedWork(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.ReconcileInterval = 50 * time.Millisecond
	h.opts.WorktreeRetention = time.Hour
	h.opts.WorktreeBudget = 1 << 40
	var passes atomic.Int64
	h.opts.hooks = &hooks{workspacesPass: func() { passes.Add(1) }}
	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})

	m, err := workspace.New(workspace.Options{DataDir: h.opts.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]string{}
	paths := map[string]string{}
	for _, name := range []string{"unknown-work", "unknown-clean", "fresh-unpushed", "dirty", "pushed", "clean"} {
		id := uuid.NewString()
		made[name] = id
		ws, err := m.Prepare(t.Context(), workspace.Spec{RunID: id, ProjectID: testProjectID, URL: remote, Branch: "pam/" + name + "-" + id[:8]})
		if err != nil {
			t.Fatal(err)
		}
		paths[name] = ws.Path
	}
	commits := map[string]string{
		"unknown-work":   work(t, paths["unknown-work"], true),
		"fresh-unpushed": work(t, paths["fresh-unpushed"], false),
		"dirty":          pamtest.Git(t, paths["dirty"], "rev-parse", "HEAD"),
		"pushed":         work(t, paths["pushed"], false),
	}
	if err := os.WriteFile(filepath.Join(paths["dirty"], "wip.txt"), []byte("not committed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := m.Push(t.Context(), made["pushed"], ""); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	ended := func(ago time.Duration) *time.Time { t := now.Add(-ago); return &t }
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		// unknown-*: not known (not_found), as after the host was
		// removed and added again.
		r.known[made["fresh-unpushed"]] = wire.WorkerRun{RunID: made["fresh-unpushed"], Attempt: 1, Status: wire.RunExited, FinishedAt: ended(time.Minute)}
		r.known[made["dirty"]] = wire.WorkerRun{RunID: made["dirty"], Attempt: 1, Status: wire.RunFailed, FinishedAt: ended(30 * time.Minute)}
		r.known[made["pushed"]] = wire.WorkerRun{RunID: made["pushed"], Attempt: 1, Status: wire.RunExited, FinishedAt: ended(2 * time.Minute)}
		r.known[made["clean"]] = wire.WorkerRun{RunID: made["clean"], Attempt: 1, Status: wire.RunStopped, FinishedAt: ended(40 * time.Minute)}
	})
	exists := func(name string) bool { _, err := os.Stat(paths[name]); return err == nil }
	passesAfterStart := func(what string) {
		t.Helper()
		h.start()
		start := passes.Load()
		eventually.Wait(t, 20*time.Second, what, func() bool { return passes.Load() >= start+2 })
	}

	// Under the budget: the unknown runs' worktrees stay.
	passesAfterStart("two clean-up passes under the budget")
	for _, name := range []string{"unknown-work", "unknown-clean", "fresh-unpushed", "dirty", "pushed", "clean"} {
		if !exists(name) {
			t.Errorf("under the budget and within retention, the %s run's worktree was removed", name)
		}
	}
	intact(t, "the unknown run's worktree", paths["unknown-work"], commits["unknown-work"], true)

	// Over the budget (1 byte): the pushed and the clean ones go, the
	// unsaved work stays.
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h.opts.WorktreeBudget = 1
	passesAfterStart("two clean-up passes over the budget")
	for name, want := range map[string]bool{"unknown-work": true, "unknown-clean": false, "fresh-unpushed": true, "dirty": true, "pushed": false, "clean": false} {
		if got := exists(name); got != want {
			t.Errorf("over the budget: the %s run's worktree exists %v, want %v", name, got, want)
		}
	}
	intact(t, "the unknown run's worktree", paths["unknown-work"], commits["unknown-work"], true)
	intact(t, "the worktree with an unpushed commit", paths["fresh-unpushed"], commits["fresh-unpushed"], false)
	intact(t, "the worktree with an uncommitted file", paths["dirty"], commits["dirty"], true)
	for _, name := range []string{"pushed", "clean"} {
		orch.wait(0, "workspace_removed of the "+name+" run", isType(wire.FrameWorkspaceRemoved, made[name]))
	}
	reasons := map[string]string{}
	orch.count(0, func(f wiretest.Frame) bool {
		if f.Type == wire.FrameWorkspaceRemoved {
			reasons[f.RunID] = f.Reason
		}
		return false
	})
	for _, name := range []string{"pushed", "clean"} {
		if reasons[made[name]] != "budget" {
			t.Errorf("%s: removed because %q, want budget", name, reasons[made[name]])
		}
	}

	// Retention removes what is left, unsaved work included; the
	// branches stay in the mirror.
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h.opts.WorktreeRetention = time.Millisecond
	passesAfterStart("two clean-up passes past retention")
	for _, name := range []string{"unknown-work", "fresh-unpushed", "dirty"} {
		if exists(name) {
			t.Errorf("past retention, the %s run's worktree is still there", name)
		}
	}
	if got := pamtest.Git(t, m.MirrorPath(testProjectID), "rev-parse", "refs/heads/pam/fresh-unpushed-"+made["fresh-unpushed"][:8]); got != commits["fresh-unpushed"] {
		t.Errorf("the branch in the mirror is at %s, want %s", got, commits["fresh-unpushed"])
	}
}

// TestWorkspaceRemoveEndsHoldOpen: DELETE /runs/{id}/workspace of a run
// that is over while its session is held open (PAM_HOLD_OPEN) ends the
// session and removes the worktree; the branch, with its unpushed
// commit, stays in the mirror. A live run's is still refused.
func TestWorkspaceRemoveEndsHoldOpen(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.HoldOpen = time.Hour
	h.opts.ReconcileInterval = time.Hour // the request alone ends the hold-open
	h.start()
	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})
	run := uuid.NewString()
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		r.known[run] = workerRun(run, 1, wire.RunRunning, testHostID)
	})
	from := orch.mark()
	orch.send(h.worktreeDispatch(run, 1, remote))
	f, _ := orch.wait(from, "workspace_ready", isType(wire.FrameWorkspaceReady, run))
	ws := *f.Workspace
	orch.wait(from, "a snapshot", isType(wire.FrameSnapshot, run))
	commit := work(t, ws.Path, true)
	remove := func() wiretest.Frame {
		req := uuid.NewString()
		mark := orch.mark()
		orch.send(wire.WorkspaceRequestFrame{RequestID: req, RunID: run, Op: wire.WorkspaceOpRemove})
		reply, _ := orch.wait(mark, "the reply to remove", func(f wiretest.Frame) bool { return f.Type == wire.FrameWorkspaceReply && f.RequestID == req })
		return reply
	}
	if reply := remove(); reply.Code != wire.CodeIllegalTransition {
		t.Fatalf("remove of a running run's worktree: %+v", reply)
	}
	intact(t, "the running run's worktree", ws.Path, commit, true)

	// The CLI exited: the orchestrator has the run exited, and its
	// session is held open.
	orch.setRuns(func(r *fakeRuns) {
		wr := workerRun(run, 1, wire.RunExited, testHostID)
		fin := time.Now().UTC()
		wr.FinishedAt = &fin
		r.known[run] = wr
	})
	if _, ok := h.session(run); !ok {
		t.Fatal("no session held open")
	}
	if reply := remove(); reply.Code != "" || !reply.EOF {
		t.Fatalf("remove of an exited run's worktree in hold-open: %+v", reply)
	}
	if _, ok := h.session(run); ok {
		t.Error("the hold-open session is still there")
	}
	if _, err := os.Stat(ws.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the worktree is still there: %v", err)
	}
	orch.wait(from, "workspace_removed", isType(wire.FrameWorkspaceRemoved, run))
	if got := pamtest.Git(t, h.opts.DataDir, "-C", filepath.Join(h.opts.DataDir, "repos", testProjectID+".git"), "rev-parse", "refs/heads/"+ws.Branch); got != commit {
		t.Errorf("the branch in the mirror is at %s, want the unpushed commit %s", got, commit)
	}
}

// TestWorkspaceBudgetCountsMirrors: the mirrors weigh in the budget with
// the worktrees — a finished run's worktree that would fit beside the
// others alone goes when the mirror fills the budget — and a clean-up
// pass prunes the mirrors on their schedule.
func TestWorkspaceBudgetCountsMirrors(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.ReconcileInterval = 50 * time.Millisecond
	h.opts.WorktreeRetention = time.Hour
	var passes atomic.Int64
	h.opts.hooks = &hooks{workspacesPass: func() { passes.Add(1) }}
	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})
	m, err := workspace.New(workspace.Options{DataDir: h.opts.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	run := uuid.NewString()
	if _, err := m.Prepare(t.Context(), workspace.Spec{RunID: run, ProjectID: testProjectID, URL: remote, Branch: "pam/done-" + run[:8]}); err != nil {
		t.Fatal(err)
	}
	mirror := m.MirrorPath(testProjectID)
	// The mirror outweighs the worktree many times: history the run's
	// checkout does not hold (a branch nobody checked out, as fetched).
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, []byte(uuid.NewString()+strings.Repeat("x", 1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	blob := pamtest.Git(t, mirror, "hash-object", "-w", big)
	pamtest.Git(t, mirror, "tag", "history", blob) // reachable: no prune takes it
	finished := time.Now().UTC().Add(-10 * time.Minute)
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		r.known[run] = wire.WorkerRun{RunID: run, Attempt: 1, Status: wire.RunExited, FinishedAt: &finished}
	})
	wt := int64(0)
	filepath.WalkDir(m.Path(run), func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			info, _ := d.Info()
			wt += info.Size()
		}
		return nil
	})
	// The worktree alone fits ten times over; with the mirror it does not.
	h.opts.WorktreeBudget = 10 * wt
	if m.MirrorsSize() < h.opts.WorktreeBudget {
		t.Fatalf("the mirror (%d bytes) is not past the budget (%d)", m.MirrorsSize(), h.opts.WorktreeBudget)
	}
	h.start()
	start := passes.Load()
	eventually.Wait(t, 15*time.Second, "a clean-up pass", func() bool { return passes.Load() >= start+1 })
	if _, err := os.Stat(m.Path(run)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the finished run's worktree is still there with the mirror past the budget: %v", err)
	}
	eventually.Wait(t, eventually.Long, "the mirror pruned beside the clean-up pass", func() bool {
		_, err := os.Stat(filepath.Join(mirror, "pam-pruned"))
		return err == nil
	})
}
