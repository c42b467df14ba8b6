package worker

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// A run whose spawn completes while the liveness check lists the sessions
// is not judged from that list: its session was created after the list
// was taken, so reading it as vanished would report a healthy run
// session_lost and forget it while its session runs on (a false failure,
// then a second incarnation elsewhere). The hook holds the check between
// its list and its judgement while the spawn completes, which is the
// interleaving that failed TestStop on a loaded machine.
func TestLivenessIgnoresRunsSpawnedDuringTheList(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		r.known[runA] = workerRun(runA, 1, wire.RunRunning, testHostID)
	})
	var armed atomic.Bool
	var passes atomic.Int64
	listed, release := make(chan struct{}), make(chan struct{})
	h.opts.ReconcileInterval = time.Hour // only the liveness loop judges
	h.opts.hooks = &hooks{
		livenessListed: func() {
			if armed.CompareAndSwap(true, false) {
				listed <- struct{}{}
				<-release
			}
		},
		livenessPass: func() { passes.Add(1) },
	}
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))

	armed.Store(true)
	select {
	case <-listed:
	case <-time.After(eventually.Medium):
		t.Fatal("the liveness check never listed the sessions")
	}
	from := orch.mark()
	h.spawnRun(runA, 1) // acked, session created, live, captured
	close(release)

	// Two whole passes after the held one: the run must still be ours and
	// nothing reported about it.
	after := passes.Load()
	eventually.Wait(t, eventually.Medium, "two more liveness passes", func() bool { return passes.Load() >= after+3 })
	if n := orch.count(from, isType(wire.FrameRunState, runA)); n != 0 {
		t.Errorf("a run spawned during the list was reported %d times", n)
	}
	if _, ok := h.session(runA); !ok {
		t.Error("the run's session is gone")
	}
	if _, err := os.Stat(filepath.Join(h.opts.DataDir, "worker", "dispatch", runA+".json")); err != nil {
		t.Errorf("the run was forgotten: %v", err)
	}
}
