package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"pam/internal/spool"
	"pam/internal/tmux"
	"pam/internal/wire"
)

// Reconciliation (docs/architecture.md#worker-duties, docs/architecture.md#reconciliation-loop):
// the host's desired runs (GET /api/internal/worker/runs, cached in
// runcache.json for partitions) against its actual sessions (one
// list-sessions). It runs at start from the cache alone, after every
// (re)connect, every ReconcileInterval and on SIGHUP. Without an answer
// from the orchestrator it only re-adopts: every other judgement (orphan,
// missing, stale, stop) needs the orchestrator's word on the run, because
// killing a healthy session on stale information is the one mistake that
// cannot be undone.

const (
	workerRunsPath = "/api/internal/worker/runs"
	// apiTimeout bounds one call of the internal API from the loops.
	apiTimeout = 10 * time.Second
)

// reliability is the state of the loops that keep this host honest:
// reconciliation, the liveness check and spool replay.
type reliability struct {
	failures *failureLog

	// judge serialises the judgements of sessions (reconciliation and the
	// liveness check), so that one vanished session is reported once.
	judge sync.Mutex
	// Guarded by judge.
	orphans map[tmux.SessionName]time.Time // first seen, for PAM_ORPHAN_HOLD
	flagged map[string]bool                // run/attempt reported stale_session
	foreign map[tmux.SessionName]bool      // sessions of another instance, logged once
	endedAt map[string]time.Time           // run/attempt first seen over, when the orchestrator gave no finished_at

	cacheMu sync.Mutex
	cache   runCache
	cached  bool

	replayWake, livenessWake, reconcileWake chan struct{}

	// replayMu makes spool replay one pass at a time; it guards replayed.
	replayMu sync.Mutex
	replayed replayState
}

func (rs *reliability) init(dir string) {
	rs.failures = &failureLog{path: filepath.Join(dir, failureFile)}
	rs.orphans = map[tmux.SessionName]time.Time{}
	rs.flagged = map[string]bool{}
	rs.foreign = map[tmux.SessionName]bool{}
	rs.endedAt = map[string]time.Time{}
	rs.replayed.kept = map[string]bool{}
	rs.replayWake = make(chan struct{}, 1)
	rs.livenessWake = make(chan struct{}, 1)
	rs.reconcileWake = make(chan struct{}, 1)
}

// poke asks a loop for a pass without blocking; one pending ask is enough.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (w *agent) pokeLiveness() { poke(w.rs.livenessWake) }

// afterConnect runs what every (re)connect calls for once the uplink is
// up: replay what was spooled meanwhile (the spool was replayed before the
// uplink opened) and reconcile against the orchestrator's current word.
func (w *agent) afterConnect() {
	poke(w.rs.replayWake)
	poke(w.rs.reconcileWake)
}

func runKey(runID string, attempt int) string { return fmt.Sprintf("%s/%d", runID, attempt) }

// runName validates a desired run and returns its session name.
func runName(r wire.WorkerRun) (tmux.SessionName, error) {
	name, err := tmux.SessionForRun(r.RunID)
	if err != nil {
		return name, err
	}
	if r.SessionName != name.String() || r.Attempt < 1 {
		return name, fmt.Errorf("run %s: session %q attempt %d do not match", r.RunID, r.SessionName, r.Attempt)
	}
	return name, nil
}

func (w *agent) currentHostID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hostID
}

// startReconcile is the reconciliation at start, before registering: the
// run cache is read (a corrupt one set aside) and the sessions a previous
// worker left are adopted, without any status change. Desired runs of the
// cache without a session are left for the first reconciliation with the
// orchestrator, which confirms before it reports anything.
func (w *agent) startReconcile(ctx context.Context) {
	c, ok := w.loadRunCache()
	w.rs.cacheMu.Lock()
	w.rs.cache, w.rs.cached = c, ok
	w.rs.cacheMu.Unlock()
	w.adopt(ctx)
	w.mu.Lock()
	known, missing := 0, 0
	for _, d := range c.Runs {
		if r := w.runs[d.RunID]; r != nil && r.attempt == d.Attempt {
			known++
		} else {
			missing++
		}
	}
	adopted := len(w.runs)
	w.mu.Unlock()
	w.log.Info("start reconciliation", "sessions_adopted", adopted, "run_cache", ok, "cached_runs_adopted", known, "cached_runs_without_session", missing)
}

