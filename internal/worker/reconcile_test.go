package worker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pam/internal/clock"
	"pam/internal/eventually"
	"pam/internal/spool"
	"pam/internal/tmux"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// fakeRuns is what the fake orchestrator says about this host's runs.
type fakeRuns struct {
	// serve makes GET /api/internal/worker/runs[/{id}] answer; otherwise
	// they are a plain 404, as from an orchestrator without them.
	serve bool
	// down answers 503: the orchestrator cannot say (a partition, its
	// database down).
	down    bool
	desired []wire.WorkerRun
	// known answers GET /runs/{id}; a run missing here is not_found.
	known map[string]wire.WorkerRun
	// signalAnswer, when set, decides the status of each posted signal.
	signalAnswer func(postedSignal) int
}

func (o *fakeOrch) setRuns(f func(r *fakeRuns)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.runs.known == nil {
		o.runs.known = map[string]wire.WorkerRun{}
	}
	f(&o.runs)
}

func (o *fakeOrch) workerRuns(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	serve, down, list := o.runs.serve, o.runs.down, append([]wire.WorkerRun{}, o.runs.desired...)
	o.mu.Unlock()
	switch {
	case !o.authorized(r) || !serve:
		http.NotFound(w, r)
	case down:
		http.Error(w, `{"error":{"code":"unavailable","message":"down"}}`, http.StatusServiceUnavailable)
	default:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(wire.WorkerRunList{Runs: list})
	}
}

