package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/tmux"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

const (
	runA = "0a0a0a0a-1111-4111-8111-111111111111"
	runB = "0b0b0b0b-2222-4222-8222-222222222222"
	runC = "0c0c0c0c-3333-4333-8333-333333333333"
	// Run ids holding 7777 make the fake pam ignore SIGTERM.
	runStubborn = "77777777-4444-4444-8444-444444444444"
)

func TestRegisterHeartbeatAndFiles(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	hb, _ := orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	regs := orch.regs()
	if len(regs) != 1 {
		t.Fatalf("registrations: %+v", regs)
	}
	r := regs[0]
	if r.HostName != "test-host" || r.Protocol != 1 || r.Executor != "tmux" || r.MaxRuns != 4 || r.Version != "test" ||
		!slices.Equal(r.Providers, []string{"fake", "shell"}) || !tmux.ValidRunID(r.InstanceID) || !strings.Contains(r.Platform, "/") {
		t.Errorf("register body = %+v", r)
	}
	if hb.HostID != testHostID || hb.InstanceID != r.InstanceID || hb.Timestamp == nil {
		t.Errorf("heartbeat = %+v", hb)
	}
	// Heartbeats keep coming.
	_, i := orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	orch.wait(i+1, "a second heartbeat", isType(wire.FrameHeartbeat, ""))

	dir := filepath.Join(h.opts.DataDir, "worker")
	for path, mode := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, filepath.Join(dir, "worker.json"): 0o600, filepath.Join(dir, "instance_id"): 0o600, filepath.Join(dir, "dispatch"): 0o700 | os.ModeDir} {
		st, err := os.Stat(path)
		if err != nil || st.Mode() != mode {
			t.Errorf("%s: mode %v, err %v; want %v", path, st.Mode(), err, mode)
		}
	}
	var note Note
	b, _ := os.ReadFile(filepath.Join(dir, "worker.json"))
	if err := json.Unmarshal(b, &note); err != nil || note.PID != os.Getpid() || note.HostName != "test-host" ||
		note.InstanceID != r.InstanceID || note.Executor != "tmux" || note.Version != "test" || time.Since(note.StartedAt) > time.Minute {
		t.Errorf("worker.json = %s (%v)", b, err)
	}

	// A restart on the same data dir reuses the instance id.
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h.start()
	eventually.Wait(t, eventually.Medium, "a second registration", func() bool { return len(orch.regs()) == 2 })
	if got := orch.regs()[1].InstanceID; got != r.InstanceID {
		t.Errorf("instance id changed across restarts: %s then %s", r.InstanceID, got)
	}
}

