package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// gitE2E runs git in dir for the test.
func gitE2E(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = append(append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"), env...)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit is the shell text an agent runs to commit what it staged.
const commit = "git -c user.name=agent -c user.email=agent@example.com commit -q -m"

// TestWorkspaceE2E: real serve, real worker, real git, a local bare
// repository as the project's remote.
//   - two runs of the project at once each get their own worktree and
//     branch; a file one writes is absent in the other;
//   - the diff through the API shows a commit, an unstaged edit, a staged
//     file and an untracked one; the stat matches git's numstat;
//   - push: the branch is in the remote with the run's commit;
//   - a retry reuses the worktree (attempt 1's file is there in attempt 2);
//   - kill -9 of the worker mid-run: the worktree is re-adopted with the
//     run, and a budget clean-up after the restart removes only finished
//     runs' worktrees, and of those only the one with nothing unsaved:
//     the ones with uncommitted or untracked files stay;
//   - an unreachable repository fails the run workspace_failed.
func TestWorkspaceE2E(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "")
	w := s.faultWorker("ws-host", s.url)

	// The project's remote.
	remote := pamtest.GitRemote(t, map[string]string{"tracked.txt": "one\ntwo\n"})
	main := gitE2E(t, remote, nil, "rev-parse", "main")

	var p wire.Project
	s.must(201, "POST", "/api/v1/projects", map[string]any{"name": "Workspaces", "repo": map[string]any{"url": remote}}, &p)
	var task wire.WorkItem
	s.must(201, "POST", "/api/v1/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "Change things"}, &task)
	g := newGate(t)

	a := s.runShell(task.ID, "echo A > a.txt && git add a.txt && "+commit+" a && printf 'one\\nTWO\\nthree\\n' > tracked.txt && "+
		"echo staged > staged.txt && git add staged.txt && printf 'u1\\nu2\\n' > untracked.txt && touch written; "+g.wait("a")+"; exit 0", nil)
	b := s.runShell(task.ID, g.wait("b")+"; exit 0", nil)
	ra := s.waitRun(a.ID, "running with a worktree", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" && r.Workspace != nil })
	rb := s.waitRun(b.ID, "running with a worktree", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" && r.Workspace != nil })
	wa, wb := *ra.Workspace, *rb.Workspace
	if wa.Path == wb.Path || wa.Branch == wb.Branch || wa.Branch != "pam/change-things-"+a.ID[:8] || wa.BaseCommit != main {
		t.Fatalf("workspaces %+v and %+v", wa, wb)
	}
	if !strings.HasPrefix(wa.Path, filepath.Join(w.opts.DataDir, "worktrees")+"/") {
		t.Errorf("worktree %s is not under the worker's data dir", wa.Path)
	}
	eventually.Wait(t, eventually.Long, "run a to make its changes", func() bool {
		_, err := os.Stat(filepath.Join(wa.Path, "written"))
		return err == nil
	})
	if _, err := os.Stat(filepath.Join(wb.Path, "a.txt")); !os.IsNotExist(err) {
		t.Errorf("run a's file is in run b's worktree: %v", err)
	}
	if ev := s.events(a.ID); countTopic(ev, "run.workspace_ready") != 1 {
		t.Errorf("run.workspace_ready %d times", countTopic(ev, "run.workspace_ready"))
	}

	// The diff and its stat, through serve, from the worker.
	code, body := s.call("GET", "/api/v1/runs/"+a.ID+"/diff", nil)
	diff := string(body)
	if code != 200 {
		t.Fatalf("diff: %d %s", code, body)
	}
	for _, want := range []string{"+++ b/a.txt", "+A", "+++ b/tracked.txt", "-two", "+TWO", "+three", "+++ b/staged.txt", "+++ b/untracked.txt", "+u2"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	var stat wire.DiffStat
	s.must(200, "GET", "/api/v1/runs/"+a.ID+"/diff?stat=true", nil, &stat)

	g.open(t, "a")
	g.open(t, "b")
	s.waitRun(a.ID, "exited", 60*time.Second, func(r wire.Run) bool { return r.Status == "exited" })
	s.waitRun(b.ID, "exited", 60*time.Second, func(r wire.Run) bool { return r.Status == "exited" })
	gitE2E(t, wa.Path, nil, "add", "-A")
	numstat := map[string]string{}
	for _, line := range strings.Split(gitE2E(t, wa.Path, nil, "diff", "--cached", "--numstat", wa.BaseCommit), "\n") {
		f := strings.SplitN(line, "\t", 3)
		numstat[f[2]] = f[0] + " " + f[1]
	}
	got := map[string]string{}
	for _, f := range stat.Files {
		got[f.Path] = strings.Trim(jsonNum(f.Added)+" "+jsonNum(f.Deleted), " ")
	}
	if len(got) != 5 || len(got) != len(numstat) {
		t.Errorf("stat %v, numstat %v", got, numstat)
	}
	for path, n := range numstat {
		if got[path] != n {
			t.Errorf("%s: stat %q, git numstat %q", path, got[path], n)
		}
	}

	// Push: the run's branch, with its commit, in the remote.
	var pushed wire.PushResult
	s.must(202, "POST", "/api/v1/runs/"+a.ID+"/push", nil, &pushed)
	if !pushed.OK || pushed.Branch != wa.Branch {
		t.Fatalf("push %+v", pushed)
	}
	if msg := gitE2E(t, remote, nil, "log", "-1", "--format=%s", "refs/heads/"+wa.Branch); msg != "a" {
		t.Errorf("remote branch head %q, want the run's commit", msg)
	}
	if countTopic(s.events(a.ID), "run.workspace_pushed") != 1 {
		t.Error("no run.workspace_pushed")
	}

	// A retry reuses the worktree.
	c := s.runShell(task.ID, "if [ -e attempt1.txt ]; then cp attempt1.txt attempt2.txt; exit 0; fi; echo first > attempt1.txt; exit 3",
		map[string]any{"max_attempts": 2})
	rc := s.waitRun(c.ID, "exited", 90*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	if rc.Status != "exited" || rc.Attempt != 2 || rc.Workspace == nil {
		t.Fatalf("retried run %s attempt %d workspace %+v", rc.Status, rc.Attempt, rc.Workspace)
	}
	if b, err := os.ReadFile(filepath.Join(rc.Workspace.Path, "attempt2.txt")); err != nil || string(b) != "first\n" {
		t.Errorf("attempt 2 did not find attempt 1's file: %q %v", b, err)
	}

	// kill -9 mid-run; the restarted worker keeps to a budget of 1 byte.
	d := s.runShell(task.ID, "touch started; "+g.wait("d")+"; exit 0", nil)
	rd := s.waitRun(d.ID, "running with a worktree", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" && r.Workspace != nil })
	w.kill9()
	w.opts.Env = append(w.opts.Env, "PAM_WORKTREE_BUDGET=1")
	w.start()
	w.waitLog(eventually.Long, "session adopted", d.ID)
	s.waitRun(b.ID, "worktree removed by the budget", 60*time.Second, func(r wire.Run) bool { return r.Workspace == nil })
	if _, err := os.Stat(wb.Path); !os.IsNotExist(err) {
		t.Errorf("the clean finished run's worktree %s still there: %v", wb.Path, err)
	}
	// Run a's and run c's hold files never committed: the budget keeps
	// them (only retention or DELETE removes unsaved work).
	for _, f := range []string{filepath.Join(wa.Path, "untracked.txt"), filepath.Join(rc.Workspace.Path, "attempt2.txt")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("unsaved work removed by the budget: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(rd.Workspace.Path, "started")); err != nil {
		t.Errorf("the live run's worktree after kill -9 and a budget pass: %v", err)
	}
	if got := s.waitRun(d.ID, "", time.Second, func(wire.Run) bool { return true }); got.Status != "running" || got.Workspace == nil || *got.Workspace != *rd.Workspace {
		t.Errorf("live run after the restart: %s %+v", got.Status, got.Workspace)
	}
	var evs wire.EventList
	s.must(200, "GET", "/api/v1/events?after=0&topic=run.workspace_removed", nil, &evs)
	if len(evs.Events) != 1 || !strings.Contains(string(evs.Events[0].Payload), `"reason":"budget"`) {
		t.Errorf("run.workspace_removed events: %d", len(evs.Events))
	}
	g.open(t, "d")
	s.waitRun(d.ID, "exited", 60*time.Second, func(r wire.Run) bool { return r.Status == "exited" })
	code, body = s.call("GET", "/api/v1/runs/"+b.ID+"/diff", nil)
	if code != 404 || !strings.Contains(string(body), wire.CodeNoWorkspace) {
		t.Errorf("diff of a cleaned run: %d %s", code, body)
	}

	// An unreachable repository.
	var bad wire.Project
	s.must(201, "POST", "/api/v1/projects", map[string]any{"name": "Gone", "repo": map[string]any{"url": filepath.Join(t.TempDir(), "gone.git")}}, &bad)
	var badTask wire.WorkItem
	s.must(201, "POST", "/api/v1/projects/"+bad.Slug+"/work-items", map[string]any{"kind": "task", "title": "Never"}, &badTask)
	e := s.runShell(badTask.ID, "exit 0", map[string]any{"max_attempts": 1})
	re := s.waitRun(e.ID, "failed", 60*time.Second, func(r wire.Run) bool { return r.Status == "failed" })
	if re.FailureReason == nil || *re.FailureReason != wire.FailWorkspaceFailed {
		t.Fatalf("failure reason %v", re.FailureReason)
	}
	for _, ev := range s.events(e.ID) {
		if ev.Topic == "run.failed" && !strings.Contains(string(ev.Payload), "gone.git") {
			t.Errorf("run.failed without git's error: %s", ev.Payload)
		}
	}
	if _, err := os.Stat(filepath.Join(w.opts.DataDir, "worktrees", e.ID)); !os.IsNotExist(err) {
		t.Errorf("a worktree was left for the failed run: %v", err)
	}
}

// jsonNum prints a count as git's numstat does ("-" for a binary file).
func jsonNum(p *int) string {
	if p == nil {
		return "-"
	}
	b, _ := json.Marshal(*p)
	return string(b)
}

// TestWorkspaceDeleteInHoldOpen: DELETE /runs/{id}/workspace of a run
// that exited while its session is still held open (PAM_HOLD_OPEN) ends
// the session and removes the worktree (204), instead of a 409 saying
// the run is live; the branch, with the run's unpushed commit, stays in
// the mirror.
func TestWorkspaceDeleteInHoldOpen(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "")
	w := s.faultWorker("hold-host", s.url, "PAM_HOLD_OPEN=1h")
	remote := pamtest.GitRemote(t, map[string]string{"tracked.txt": "one\n"})
	var p wire.Project
	s.must(201, "POST", "/api/v1/projects", map[string]any{"name": "Held", "repo": map[string]any{"url": remote}}, &p)
	var task wire.WorkItem
	s.must(201, "POST", "/api/v1/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "Hold it"}, &task)

	run := s.runShell(task.ID, "echo A > a.txt && git add a.txt && "+commit+" a && echo wip > wip.txt; exit 0", nil)
	r := s.waitRun(run.ID, "exited with a worktree", 60*time.Second, func(r wire.Run) bool { return r.Status == "exited" && r.Workspace != nil })
	ws := *r.Workspace
	head := gitE2E(t, ws.Path, nil, "rev-parse", "HEAD")
	if msg := gitE2E(t, ws.Path, nil, "log", "-1", "--format=%s"); msg != "a" {
		t.Fatalf("the run's commit is not there: HEAD %q", msg)
	}
	if !w.hasSession(r.SessionName) {
		t.Fatal("the exited run's session is not held open")
	}

	code, body := s.call("DELETE", "/api/v1/runs/"+run.ID+"/workspace", nil)
	if code != 204 {
		t.Fatalf("DELETE /runs/{id}/workspace of an exited run in hold-open: %d %s", code, body)
	}
	if w.hasSession(r.SessionName) {
		t.Error("the hold-open session is still there")
	}
	if _, err := os.Stat(ws.Path); !os.IsNotExist(err) {
		t.Errorf("the worktree is still there: %v", err)
	}
	s.waitRun(run.ID, "workspace cleared", eventually.Long, func(r wire.Run) bool { return r.Workspace == nil })
	mirror := filepath.Join(w.opts.DataDir, "repos", p.ID+".git")
	if got := gitE2E(t, mirror, nil, "rev-parse", "refs/heads/"+ws.Branch); got != head {
		t.Errorf("the branch in the mirror is at %s, want the run's commit %s", got, head)
	}
}

// TestWorkspaceHostAddedAgain: a host removed and added again (a new host
// id, the same worker data dir) keeps its old worktrees: the orchestrator
// no longer knows their runs, and its worker's clean-up keeps the one
// holding an unpushed commit and an uncommitted file — even past the
// budget, which takes only the clean one. Which host ran the runs is
// still on them.
func TestWorkspaceHostAddedAgain(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "")
	w := s.faultWorker("again-host", s.url)
	old := s.host("again-host")
	remote := pamtest.GitRemote(t, map[string]string{"tracked.txt": "one\n"})
	var p wire.Project
	s.must(201, "POST", "/api/v1/projects", map[string]any{"name": "Again", "repo": map[string]any{"url": remote}}, &p)
	var task wire.WorkItem
	s.must(201, "POST", "/api/v1/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "Keep it"}, &task)

	a := s.runShell(task.ID, "echo A > a.txt && git add a.txt && "+commit+" a && echo wip > wip.txt; exit 0", nil)
	b := s.runShell(task.ID, "exit 0", nil)
	ra := s.waitRun(a.ID, "exited with a worktree", 60*time.Second, func(r wire.Run) bool { return r.Status == "exited" && r.Workspace != nil })
	rb := s.waitRun(b.ID, "exited with a worktree", 60*time.Second, func(r wire.Run) bool { return r.Status == "exited" && r.Workspace != nil })
	head := gitE2E(t, ra.Workspace.Path, nil, "rev-parse", "HEAD")

	// The worker stops; its host is removed and added again.
	w.kill9()
	s.must(204, "DELETE", "/api/v1/hosts/again-host", nil, nil)
	var created wire.HostCreated
	s.must(201, "POST", "/api/v1/hosts", map[string]any{"name": "again-host"}, &created)
	if created.Host.ID == old.ID {
		t.Fatal("the host came back with its old id")
	}
	w.opts.Token = created.WorkerToken
	w.opts.Env = append(w.opts.Env, "PAM_WORKTREE_BUDGET=1")
	w.start()
	s.waitHost("again-host", "online", eventually.Long)

	// The budget takes the clean worktree; in the same pass it keeps the
	// one with unsaved work.
	w.waitLog(60*time.Second, "worktree cleaned up", b.ID, "reason=budget")
	if _, err := os.Stat(rb.Workspace.Path); !os.IsNotExist(err) {
		t.Errorf("the clean worktree is still there: %v", err)
	}
	if got := gitE2E(t, ra.Workspace.Path, nil, "rev-parse", "HEAD"); got != head {
		t.Errorf("the kept worktree's HEAD is %s, want the unpushed commit %s", got, head)
	}
	if b, err := os.ReadFile(filepath.Join(ra.Workspace.Path, "wip.txt")); err != nil || string(b) != "wip\n" {
		t.Errorf("the uncommitted file is gone: %q %v", b, err)
	}
	if got := s.getRun(a.ID); got.HostID == nil || *got.HostID != old.ID {
		t.Errorf("run a's host_id after its host was removed: %v, want %s", got.HostID, old.ID)
	}
}