func (o *fakeOrch) workerRun(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	serve, down := o.runs.serve, o.runs.down
	run, ok := o.runs.known[r.PathValue("id")]
	o.mu.Unlock()
	switch {
	case !o.authorized(r) || !serve:
		http.NotFound(w, r)
	case down:
		http.Error(w, `{"error":{"code":"unavailable","message":"down"}}`, http.StatusServiceUnavailable)
	case !ok:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"code":"not_found","message":"run not found"}}`))
	default:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(run)
	}
}

// Run ids with distinct session names for the reconciliation tests.
const (
	runOrphan   = "c0000001-0000-4000-8000-000000000001"
	runHostLost = "c0000002-0000-4000-8000-000000000002"
	runHold     = "c0000003-0000-4000-8000-000000000003"
	runPastHold = "c0000004-0000-4000-8000-000000000004"
	runStopped  = "c0000005-0000-4000-8000-000000000005"
	runElse     = "c0000006-0000-4000-8000-000000000006"
	runOlder    = "c0000007-0000-4000-8000-000000000007"
	runDesired  = "c0000008-0000-4000-8000-000000000008"
	runMissing  = "c0000009-0000-4000-8000-000000000009"
	runMissSpwn = "c000000a-0000-4000-8000-00000000000a"
	runSpooled  = "c000000b-0000-4000-8000-00000000000b"
)

func ptr[T any](v T) *T { return &v }

// workerRun is a run as GET /api/internal/worker/runs/{id} tells it.
func workerRun(id string, attempt int, status, host string, attempts ...wire.RunAttempt) wire.WorkerRun {
	r := wire.WorkerRun{RunID: id, Attempt: attempt, Status: status, SessionName: "pam-" + id[:8], TaskID: "t", Provider: "shell", Attempts: attempts}
	if host != "" {
		r.HostID = ptr(host)
	}
	return r
}

// oldSession creates a pam session for a run as an earlier worker would
// have.
func (h *harness) oldSession(runID string, attempt int, command ...string) tmux.SessionName {
	h.t.Helper()
	name, err := tmux.SessionForRun(runID)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(command) == 0 {
		command = []string{h.opts.PamBinary, "session", runID}
	}
	if err := h.ex.NewSession(h.t.Context(), tmux.Spawn{Name: name, Cwd: h.t.TempDir(), RunID: runID, Attempt: attempt, Instance: h.instanceID(), Command: command}); err != nil {
		h.t.Fatal(err)
	}
	return name
}

func (h *harness) alive(name tmux.SessionName) bool {
	for _, s := range h.sessions() {
		if s.Name == name {
			return true
		}
	}
	return false
}

func isState(state, runID string) func(wiretest.Frame) bool {
	return func(f wiretest.Frame) bool {
		return f.Type == wire.FrameRunState && f.State == state && f.RunID == runID
	}
}

// TestReconcileDiscrimination walks the terminal-but-alive table (docs/architecture.md#terminal-but-alive-sessions) with one live session per
// row, plus missing sessions and re-adoption.
//
// It runs once per executor: the table is the same for PTY holders.
func TestReconcileDiscrimination(t *testing.T) {
	t.Parallel()
	for _, ex := range []string{"tmux", "pty"} {
		t.Run(ex, func(t *testing.T) {
			t.Parallel()
			if ex == "pty" && testing.Short() {
				t.Skip("builds pam")
			}
			reconcileDiscrimination(t, ex)
		})
	}
}

func reconcileDiscrimination(t *testing.T, executor string) {
	orch := newFakeOrch(t)
	h := newHarnessFor(t, orch, executor)
	h.opts.ReconcileInterval = 200 * time.Millisecond
	h.opts.OrphanHold = 10 * time.Minute
	h.opts.HoldOpen = time.Hour
	h.opts.StopGrace = 500 * time.Millisecond
	// The holds are judged at a clock the test moves: a pass within a
	// hold keeps the session, the first past it acts.
	clk := clock.NewManual(time.Now())
	h.opts.Clock = clk.Now
	var passes atomic.Int64
	h.opts.hooks = &hooks{reconcilePass: func() { passes.Add(1) }}
	afterPasses := func(what string, n int64) {
		t.Helper()
		from := passes.Load()
		eventually.Wait(t, eventually.Medium, what, func() bool { return passes.Load() >= from+n })
	}
	now := clk.Now().UTC()
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		hostLost := wire.RunAttempt{Attempt: 1, HostID: ptr(testHostID), Outcome: ptr("failed"), FailureReason: ptr(wire.FailHostLost)}
		r.known[runHostLost] = workerRun(runHostLost, 2, wire.RunRunning, "host-2", hostLost)
		hold := workerRun(runHold, 1, wire.RunExited, testHostID)
		hold.FinishedAt = &now
		r.known[runHold] = hold
		past := workerRun(runPastHold, 1, wire.RunExited, testHostID)
		past.FinishedAt = ptr(now.Add(-2 * time.Hour))
		r.known[runPastHold] = past
		r.known[runStopped] = workerRun(runStopped, 1, wire.RunStopped, testHostID)
		r.known[runElse] = workerRun(runElse, 1, wire.RunRunning, "host-2")
		r.known[runOlder] = workerRun(runOlder, 2, wire.RunRunning, "host-2",
			wire.RunAttempt{Attempt: 1, HostID: ptr(testHostID), Outcome: ptr("failed"), FailureReason: ptr(wire.FailExitNonzero)})
		// runDesired's session comes after the start; until then the
		// orchestrator cannot confirm its loss (no answer for it).
		r.desired = append(r.desired, workerRun(runDesired, 1, wire.RunRunning, testHostID))
		for _, d := range []wire.WorkerRun{
			workerRun(runMissing, 1, wire.RunRunning, testHostID),
			workerRun(runMissSpwn, 1, wire.RunSpawning, testHostID),
			workerRun(runSpooled, 1, wire.RunRunning, testHostID),
		} {
			r.desired = append(r.desired, d)
			r.known[d.RunID] = d
		}
	})
	names := map[string]tmux.SessionName{}
	for id, attempt := range map[string]int{runOrphan: 1, runHostLost: 1, runHold: 1, runPastHold: 1, runStopped: 1, runElse: 1, runOlder: 1} {
		names[id] = h.oldSession(id, attempt)
	}
	// A spooled signal of runSpooled waits: its loss is not reported
	// before the spool is replayed (the replay fails here: 503).
	orch.setRuns(func(r *fakeRuns) {
		r.signalAnswer = func(p postedSignal) int { return http.StatusServiceUnavailable }
	})
	if _, err := spool.Write(spool.Dir(filepath.Join(h.opts.DataDir, "worker")), spool.Entry{RunID: runSpooled,
		Signal: wire.Signal{Kind: wire.SignalFinished, Attempt: ptr(1), Source: wire.SourceWrapper, Payload: json.RawMessage(`{"exit_code":0}`)}, Token: "t"}); err != nil {
		t.Fatal(err)
	}
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	// Created after the start: only reconciliation can adopt it.
	names[runDesired] = h.oldSession(runDesired, 1)

	orch.wait(0, "the orphan report", func(f wiretest.Frame) bool {
		return f.Type == wire.FrameRunState && f.State == wire.StateOrphanDetected && strings.Contains(f.Detail, names[runOrphan].String())
	})
	orch.wait(0, "stale_session", isState(wire.StateStaleSession, runHostLost))
	orch.wait(0, "session_lost of the missing run", isState(wire.StateSessionLost, runMissing))
	orch.wait(0, "spawn_failed of the missing spawning run", isState(wire.StateSpawnFailed, runMissSpwn))
	orch.wait(0, "a snapshot of the re-adopted session", isType(wire.FrameSnapshot, runDesired))
	for _, id := range []string{runPastHold, runStopped, runElse, runOlder} {
		eventually.Wait(t, eventually.Medium, "the session of "+id+" to be stopped", func() bool { return !h.alive(names[id]) })
	}
	afterPasses("reconciliation passes within the orphan hold", 3)
	if !h.alive(names[runOrphan]) {
		t.Fatal("the orphan was killed within its hold")
	}
	clk.Advance(h.opts.OrphanHold + time.Second)
	eventually.Wait(t, eventually.Medium, "the orphan to be killed after its hold", func() bool { return !h.alive(names[runOrphan]) })
	// Several passes later: what is kept is still there, reported once.
	if !h.alive(names[runHostLost]) || !h.alive(names[runHold]) || !h.alive(names[runDesired]) {
		t.Errorf("a session that must be kept is gone: %+v", h.sessions())
	}
	for _, c := range []struct {
		what  string
		match func(wiretest.Frame) bool
	}{
		{"stale_session", isState(wire.StateStaleSession, runHostLost)},
		{"orphan_detected", func(f wiretest.Frame) bool {
			return f.Type == wire.FrameRunState && f.State == wire.StateOrphanDetected
		}},
	} {
		if n := orch.count(0, c.match); n != 1 {
			t.Errorf("%s reported %d times, want once", c.what, n)
		}
	}
	for _, id := range []string{runDesired, runHold, runSpooled, runHostLost, runElse, runOlder, runStopped, runPastHold} {
		if n := orch.count(0, func(f wiretest.Frame) bool {
			return f.Type == wire.FrameRunState && f.RunID == id && f.State != wire.StateStaleSession
		}); n != 0 {
			t.Errorf("run %s got %d run_state frames", id, n)
		}
	}
	// The session is gone a moment before the worker has written why.
	var log []byte
	if !eventually.Within(eventually.Medium, func() bool {
		log, _ = os.ReadFile(filepath.Join(h.opts.DataDir, "worker", "worker.log"))
		return strings.Contains(string(log), "orphan session killed after its hold") && strings.Contains(string(log), "stale session flagged")
	}) {
		t.Errorf("worker.log:\n%s", log)
	}
	// The finished run's hold-open ends with the clock too.
	clk.Set(now.Add(h.opts.HoldOpen + time.Second))
	eventually.Wait(t, eventually.Medium, "the session of the finished run to be stopped after its hold-open", func() bool { return !h.alive(names[runHold]) })
}

// Without the orchestrator's word nothing is judged: an unknown session
// is not an orphan, a missing one is not lost. The cached desired runs
// are still re-adopted.
func TestPartitionUsesRunCache(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.ReconcileInterval = 100 * time.Millisecond
	missing := workerRun(runMissing, 1, wire.RunRunning, testHostID)
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		// runDesired has no session yet and the orchestrator cannot
		// confirm its loss (no answer for it): it is not reported.
		r.desired = []wire.WorkerRun{workerRun(runDesired, 1, wire.RunRunning, testHostID), missing}
		r.known[runMissing] = missing
	})
	var passes atomic.Int64
	h.opts.hooks = &hooks{reconcilePass: func() { passes.Add(1) }}
	lost := h.oldSession(runMissing, 1)
	h.start()
	cache := filepath.Join(h.opts.DataDir, "worker", "runcache.json")
	eventually.Wait(t, eventually.Medium, "runcache.json with the desired runs", func() bool {
		b, _ := os.ReadFile(cache)
		var c runCache
		return json.Unmarshal(b, &c) == nil && len(c.Runs) == 2 && c.HostID == testHostID
	})
	if st, _ := os.Stat(cache); st.Mode().Perm() != 0o600 {
		t.Errorf("runcache.json mode %v", st.Mode())
	}
	orch.setRuns(func(r *fakeRuns) { r.down = true })
	from := orch.mark()
	h.oldSession(runOrphan, 1)
	h.oldSession(runDesired, 1)
	if err := h.tm.KillSession(t.Context(), lost); err != nil {
		t.Fatal(err)
	}
	orch.wait(from, "a snapshot of the cached desired run", isType(wire.FrameSnapshot, runDesired))
	// Several whole passes with the orchestrator down.
	after := passes.Load()
	eventually.Wait(t, eventually.Medium, "three reconciliation passes", func() bool { return passes.Load() >= after+3 })
	if n := orch.count(from, isType(wire.FrameRunState, "")); n != 0 {
		t.Errorf("%d run_state frames during the partition", n)
	}
	if _, ok := h.session(runOrphan); !ok {
		t.Error("an unknown session was killed during the partition")
	}
	// Healed: now the lost run is reported and the unknown session is an
	// orphan.
	orch.setRuns(func(r *fakeRuns) { r.down = false })
	orch.wait(from, "session_lost after the heal", isState(wire.StateSessionLost, runMissing))
	orch.wait(from, "the orphan after the heal", func(f wiretest.Frame) bool {
		return f.Type == wire.FrameRunState && f.State == wire.StateOrphanDetected
	})
}

// The liveness check reports a vanished session only when the
// orchestrator says the run still runs here; a run that ended (its
// session closed after hold-open) is just forgotten.
func TestLivenessConfirmsLoss(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		r.known[runA] = workerRun(runA, 1, wire.RunRunning, testHostID)
		r.known[runB] = workerRun(runB, 1, wire.RunExited, testHostID)
	})
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	h.spawnRun(runA, 1)
	h.spawnRun(runB, 1)
	from := orch.mark()
	// One at a time: the last sessions vanishing in one poll would read
	// as the tmux server crashing.
	for _, id := range []string{runB, runA} {
		s, _ := h.session(id)
		if err := h.tm.KillSession(t.Context(), s.Name); err != nil {
			t.Fatal(err)
		}
		eventually.Wait(t, eventually.Medium, "the run forgotten", func() bool {
			_, err := os.Stat(filepath.Join(h.opts.DataDir, "worker", "dispatch", id+".json"))
			return err != nil
		})
	}
	f, _ := orch.wait(from, "session_lost", isState(wire.StateSessionLost, runA))
	if f.Attempt == nil || *f.Attempt != 1 {
		t.Errorf("report %+v", f)
	}
	eventually.Wait(t, eventually.Medium, "both runs forgotten", func() bool { return h.dispatchFiles() == 0 })
	if n := orch.count(from, isType(wire.FrameRunState, runB)); n != 0 {
		t.Errorf("the ended run was reported %d times", n)
	}
}

func (h *harness) dispatchFiles() int {
	n := 0
	for _, id := range []string{runA, runB} {
		if _, err := os.Stat(filepath.Join(h.opts.DataDir, "worker", "dispatch", id+".json")); err == nil {
			n++
		}
	}
	return n
}

// Every live session vanishing at once with the tmux server is a crash.
func TestTmuxCrashReported(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		r.known[runA] = workerRun(runA, 1, wire.RunRunning, testHostID)
		r.known[runB] = workerRun(runB, 1, wire.RunRunning, testHostID)
	})
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	h.spawnRun(runA, 1)
	h.spawnRun(runB, 1)
	from := orch.mark()
	if _, err := exec_(h, "kill-server"); err != nil {
		t.Fatal(err)
	}
	orch.wait(from, "tmux_crash of A", isState(wire.StateTmuxCrash, runA))
	orch.wait(from, "tmux_crash of B", isState(wire.StateTmuxCrash, runB))
}

// A dead pane (a session kept with remain-on-exit) of a running run fails
// it wrapper_died, and the session is removed.
func TestZombieReported(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.ReconcileInterval = 200 * time.Millisecond
	z := workerRun(runDesired, 1, wire.RunRunning, testHostID)
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		r.desired = []wire.WorkerRun{z}
		r.known[runDesired] = z
	})
	if _, err := exec_(h, "new-session", "-d", "-s", "keeper", "sleep 600"); err != nil {
		t.Fatal(err)
	}
	if _, err := exec_(h, "set-option", "-g", "remain-on-exit", "on"); err != nil {
		t.Fatal(err)
	}
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	name := h.oldSession(runDesired, 1, "/bin/sh", "-c", "sleep 0.3")
	orch.wait(0, "wrapper_died", isState(wire.StateWrapperDied, runDesired))
	eventually.Wait(t, eventually.Medium, "the dead session removed", func() bool { return !h.alive(name) })
	if _, err := exec_(h, "has-session", "-t", "=keeper"); err != nil {
		t.Error("a session that is not pam's was touched")
	}
}

// Corrupt worker.json and runcache.json are set aside and reported; the
// worker starts anyway and writes a good worker.json.
func TestCorruptStateFilesSetAside(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	dir := filepath.Join(h.opts.DataDir, "worker")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "worker.json"), []byte(`{"pid": 12, "host_na`), 0o600)
	os.WriteFile(filepath.Join(dir, "runcache.json"), []byte("\x00\x01garbage"), 0o600)
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	bad, _ := os.ReadDir(filepath.Join(dir, "bad"))
	var got []string
	for _, e := range bad {
		got = append(got, e.Name())
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "runcache.json.") || !strings.HasPrefix(got[1], "worker.json.") {
		t.Errorf("bad/ holds %q", got)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "worker.json"))
	var n Note
	if err := json.Unmarshal(b, &n); err != nil || n.PID != os.Getpid() {
		t.Errorf("worker.json = %s (%v)", b, err)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "worker.log"))
	if strings.Count(string(log), "unreadable file set aside") != 2 {
		t.Errorf("worker.log:\n%s", log)
	}
}

