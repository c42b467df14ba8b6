package e2e

import (
	"testing"
	"time"

	"pam/internal/wire"
)

// TestPTYWorkspaceFreedByFinishedRun: under the pty executor one
// workspace has one live run, but a finished run whose session only
// holds its last screen open (a long PAM_HOLD_OPEN) does not keep the
// next run in the same workspace from starting: its session is ended
// for it. A workspace with a live run still refuses a second one.
func TestPTYWorkspaceFreedByFinishedRun(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	data, _ := s.worker("ws-host", "PAM_EXECUTOR=pty", "PAM_HOLD_OPEN=10m")
	task := s.task()
	cwd := t.TempDir()
	var first wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell", "prompt": "echo first; exit 0", "cwd": cwd}, &first)
	s.waitRun(first.ID, "exited", 60*time.Second, func(r wire.Run) bool { return r.Status == "exited" })
	if !s.sessionAlive(data, first.SessionName, "PAM_EXECUTOR=pty") {
		t.Fatal("the finished run's session is not in hold-open (nothing under test)")
	}
	var second wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell", "prompt": "exec sleep 300", "cwd": cwd, "max_attempts": 1}, &second)
	got := s.waitRun(second.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status != "pending" && r.Status != "spawning" })
	if got.Status != "running" {
		t.Fatalf("the second run in the workspace is %s (%s), want running", got.Status, reasonOf(got))
	}
	if s.sessionAlive(data, first.SessionName, "PAM_EXECUTOR=pty") {
		t.Fatal("the finished run's session still holds the workspace")
	}
	var third wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell", "prompt": "exit 0", "cwd": cwd, "max_attempts": 1}, &third)
	got = s.waitRun(third.ID, "failed", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	if got.Status != "failed" || got.FailureReason == nil || *got.FailureReason != wire.FailSpawnFailed {
		t.Fatalf("a run in a workspace with a live run: %s %s, want failed spawn_failed", got.Status, reasonOf(got))
	}
	s.must(200, "GET", "/api/v1/runs/"+second.ID, nil, &second)
	if second.Status != "running" {
		t.Fatalf("the live run is %s after another was refused its workspace", second.Status)
	}
}

func reasonOf(r wire.Run) string {
	if r.FailureReason == nil {
		return "no failure reason"
	}
	return *r.FailureReason
}
