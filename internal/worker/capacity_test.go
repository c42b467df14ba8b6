package worker

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// dispatchAck sends a run_dispatch for runID and returns its ack.
func (h *harness) dispatchAck(runID string, attempt int) wiretest.Frame {
	h.t.Helper()
	from := h.orch.mark()
	h.orch.send(h.dispatchFrame(runID, attempt))
	ack, _ := h.orch.wait(from, "the ack of "+runID, isType(wire.FrameRunDispatchAck, runID))
	return ack
}

// Issue item "refused offers loop": only runs being spawned or running
// count against PAM_MAX_RUNS, as the orchestrator counts them. A session
// in hold-open (the CLI exited; the orchestrator says the run is over)
// and one being stopped take no capacity, even before reconciliation
// looked at them: a host at max_runs by its sessions but not by its
// running runs takes the run it is offered, instead of refusing it on
// every offer. A host full of running runs still refuses.
func TestCapacityCountsOnlySpawningRunning(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.MaxRuns = 2
	h.opts.StopGrace = time.Minute       // the stubborn run stays "being stopped"
	h.opts.ReconcileInterval = time.Hour // only the first pass, at connect
	h.opts.LivenessInterval = time.Hour  // nothing else learns a run ended
	var passes atomic.Int64
	h.opts.hooks = &hooks{reconcilePass: func() { passes.Add(1) }}
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	eventually.Wait(t, eventually.Medium, "the reconciliation at connect", func() bool { return passes.Load() >= 1 })

	running := func(ids ...string) {
		orch.setRuns(func(r *fakeRuns) {
			r.serve = true
			r.desired = nil
			for _, id := range ids {
				wr := workerRun(id, 1, wire.RunRunning, testHostID)
				r.desired = append(r.desired, wr)
				r.known[id] = wr
			}
		})
	}
	running(runA, runStubborn)
	h.spawnRun(runA, 1)
	h.spawnRun(runStubborn, 1)

	// Run A's CLI exits: the orchestrator has it exited; its session is
	// in hold-open. The worker has not reconciled since.
	orch.setRuns(func(r *fakeRuns) { r.known[runA] = workerRun(runA, 1, wire.RunExited, testHostID) })
	running(runStubborn)
	if ack := h.dispatchAck(runB, 1); ack.Accepted == nil || !*ack.Accepted {
		t.Fatalf("with one run running and one in hold-open (max_runs 2), the dispatch was refused: %q", ack.Reason)
	}
	if _, ok := h.session(runA); !ok {
		t.Error("the session in hold-open was ended; it must stay until its hold-open ends")
	}

	// The stubborn run is stopped (it ignores SIGTERM, so it stays being
	// stopped for a while): it no longer counts either.
	orch.send(wire.RunStopFrame{RunID: runStubborn, Attempt: wire.IntPtr(1)})
	orch.setRuns(func(r *fakeRuns) { r.known[runStubborn] = workerRun(runStubborn, 1, wire.RunStopped, testHostID) })
	running(runB)
	if ack := h.dispatchAck(runC, 1); ack.Accepted == nil || !*ack.Accepted {
		t.Fatalf("with one run running, one in hold-open and one being stopped (max_runs 2), the dispatch was refused: %q", ack.Reason)
	}
	if _, ok := h.session(runStubborn); !ok {
		t.Fatal("the stubborn session went before the test could count it as being stopped")
	}

	// B and C run: the host is full, and says so.
	running(runB, runC)
	ack := h.dispatchAck(runHold, 1)
	if ack.Accepted == nil || *ack.Accepted || !strings.Contains(ack.Reason, "at capacity: 2 of 2") {
		t.Errorf("a dispatch to a host with 2 of 2 runs running: accepted %v, reason %q", ack.Accepted, ack.Reason)
	}
}