// TestReplaySpool: spooled signals are replayed in seq order, verbatim,
// with their own tokens; deleted only on a final answer; a corrupt file is
// set aside without blocking the others.
func TestReplaySpool(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.LivenessInterval = 100 * time.Millisecond
	dir := spool.Dir(filepath.Join(h.opts.DataDir, "worker"))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	type item struct {
		run, token string
		sig        wire.Signal
	}
	items := []item{
		{runA, "tok-a", wire.Signal{Kind: wire.SignalProgress, Attempt: ptr(2), Seq: ptr[int64](1), Source: wire.SourceProviderHook, Timestamp: &at}},
		{runB, "tok-b-bad", wire.Signal{Kind: wire.SignalStarted, Attempt: ptr(1), Source: wire.SourceWrapper, Timestamp: &at}},
		{runA, "tok-a", wire.Signal{Kind: wire.SignalProgress, Attempt: ptr(2), Seq: ptr[int64](2), Source: wire.SourceProviderHook, Timestamp: &at}},
		{runB, "tok-b-bad", wire.Signal{Kind: wire.SignalFinished, Attempt: ptr(1), Source: wire.SourceWrapper, Payload: json.RawMessage(`{"exit_code":0}`), Timestamp: &at}},
		{runA, "tok-a", wire.Signal{Kind: wire.SignalFinished, Attempt: ptr(2), Source: wire.SourceWrapper, Payload: json.RawMessage(`{"exit_code":7}`), Timestamp: &at}},
		{runOrphan, "tok-gone", wire.Signal{Kind: wire.SignalCompleted, Attempt: ptr(1), Source: wire.SourceProviderHook, Timestamp: &at}},
	}
	var paths []string
	for _, it := range items {
		p, err := spool.Write(dir, spool.Entry{RunID: it.run, Signal: it.sig, Token: it.token, APIURL: "http://elsewhere.invalid"})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	corrupt := filepath.Join(dir, fmt.Sprintf("%020d-%s-1-progress.json", 99, runB))
	os.WriteFile(corrupt, []byte(`{"run_id": "torn`), 0o600)

	// First the orchestrator does not take signals: nothing is deleted and
	// the first file is retried, never skipped.
	var down atomic.Bool
	down.Store(true)
	orch.setRuns(func(r *fakeRuns) {
		r.signalAnswer = func(p postedSignal) int {
			switch {
			case down.Load():
				return http.StatusServiceUnavailable
			case p.Auth == "Bearer tok-b-bad":
				return http.StatusUnauthorized
			case p.Auth == "Bearer tok-gone":
				return http.StatusNotFound
			}
			return http.StatusAccepted
		}
	})
	h.start()
	eventually.Wait(t, eventually.Medium, "two tries", func() bool {
		orch.mu.Lock()
		defer orch.mu.Unlock()
		return len(orch.signals) >= 2
	})
	orch.mu.Lock()
	for _, s := range orch.signals {
		if s.Auth != "Bearer tok-a" || s.Body.Seq == nil || *s.Body.Seq != 1 {
			t.Errorf("while down, a later signal was tried: %+v", s)
		}
	}
	orch.signals = nil
	down.Store(false)
	orch.mu.Unlock()
	for _, p := range paths[:1] {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s deleted on a 503", p)
		}
	}
	eventually.Wait(t, eventually.Medium, "A's signals replayed and deleted", func() bool {
		for _, i := range []int{0, 2, 4, 5} {
			if _, err := os.Stat(paths[i]); err == nil {
				return false
			}
		}
		return true
	})
	orch.mu.Lock()
	var seen []string
	for _, s := range orch.signals {
		if s.RunID == runA {
			b, _ := json.Marshal(s.Body)
			seen = append(seen, string(b))
			if s.Auth != "Bearer tok-a" {
				t.Errorf("replayed with %q", s.Auth)
			}
		}
	}
	orch.mu.Unlock()
	var want []string
	for _, i := range []int{0, 2, 4} {
		b, _ := json.Marshal(items[i].sig)
		want = append(want, string(b))
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("replayed\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	// B's token is refused: kept, and its finished is held behind its
	// started (per-run order); the corrupt file is set aside.
	for _, i := range []int{1, 3} {
		if _, err := os.Stat(paths[i]); err != nil {
			t.Errorf("a signal refused 401 was deleted: %s", paths[i])
		}
	}
	orch.mu.Lock()
	for _, s := range orch.signals {
		if s.RunID == runB && s.Body.Kind == wire.SignalFinished {
			t.Errorf("B's finished was posted before its started was taken")
		}
	}
	orch.mu.Unlock()
	eventually.Wait(t, eventually.Short, "the corrupt file set aside", func() bool {
		entries, _ := os.ReadDir(filepath.Join(dir, "bad"))
		_, err := os.Stat(corrupt)
		return len(entries) == 1 && strings.HasPrefix(entries[0].Name(), filepath.Base(corrupt)) && err != nil
	})
	log, _ := os.ReadFile(filepath.Join(h.opts.DataDir, "worker", "worker.log"))
	for _, want := range []string{"unreadable file set aside", "spooled signal kept: its token was refused", "spooled signal refused by the orchestrator and dropped"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("worker.log lacks %q:\n%s", want, log)
		}
	}
}

// A session of another pam instance on the same socket (another worker of
// the same user) is never adopted, judged, stopped or killed: not as an
// orphan, not by a run_stop, not to respawn a run under its name. A
// session without @pam_instance (an older pam's) is handled as before.
func TestForeignInstanceSessionsLeftAlone(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.ReconcileInterval = 100 * time.Millisecond
	h.opts.OrphanHold = time.Minute
	h.opts.StopGrace = 200 * time.Millisecond
	clk := clock.NewManual(time.Now())
	h.opts.Clock = clk.Now
	var passes atomic.Int64
	h.opts.hooks = &hooks{reconcilePass: func() { passes.Add(1) }}
	const other = "f0f0f0f0-9999-4999-8999-999999999999"
	desired := workerRun(runDesired, 1, wire.RunRunning, testHostID)
	respawn := workerRun(runMissing, 1, wire.RunSpawning, testHostID)
	orch.setRuns(func(r *fakeRuns) {
		r.serve = true
		r.desired = []wire.WorkerRun{desired, respawn}
		r.known[runDesired] = desired
		r.known[runMissing] = respawn
	})
	foreign := func(runID string) tmux.SessionName {
		name, _ := tmux.SessionForRun(runID)
		if err := h.tm.NewSession(t.Context(), tmux.Spawn{Name: name, Cwd: t.TempDir(), RunID: runID, Attempt: 1, Instance: other,
			Command: []string{h.opts.PamBinary, "session", runID}}); err != nil {
			t.Fatal(err)
		}
		return name
	}
	// Unknown to the orchestrator (an orphan if it were ours), desired of
	// this host, and holding the name of a run this host will be given.
	fOrphan, fDesired, fRespawn := foreign(runOrphan), foreign(runDesired), foreign(runMissing)
	// An older pam's session records no instance: still judged, an orphan.
	untagged, _ := tmux.SessionForRun(runStopped)
	for _, args := range [][]string{
		{"new-session", "-d", "-s", untagged.String(), "sleep 600"},
		{"set-option", "-t", "=" + untagged.String() + ":", tmux.OptRunID, runStopped},
		{"set-option", "-t", "=" + untagged.String() + ":", tmux.OptAttempt, "1"},
	} {
		if out, err := exec_(h, args...); err != nil {
			t.Fatalf("%q: %v %s", args, err, out)
		}
	}
	pids := map[tmux.SessionName]int{}
	for _, s := range h.sessions() {
		pids[s.Name] = s.PanePID
	}
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	orch.wait(0, "the orphan report of the untagged session", func(f wiretest.Frame) bool {
		return f.Type == wire.FrameRunState && f.State == wire.StateOrphanDetected && strings.Contains(f.Detail, untagged.String())
	})
	clk.Advance(h.opts.OrphanHold + time.Second)
	eventually.Wait(t, 15*time.Second, "the untagged orphan to be killed after its hold", func() bool { return !h.alive(untagged) })
	from := orch.mark()
	orch.send(wire.RunStopFrame{RunID: runOrphan, Attempt: wire.IntPtr(1), Force: true})
	orch.send(h.dispatchFrame(runMissing, 1))
	orch.wait(from, "spawn_failed of the run whose name another instance holds", isState(wire.StateSpawnFailed, runMissing))
	// Several reconciliations (each past the orphan hold) after all that.
	clk.Advance(h.opts.OrphanHold + time.Second)
	n := passes.Load()
	eventually.Wait(t, 15*time.Second, "more reconciliation passes", func() bool { return passes.Load() >= n+5 })

	for _, name := range []tmux.SessionName{fOrphan, fDesired, fRespawn} {
		s, ok := h.session(map[tmux.SessionName]string{fOrphan: runOrphan, fDesired: runDesired, fRespawn: runMissing}[name])
		if !ok || s.Name != name || s.Instance != other || s.PanePID != pids[name] {
			t.Errorf("the other instance's session %s was touched: %+v (present %v, pid was %d)", name, s, ok, pids[name])
		}
	}
	for _, id := range []string{runOrphan, runDesired, runMissing} {
		if n := orch.count(0, isType(wire.FrameSnapshot, id)); n != 0 {
			t.Errorf("the other instance's session of %s was adopted: %d snapshots", id, n)
		}
	}
	if n := orch.count(0, func(f wiretest.Frame) bool {
		return f.Type == wire.FrameRunState && f.State == wire.StateOrphanDetected &&
			(strings.Contains(f.Detail, fOrphan.String()) || strings.Contains(f.Detail, fDesired.String()) || strings.Contains(f.Detail, fRespawn.String()))
	}); n != 0 {
		t.Errorf("the other instance's sessions were reported as orphans %d times", n)
	}
	if n := orch.count(0, func(f wiretest.Frame) bool {
		return f.Type == wire.FrameRunState && f.State == wire.StateOrphanDetected && strings.Contains(f.Detail, untagged.String())
	}); n != 1 {
		t.Errorf("the untagged orphan was reported %d times, want once", n)
	}
}

// The orphan report of a session that carries a run id and attempt names
// them (the orchestrator journals them); one without names no run.
func TestOrphanDetectedCarriesRunID(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.ReconcileInterval = 100 * time.Millisecond
	h.opts.OrphanHold = time.Hour
	orch.setRuns(func(r *fakeRuns) { r.serve = true })
	named := h.oldSession(runOrphan, 2)
	bare := "pam-0badc0de"
	if out, err := exec_(h, "new-session", "-d", "-s", bare, "sleep 600"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	h.start()
	f, _ := orch.wait(0, "the orphan report of the named session", func(f wiretest.Frame) bool {
		return f.Type == wire.FrameRunState && f.State == wire.StateOrphanDetected && strings.Contains(f.Detail, named.String())
	})
	if f.RunID != runOrphan || f.Attempt == nil || *f.Attempt != 2 {
		t.Errorf("orphan report %+v: want run %s attempt 2", f, runOrphan)
	}
	f, _ = orch.wait(0, "the orphan report of the bare session", func(f wiretest.Frame) bool {
		return f.Type == wire.FrameRunState && f.State == wire.StateOrphanDetected && strings.Contains(f.Detail, bare)
	})
	if f.RunID != "" || f.Attempt != nil {
		t.Errorf("orphan report of a session without a run names one: %+v", f)
	}
}