// reconcileLoop reconciles every ReconcileInterval, after each (re)connect
// and on each request from outside (SIGHUP).
func (w *agent) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(w.o.ReconcileInterval)
	defer t.Stop()
	var cleaned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.rs.reconcileWake:
		case <-w.o.Reconcile:
			w.log.Info("reconcile requested")
		}
		w.reconcile(ctx)
		w.o.hooks.pass(func(h *hooks) func() { return h.reconcilePass })
		// Worktree clean-up weighs every worktree's files: every tenth
		// interval, and at the first pass with the orchestrator's word.
		if w.currentHostID() != "" && time.Since(cleaned) >= 10*w.o.ReconcileInterval {
			w.cleanWorkspaces(ctx)
			w.cleanRunLogs(ctx)
			cleaned = time.Now()
			w.o.hooks.pass(func(h *hooks) func() { return h.workspacesPass })
		}
	}
}

// reconcile is one pass.
func (w *agent) reconcile(ctx context.Context) {
	// A session that vanished is forgotten (and reported) first.
	w.checkLiveness(ctx)
	poke(w.rs.replayWake)
	desired, fresh := w.desiredRuns(ctx)
	if ctx.Err() != nil {
		return
	}
	w.rs.judge.Lock()
	defer w.rs.judge.Unlock()
	// Read before listing, as checkLiveness does: a spawn that completes
	// during the list must read as in flight, not as a missing session.
	before := w.runMarks()
	list, err := w.tm.ListSessions(ctx)
	if err != nil {
		if ctx.Err() == nil { // not a failure when the worker is stopping
			w.log.Warn("reconcile: list sessions", "err", err)
		}
		return
	}
	sessions := slices.DeleteFunc(slices.Clone(list), func(s tmux.Session) bool {
		if w.mine(s) {
			return false
		}
		if !w.rs.foreign[s.Name] {
			w.rs.foreign[s.Name] = true
			w.log.Info("reconcile: session of another pam instance left alone", "session", s.Name.String(), "instance", s.Instance, "run_id", s.RunID)
		}
		return true
	})
	hostID := w.currentHostID()
	byRun := map[string]wire.WorkerRun{}
	for _, d := range desired {
		byRun[d.RunID] = d
	}
	present := map[string]tmux.Session{}
	seen := map[tmux.SessionName]bool{}
	for _, s := range list {
		seen[s.Name] = true
	}
	for _, s := range sessions {
		if s.RunID != "" {
			present[s.RunID] = s
		}
		w.judgeSession(ctx, s, byRun, fresh, hostID)
	}
	for name := range w.rs.orphans {
		if !seen[name] {
			delete(w.rs.orphans, name) // ended by itself
		}
	}
	for name := range w.rs.foreign {
		if !seen[name] {
			delete(w.rs.foreign, name)
		}
	}
	if fresh {
		w.missingSessions(ctx, desired, present, before, hostID)
	}
}

// desiredRuns fetches the host's desired runs and replaces the run cache
// with them; when the orchestrator does not answer (or this worker has not
// registered yet) it returns the cache, fresh=false.
func (w *agent) desiredRuns(ctx context.Context) (runs []wire.WorkerRun, fresh bool) {
	if hostID := w.currentHostID(); hostID != "" {
		cctx, cancel := context.WithTimeout(ctx, apiTimeout)
		var out wire.WorkerRunList
		err := w.client.Do(cctx, http.MethodGet, workerRunsPath, nil, nil, &out)
		cancel()
		if err == nil {
			valid := make([]wire.WorkerRun, 0, len(out.Runs))
			for _, r := range out.Runs {
				if _, err := runName(r); err != nil {
					w.log.Warn("reconcile: a desired run with a bad name or attempt skipped", "err", err)
					continue
				}
				valid = append(valid, r)
			}
			c := runCache{FetchedAt: time.Now().UTC(), HostID: hostID, Runs: valid}
			if err := w.saveRunCache(c); err != nil {
				w.report("run cache not written", "err", err)
			}
			w.rs.cacheMu.Lock()
			w.rs.cache, w.rs.cached = c, true
			w.rs.cacheMu.Unlock()
			return valid, true
		}
		if ctx.Err() == nil {
			w.log.Warn("reconcile: desired runs unavailable; using the run cache", "err", err)
		}
	}
	w.rs.cacheMu.Lock()
	defer w.rs.cacheMu.Unlock()
	return w.rs.cache.Runs, false
}

