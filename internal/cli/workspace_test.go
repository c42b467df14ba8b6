package cli

import (
	"strings"
	"testing"
)

// TestWorkspaceCommands: --repo and --base of pam project create and
// update, run start --workspace, and pam run diff, push and clean send
// what the contract says and print plainly when piped.
func TestWorkspaceCommands(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	withRepo := strings.Replace(projectJSON, `"repo":null`, `"repo":{"url":"/srv/app.git","base":"main"}`, 1)
	f.handle("POST /api/v1/projects", 201, withRepo)
	f.handle("PATCH /api/v1/projects/demo", 200, withRepo)
	f.handle("GET /api/v1/projects/demo", 200, withRepo)
	f.handle("POST /api/v1/runs", 202, runJSON)
	f.handle("POST /api/v1/runs/"+runID+"/push", 202, `{"run_id":"`+runID+`","branch":"pam/demo-f8d9e2a1","commit":"0123456789abcdef0123456789abcdef01234567","ok":true,"detail":"pushed"}`)
	f.handle("DELETE /api/v1/runs/"+runID+"/workspace", 204, ``)
	f.handle("GET /api/v1/runs/"+runID+"/diff", 200, "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n")

	task := "9c0c2f7e-0000-4000-8000-000000000002"
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"project", "create", "--name", "Demo", "--repo", "/srv/app.git"},
			`POST /api/v1/projects {"name":"Demo","repo":{"url":"/srv/app.git"}}`},
		{[]string{"project", "create", "--name", "Demo", "--repo", "git@example.com:o/app.git", "--base", "release/2"},
			`POST /api/v1/projects {"name":"Demo","repo":{"url":"git@example.com:o/app.git","base":"release/2"}}`},
		{[]string{"project", "update", "demo", "--repo", "/srv/other.git"},
			`PATCH /api/v1/projects/demo {"repo":{"url":"/srv/other.git"}}`},
		{[]string{"project", "update", "demo", "--base", "dev"},
			`PATCH /api/v1/projects/demo {"repo":{"url":"/srv/app.git","base":"dev"}}`},
		{[]string{"project", "update", "demo", "--repo", ""},
			`PATCH /api/v1/projects/demo {"repo":null}`},
		{[]string{"run", "start", "--task", task, "--provider", "claude", "--workspace", "none"},
			`POST /api/v1/runs {"task_id":"` + task + `","provider":"claude","workspace":"none"}`},
		{[]string{"run", "push", runID}, `POST /api/v1/runs/` + runID + `/push`},
		{[]string{"run", "clean", runID}, `DELETE /api/v1/runs/` + runID + `/workspace`},
		{[]string{"run", "diff", runID}, `GET /api/v1/runs/` + runID + `/diff`},
		{[]string{"run", "diff", "--part", "committed", runID}, `GET /api/v1/runs/` + runID + `/diff?part=committed`},
		{[]string{"run", "push", "--commit", "0123456789abcdef0123456789abcdef01234567", runID}, `POST /api/v1/runs/` + runID + `/push {"commit":"0123456789abcdef0123456789abcdef01234567"}`},
	}
	for _, tt := range tests {
		e.mustPam(tt.args...)
		if got := f.last(); got != tt.want {
			t.Errorf("pam %s sent\n  %s\nwant\n  %s", strings.Join(tt.args, " "), got, tt.want)
		}
	}
	if out := e.mustPam("run", "diff", runID); out != "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n" || strings.Contains(out, "\x1b") {
		t.Errorf("piped diff %q", out)
	}
	if out := e.mustPam("project", "show", "demo"); !strings.Contains(out, "/srv/app.git") {
		t.Errorf("project show lacks the repo:\n%s", out)
	}
	if out := e.mustPam("run", "push", runID); out != "pushed pam/demo-f8d9e2a1 at 0123456789abcdef0123456789abcdef01234567\n" {
		t.Errorf("push printed %q", out)
	}

	f.handle("GET /api/v1/runs/"+runID+"/diff", 200, `{"head":"0123456789abcdef0123456789abcdef01234567","files":[{"path":"x","added":3,"deleted":1,"status":"modified","committed":true},{"path":"b.png","added":null,"deleted":null,"status":"added","committed":false}]}`)
	out := e.mustPam("run", "diff", "--stat", runID)
	if f.last() != `GET /api/v1/runs/`+runID+`/diff?stat=true` {
		t.Errorf("stat sent %s", f.last())
	}
	for _, want := range []string{"head 0123456789abcdef0123456789abcdef01234567", "3      1        modified  committed    x", "-      -        added     uncommitted  b.png", "2 files changed, 3 insertions(+), 1 deletions(-)"} {
		if !strings.Contains(out, want) {
			t.Errorf("stat lacks %q:\n%s", want, out)
		}
	}

	f.handle("POST /api/v1/runs/"+runID+"/push", 202, `{"run_id":"`+runID+`","branch":"pam/demo-f8d9e2a1","ok":false,"detail":"rejected: non-fast-forward"}`)
	if r := e.pam("run", "push", runID); r.code != 1 || !strings.Contains(r.stderr, "non-fast-forward") {
		t.Errorf("failed push: %+v", r)
	}
	f.handle("GET /api/v1/runs/"+runID+"/diff", 404, `{"error":{"code":"no_workspace","message":"run has no worktree","details":{}}}`)
	if r := e.pam("run", "diff", runID); r.code != 1 || !strings.Contains(r.stderr, "no worktree") {
		t.Errorf("no worktree: %+v", r)
	}
	f.handle("POST /api/v1/runs/"+runID+"/push", 409, `{"error":{"code":"head_moved","message":"the branch is at 89abcdef0123 now, not at the reviewed 0123456789ab: review it again","details":{}}}`)
	if r := e.pam("run", "push", "--commit", "0123456789abcdef0123456789abcdef01234567", runID); r.code != 1 || !strings.Contains(r.stderr, "review it again") {
		t.Errorf("push of a moved head: %+v", r)
	}
	for _, args := range [][]string{{"run", "diff", "--part", "all", runID}, {"run", "push", "--commit", "HEAD", runID}} {
		if r := e.pam(args...); r.code != 2 {
			t.Errorf("pam %s: %+v", strings.Join(args, " "), r)
		}
	}
	if r := e.pam("project", "create", "--name", "X", "--base", "main"); r.code != 2 {
		t.Errorf("--base without --repo: %+v", r)
	}
}

// TestColorDiff: on a terminal, additions are green, deletions red, hunk
// headers cyan.
func TestColorDiff(t *testing.T) {
	var b strings.Builder
	if err := colorDiff(&b, strings.NewReader("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n same\n")); err != nil {
		t.Fatal(err)
	}
	want := ansiBold + "--- a/x" + ansiReset + "\n" + ansiBold + "+++ b/x" + ansiReset + "\n" + ansiCyan + "@@ -1 +1 @@" + ansiReset + "\n" +
		ansiRed + "-old" + ansiReset + "\n" + ansiGreen + "+new" + ansiReset + "\n same\n"
	if b.String() != want {
		t.Errorf("coloured\n%q\nwant\n%q", b.String(), want)
	}
}
