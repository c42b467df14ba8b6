package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// TestProjectRepo: projects.repo over REST — set at creation, changed,
// removed with null; a URL with credentials, a remote helper or an option
// is refused naming repo.url.
func TestProjectRepo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var p wire.Project
	e.must(201, "POST", "/api/v1/projects", map[string]any{"name": "Repo", "repo": map[string]any{"url": "/srv/repos/app.git"}}, &p)
	if p.Repo == nil || p.Repo.URL != "/srv/repos/app.git" || p.Repo.Base != "" {
		t.Fatalf("repo %+v", p.Repo)
	}
	e.must(200, "PATCH", "/api/v1/projects/"+p.Slug, map[string]any{"repo": map[string]any{"url": "git@example.com:o/app.git", "base": "release/2"}}, &p)
	if p.Repo == nil || p.Repo.URL != "git@example.com:o/app.git" || p.Repo.Base != "release/2" {
		t.Fatalf("repo after update %+v", p.Repo)
	}
	e.must(200, "PATCH", "/api/v1/projects/"+p.Slug, map[string]any{"description": "kept"}, &p)
	if p.Repo == nil {
		t.Fatal("a PATCH without repo removed it")
	}
	e.must(200, "PATCH", "/api/v1/projects/"+p.Slug, map[string]any{"repo": nil}, &p)
	if p.Repo != nil {
		t.Fatalf("repo after null %+v", p.Repo)
	}
	for _, bad := range []map[string]any{
		{"url": "https://user:secret@example.com/o/app.git"},
		{"url": "https://token@example.com/o/app.git"},
		{"url": "ext::sh -c touch% /tmp/x"},
		{"url": "--upload-pack=touch /tmp/x"},
		{"url": "/srv/app.git", "base": "-x"},
		{"url": "/srv/app.git", "surprise": 1},
	} {
		code, body := e.call("PATCH", "/api/v1/projects/"+p.Slug, map[string]any{"repo": bad})
		if code != 400 {
			t.Errorf("repo %v: %d %s", bad, code, body)
		}
	}
	code, body := e.call("POST", "/api/v1/projects", map[string]any{"name": "Leaky", "repo": map[string]any{"url": "https://u:p@example.com/r"}})
	if code != 400 || !strings.Contains(string(body), "credential helper") || !strings.Contains(string(body), `"repo.url"`) {
		t.Errorf("credentials in the URL: %d %s", code, body)
	}
}

// TestRunWorkspaceMode: a run of a project with a repo gets a worktree by
// default (the dispatch carries the repo and the branch); asking for one
// without a repo, or with a cwd, is refused.
func TestRunWorkspaceMode(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	code, body := e.call("POST", "/api/v1/runs", map[string]any{"task_id": e.task.ID, "provider": "shell", "workspace": "worktree"})
	if code != 400 || !strings.Contains(string(body), `"workspace"`) {
		t.Errorf("worktree without a repo: %d %s", code, body)
	}
	e.must(200, "PATCH", "/api/v1/projects/runs", map[string]any{"repo": map[string]any{"url": "/srv/app.git", "base": "main"}}, nil)
	code, body = e.call("POST", "/api/v1/runs", map[string]any{"task_id": e.task.ID, "provider": "shell", "workspace": "worktree", "cwd": "/tmp"})
	if code != 400 || !strings.Contains(string(body), `"cwd"`) {
		t.Errorf("worktree with a cwd: %d %s", code, body)
	}
	code, body = e.call("POST", "/api/v1/runs", map[string]any{"task_id": e.task.ID, "provider": "shell", "workspace": "both"})
	if code != 400 {
		t.Errorf("workspace both: %d %s", code, body)
	}

	a := e.worker("ws-a", 4, "shell")
	withCwd := e.start(map[string]any{"cwd": "/tmp"})
	d := a.expect(wire.FrameRunDispatch)
	if d.RunID != withCwd.ID || d.Workspace != nil || d.Repo != nil {
		t.Errorf("a run with a cwd got a worktree: %+v", d)
	}
	r := e.start(nil)
	d = a.expect(wire.FrameRunDispatch)
	want := "pam/do-the-thing-" + r.ID[:8]
	if d.RunID != r.ID || d.Workspace == nil || d.Workspace.Branch != want || d.Repo == nil || d.Repo.URL != "/srv/app.git" ||
		d.Repo.Base != "main" || d.ProjectID != r.ProjectID {
		t.Fatalf("dispatch %+v workspace %+v repo %+v", d, d.Workspace, d.Repo)
	}
}

