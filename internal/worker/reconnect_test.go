package worker

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/spool"
	"pam/internal/wire"
)

// Issue item "spooled signals are replayed before the worker resumes
// heartbeats" (docs/architecture.md#spool-and-replay): signals spooled while the orchestrator could
// not be reached are all posted, in order, after the worker registered
// again and before it opens the uplink, whose first frame is a heartbeat;
// so the orchestrator never judges the host's runs on the state it had
// before the spooled signals.
func TestSpoolReplayedBeforeHeartbeats(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	// Nothing replays but a (re)connect: no periodic replay, no
	// reconciliation pass asking for one.
	h.opts.LivenessInterval = time.Hour
	h.opts.ReconcileInterval = time.Hour
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))

	// The orchestrator goes away: registrations fail, the uplink drops.
	orch.mu.Lock()
	orch.failRegister = 1 << 30
	orch.mu.Unlock()
	orch.drop()
	eventually.Wait(t, eventually.Medium, "a refused registration after the drop", func() bool { return len(orch.regs()) >= 2 })

	// Meanwhile the wrapper of runA spools what it could not deliver.
	dir := spool.Dir(filepath.Join(h.opts.DataDir, "worker"))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sigs := []wire.Signal{
		{Kind: wire.SignalStarted, Attempt: ptr(1), Source: wire.SourceWrapper, Timestamp: &at},
		{Kind: wire.SignalProgress, Attempt: ptr(1), Seq: ptr[int64](1), Source: wire.SourceProviderHook, Timestamp: &at},
		{Kind: wire.SignalFinished, Attempt: ptr(1), Source: wire.SourceWrapper, Payload: json.RawMessage(`{"exit_code":0}`), Timestamp: &at},
	}
	for _, sig := range sigs {
		if _, err := spool.Write(dir, spool.Entry{RunID: runA, Signal: sig, Token: "tok-a", APIURL: orch.srv.URL}); err != nil {
			t.Fatal(err)
		}
	}
	// Each post notes how many uplinks had been asked for by then.
	orch.mu.Lock()
	dialsBefore := orch.dials
	heartbeatsFrom := len(orch.frames)
	var dialsAtPost []int
	orch.runs.signalAnswer = func(postedSignal) int {
		orch.mu.Lock()
		defer orch.mu.Unlock()
		dialsAtPost = append(dialsAtPost, orch.dials)
		return http.StatusAccepted
	}
	orch.failRegister = 0 // the orchestrator is back
	orch.mu.Unlock()

	orch.wait(heartbeatsFrom, "a heartbeat on the new uplink", isType(wire.FrameHeartbeat, ""))
	eventually.Wait(t, eventually.Medium, "the spool replayed", func() bool {
		files, _, _ := spool.List(dir)
		return len(files) == 0
	})
	orch.mu.Lock()
	defer orch.mu.Unlock()
	var kinds []string
	for _, s := range orch.signals {
		if s.RunID == runA {
			kinds = append(kinds, s.Body.Kind)
		}
	}
	if want := []string{wire.SignalStarted, wire.SignalProgress, wire.SignalFinished}; len(kinds) != len(want) ||
		kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] {
		t.Errorf("replayed %v, want %v in order", kinds, want)
	}
	for i, n := range dialsAtPost {
		if n != dialsBefore {
			t.Errorf("spooled signal %d posted after the uplink was dialled (%d dials, %d before the outage ended): a heartbeat went first", i, n, dialsBefore)
		}
	}
}