func TestDispatchSpawnsSession(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	const apiKey = "sk-pass-env-0a0a0a0a"
	h.opts.PassEnv = func(provider string) map[string]string {
		if provider != "shell" {
			t.Errorf("PassEnv asked for provider %q", provider)
		}
		return map[string]string{"ANTHROPIC_API_KEY": apiKey}
	}
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	df := h.dispatchFrame(runA, 2)
	from := orch.mark()
	orch.send(df)
	ack, ackAt := orch.wait(from, "the ack", isType(wire.FrameRunDispatchAck, runA))
	if ack.Accepted == nil || !*ack.Accepted || ack.Attempt == nil || *ack.Attempt != 2 || ack.Reason != "" {
		t.Fatalf("ack = %+v", ack)
	}
	snap, snapAt := orch.wait(from, "the first snapshot", func(f wiretest.Frame) bool {
		return f.Type == wire.FrameSnapshot && f.RunID == runA && strings.Contains(f.Capture, "fake pam:")
	})
	if _, first := orch.wait(from, "any snapshot", isType(wire.FrameSnapshot, runA)); first < ackAt || snapAt < ackAt {
		t.Errorf("a snapshot (frame %d) came before the ack (frame %d)", first, ackAt)
	}
	if snap.Attempt == nil || *snap.Attempt != 2 || snap.Timestamp == nil {
		t.Errorf("snapshot = %+v", snap)
	}
	// The session's command is pam exec run, pointed at the data dir and
	// given the hold-open (the tmux server's environment carries neither).
	wantCmd := "fake pam: exec run --data-dir=" + h.opts.DataDir + " --hold-open=5m0s -- " + runA
	if !strings.Contains(snap.Capture, wantCmd) {
		t.Errorf("pane does not show %q:\n%s", wantCmd, snap.Capture)
	}

	s, ok := h.session(runA)
	if !ok || s.Name.String() != "pam-0a0a0a0a" || s.Attempt != 2 {
		t.Fatalf("session = %+v, %v", s, ok)
	}
	out, err := exec_(h, "display-message", "-p", "-t", "=pam-0a0a0a0a:", "#{window_name}|#{pane_current_path}")
	if err != nil || strings.TrimSpace(out) != "fix-the-login-bug|"+df.Cwd {
		t.Errorf("window = %q, %v", out, err)
	}

	// The dispatch file: 0600, what `pam exec run` needs.
	path := filepath.Join(h.opts.DataDir, "worker", "dispatch", runA+".json")
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("dispatch file: %v %v", st, err)
	}
	var d wire.Dispatch
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	want := wire.Dispatch{RunID: runA, Attempt: 2, APIURL: orch.srv.URL, SignalToken: "signal-token-0a0a0a0a",
		Provider: "shell", Binary: "/bin/sh", TaskID: testTaskID, TaskTitle: "Fix the Login Bug!", Prompt: "echo hi; rm -rf /",
		Args: []string{"--flag"}, Cwd: df.Cwd, SessionName: "pam-0a0a0a0a", WorkerDataDir: filepath.Join(h.opts.DataDir, "worker")}
	if d.RunID != want.RunID || d.Attempt != want.Attempt || d.APIURL != want.APIURL || d.SignalToken != want.SignalToken ||
		d.Provider != want.Provider || d.Binary != want.Binary || d.TaskID != want.TaskID || d.TaskTitle != want.TaskTitle ||
		d.Prompt != want.Prompt || !slices.Equal(d.Args, want.Args) || d.Cwd != want.Cwd || d.SessionName != want.SessionName ||
		d.WorkerDataDir != want.WorkerDataDir {
		t.Errorf("dispatch file = %+v\nwant %+v", d, want)
	}
	if len(d.PassEnv) != 1 || d.PassEnv["ANTHROPIC_API_KEY"] != apiKey {
		t.Errorf("dispatch file pass_env = %v", d.PassEnv)
	}
	// Nothing secret went through the tmux command line.
	for _, c := range h.tmuxCalls() {
		if strings.Contains(c, "signal-token") || strings.Contains(c, "rm -rf") || strings.Contains(c, workerToken) || strings.Contains(c, apiKey) {
			t.Errorf("a secret or the prompt reached tmux: %s", c)
		}
	}

	// The run log: a timestamp line, then the pane text; 0600.
	logPath := filepath.Join(h.opts.DataDir, "runs", runA+".log")
	eventually.Wait(t, eventually.Short, "the run log", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), wantCmd)
	})
	if st, _ := os.Stat(logPath); st.Mode().Perm() != 0o600 {
		t.Errorf("run log mode %v", st.Mode())
	}
	lb, _ := os.ReadFile(logPath)
	if !strings.HasPrefix(string(lb), "--- ") || !strings.Contains(strings.SplitN(string(lb), "\n", 2)[0], "attempt 2") {
		t.Errorf("run log does not start with a timestamp line:\n%.200s", lb)
	}

	// Snapshots only on change: with the pane unchanged over many
	// capture cycles (three heartbeats = 12 captures), none is sent.
	hbFrom := orch.mark()
	for i := 0; i < 3; i++ {
		_, hbFrom = orch.wait(hbFrom, "a heartbeat", isType(wire.FrameHeartbeat, ""))
		hbFrom++
	}
	if n := orch.count(from, isType(wire.FrameSnapshot, runA)); n != 1 {
		t.Errorf("%d snapshots for an unchanged pane, want 1", n)
	}
	// Input changes the pane: one more snapshot, with the text.
	orch.send(wire.SendKeysFrame{RunID: runA, Attempt: wire.IntPtr(2), Keys: []wire.Key{{Text: "typed-text"}}})
	orch.wait(from, "a snapshot with the typed text", func(f wiretest.Frame) bool {
		return f.Type == wire.FrameSnapshot && f.RunID == runA && strings.Contains(f.Capture, "typed-text")
	})
	// Keys outside the allowlist never reach tmux.
	orch.send(wire.SendKeysFrame{RunID: runA, Attempt: wire.IntPtr(2), Keys: []wire.Key{{Text: "$(touch /tmp/pwned)"}}})

	// A repeated dispatch of the same attempt is acked again and not
	// respawned: same pane process, one session.
	pane, err := h.tm.Pane(t.Context(), s.Name)
	if err != nil {
		t.Fatal(err)
	}
	from2 := orch.mark()
	orch.send(df)
	ack2, _ := orch.wait(from2, "the second ack", isType(wire.FrameRunDispatchAck, runA))
	if ack2.Accepted == nil || !*ack2.Accepted {
		t.Errorf("repeated dispatch refused: %+v", ack2)
	}
	_, i := orch.wait(from2, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	orch.wait(i+1, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	pane2, err := h.tm.Pane(t.Context(), s.Name)
	if err != nil || pane2.PID != pane.PID || len(h.sessions()) != 1 {
		t.Errorf("respawned: pane pid %d then %d (%v), sessions %+v", pane.PID, pane2.PID, err, h.sessions())
	}
	calls := strings.Join(h.tmuxCalls(), "\n")
	if strings.Contains(calls, "pwned") {
		t.Error("refused keys reached tmux")
	}
	// (The capture's control client creates its helper session with a
	// new-session of its own, docs/architecture.md#capture-by-control-mode.)
	if n := strings.Count(calls, "new-session -d -s pam-0a0a0a0a"); n != 1 {
		t.Errorf("%d new-session calls, want 1", n)
	}
}

func exec_(h *harness, args ...string) (string, error) {
	cmd := exec.Command("tmux", append([]string{"-L", tmux.Socket}, args...)...)
	cmd.Env = []string{"TMUX_TMPDIR=" + h.tmuxDir}
	out, err := cmd.Output()
	return string(out), err
}

func TestDispatchRefusals(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.MaxRuns = 1
	h.opts.LivenessInterval = time.Hour // keep tmux calls to the ones dispatches cause
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	h.spawnRun(runA, 2)
	before := h.tmuxCalls()

	// A dispatch naming a valid run and attempt is acked as refused, with
	// the reason; one whose ack could not name them is dropped unanswered
	// (reason ""), which the ack of a later refusal, of runC, proves.
	refusals := []struct {
		what   string
		mod    func(*wire.RunDispatchFrame)
		reason string
	}{
		{"bad session name", func(f *wire.RunDispatchFrame) { f.SessionName = "pam-0B0B0B0B" }, "session_name"},
		{"session name of another run", func(f *wire.RunDispatchFrame) { f.SessionName = "pam-0a0a0a0a" }, "session_name"},
		{"injected session name", func(f *wire.RunDispatchFrame) { f.SessionName = "pam-0b0b0b0b;kill-server" }, "session_name"},
		{"unknown provider", func(f *wire.RunDispatchFrame) { f.Provider = "nope" }, "provider"},
		{"bad provider name", func(f *wire.RunDispatchFrame) { f.Provider = "../sh" }, "provider"},
		{"relative cwd", func(f *wire.RunDispatchFrame) { f.Cwd = "tmp" }, "cwd"},
		{"no signal token", func(f *wire.RunDispatchFrame) { f.SignalToken = "" }, "signal_token"},
		{"bad run id", func(f *wire.RunDispatchFrame) { f.RunID = "../../etc/passwd" }, ""},
		{"uppercase run id", func(f *wire.RunDispatchFrame) { f.RunID = strings.ToUpper(runB) }, ""},
		{"attempt 0", func(f *wire.RunDispatchFrame) { f.Attempt = wire.IntPtr(0) }, ""},
		{"no attempt", func(f *wire.RunDispatchFrame) { f.Attempt = nil }, ""},
		{"over capacity", func(f *wire.RunDispatchFrame) {}, "capacity"},
	}
	for _, r := range refusals {
		f := h.dispatchFrame(runB, 1)
		r.mod(&f)
		from := orch.mark()
		orch.send(f)
		if r.reason == "" {
			sentinel := h.dispatchFrame(runC, 1)
			sentinel.Provider = "nope"
			orch.send(sentinel)
			_, at := orch.wait(from, "the ack of the dispatch after "+r.what, isType(wire.FrameRunDispatchAck, runC))
			if n := orch.count(from, func(g wiretest.Frame) bool { return g.Type == wire.FrameRunDispatchAck && g.RunID != runC }); n != 0 {
				t.Errorf("%s: %d acks before frame %d, want none", r.what, n, at)
			}
			continue
		}
		ack, _ := orch.wait(from, "the ack of "+r.what, isType(wire.FrameRunDispatchAck, f.RunID))
		if ack.Accepted == nil || *ack.Accepted || !strings.Contains(ack.Reason, r.reason) {
			t.Errorf("%s: ack = accepted %v reason %q, want a refusal naming %q", r.what, ack.Accepted, ack.Reason, r.reason)
		}
	}
	// An older attempt of a live run is refused too.
	from := orch.mark()
	h.orch.send(h.dispatchFrame(runA, 1))
	ack, _ := orch.wait(from, "ack", isType(wire.FrameRunDispatchAck, runA))
	if *ack.Accepted || !strings.Contains(ack.Reason, "attempt 2") {
		t.Errorf("older attempt: ack = %+v", ack)
	}

	// No tmux call named the refused run's session or created one; only
	// the live run's captures happened meanwhile.
	for _, c := range h.tmuxCalls()[len(before):] {
		if !strings.Contains(c, "capture-pane -p -e -t =pam-0a0a0a0a:") {
			t.Errorf("tmux call during refused dispatches: %s", c)
		}
	}
	if _, err := os.Stat(filepath.Join(h.opts.DataDir, "worker", "dispatch", runB+".json")); err == nil {
		t.Error("a refused run got a dispatch file")
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.StopGrace = time.Minute // only the forced stop may end the stubborn run quickly
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	h.spawnRun(runA, 1)
	h.spawnRun(runStubborn, 1)
	h.spawnRun(runB, 3)
	dispatch := func(id string) string { return filepath.Join(h.opts.DataDir, "worker", "dispatch", id+".json") }

	// Graceful: SIGTERM ends the fake pam well within the grace.
	orch.send(wire.RunStopFrame{RunID: runA, Attempt: wire.IntPtr(1)})
	eventually.Wait(t, eventually.Medium, "run A's session to go", func() bool { _, ok := h.session(runA); return !ok })
	eventually.Wait(t, eventually.Short, "run A's dispatch file to go", func() bool { _, err := os.Stat(dispatch(runA)); return err != nil })

	// Forced: a process ignoring SIGTERM is killed at once.
	start := time.Now()
	orch.send(wire.RunStopFrame{RunID: runStubborn, Attempt: wire.IntPtr(1), Force: true})
	eventually.Wait(t, eventually.Medium, "the stubborn session to go", func() bool { _, ok := h.session(runStubborn); return !ok })
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("forced stop took %s", d)
	}

	// A stop for an older attempt leaves the newer incarnation alone.
	orch.send(wire.RunStopFrame{RunID: runB, Attempt: wire.IntPtr(2), Force: true})
	_, i := orch.wait(orch.mark(), "a heartbeat", isType(wire.FrameHeartbeat, ""))
	orch.wait(i+1, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	if _, ok := h.session(runB); !ok {
		t.Error("a stop of attempt 2 ended attempt 3")
	}
	orch.send(wire.RunStopFrame{RunID: runB, Attempt: wire.IntPtr(3), Force: true})
	eventually.Wait(t, eventually.Medium, "run B's session to go", func() bool { _, ok := h.session(runB); return !ok })

	// After the stops, capacity is free again: a new dispatch is taken.
	h.spawnRun(runC, 1)
}

// A newer attempt of a run kills the previous incarnation before it
// spawns (kill-before-respawn), and acks before either.
func TestRespawnNewerAttempt(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	h.spawnRun(runA, 1)
	s1, _ := h.session(runA)
	from := orch.mark()
	orch.send(h.dispatchFrame(runA, 2))
	ack, ackAt := orch.wait(from, "the ack", isType(wire.FrameRunDispatchAck, runA))
	if !*ack.Accepted {
		t.Fatalf("ack = %+v", ack)
	}
	snap, snapAt := orch.wait(from, "a snapshot of attempt 2", func(f wiretest.Frame) bool {
		return f.Type == wire.FrameSnapshot && f.RunID == runA && *f.Attempt == 2 && strings.Contains(f.Capture, "fake pam:")
	})
	if snapAt < ackAt {
		t.Error("snapshot before ack")
	}
	_ = snap
	s2, ok := h.session(runA)
	if !ok || s2.Attempt != 2 || s2.PanePID == s1.PanePID {
		t.Errorf("sessions: before %+v, after %+v", s1, s2)
	}
}

// The same with the pty executor: its NewSession says the name is taken
// (tmux.ErrSessionExists) as tmux does, and the spawn replaces the
// earlier incarnation.
func TestRespawnNewerAttemptPTY(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds pam")
	}
	orch := newFakeOrch(t)
	h := newHarnessFor(t, orch, "pty")
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	h.spawnRun(runA, 1)
	s1, _ := h.session(runA)
	from := orch.mark()
	orch.send(h.dispatchFrame(runA, 2))
	if ack, _ := orch.wait(from, "the ack", isType(wire.FrameRunDispatchAck, runA)); !*ack.Accepted {
		t.Fatalf("ack = %+v", ack)
	}
	orch.wait(from, "a snapshot of attempt 2", func(f wiretest.Frame) bool {
		return f.Type == wire.FrameSnapshot && f.RunID == runA && *f.Attempt == 2 && strings.Contains(f.Capture, "fake pam:")
	})
	s2, ok := h.session(runA)
	if !ok || s2.Attempt != 2 || s2.PanePID == s1.PanePID {
		t.Errorf("sessions: before %+v, after %+v", s1, s2)
	}
	if n := orch.count(from, isType(wire.FrameRunState, runA)); n != 0 {
		t.Errorf("%d run_state frames: the respawn failed", n)
	}
	// The process that starts a holder exits late under the race
	// detector; the package's leak check must not find it waited for.
	eventually.Wait(t, eventually.Medium, "the holders' starters to be reaped", func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "pam/internal/holder.Start")
	})
}

