package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pam/internal/pamtest"
	"pam/internal/wire"
)

// fakeResumable is an agent CLI that can resume: it writes the argv it
// got into its working directory (the run's worktree), one argument a
// line, reports its session id through `pam hook completed` with the JSON
// on stdin that Claude Code gives its hooks, and exits.
const fakeResumable = `#!/bin/sh
printf '%%s\n' "$@" > "argv.$PAM_RUN_ID"
echo '{"session_id":"abc","hook_event_name":"Stop"}' | %s hook completed
echo fake-agent-done
`

// TestContinueE2E (docs/architecture.md#resume-and-continue): real serve,
// worker, sessions and git, a fake agent CLI that is a real process. Its
// hook reports the session id; POST /runs/{id}/continue starts a new run
// on the same host, in the same worktree, whose CLI gets the provider's
// resume_args with that session and the text; the old run journals
// run.continued and no longer holds the worktree. Run it with
// PAM_EXECUTOR=pty too: the continuation then starts while the old run's
// holder may still hold the worktree open.
func TestContinueE2E(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "")
	conf := pamtest.ShortDir(t, "pamc-")
	bin := pamtest.ShortDir(t, "pamb-")
	agent := filepath.Join(bin, "agent")
	if err := os.WriteFile(agent, []byte(fmt.Sprintf(fakeResumable, pamtest.Pam(t))), 0o755); err != nil {
		t.Fatal(err)
	}
	catalog := fmt.Sprintf(`[providers.agent]
binary = %q
args = ["--task", "{prompt}"]
resume_args = ["--resume", "{session_id}", "{prompt}"]
`, agent)
	if err := os.WriteFile(filepath.Join(conf, "providers.toml"), []byte(catalog), 0o600); err != nil {
		t.Fatal(err)
	}
	w := s.faultWorker("conv-host", s.url, "PAM_CONFIG_DIR="+conf)
	host := s.host("conv-host")
	if !strings.Contains(strings.Join(host.Providers, ","), "agent") {
		t.Fatalf("the host does not offer the agent: %v", host.Providers)
	}

	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})
	var p wire.Project
	s.must(201, "POST", "/api/v1/projects", map[string]any{"name": "Conversations", "repo": map[string]any{"url": remote}}, &p)
	var task wire.WorkItem
	s.must(201, "POST", "/api/v1/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "Talk"}, &task)

	var first wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "agent", "prompt": "write the code"}, &first)
	old := s.waitRun(first.ID, "exited with its agent session", 60*time.Second, func(r wire.Run) bool {
		return r.Status == wire.RunExited && r.AgentSessionID != nil
	})
	if *old.AgentSessionID != "abc" || old.Workspace == nil {
		t.Fatalf("the first run: session %v, workspace %+v; events %v", *old.AgentSessionID, old.Workspace, s.topics(first.ID))
	}
	ws := *old.Workspace
	if got := readArgv(t, ws.Path, first.ID); got != "--task\nwrite the code" {
		t.Errorf("the first run's argv:\n%s", got)
	}
	if n := countTopic(s.events(first.ID), string(wire.TopicRunAgentSession)); n != 1 {
		t.Errorf("run.agent_session %d times", n)
	}

	var next wire.Run
	s.must(202, "POST", "/api/v1/runs/"+first.ID+"/continue", map[string]any{"text": "now the docs"}, &next)
	if next.ContinuesRunID == nil || *next.ContinuesRunID != first.ID || next.TargetHostID == nil || *next.TargetHostID != host.ID {
		t.Fatalf("the continuation: %+v", next)
	}
	done := s.waitRun(next.ID, "the continuation exited", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	if done.Status != wire.RunExited || done.HostID == nil || *done.HostID != host.ID || done.Workspace == nil || *done.Workspace != ws {
		t.Fatalf("the continuation ended %s on %v in %+v; events %v", done.Status, done.HostID, done.Workspace, s.topics(next.ID))
	}
	// The same worktree (the argv file is in it), resumed with the
	// session and the text.
	if got := readArgv(t, ws.Path, next.ID); got != "--resume\nabc\nnow the docs" {
		t.Errorf("the continuation's argv:\n%s", got)
	}
	var got wire.Run
	if s.must(200, "GET", "/api/v1/runs/"+first.ID, nil, &got); got.Workspace != nil {
		t.Errorf("the old run still holds the worktree: %+v", got.Workspace)
	}
	evs := s.events(first.ID)
	if countTopic(evs, string(wire.TopicRunContinued)) != 1 {
		t.Errorf("no run.continued on the old run: %v", s.topics(first.ID))
	}
	for _, e := range evs {
		if e.Topic == string(wire.TopicRunContinued) && eventPayload(e)["run_id"] != next.ID {
			t.Errorf("run.continued names %v", eventPayload(e)["run_id"])
		}
	}
	if _, err := os.Stat(filepath.Join(w.opts.DataDir, "worker", "workspaces", next.ID+".json")); err != nil {
		t.Errorf("the worker did not hand the worktree to the continuation: %v", err)
	}
}

// readArgv is what the fake agent of a run wrote into the worktree.
func readArgv(t *testing.T, dir, runID string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "argv."+runID))
	if err != nil {
		t.Fatalf("the agent of run %s left no argv in %s: %v", runID, dir, err)
	}
	return strings.TrimRight(string(b), "\n")
}