// TestWorkspaceRoutes: workspace_ready fills runs.workspace; diff, stat,
// push and removal are relayed to the worker holding the worktree; a
// live run's worktree is not removed; a host that is gone is 503
// host_unreachable; a run without a worktree is 404 no_workspace.
func TestWorkspaceRoutes(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	e.must(200, "PATCH", "/api/v1/projects/runs", map[string]any{"repo": map[string]any{"url": "/srv/app.git"}}, nil)
	a := e.worker("ws-b", 4, "shell")
	r := e.start(nil)
	d := a.expect(wire.FrameRunDispatch)
	a.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })

	code, body := e.call("GET", "/api/v1/runs/"+r.ID+"/diff", nil)
	if code != 404 || !strings.Contains(string(body), wire.CodeNoWorkspace) {
		t.Errorf("diff before the worktree: %d %s", code, body)
	}
	ws := wire.Workspace{Path: "/data/worktrees/" + r.ID, Branch: d.Workspace.Branch, BaseCommit: strings.Repeat("ab", 20)}
	a.send(wire.WorkspaceReadyFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Workspace: &ws})
	got := e.waitRun(r.ID, "workspace", func(r wire.Run) bool { return r.Workspace != nil })
	if *got.Workspace != ws {
		t.Fatalf("workspace %+v, want %+v", got.Workspace, ws)
	}
	if !strings.Contains(e.topics(r.ID), "run.workspace_ready") {
		t.Errorf("no run.workspace_ready in %s", e.topics(r.ID))
	}

	// ask runs an HTTP call while the fake worker answers the request.
	ask := func(method, path string, answer func(req wiretest.Frame)) (int, []byte) {
		t.Helper()
		type res struct {
			code int
			body []byte
		}
		ch := make(chan res, 1)
		go func() { c, b := e.call(method, path, nil); ch <- res{c, b} }()
		req := a.expect(wire.FrameWorkspaceRequest)
		if req.RunID != r.ID {
			t.Fatalf("request for run %s", req.RunID)
		}
		answer(req)
		out := <-ch
		return out.code, out.body
	}
	code, body = ask("GET", "/api/v1/runs/"+r.ID+"/diff", func(req wiretest.Frame) {
		if req.Op != wire.WorkspaceOpDiff {
			t.Errorf("op %s", req.Op)
		}
		a.send(wire.WorkspaceReplyFrame{RequestID: req.RequestID, RunID: r.ID, Text: "diff --git a/x b/x\n"})
		a.send(wire.WorkspaceReplyFrame{RequestID: req.RequestID, RunID: r.ID, Text: "+new\n", EOF: true})
	})
	if code != 200 || string(body) != "diff --git a/x b/x\n+new\n" {
		t.Errorf("diff: %d %q", code, body)
	}
	code, body = ask("GET", "/api/v1/runs/"+r.ID+"/diff?stat=1", func(req wiretest.Frame) {
		if req.Op != wire.WorkspaceOpStat {
			t.Errorf("op %s", req.Op)
		}
		a.send(wire.WorkspaceReplyFrame{RequestID: req.RequestID, RunID: r.ID, EOF: true,
			Text: `{"files":[{"path":"x","added":1,"deleted":0,"status":"modified"},{"path":"b.bin","added":null,"deleted":null,"status":"added"}]}`})
	})
	var stat wire.DiffStat
	if code != 200 || json.Unmarshal(body, &stat) != nil || len(stat.Files) != 2 || *stat.Files[0].Added != 1 || stat.Files[1].Added != nil {
		t.Errorf("stat: %d %s", code, body)
	}
	code, body = ask("POST", "/api/v1/runs/"+r.ID+"/push", func(req wiretest.Frame) {
		ok := true
		a.send(wire.WorkspacePushedFrame{RunID: r.ID, Workspace: &ws, OK: &ok, Detail: "pushed"})
		a.send(wire.WorkspaceReplyFrame{RequestID: req.RequestID, RunID: r.ID, EOF: true,
			Text: `{"run_id":"` + r.ID + `","branch":"` + ws.Branch + `","ok":true,"detail":"pushed"}`})
	})
	var pushed wire.PushResult
	if code != 202 || json.Unmarshal(body, &pushed) != nil || !pushed.OK || pushed.Branch != ws.Branch {
		t.Errorf("push: %d %s", code, body)
	}
	if !strings.Contains(e.topics(r.ID), "run.workspace_pushed") {
		t.Errorf("no run.workspace_pushed in %s", e.topics(r.ID))
	}

	code, body = e.call("DELETE", "/api/v1/runs/"+r.ID+"/workspace", nil)
	if code != 409 || !strings.Contains(string(body), wire.CodeIllegalTransition) {
		t.Errorf("remove a live run's worktree: %d %s", code, body)
	}
	e.must(202, "POST", "/api/v1/runs/"+r.ID+"/stop", map[string]any{"force": true}, nil)
	a.expect(wire.FrameRunStop)
	code, _ = ask("DELETE", "/api/v1/runs/"+r.ID+"/workspace", func(req wiretest.Frame) {
		if req.Op != wire.WorkspaceOpRemove {
			t.Errorf("op %s", req.Op)
		}
		a.send(wire.WorkspaceRemovedFrame{RunID: r.ID, Workspace: &ws, Reason: "removed on request"})
		a.send(wire.WorkspaceReplyFrame{RequestID: req.RequestID, RunID: r.ID, EOF: true})
	})
	if code != 204 {
		t.Errorf("remove: %d", code)
	}
	if got := e.run(r.ID); got.Workspace != nil {
		t.Errorf("workspace after removal %+v", got.Workspace)
	}
	if !strings.Contains(e.topics(r.ID), "run.workspace_removed") {
		t.Errorf("no run.workspace_removed in %s", e.topics(r.ID))
	}
	code, body = e.call("GET", "/api/v1/runs/"+r.ID+"/diff?stat=true", nil)
	if code != 404 || !strings.Contains(string(body), wire.CodeNoWorkspace) {
		t.Errorf("diff after removal: %d %s", code, body)
	}

	// The worker's error answers come back as their codes.
	r2 := e.start(nil)
	d2 := a.expect(wire.FrameRunDispatch)
	a.ack(d2, true)
	e.waitRun(r2.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })
	ws2 := wire.Workspace{Path: "/data/worktrees/" + r2.ID, Branch: d2.Workspace.Branch, BaseCommit: strings.Repeat("cd", 20)}
	a.send(wire.WorkspaceReadyFrame{RunID: r2.ID, Attempt: wire.IntPtr(1), Workspace: &ws2})
	e.waitRun(r2.ID, "workspace", func(r wire.Run) bool { return r.Workspace != nil })
	r = r2
	code, body = ask("GET", "/api/v1/runs/"+r2.ID+"/diff", func(req wiretest.Frame) {
		a.send(wire.WorkspaceReplyFrame{RequestID: req.RequestID, RunID: r2.ID, EOF: true, Code: wire.CodeNoWorkspace, Message: "gone"})
	})
	if code != 404 || !strings.Contains(string(body), wire.CodeNoWorkspace) {
		t.Errorf("worker said no_workspace: %d %s", code, body)
	}

	// A worktree failure fails the attempt workspace_failed, with git's words.
	detail := "git fetch --quiet --prune --tags origin: exit status 128: fatal: '/srv/app.git' does not appear to be a git repository"
	a.send(wire.RunStateFrame{RunID: r2.ID, Attempt: wire.IntPtr(1), State: wire.StateWorkspaceFailed, Detail: detail})
	e.waitRun(r2.ID, "requeued", func(r wire.Run) bool { return r.Attempt == 2 })
	var evs wire.EventList
	e.must(200, "GET", "/api/v1/runs/"+r2.ID+"/events", nil, &evs)
	found := false
	for _, ev := range evs.Events {
		if ev.Topic == string(wire.TopicRunFailed) && strings.Contains(string(ev.Payload), `"failure_reason":"workspace_failed"`) && strings.Contains(string(ev.Payload), "does not appear") {
			found = true
		}
	}
	if !found {
		t.Errorf("no run.failed workspace_failed with the git detail among %d events", len(evs.Events))
	}

	// The host holding the worktree goes away: 503 host_unreachable.
	a.ws.CloseNow()
	<-a.gone
	code, body = e.call("GET", "/api/v1/runs/"+r2.ID+"/diff", nil)
	if code != 503 || !strings.Contains(string(body), wire.CodeHostUnreachable) {
		t.Errorf("host gone: %d %s", code, body)
	}
}

