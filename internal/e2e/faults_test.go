package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pam/internal/embeddb"
	"pam/internal/eventually"
	"pam/internal/holder"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// The fault-injection tests of the fleet-reliability issue: real serve,
// worker, wrapper, tmux and PostgreSQL processes, faults injected from
// outside (kill -9, a cut TCP proxy, kill-server, a database restart,
// corrupt files, racing starts). Timers are short through the same
// PAM_* variables an operator sets. Each test logs what it observed.

// 1. kill -9 the worker 10 times during a run: the pane's process keeps
// its pid, the run is re-adopted each time, ends exited, one run.finished.
func TestFaultWorkerKilled(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "")
	w := s.faultWorker("fault-kill", s.url)
	g := newGate(t)
	r := s.runShell(s.task().ID, g.wait("go")+"; echo done; exit 0", nil)
	s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
	pid := w.panePID(r.SessionName)
	var cycles []time.Duration
	for i := range 10 {
		t0 := time.Now()
		w.kill9()
		w.start()
		w.waitLog(eventually.Long, "session adopted", r.ID)
		w.waitLog(eventually.Long, "uplink connected")
		cycles = append(cycles, time.Since(t0))
		if got := w.panePID(r.SessionName); got != pid {
			t.Fatalf("kill %d: the pane's process is %d, was %d", i+1, got, pid)
		}
		if got := s.waitRun(r.ID, "", time.Second, func(wire.Run) bool { return true }); got.Status != "running" || got.Attempt != 1 {
			t.Fatalf("kill %d: run %s attempt %d", i+1, got.Status, got.Attempt)
		}
	}
	g.open(t, "go")
	got := s.waitRun(r.ID, "exited", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	evs := s.events(r.ID)
	if got.Status != "exited" || got.Attempt != 1 || countTopic(evs, "run.finished") != 1 || countTopic(evs, "run.started") != 1 ||
		countTopic(evs, "run.spawning") != 1 || countTopic(evs, "run.failed") != 0 {
		t.Fatalf("run ended %s attempt %d; events %v", got.Status, got.Attempt, s.topics(r.ID))
	}
	slices.Sort(cycles)
	t.Logf("observed: 10× kill -9 of the worker; pane pid %d kept each time; kill→re-adopted+reconnected median %s max %s; run exited, run.finished=1, duplicates=0",
		pid, cycles[5].Round(time.Millisecond), cycles[9].Round(time.Millisecond))
}