// lookupRun is GET /api/internal/worker/runs/{id}: one run ever offered to
// this host, whatever its status, with its attempts.
func (w *agent) lookupRun(ctx context.Context, runID string) (wire.WorkerRun, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var out wire.WorkerRun
	err := w.client.Do(ctx, http.MethodGet, workerRunsPath+"/"+url.PathEscape(runID), nil, nil, &out)
	return out, err
}

// judgeSession decides about one live session.
func (w *agent) judgeSession(ctx context.Context, s tmux.Session, desired map[string]wire.WorkerRun, fresh bool, hostID string) {
	want, err := tmux.SessionForRun(s.RunID)
	mapped := err == nil && want == s.Name && s.Attempt >= 1
	if mapped {
		if d, ok := desired[s.RunID]; ok && d.Attempt == s.Attempt && !s.PaneDead {
			delete(w.rs.orphans, s.Name)
			w.readopt(s)
			return
		}
	}
	if !fresh || hostID == "" {
		return // without the orchestrator's word nothing else is decided
	}
	if s.PaneDead {
		w.zombie(ctx, s, hostID)
		return
	}
	if !mapped {
		w.orphan(ctx, s, "no @pam_run_id/@pam_attempt matching the session name")
		return
	}
	wr, err := w.lookupRun(ctx, s.RunID)
	if wire.HasCode(err, wire.CodeNotFound) {
		w.orphan(ctx, s, fmt.Sprintf("run %s attempt %d was never given to this host", s.RunID, s.Attempt))
		return
	}
	if err != nil {
		if ctx.Err() == nil { // a worker stopping cancels its lookups: nothing to say
			w.log.Warn("reconcile: look up a session's run", "run_id", s.RunID, "err", err)
		}
		return
	}
	delete(w.rs.orphans, s.Name)
	w.discriminate(ctx, s, wr, hostID)
}

// discriminate is the terminal-but-alive table (docs/architecture.md#terminal-but-alive-sessions), for a live session
// whose run is not among the host's desired runs.
func (w *agent) discriminate(ctx context.Context, s tmux.Session, wr wire.WorkerRun, hostID string) {
	key := runKey(s.RunID, s.Attempt)
	mine := wr.HostID != nil && *wr.HostID == hostID
	switch {
	case endedHostLost(wr, s.Attempt):
		// Flagged for the operator, never killed: the incarnation may still
		// be doing real work (docs/architecture.md#restart-policy).
		if !w.rs.flagged[key] {
			w.rs.flagged[key] = true
			w.sendState(s.RunID, s.Attempt, wire.StateStaleSession, fmt.Sprintf("attempt %d ended host_lost; session %s kept for the operator", s.Attempt, s.Name))
			w.report("stale session flagged, left running", "run_id", s.RunID, "attempt", s.Attempt, "session", s.Name.String())
		}
		w.release(s.RunID, s.Attempt)
	case s.Attempt > wr.Attempt:
		w.log.Warn("reconcile: session of an attempt the orchestrator never made; left alone", "run_id", s.RunID, "attempt", s.Attempt, "run_attempt", wr.Attempt)
	case s.Attempt < wr.Attempt:
		w.stopSession(ctx, s, false, fmt.Sprintf("stale incarnation: attempt %d, the run is at %d", s.Attempt, wr.Attempt))
	case !mine:
		w.stopSession(ctx, s, true, "the run now belongs to another host at this attempt; it must not run twice")
	case wr.Status == wire.RunStopped:
		w.stopSession(ctx, s, false, "the run was stopped")
	case wr.Status == wire.RunExited || wr.Status == wire.RunFailed:
		end := w.holdOpenEnd(wr, key)
		if w.now().Before(end) {
			w.keepHoldOpen(s)
			return
		}
		delete(w.rs.endedAt, key)
		w.stopSession(ctx, s, false, fmt.Sprintf("the run is %s and its hold-open ended at %s", wr.Status, end.UTC().Format(time.RFC3339)))
	default:
		// Active and this host's: it became desired after the list was read.
		w.readopt(s)
	}
}

