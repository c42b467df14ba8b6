package e2e

import (
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// A run whose pane does not change for PAM_CLI_HANG_TIMEOUT while its host
// is online fails cli_hang, and its host stops the session.
func TestCLIHang(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "", "PAM_CLI_HANG_TIMEOUT=2s")
	w := s.faultWorker("hang-host", s.url)
	r := s.runShell(s.task().ID, "echo waiting-forever; exec sleep 600", map[string]any{"max_attempts": 1})
	s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
	t0 := time.Now()
	got := s.waitRun(r.ID, "cli_hang", 30*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	if got.Status != "failed" || got.FailureReason == nil || *got.FailureReason != wire.FailCLIHang {
		t.Fatalf("run %s %v; events %v", got.Status, got.FailureReason, s.topics(r.ID))
	}
	failedAfter := time.Since(t0)
	eventually.Wait(t, 15*time.Second, "the hung session stopped", func() bool { return !w.hasSession(r.SessionName) })
	t.Logf("cli_hang %s after running (timeout 2s); session stopped %s after that", failedAfter.Round(time.Millisecond), (time.Since(t0) - failedAfter).Round(time.Millisecond))
}