func TestSpawnFailureReported(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	f := h.dispatchFrame(runA, 1)
	f.Cwd = filepath.Join(t.TempDir(), "missing")
	from := orch.mark()
	orch.send(f)
	ack, ackAt := orch.wait(from, "the ack", isType(wire.FrameRunDispatchAck, runA))
	if !*ack.Accepted {
		t.Fatalf("ack = %+v", ack)
	}
	st, stAt := orch.wait(from, "run_state", isType(wire.FrameRunState, runA))
	if st.State != wire.StateSpawnFailed || !strings.Contains(st.Detail, "missing") || stAt < ackAt || st.Attempt == nil || *st.Attempt != 1 {
		t.Errorf("run_state = %+v", st)
	}
	// Forgotten: the same attempt can be dispatched again, and works.
	from = orch.mark()
	orch.send(h.dispatchFrame(runA, 1))
	orch.wait(from, "a snapshot", isType(wire.FrameSnapshot, runA))
}

func TestMalformedFramesKeepTheUplink(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	c := orch.current()
	for _, raw := range []string{
		`not json`, `{}`, `{"type":"no_such_frame"}`, `{"type":"run_dispatch","bogus":1}`, `[1,2]`,
		`{"type":"run_stop","run_id":"../x"}`, `{"type":"send_keys","run_id":"` + runA + `","keys":[{"key":"C-b"}]}`,
		`{"type":"heartbeat","host_id":"x"}`, `{"type":"attach_open","attach_id":"a1"}`,
		`{"type":"attach_open","attach_id":"` + relay1 + `"}`, `{"type":"log_request","run_id":"nope","request_id":"` + relay2 + `"}`,
		`{"type":"run_dispatch","run_id":"` + runB + `","attempt":1,"session_name":"pam-0b0b0b0b;x"}`,
	} {
		if err := orch.sendRaw(c, []byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	// Still connected on the same uplink: a dispatch works.
	h.spawnRun(runA, 1)
	orch.mu.Lock()
	conns := orch.conns
	orch.mu.Unlock()
	if conns != 1 || len(orch.regs()) != 1 {
		t.Errorf("the worker reconnected (%d uplinks, %d registrations) after malformed frames", conns, len(orch.regs()))
	}
	// Answered where the answer can name what it refuses (a valid attach
	// id, a valid run and attempt); the rest dropped unanswered.
	if n := orch.count(0, isType(wire.FrameAttachClosed, "")); n != 1 {
		t.Errorf("%d attach_closed answers, want 1 (for %s)", n, relay1)
	}
	if ac, _ := orch.wait(0, "attach_closed", isType(wire.FrameAttachClosed, "")); ac.AttachID != relay1 || !strings.Contains(ac.Reason, "run_id") {
		t.Errorf("attach_closed = %+v", ac)
	}
	if ack, _ := orch.wait(0, "the refusal of a bad dispatch", isType(wire.FrameRunDispatchAck, runB)); *ack.Accepted || !strings.Contains(ack.Reason, "session_name") {
		t.Errorf("run_dispatch_ack = %+v", ack)
	}
	if n := orch.count(0, isType(wire.FrameLogChunk, "")); n != 0 {
		t.Errorf("%d log chunks for a log_request with a bad run id", n)
	}
	orch.mu.Lock()
	defer orch.mu.Unlock()
	if len(orch.bad) > 0 {
		t.Errorf("the worker sent frames that do not decode or validate: %q", orch.bad)
	}
}

func TestSecondWorkerRefused(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	o := h.opts
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := Run(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second worker: %v", err)
	}
	if len(orch.regs()) != 1 {
		t.Errorf("the second worker registered")
	}
}

func TestReconnectResendsSnapshots(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	snapA, _ := h.spawnRun(runA, 1)
	snapB, _ := h.spawnRun(runB, 1)

	// The orchestrator goes away and refuses the first registrations:
	// the worker keeps trying with backoff.
	orch.mu.Lock()
	orch.failRegister = 2
	orch.mu.Unlock()
	from := orch.mark()
	orch.drop()
	eventually.Wait(t, 15*time.Second, "a new uplink", func() bool {
		orch.mu.Lock()
		defer orch.mu.Unlock()
		return orch.conns == 2
	})
	if n := len(orch.regs()); n < 4 {
		t.Errorf("%d registrations: the failed ones were not retried", n)
	}
	hb, hbAt := orch.wait(from, "a heartbeat after reconnect", isType(wire.FrameHeartbeat, ""))
	if hb.HostID != testHostID {
		t.Errorf("heartbeat = %+v", hb)
	}
	// The latest snapshot of each live session, unchanged, right after.
	for _, want := range []wiretest.Frame{snapA, snapB} {
		got, at := orch.wait(from, "a resent snapshot", isType(wire.FrameSnapshot, want.RunID))
		if got.Capture != want.Capture || at < hbAt {
			t.Errorf("resent snapshot of %s differs or precedes the heartbeat", want.RunID)
		}
	}
	// The sessions never noticed.
	if len(h.sessions()) != 2 {
		t.Errorf("sessions after reconnect: %+v", h.sessions())
	}
}

// Ending the worker (SIGTERM) closes the uplink and leaves the sessions
// running; a new worker adopts them.
func TestShutdownLeavesSessions(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	h.spawnRun(runA, 1)
	s1, _ := h.session(runA)
	if err := h.stop(); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	s2, ok := h.session(runA)
	if !ok || s2.PanePID != s1.PanePID {
		t.Fatalf("session after shutdown: %+v %v", s2, ok)
	}
	for _, c := range h.tmuxCalls() {
		if strings.HasPrefix(c, "-L pam -f /dev/null kill") {
			t.Errorf("shutdown ran %s", c)
		}
	}
	// The lock is free, and the next worker adopts the session.
	from := orch.mark()
	h.start()
	snap, _ := orch.wait(from, "a snapshot of the adopted session", isType(wire.FrameSnapshot, runA))
	if !strings.Contains(snap.Capture, "fake pam:") {
		t.Errorf("snapshot = %q", snap.Capture)
	}
	// It knows the run: a repeated dispatch is not respawned.
	from = orch.mark()
	orch.send(h.dispatchFrame(runA, 1))
	ack, _ := orch.wait(from, "ack", isType(wire.FrameRunDispatchAck, runA))
	if !*ack.Accepted {
		t.Errorf("ack = %+v", ack)
	}
	if s3, _ := h.session(runA); s3.PanePID != s1.PanePID {
		t.Errorf("adopted session respawned")
	}
}

// A session that ends by itself is forgotten: its capacity is freed.
func TestVanishedSessionForgotten(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.MaxRuns = 1
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	h.spawnRun(runA, 1)
	s, _ := h.session(runA)
	if err := h.tm.KillSession(t.Context(), s.Name); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Medium, "the dispatch file to go", func() bool {
		_, err := os.Stat(filepath.Join(h.opts.DataDir, "worker", "dispatch", runA+".json"))
		return err != nil
	})
	h.spawnRun(runB, 1)
}

func TestLogRequest(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	// A log of ~700 KiB: multi-byte characters at chunk boundaries, and
	// ANSI escapes, which JSON spells as six bytes each.
	var b strings.Builder
	for b.Len() < 700<<10 {
		b.WriteString("é\x1b[31m€x😀\x1b[0m\n")
	}
	text := b.String()
	os.MkdirAll(filepath.Join(h.opts.DataDir, "runs"), 0o700)
	if err := os.WriteFile(filepath.Join(h.opts.DataDir, "runs", runC+".log"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func(reqID string, offset int64) string {
		t.Helper()
		from := orch.mark()
		orch.send(wire.LogRequestFrame{RequestID: reqID, RunID: runC, Offset: &offset})
		orch.wait(from, "the last chunk", func(f wiretest.Frame) bool { return f.Type == wire.FrameLogChunk && f.RequestID == reqID && f.EOF })
		orch.mu.Lock()
		defer orch.mu.Unlock()
		var got strings.Builder
		eofs := 0
		for _, f := range orch.frames[from:] {
			if f.Type != wire.FrameLogChunk || f.RequestID != reqID {
				continue
			}
			if len(f.Text) > maxLogChunk {
				t.Errorf("chunk of %d bytes", len(f.Text))
			}
			if strings.ContainsRune(f.Text, '\uFFFD') {
				t.Error("a chunk split a character")
			}
			if f.RunID != runC || f.Timestamp == nil {
				t.Errorf("chunk = %+v", f)
			}
			if f.EOF {
				eofs++
			}
			got.WriteString(f.Text)
		}
		if eofs != 1 {
			t.Errorf("%d eof chunks", eofs)
		}
		return got.String()
	}
	if got := read("aaaaaaaa-0000-4000-8000-0000000000a1", 0); got != text {
		t.Errorf("log from 0: got %d bytes, want %d", len(got), len(text))
	}
	if got := read("aaaaaaaa-0000-4000-8000-0000000000a2", 1000); got != text[1000:] {
		t.Errorf("log from 1000: got %d bytes, want %d", len(got), len(text)-1000)
	}
	if got := read("aaaaaaaa-0000-4000-8000-0000000000a3", int64(len(text)+5)); got != "" {
		t.Errorf("log past the end: %q", got)
	}
}

func TestLogRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := &agent{o: Options{DataDir: dir, LogMaxBytes: 1000}}
	os.MkdirAll(filepath.Join(dir, "runs"), 0o700)
	for i := 0; i < 10; i++ {
		if err := w.appendLog(runA, snapshot{attempt: 1, capture: strings.Repeat(strconv.Itoa(i), 300), at: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := os.ReadFile(w.logPath(runA))
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(w.logPath(runA) + ".1")
	if err != nil {
		t.Fatal(err)
	}
	if len(cur) > 1000 || len(old) > 1000 || !strings.Contains(string(cur), strings.Repeat("9", 300)) || !strings.Contains(string(old), strings.Repeat("7", 300)) {
		t.Errorf("rotation: current %d bytes, old %d bytes", len(cur), len(old))
	}
	if _, err := os.Stat(w.logPath(runA) + ".2"); err == nil {
		t.Error("more than one old log kept")
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	lo, hi := time.Second, 30*time.Second
	seen := map[time.Duration]bool{}
	for d := lo; d <= hi; d = min(d*2, hi) {
		for i := 0; i < 200; i++ {
			j := jitter(d, lo, hi)
			if j < lo || j > hi || j < d*3/4 || j > d+d/4 {
				t.Fatalf("jitter(%s) = %s", d, j)
			}
			seen[j] = true
		}
		if d == hi {
			break
		}
	}
	if len(seen) < 100 {
		t.Errorf("only %d distinct delays", len(seen))
	}
}

func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	good := Options{URL: "http://127.0.0.1:1", Token: "t", DataDir: t.TempDir(), PamBinary: "/usr/bin/pam"}
	for what, mod := range map[string]func(*Options){
		"no token":         func(o *Options) { o.Token = "" },
		"bad url":          func(o *Options) { o.URL = "ftp://x" },
		"unknown executor": func(o *Options) { o.Executor = "screen" },
		"relative pam":     func(o *Options) { o.PamBinary = "pam" },
		"no data dir":      func(o *Options) { o.DataDir = "" },
	} {
		o := good
		mod(&o)
		if err := Run(t.Context(), o); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
}

// A reconciliation asked for from outside (SIGHUP in pam worker) checks
// liveness at once: a vanished session is forgotten without waiting for
// the timers.
func TestReconcileRequest(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	reconcile := make(chan struct{})
	h.opts.Reconcile = reconcile
	h.opts.LivenessInterval = time.Hour
	h.opts.CaptureInterval = time.Hour
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	from := orch.mark()
	orch.send(h.dispatchFrame(runA, 1))
	orch.wait(from, "the ack", isType(wire.FrameRunDispatchAck, runA))
	dispatch := filepath.Join(h.opts.DataDir, "worker", "dispatch", runA+".json")
	eventually.Wait(t, eventually.Medium, "the session", func() bool { _, ok := h.session(runA); return ok })
	s, _ := h.session(runA)
	if err := h.tm.KillSession(t.Context(), s.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dispatch); err != nil {
		t.Fatalf("dispatch file gone before the reconcile: %v", err)
	}
	reconcile <- struct{}{}
	eventually.Wait(t, eventually.Medium, "the run to be forgotten", func() bool { _, err := os.Stat(dispatch); return err != nil })
}

// When Run returns, every goroutine it started has ended, down to the
// keep-alive connections of its HTTP client. Not parallel: goleak looks
// at the whole process, and parallel tests start only after this one.
func TestRunLeavesNoGoroutines(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	before := goleak.IgnoreCurrent()
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	h.spawnRun(runA, 1)
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}

// Issue 9 item 20: the first start of a worker on a new host (status
// "registered" until its first heartbeat) logs no warning; a disabled
// host is said once, as information.
func TestFirstStartLogsNoWarning(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"registered", "offline", "disabled"} {
		orch := newFakeOrch(t)
		orch.regStatus = status
		orch.setRuns(func(r *fakeRuns) { r.serve = true })
		h := newHarness(t, orch)
		var logs pamtest.Buffer
		h.opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		h.start()
		orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
		if err := h.stop(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("status %s: a warning on a normal start:\n%s", status, logs.String())
		}
		if disabled := strings.Contains(logs.String(), "this host is disabled"); disabled != (status == "disabled") {
			t.Errorf("status %s: disabled said %v:\n%s", status, disabled, logs.String())
		}
	}
}
