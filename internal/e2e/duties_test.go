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
	got := s.waitRun(r.ID, "cli_hang", eventually.Long, func(r wire.Run) bool { return !isActive(r.Status) })
	if got.Status != "failed" || got.FailureReason == nil || *got.FailureReason != wire.FailCLIHang {
		t.Fatalf("run %s %v; events %v", got.Status, got.FailureReason, s.topics(r.ID))
	}
	failedAfter := time.Since(t0)
	eventually.Wait(t, 15*time.Second, "the hung session stopped", func() bool { return !w.hasSession(r.SessionName) })
	t.Logf("cli_hang %s after running (timeout 2s); session stopped %s after that", failedAfter.Round(time.Millisecond), (time.Since(t0) - failedAfter).Round(time.Millisecond))
}

// An agent whose turn ended waits at its prompt
// (docs/architecture.md#working-waiting-hung): a shell run that posts its
// completion (`pam hook completed`, as Claude Code's Stop hook does) and
// then sits quiet stays running, at attempt 1, through twice
// PAM_CLI_HANG_TIMEOUT; once it has had no input and no pane change for
// PAM_COMPLETED_STOP_AFTER, pam stops it (run.stopped, source
// completed_idle, no requeue) and its host stops the session.
func TestCompletedRunWaitsThenStops(t *testing.T) {
	t.Parallel()
	const hang, stopAfter = 2 * time.Second, 8 * time.Second
	s, _ := newFaultSystem(t, "", "PAM_CLI_HANG_TIMEOUT="+hang.String(), "PAM_COMPLETED_STOP_AFTER="+stopAfter.String())
	w := s.faultWorker("waiting-host", s.url)
	// The pane ticks while the hook runs: until its completion lands the
	// run is working, and a slow hook must not look hung.
	r := s.runShell(s.task().ID, `(while :; do date +%N; sleep 0.2; done) & tick=$!; `+hookCall(t, "completed")+
		`; kill $tick; wait $tick 2>/dev/null; echo turn-ended; exec sleep 600`, ownCwd(t))
	s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == wire.RunRunning })
	done := s.waitRun(r.ID, "completed", eventually.Long, func(r wire.Run) bool { return r.CompletedAt != nil })

	var moved wire.Run
	if eventually.Within(2*hang, func() bool {
		moved = s.getRun(r.ID)
		return moved.Status != wire.RunRunning || moved.Attempt != 1
	}) {
		t.Fatalf("a completed run within twice the hang timeout: %s at attempt %d (%v); events %v",
			moved.Status, moved.Attempt, moved.FailureReason, s.topics(r.ID))
	}

	got := s.waitRun(r.ID, "stopped", eventually.Long, func(r wire.Run) bool { return r.Status != wire.RunRunning })
	if got.Status != wire.RunStopped || got.Attempt != 1 || got.FailureReason != nil {
		t.Fatalf("run %s at attempt %d (%v); events %v", got.Status, got.Attempt, got.FailureReason, s.topics(r.ID))
	}
	if idle := got.FinishedAt.Sub(*done.CompletedAt); idle < stopAfter {
		t.Errorf("stopped %s after its completion, before PAM_COMPLETED_STOP_AFTER (%s)", idle, stopAfter)
	}
	var sources []any
	for _, ev := range s.events(r.ID) {
		switch ev.Topic {
		case string(wire.TopicRunStopped):
			sources = append(sources, eventPayload(ev)["source"])
		case string(wire.TopicRunRequeued), string(wire.TopicRunFailed):
			t.Errorf("%s; events %v", ev.Topic, s.topics(r.ID))
		}
	}
	if len(sources) != 1 || sources[0] != wire.StopCompletedIdle {
		t.Errorf("run.stopped sources %v, want [%s]", sources, wire.StopCompletedIdle)
	}
	eventually.Wait(t, 15*time.Second, "the idle session stopped", func() bool { return !w.hasSession(r.SessionName) })
	t.Logf("stopped %s after its completion (stop after %s)", got.FinishedAt.Sub(*done.CompletedAt).Round(time.Millisecond), stopAfter)
}