// 2. kill -9 serve while a run finishes: the finished signal is spooled
// and delivered exactly once after serve returns; no host went offline
// because of the restart.
func TestFaultServeKilledWhileRunFinishes(t *testing.T) {
	t.Parallel()
	const offlineAfter = 6 * time.Second
	s, sp := newFaultSystem(t, "", "PAM_HOST_OFFLINE_AFTER="+offlineAfter.String())
	w := s.faultWorker("fault-serve", s.url)
	host := s.host("fault-serve")
	g := newGate(t)
	r := s.runShell(s.task().ID, g.wait("go")+"; exit 0", nil)
	s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })

	sp.kill9()
	tKill := time.Now()
	g.open(t, "go")
	eventually.Wait(t, eventually.Long, "the finished signal in the spool", func() bool {
		for _, f := range w.spooled() {
			if strings.HasSuffix(f, "-finished.json") {
				return true
			}
		}
		return false
	})
	tSpooled := time.Now()
	sp.start()
	tBack := time.Now()
	got := s.waitRun(r.ID, "exited", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	tDelivered := time.Now()
	evs := s.events(r.ID)
	if got.Status != "exited" || countTopic(evs, "run.finished") != 1 || countTopic(evs, "run.exited") != 1 {
		t.Fatalf("run %s; events %v", got.Status, s.topics(r.ID))
	}
	eventually.Wait(t, eventually.Medium, "the spool to drain", func() bool { return len(w.spooled()) == 0 })
	// Past the restart grace: the host stayed online throughout.
	for time.Since(tBack) < offlineAfter+2*time.Second {
		if h := s.host("fault-serve"); h.Status != "online" {
			t.Fatalf("host went %s after the serve restart", h.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := len(s.hostEvents(host.ID, "worker.offline")); n != 0 {
		t.Fatalf("%d worker.offline events", n)
	}
	t.Logf("observed: serve down %s; finished spooled %s after the kill; delivered %s after serve returned; run.finished=1, duplicates=0; host online through %s past the restart (no worker.offline)",
		tBack.Sub(tKill).Round(time.Millisecond), tSpooled.Sub(tKill).Round(time.Millisecond), tDelivered.Sub(tBack).Round(time.Millisecond), offlineAfter+2*time.Second)
}

// 3. Partition worker ↔ serve past PAM_HOST_OFFLINE_AFTER: the host goes
// offline, the run is untouched, progress and finished are spooled and
// replayed in order after the heal without a duplicate.
func TestFaultPartition(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "", "PAM_HOST_OFFLINE_AFTER=1500ms")
	p := newProxy(t, s.url)
	w := s.faultWorker("fault-part", p.URL())
	g := newGate(t)
	prompt := strings.Join([]string{hookCall(t, "progress"), g.wait("1"), hookCall(t, "progress"), hookCall(t, "progress"), g.wait("2"), "exit 0"}, "; ")
	r := s.runShell(s.task().ID, prompt, nil)
	eventually.Wait(t, 60*time.Second, "the first progress", func() bool { return slices.Equal(progressSeqs(s.events(r.ID)), []int{1}) })

	p.Cut()
	tCut := time.Now()
	s.waitHost("fault-part", "offline", eventually.Long)
	tOffline := time.Now()
	g.open(t, "1")
	g.open(t, "2")
	eventually.Wait(t, eventually.Long, "progress 2, 3 and finished in the spool", func() bool { return len(w.spooled()) == 3 })
	if got := s.waitRun(r.ID, "", time.Second, func(wire.Run) bool { return true }); got.Status != "running" || got.Attempt != 1 {
		t.Fatalf("during the partition the run is %s attempt %d", got.Status, got.Attempt)
	}
	// The session ends after its hold-open; with no word from serve the
	// worker reports nothing.
	eventually.Wait(t, eventually.Long, "the session to end", func() bool { return !w.hasSession(r.SessionName) })

	p.Heal()
	tHeal := time.Now()
	got := s.waitRun(r.ID, "exited", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	tLast := time.Now()
	s.waitHost("fault-part", "online", eventually.Long)
	evs := s.events(r.ID)
	if got.Status != "exited" || !slices.Equal(progressSeqs(evs), []int{1, 2, 3}) || countTopic(evs, "run.finished") != 1 ||
		countTopic(evs, "run.failed") != 0 || countTopic(evs, "run.signal_received") != 0 {
		t.Fatalf("run %s; progress %v; events %v", got.Status, progressSeqs(evs), s.topics(r.ID))
	}
	if n := len(w.spooled()); n != 0 {
		t.Fatalf("%d signals left in the spool", n)
	}
	t.Logf("observed: offline %s after the cut; partition %s; heal → last replayed signal (run exited) %s; progress seqs %v in order, run.finished=1, duplicates=0",
		tOffline.Sub(tCut).Round(time.Millisecond), tHeal.Sub(tCut).Round(time.Millisecond), tLast.Sub(tHeal).Round(time.Millisecond), progressSeqs(evs))
}

// 4. Partition past PAM_HOST_LOST_AFTER while the run is requeued to a
// second host: the old incarnation's late signals are stale_attempt, its
// session is flagged (run.stale_session) and not killed, the new
// incarnation completes.
func TestFaultPartitionPastHostLost(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "", "PAM_HOST_OFFLINE_AFTER=1s", "PAM_HOST_LOST_AFTER=3s")
	p := newProxy(t, s.url)
	a := s.faultWorker("fault-lost-a", p.URL())
	g := newGate(t)
	// Attempt 1 waits, then says something late and keeps running;
	// attempt 2 (elsewhere) completes at once.
	prompt := fmt.Sprintf(`if [ "$PAM_ATTEMPT" = 1 ]; then %s; %s; while :; do sleep 1; done; else exit 0; fi`, g.wait("late"), hookCall(t, "progress"))
	r := s.runShell(s.task().ID, prompt, nil)
	s.waitRun(r.ID, "running on A", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
	s.faultWorker("fault-lost-b", s.url)

	p.Cut()
	tCut := time.Now()
	got := s.waitRun(r.ID, "the new incarnation to complete", 60*time.Second, func(r wire.Run) bool { return r.Attempt == 2 && r.Status == "exited" })
	tDone := time.Now()
	hb := s.host("fault-lost-b")
	if got.HostID == nil || *got.HostID != hb.ID {
		t.Fatalf("attempt 2 ran on %v, want B", got.HostID)
	}
	evs := s.events(r.ID)
	lost := false
	for _, e := range evs {
		if e.Topic == "run.failed" && eventPayload(e)["failure_reason"] == wire.FailHostLost {
			lost = true
		}
	}
	if !lost || countTopic(evs, "run.requeued") != 1 {
		t.Fatalf("no host_lost failure and requeue: %v", s.topics(r.ID))
	}

	p.Heal()
	tHeal := time.Now()
	eventually.Wait(t, eventually.Long, "run.stale_session", func() bool { return countTopic(s.events(r.ID), "run.stale_session") == 1 })
	tFlagged := time.Now()
	g.open(t, "late")
	eventually.Wait(t, eventually.Long, "the late progress journaled as stale", func() bool { return countTopic(s.events(r.ID), "run.stale_signal") >= 1 })
	// Several reconciliations later: still flagged once, never killed.
	time.Sleep(2 * time.Second)
	if !a.hasSession(r.SessionName) {
		t.Fatal("the stale session was killed")
	}
	evs = s.events(r.ID)
	final := s.waitRun(r.ID, "", time.Second, func(wire.Run) bool { return true })
	if n := countTopic(evs, "run.stale_session"); n != 1 || final.Status != "exited" || final.Attempt != 2 || countTopic(evs, "run.finished") != 1 {
		t.Fatalf("stale_session %d times; run %s attempt %d; events %v", n, final.Status, final.Attempt, s.topics(r.ID))
	}
	for _, e := range evs {
		if e.Topic == "run.stale_signal" {
			if pl := eventPayload(e); pl["signal_attempt"] != float64(1) {
				t.Errorf("stale signal %v", pl)
			}
		}
	}
	t.Logf("observed: cut → host_lost → requeued → attempt 2 exited on B in %s; heal → run.stale_session in %s (once); late progress of attempt 1 → stale_attempt (run.stale_signal); old session alive after; duplicates=0",
		tDone.Sub(tCut).Round(time.Millisecond), tFlagged.Sub(tHeal).Round(time.Millisecond))
}

// 5. Kill the tmux server on the worker's socket: the runs fail
// tmux_crash (or session_lost) and are requeued per policy. With the pty
// executor every run's holder is killed with SIGKILL instead: each run
// fails session_lost, and its second attempt starts in the same
// workspace past the dead holder's socket.
func TestFaultTmuxServerKilled(t *testing.T) {
	t.Parallel()
	pty := usesPTY(nil)
	s, _ := newFaultSystem(t, "")
	w := s.faultWorker("fault-tmux", s.url)
	task := s.task()
	g := newGate(t)
	// Attempt 1 records its shell's and its child's pids: neither may
	// outlive the tmux server (an unseen first incarnation would run on
	// beside the second).
	prompt := fmt.Sprintf(`if [ "$PAM_ATTEMPT" = 1 ]; then sleep 600 & echo $$ $! > %s/$PAM_RUN_ID.pids; wait; else exit 0; fi`, g)
	extra := func() map[string]any { m := ownCwd(t); m["max_attempts"] = 2; return m }
	runs := []wire.Run{s.runShell(task.ID, prompt, extra()), s.runShell(task.ID, prompt, extra())}
	for _, r := range runs {
		s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
		// "running" means the wrapper posted started, which it does as it
		// spawns the CLI: the shell may not have written its pids yet.
		// Killing the server before it did would leave nothing to check.
		pids := filepath.Join(string(g), r.ID+".pids")
		eventually.Wait(t, eventually.Long, "attempt 1 of "+r.ID+" to record its pids", func() bool {
			b, _ := os.ReadFile(pids)
			return len(strings.Fields(string(b))) == 2
		})
	}
	if pty {
		for _, r := range runs {
			n, ok := holder.Alive(holdersOf(w.opts.DataDir), r.SessionName)
			if !ok || n.PID <= 0 {
				t.Fatalf("no live holder for %s: %+v", r.SessionName, n)
			}
			if err := syscall.Kill(n.PID, syscall.SIGKILL); err != nil {
				t.Fatalf("kill -9 holder %d: %v", n.PID, err)
			}
		}
	} else if out, err := w.tmuxCmd("kill-server"); err != nil {
		t.Fatalf("kill-server: %v %s", err, out)
	}
	tKill := time.Now()
	var reasons []string
	for _, r := range runs {
		got := s.waitRun(r.ID, "requeued and exited", 60*time.Second, func(r wire.Run) bool { return r.Attempt == 2 && !isActive(r.Status) })
		evs := s.events(r.ID)
		var why string
		for _, e := range evs {
			if e.Topic == "run.failed" {
				why, _ = eventPayload(e)["failure_reason"].(string)
			}
		}
		if got.Status != "exited" || (why != wire.FailTmuxCrash && why != wire.FailSessionLost) || (pty && why != wire.FailSessionLost) || countTopic(evs, "run.requeued") != 1 ||
			countTopic(evs, "run.finished") != 1 {
			t.Fatalf("run %s attempt %d, failure %q; events %v", got.Status, got.Attempt, why, s.topics(r.ID))
		}
		reasons = append(reasons, why)
		b, _ := os.ReadFile(filepath.Join(string(g), r.ID+".pids"))
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			eventually.Wait(t, eventually.Medium, fmt.Sprintf("process %d of attempt 1 to end", pid), func() bool {
				return pid > 0 && syscall.Kill(pid, 0) != nil
			})
		}
		if len(strings.Fields(string(b))) != 2 {
			t.Fatalf("pids of attempt 1: %q", b)
		}
	}
	t.Logf("observed: kill-server → both runs failed %v, requeued, attempt 2 exited, within %s; the processes of attempt 1 ended with their sessions; run.finished=1 each (attempt 2), duplicates=0",
		reasons, time.Since(tKill).Round(time.Millisecond))
}

// 6. Restart PostgreSQL under a running system: /healthz is 503 while it
// is down, no signal is lost (the wrapper and the hook spool, the worker
// replays), everything resumes.
func TestFaultPostgresRestart(t *testing.T) {
	t.Parallel()
	pamtest.Require(t, "postgres")
	dir := pamtest.ShortDir(t, "pamdb-") // traversable: the cluster runs as postgres when root
	// Durable, as serve runs it: a crash must not lose what was committed.
	opts := embeddb.Options{Dir: filepath.Join(dir, "pg"), Database: "pam", Durable: true, StartTimeout: time.Minute}
	ctx := t.Context()
	db, err := embeddb.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after serve has stopped.
	t.Cleanup(func() { _ = db.Stop() })
	s, _ := newFaultSystem(t, db.URL(), "PAM_HOST_OFFLINE_AFTER=30s")
	w := s.faultWorker("fault-pg", s.url)
	g := newGate(t)
	prompt := strings.Join([]string{hookCall(t, "progress"), g.wait("1"), hookCall(t, "progress"), g.wait("2"), "exit 0"}, "; ")
	r := s.runShell(s.task().ID, prompt, nil)
	eventually.Wait(t, 60*time.Second, "the first progress", func() bool { return slices.Equal(progressSeqs(s.events(r.ID)), []int{1}) })

	// An immediate shutdown: every backend gone at once, crash recovery on
	// the next start.
	if err := syscall.Kill(db.Pid(), syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	if err := db.Stop(); err != nil {
		t.Fatal(err)
	}
	tDown := time.Now()
	health := func() int { code, _ := s.call("GET", "/healthz", nil); return code }
	eventually.Wait(t, eventually.Medium, "/healthz 503", func() bool { return health() == 503 })
	g.open(t, "1")
	g.open(t, "2")
	eventually.Wait(t, eventually.Long, "progress 2 and finished in the spool", func() bool { return len(w.spooled()) == 2 })
	// The worker tries to replay while the database is down, and keeps
	// the files.
	w.waitLog(eventually.Long, "spool replay paused")
	if code := health(); code != 503 {
		t.Fatalf("/healthz %d while the database is down", code)
	}
	if db, err = embeddb.Start(ctx, opts); err != nil {
		t.Fatal(err)
	}
	tUp := time.Now()
	eventually.Wait(t, eventually.Long, "/healthz 200", func() bool { return health() == 200 })
	tHealthy := time.Now()
	got := s.waitRun(r.ID, "exited", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	tDone := time.Now()
	evs := s.events(r.ID)
	if got.Status != "exited" || !slices.Equal(progressSeqs(evs), []int{1, 2}) || countTopic(evs, "run.finished") != 1 {
		t.Fatalf("run %s; progress %v; events %v", got.Status, progressSeqs(evs), s.topics(r.ID))
	}
	eventually.Wait(t, eventually.Medium, "the spool to drain", func() bool { return len(w.spooled()) == 0 })
	// Everything resumes: a new run goes through.
	r2 := s.runShell(s.task().ID, "exit 0", ownCwd(t)) // the first may still hold the workspace in hold-open
	if got := s.waitRun(r2.ID, "exited", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) }); got.Status != "exited" {
		t.Fatalf("a run after the restart ended %s", got.Status)
	}
	t.Logf("observed: database down %s (healthz 503 throughout); healthz 200 %s after it was back; spooled signals delivered %s after that; progress %v, run.finished=1, duplicates=0; a new run exited",
		tUp.Sub(tDown).Round(time.Millisecond), tHealthy.Sub(tUp).Round(time.Millisecond), tDone.Sub(tHealthy).Round(time.Millisecond), progressSeqs(evs))
}

// 7. Corrupt runcache.json, worker.json and one spool file, then restart
// the worker: no second launch of the live run, the corrupt files
// reported and set aside.
func TestFaultCorruptWorkerFiles(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "")
	w := s.faultWorker("fault-corrupt", s.url)
	g := newGate(t)
	r := s.runShell(s.task().ID, g.wait("go")+"; exit 0", nil)
	s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
	dir := filepath.Join(w.opts.DataDir, "worker")
	eventually.Wait(t, eventually.Long, "runcache.json with the run", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "runcache.json"))
		return strings.Contains(string(b), r.ID)
	})
	pid := w.panePID(r.SessionName)
	w.kill9()
	torn := fmt.Sprintf("%020d-%s-1-progress.json", 42, r.ID)
	for name, text := range map[string]string{
		"runcache.json":              `{"fetched_at": "2026-01-01T00:00:00Z", "runs": [{"run_id": "` + r.ID[:20],
		"worker.json":                "\x00\x00\x00garbage",
		filepath.Join("spool", torn): `{"run_id": "` + r.ID + `", "signal": {"kind": "prog`,
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w.start()
	w.waitLog(eventually.Long, "uplink connected")
	eventually.Wait(t, eventually.Long, "three files set aside in worker.log", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "worker.log"))
		return strings.Count(string(b), "unreadable file set aside") == 3
	})
	log, _ := os.ReadFile(filepath.Join(dir, "worker.log"))
	for _, want := range []string{"runcache.json", "worker.json", torn} {
		if !strings.Contains(string(log), want) {
			t.Errorf("worker.log does not name %s:\n%s", want, log)
		}
	}
	var aside []string
	for _, d := range []string{filepath.Join(dir, "bad"), filepath.Join(dir, "spool", "bad")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			aside = append(aside, e.Name())
		}
	}
	if len(aside) != 3 {
		t.Errorf("set aside: %v", aside)
	}
	// Reconciliation ran against the orchestrator and rewrote the cache.
	eventually.Wait(t, eventually.Long, "a fresh runcache.json", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "runcache.json"))
		return strings.Contains(string(b), r.ID) && strings.Contains(string(b), `"host_id"`)
	})
	if got := w.panePID(r.SessionName); got != pid {
		t.Fatalf("the run was launched again: pane pid %d, was %d", got, pid)
	}
	g.open(t, "go")
	got := s.waitRun(r.ID, "exited", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	evs := s.events(r.ID)
	if got.Status != "exited" || countTopic(evs, "run.spawning") != 1 || countTopic(evs, "run.started") != 1 || countTopic(evs, "run.finished") != 1 {
		t.Fatalf("run %s; events %v", got.Status, s.topics(r.ID))
	}
	t.Logf("observed: 3 corrupt files set aside (%s) and reported in worker.log; pane pid %d kept (one run.started); run exited, duplicates=0",
		strings.Join(aside, ", "), pid)
}