// TestDiffPartsAndReviewedPush: ?part= reaches the worker, the stat's
// head and committed marks come back, the text names its head in
// Pam-Head; a push with {commit} carries it to the worker and a
// head_moved refusal is 409 naming the branch's head; a bad part or
// commit is 400 before any worker is asked.
func TestDiffPartsAndReviewedPush(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	e.must(200, "PATCH", "/api/v1/projects/runs", map[string]any{"repo": map[string]any{"url": "/srv/app.git"}}, nil)
	a := e.worker("ws-parts", 4, "shell")
	r := e.start(nil)
	d := a.expect(wire.FrameRunDispatch)
	a.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })
	ws := wire.Workspace{Path: "/data/worktrees/" + r.ID, Branch: d.Workspace.Branch, BaseCommit: strings.Repeat("ab", 20)}
	a.send(wire.WorkspaceReadyFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Workspace: &ws})
	e.waitRun(r.ID, "workspace", func(r wire.Run) bool { return r.Workspace != nil })
	head, moved := strings.Repeat("cd", 20), strings.Repeat("ef", 20)

	type res struct {
		code   int
		header http.Header
		body   []byte
	}
	ask := func(method, path, body string, answer func(req wiretest.Frame)) res {
		t.Helper()
		ch := make(chan res, 1)
		go func() {
			req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				ch <- res{}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			ch <- res{resp.StatusCode, resp.Header, b}
		}()
		req := a.expect(wire.FrameWorkspaceRequest)
		answer(req)
		return <-ch
	}
	reply := func(req wiretest.Frame, f wire.WorkspaceReplyFrame) {
		f.RequestID, f.RunID = req.RequestID, r.ID
		a.send(f)
	}

	out := ask("GET", "/api/v1/runs/"+r.ID+"/diff?stat=true&part=committed", "", func(req wiretest.Frame) {
		if req.Op != wire.WorkspaceOpStat || req.Part != wire.DiffPartCommitted {
			t.Errorf("stat request op %q part %q", req.Op, req.Part)
		}
		reply(req, wire.WorkspaceReplyFrame{EOF: true, Commit: head,
			Text: `{"head":"` + head + `","files":[{"path":"x","added":1,"deleted":0,"status":"modified","committed":true}]}`})
	})
	var stat wire.DiffStat
	if out.code != 200 || json.Unmarshal(out.body, &stat) != nil || stat.Head != head || len(stat.Files) != 1 || !stat.Files[0].Committed {
		t.Errorf("stat: %d %s", out.code, out.body)
	}
	out = ask("GET", "/api/v1/runs/"+r.ID+"/diff?part=uncommitted", "", func(req wiretest.Frame) {
		if req.Op != wire.WorkspaceOpDiff || req.Part != wire.DiffPartUncommitted {
			t.Errorf("diff request op %q part %q", req.Op, req.Part)
		}
		reply(req, wire.WorkspaceReplyFrame{EOF: true, Commit: head, Text: "diff --git a/y b/y\n"})
	})
	if out.code != 200 || out.header.Get("Pam-Head") != head || string(out.body) != "diff --git a/y b/y\n" {
		t.Errorf("diff: %d head %q %q", out.code, out.header.Get("Pam-Head"), out.body)
	}

	// The reviewed head, moved on since: 409 head_moved naming the head.
	out = ask("POST", "/api/v1/runs/"+r.ID+"/push", `{"commit":"`+head+`"}`, func(req wiretest.Frame) {
		if req.Op != wire.WorkspaceOpPush || req.Commit != head {
			t.Errorf("push request op %q commit %q", req.Op, req.Commit)
		}
		reply(req, wire.WorkspaceReplyFrame{EOF: true, Code: wire.CodeHeadMoved, Message: "the branch is at another commit", Commit: moved})
	})
	if out.code != 409 {
		t.Errorf("stale push: %d %s", out.code, out.body)
	} else if e := errorOf(t, out.body); e.Code != wire.CodeHeadMoved || e.Details["head"] != moved {
		t.Errorf("stale push: %+v", e)
	}
	out = ask("POST", "/api/v1/runs/"+r.ID+"/push", `{"commit":"`+moved+`"}`, func(req wiretest.Frame) {
		reply(req, wire.WorkspaceReplyFrame{EOF: true, Commit: moved,
			Text: `{"run_id":"` + r.ID + `","branch":"` + ws.Branch + `","commit":"` + moved + `","ok":true,"detail":"pushed"}`})
	})
	var pushed wire.PushResult
	if out.code != 202 || json.Unmarshal(out.body, &pushed) != nil || pushed.Commit != moved {
		t.Errorf("push: %d %s", out.code, out.body)
	}

	for _, c := range []struct{ method, path, body, field string }{
		{"GET", "/api/v1/runs/" + r.ID + "/diff?part=everything", "", "part"},
		{"POST", "/api/v1/runs/" + r.ID + "/push", `{"commit":"HEAD"}`, "commit"},
		{"POST", "/api/v1/runs/" + r.ID + "/push", `{"commit":"` + head[:12] + `"}`, "commit"},
	} {
		code, body := e.call(c.method, c.path, c.body)
		if code != 400 || errorOf(t, body).Details["field"] != c.field {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, code, body)
		}
	}
}