// endedHostLost reports whether the session's attempt ended host_lost,
// whether or not the run was requeued since.
func endedHostLost(wr wire.WorkerRun, attempt int) bool {
	for _, a := range wr.Attempts {
		if a.Attempt == attempt && a.FailureReason != nil && *a.FailureReason == wire.FailHostLost {
			return true
		}
	}
	return wr.Attempt == attempt && wr.Status == wire.RunFailed && wr.FailureReason != nil && *wr.FailureReason == wire.FailHostLost
}

// holdOpenEnd is when a finished run's session may be cleaned up: its end
// plus HoldOpen (from the first time this worker saw it over, when the
// orchestrator does not say when it ended).
func (w *agent) holdOpenEnd(wr wire.WorkerRun, key string) time.Time {
	if wr.FinishedAt != nil {
		return wr.FinishedAt.Add(w.o.HoldOpen)
	}
	t, ok := w.rs.endedAt[key]
	if !ok {
		t = w.now()
		w.rs.endedAt[key] = t
	}
	return t.Add(w.o.HoldOpen)
}

// readopt takes a desired session into this worker's hands if it is not
// there already: captured and streamed again, without any status change.
func (w *agent) readopt(s tmux.Session) {
	if !tmux.ValidRunID(s.RunID) || s.Attempt < 1 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.runs[s.RunID]; r != nil {
		r.ended = false
		return
	}
	now := time.Now()
	w.runs[s.RunID] = &run{id: s.RunID, attempt: s.Attempt, name: s.Name, state: stateLive, gen: 1,
		next: now, interval: w.o.CaptureInterval, lastChange: now}
	w.log.Info("session re-adopted", "run_id", s.RunID, "attempt", s.Attempt, "session", s.Name.String())
}

// keepHoldOpen keeps a finished run's session (captured, so its last
// screen reaches the orchestrator) without it counting against MaxRuns.
func (w *agent) keepHoldOpen(s tmux.Session) {
	w.readopt(s)
	w.mu.Lock()
	if r := w.runs[s.RunID]; r != nil && r.attempt == s.Attempt {
		r.ended = true
	}
	w.mu.Unlock()
}

// release lets go of a session without touching it: no capture, no
// capacity. It is no longer this host's run (a flagged stale session, an
// orphan held for inspection).
func (w *agent) release(runID string, attempt int) {
	w.mu.Lock()
	r := w.runs[runID]
	if r == nil || r.attempt != attempt || r.state != stateLive {
		w.mu.Unlock()
		return
	}
	gen := r.gen
	w.mu.Unlock()
	w.forget(r, gen, false)
}

// stopSession stops a session as a run_stop for its run and attempt would:
// never a newer incarnation, never a session of another run.
func (w *agent) stopSession(ctx context.Context, s tmux.Session, force bool, why string) {
	w.log.Info("reconcile: stopping session", "run_id", s.RunID, "attempt", s.Attempt, "session", s.Name.String(), "force", force, "why", why)
	w.stop(ctx, wire.RunStopFrame{RunID: s.RunID, Attempt: wire.IntPtr(s.Attempt), Force: force})
}

// orphan handles a session no run of this host owns: reported once
// (run_state orphan_detected, with the run id and attempt the session
// carries, if any), held for OrphanHold for inspection, then killed.
func (w *agent) orphan(ctx context.Context, s tmux.Session, why string) {
	first, seen := w.rs.orphans[s.Name]
	now := w.now()
	if !seen {
		first = now
		w.rs.orphans[s.Name] = now
		detail := fmt.Sprintf("session %s: %s; held %s, then killed", s.Name, why, w.o.OrphanHold)
		f := wire.RunStateFrame{State: wire.StateOrphanDetected, Detail: wire.BoundText(detail)}
		if tmux.ValidRunID(s.RunID) && s.Attempt >= 1 {
			f.RunID, f.Attempt = s.RunID, wire.IntPtr(s.Attempt)
		}
		w.queueFrame(f)
		w.report("orphan session held for inspection", "session", s.Name.String(), "why", why, "hold", w.o.OrphanHold)
	}
	if s.RunID != "" {
		w.release(s.RunID, s.Attempt)
	}
	if now.Sub(first) < w.o.OrphanHold {
		return
	}
	if err := w.tm.KillSession(ctx, s.Name); err != nil && !isGone(err) {
		w.log.Warn("kill orphan session", "session", s.Name.String(), "err", err)
		return
	}
	delete(w.rs.orphans, s.Name)
	w.report("orphan session killed after its hold", "session", s.Name.String(), "held", now.Sub(first).Round(time.Second))
}