// 8. Two workers started at once on one data dir, 50 times: exactly one
// runs; the other exits 1 naming the holder's pid.
func TestFaultTwoWorkersOneDataDir(t *testing.T) {
	t.Parallel()
	data := pamtest.ShortDir(t, "pamw-")
	tm := pamtest.NewTmux(t)
	env := []string{"PAM_URL=http://127.0.0.1:1", "PAM_WORKER_TOKEN=" + strings.Repeat("ab", 32), "PAM_HOST_NAME=twin",
		"PAM_DATA_DIR=" + data, "PAM_CONFIG_DIR=" + data, tm.Env(), "PAM_LOG_LEVEL=info"}
	type exit struct {
		i    int
		code int
	}
	var slowest time.Duration
	for round := range 50 {
		t0 := time.Now()
		var cmds [2]*exec.Cmd
		var errs [2]*pamtest.Buffer
		done := make(chan exit, 2)
		for i := range cmds {
			cmds[i] = pamtest.Command(t, "worker")
			cmds[i].Env = append(cmds[i].Env, env...)
			errs[i] = &pamtest.Buffer{}
			cmds[i].Stderr = errs[i]
		}
		for i := range cmds {
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		for i := range cmds {
			go func() {
				err := cmds[i].Wait()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				}
				done <- exit{i, code}
			}()
		}
		var loser exit
		select {
		case loser = <-done:
		case <-time.After(20 * time.Second):
			for _, c := range cmds {
				c.Process.Kill()
			}
			t.Fatalf("round %d: neither worker exited", round)
		}
		winner := cmds[1-loser.i]
		msg := errs[loser.i].String()
		if loser.code != 1 || !strings.Contains(msg, "another worker runs on this data dir") ||
			!strings.Contains(msg, "(pid "+strconv.Itoa(winner.Process.Pid)+")") {
			winner.Process.Kill()
			t.Fatalf("round %d: loser exited %d: %s", round, loser.code, msg)
		}
		// The winner runs: it holds the lock and wrote worker.json.
		eventually.Wait(t, eventually.Medium, "the winner's worker.json", func() bool {
			b, _ := os.ReadFile(filepath.Join(data, "worker", "worker.json"))
			return strings.Contains(string(b), fmt.Sprintf(`"pid": %d,`, winner.Process.Pid))
		})
		select {
		case e := <-done:
			t.Fatalf("round %d: both exited (second: %d): %s", round, e.code, errs[e.i].String())
		default:
		}
		if err := winner.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-done:
			if e.code != 0 {
				t.Fatalf("round %d: the winner exited %d on SIGTERM: %s", round, e.code, errs[e.i].String())
			}
		case <-time.After(20 * time.Second):
			winner.Process.Kill()
			t.Fatalf("round %d: the winner did not stop", round)
		}
		slowest = max(slowest, time.Since(t0))
	}
	t.Logf("observed: 50 rounds of two workers started at once on one data dir: each time exactly one ran, the other exited 1 naming its pid; slowest round %s",
		slowest.Round(time.Millisecond))
}
