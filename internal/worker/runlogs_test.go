package worker

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// TestRunLogRetention: the clean-up removes the logs (and rotated logs)
// of runs that ended longer ago than PAM_RUN_LOG_RETENTION, and of runs
// the orchestrator does not know once they are that old; it keeps the
// logs of runs this host runs, of runs the orchestrator says are live,
// of runs that ended within the retention, logs written within it, and
// any file that is not a run log.
func TestRunLogRetention(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.ReconcileInterval = 50 * time.Millisecond
	h.opts.RunLogRetention = time.Hour
	var passes atomic.Int64
	h.opts.hooks = &hooks{workspacesPass: func() { passes.Add(1) }}

	dir := filepath.Join(h.opts.DataDir, "runs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	write := func(name string, age time.Duration) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("--- pane ---\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-age)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ids := map[string]string{}
	for _, name := range []string{"expired", "gone", "recent", "running", "fresh", "live"} {
		ids[name] = uuid.NewString()
	}
	paths := map[string]string{
		"expired":         write(ids["expired"]+".log", 3*time.Hour),
		"expired rotated": write(ids["expired"]+".log.1", 4*time.Hour),
		"gone":            write(ids["gone"]+".log", 2*time.Hour),
		"recent":          write(ids["recent"]+".log", 2*time.Hour),
		"running":         write(ids["running"]+".log", 2*time.Hour),
		"fresh":           write(ids["fresh"]+".log", time.Minute),
		"not a run log":   write("notes.log", 5*time.Hour),
	}
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		r.known[ids["expired"]] = wire.WorkerRun{RunID: ids["expired"], Attempt: 1, Status: wire.RunExited, FinishedAt: ago(2 * time.Hour)}
		r.known[ids["recent"]] = wire.WorkerRun{RunID: ids["recent"], Attempt: 1, Status: wire.RunFailed, FinishedAt: ago(10 * time.Minute)}
		r.known[ids["running"]] = wire.WorkerRun{RunID: ids["running"], Attempt: 2, Status: wire.RunRunning}
		r.known[ids["fresh"]] = wire.WorkerRun{RunID: ids["fresh"], Attempt: 1, Status: wire.RunStopped, FinishedAt: ago(5 * time.Hour)}
		r.known[ids["live"]] = workerRun(ids["live"], 1, wire.RunRunning, testHostID)
		r.desired = []wire.WorkerRun{r.known[ids["live"]]}
	})
	h.start()
	// A run of this host's: its log is written as its pane changes, and
	// kept however old it looks.
	h.spawnRun(ids["live"], 1)
	paths["live"] = filepath.Join(dir, ids["live"]+".log")
	old := now.Add(-5 * time.Hour)
	if err := os.Chtimes(paths["live"], old, old); err != nil {
		t.Fatal(err)
	}
	start := passes.Load()
	eventually.Wait(t, 15*time.Second, "two clean-up passes", func() bool { return passes.Load() >= start+2 })

	for name, want := range map[string]bool{"expired": false, "expired rotated": false, "gone": false,
		"recent": true, "running": true, "fresh": true, "not a run log": true, "live": true} {
		_, err := os.Stat(paths[name])
		if got := err == nil; got != want {
			t.Errorf("log of the %s run: exists %v, want %v", name, got, want)
		}
	}
}