// missingSessions reports the desired runs without a session, after
// confirming each with the orchestrator. before is this worker's runs as
// they stood before the sessions were listed.
func (w *agent) missingSessions(ctx context.Context, desired []wire.WorkerRun, present map[string]tmux.Session, before map[string]runMark, hostID string) {
	for _, d := range desired {
		if s, ok := present[d.RunID]; ok && s.Attempt >= d.Attempt {
			continue
		}
		m, known := before[d.RunID]
		inFlight := known && m.attempt >= d.Attempt && m.state != stateLive
		if inFlight {
			continue // being spawned (or stopped) right now
		}
		w.confirmLost(ctx, d.RunID, d.Attempt, hostID, wire.StateSessionLost, "no session for the run on this host", true)
	}
}

// confirmLost reports that a run's session is gone, once the orchestrator
// confirms the run is still this host's at that attempt and not over, and
// no spooled signal of it waits (its finished may be among them: the
// spool is replayed first). missing says the session was never seen by
// this worker: a spawning run then failed to spawn.
func (w *agent) confirmLost(ctx context.Context, runID string, attempt int, hostID, state, detail string, missing bool) {
	if spool.HasPending(spool.Dir(w.dir), runID, attempt) {
		w.log.Info("session gone; its spooled signals are replayed before anything is reported", "run_id", runID, "attempt", attempt)
		poke(w.rs.replayWake)
		return
	}
	wr, err := w.lookupRun(ctx, runID)
	if err != nil {
		w.log.Warn("session gone; the orchestrator could not confirm it yet", "run_id", runID, "err", err)
		return
	}
	if hostID == "" || wr.Attempt != attempt || wr.HostID == nil || *wr.HostID != hostID ||
		(wr.Status != wire.RunSpawning && wr.Status != wire.RunRunning) {
		return // over, or no longer this host's: nothing to report
	}
	if wr.Status == wire.RunSpawning && missing {
		state = wire.StateSpawnFailed
	}
	w.log.Warn("run's session is gone; reported", "run_id", runID, "attempt", attempt, "state", state, "detail", detail)
	w.sendState(runID, attempt, state, detail)
}

// zombie handles a session whose pane is dead (its wrapper exited and the
// pane stayed): a run still live at that attempt fails wrapper_died, then
// the session is removed — there is nothing left in it to stop.
func (w *agent) zombie(ctx context.Context, s tmux.Session, hostID string) {
	if _, err := tmux.SessionForRun(s.RunID); err != nil || s.Attempt < 1 {
		w.orphan(ctx, s, "dead pane without a run")
		return
	}
	if spool.HasPending(spool.Dir(w.dir), s.RunID, s.Attempt) {
		poke(w.rs.replayWake)
		return
	}
	wr, err := w.lookupRun(ctx, s.RunID)
	if wire.HasCode(err, wire.CodeNotFound) {
		w.orphan(ctx, s, "dead pane of a run never given to this host")
		return
	}
	if err != nil {
		return
	}
	if wr.Attempt == s.Attempt && wr.HostID != nil && *wr.HostID == hostID && (wr.Status == wire.RunSpawning || wr.Status == wire.RunRunning) {
		w.log.Warn("pane dead without a finished signal; reported", "run_id", s.RunID, "attempt", s.Attempt)
		w.sendState(s.RunID, s.Attempt, wire.StateWrapperDied, fmt.Sprintf("pane of %s dead (pid %d) without a finished signal", s.Name, s.PanePID))
	}
	w.release(s.RunID, s.Attempt)
	if err := w.tm.KillSession(ctx, s.Name); err != nil && !isGone(err) {
		w.log.Warn("remove dead session", "session", s.Name.String(), "err", err)
	}
}

// queueFrame sends f on the uplink, or keeps it for the next one.
func (w *agent) queueFrame(f wire.Frame) {
	if err := w.send(f); err != nil {
		w.requeue([]wire.Frame{f})
	}
}

func isGone(err error) bool { return errors.Is(err, tmux.ErrNoSession) }
