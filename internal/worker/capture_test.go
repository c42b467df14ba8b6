package worker

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"pam/internal/eventually"
	"pam/internal/tmux"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// The adaptive slowdown: an unchanged pane past IdleAfter is polled ever
// less often, at most 5× the interval; a change resets the pace. tmux is
// a fake whose capture-pane prints a file.
func TestIdleSlowdown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	screen := filepath.Join(dir, "screen")
	os.WriteFile(screen, []byte("one\n"), 0o600)
	bin := filepath.Join(dir, "tmux")
	os.WriteFile(bin, []byte("#!/bin/sh\ncat "+screen+"\n"), 0o755)
	tm, err := tmux.New(tmux.Options{Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	snaps, _ := lru.New[string, snapshot](snapshotCacheSize)
	const base = time.Second
	w := &agent{
		o:   Options{DataDir: dir, CaptureInterval: base, IdleAfter: 0, LogMaxBytes: 1 << 20},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), tm: tmuxExecutor{tm}, runs: map[string]*run{}, snaps: snaps,
	}
	os.MkdirAll(filepath.Join(dir, "runs"), 0o700)
	name, _ := tmux.SessionForRun(runA)
	r := &run{id: runA, attempt: 1, name: name, state: stateLive, gen: 1, interval: base}
	w.runs[runA] = r
	step := func() time.Duration {
		t.Helper()
		r.next = time.Time{} // due now
		w.captureDue(t.Context(), base)
		return r.interval
	}
	want := []time.Duration{base, 2 * base, 4 * base, 5 * base, 5 * base}
	for i, d := range want {
		if got := step(); got != d {
			t.Fatalf("capture %d: interval %s, want %s", i, got, d)
		}
	}
	if until := time.Until(r.next); until < 4*base || until > 5*base {
		t.Errorf("next capture in %s, want about 5s", until)
	}
	os.WriteFile(screen, []byte("two\n"), 0o600)
	if got := step(); got != base {
		t.Errorf("after a change: interval %s, want %s", got, base)
	}
	// Not due: not captured.
	before := r.next
	w.captureDue(t.Context(), base)
	if r.next != before {
		t.Error("a pane that was not due was captured")
	}
}

// The capture loop marks a quiet pane idle (docs/architecture.md#attention):
// one run_state idle per quiet spell, after IdleAfter without change,
// naming the run's attempt; input (send_keys) ends the spell, and the
// next quiet spell is reported again.
func TestIdleReportedOncePerSpell(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.IdleAfter = 300 * time.Millisecond
	h.start()
	_, ackAt := h.spawnRun(runA, 1)
	isIdle := func(f wiretest.Frame) bool {
		return f.Type == wire.FrameRunState && f.RunID == runA && f.State == wire.StateIdle
	}
	first, at := orch.wait(ackAt, "run_state idle", isIdle)
	if first.Attempt == nil || *first.Attempt != 1 || !strings.Contains(first.Detail, "unchanged") {
		t.Fatalf("run_state idle = %+v", first)
	}
	// The spell goes on (the pane does not change): five heartbeats later
	// (a second, many captures) it was still reported once.
	eventually.Wait(t, eventually.Medium, "five heartbeats after the idle report", func() bool {
		return orch.count(at, isType(wire.FrameHeartbeat, "")) >= 5
	})
	if n := orch.count(ackAt, isIdle); n != 1 {
		t.Fatalf("one quiet spell reported %d times", n)
	}

	keysAt := orch.mark()
	orch.send(wire.SendKeysFrame{RunID: runA, Attempt: wire.IntPtr(1), Keys: []wire.Key{{Text: "y"}}})
	orch.wait(keysAt, "run_state idle after the input", isIdle)
	if n := orch.count(ackAt, isIdle); n != 2 {
		t.Fatalf("two quiet spells reported %d times", n)
	}
}

// controlClient is the pid of the worker's capture control client (tmux
// list-clients), 0 when there is none.
func (h *harness) controlClient() int {
	cmd := exec.Command("tmux", "-L", tmux.Socket, "list-clients", "-F", "#{client_control_mode} #{client_pid}")
	cmd.Env = append(os.Environ(), "TMUX_TMPDIR="+h.tmuxDir)
	out, _ := cmd.Output()
	for line := range strings.SplitSeq(string(out), "\n") {
		if pid, ok := strings.CutPrefix(line, "1 "); ok {
			n, _ := strconv.Atoi(pid)
			return n
		}
	}
	return 0
}

// The capture's control client killed (SIGKILL) loses no snapshot: the
// captures go by exec at once, and a new client is started after the
// backoff, through which they go on (docs/architecture.md#capture-by-control-mode).
func TestCaptureControlClientKilled(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	h.spawnRun(runA, 1)
	var pid int
	eventually.Wait(t, eventually.Medium, "the control client", func() bool { pid = h.controlClient(); return pid != 0 })
	if n := strings.Count(strings.Join(h.tmuxCalls(), "\n"), "capture-pane"); n != 0 {
		t.Fatalf("%d capture-pane execs with the control client up", n)
	}
	calls := len(h.tmuxCalls())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	typed := func(text string) {
		t.Helper()
		from := orch.mark()
		orch.send(wire.SendKeysFrame{RunID: runA, Attempt: wire.IntPtr(1), Keys: []wire.Key{{Text: text}}})
		orch.wait(from, "a snapshot showing "+text, func(f wiretest.Frame) bool {
			return f.Type == wire.FrameSnapshot && f.RunID == runA && strings.Contains(f.Capture, text)
		})
	}
	typed("after-the-kill")
	var again int
	eventually.Wait(t, eventually.Medium, "a new control client", func() bool {
		again = h.controlClient()
		return again != 0 && again != pid
	})
	after := strings.Join(h.tmuxCalls()[calls:], "\n")
	if !strings.Contains(after, "capture-pane -p -e -t =pam-0a0a0a0a:") {
		t.Errorf("no capture by exec while the control client was down:\n%s", after)
	}
	if !strings.Contains(after, "-C ") {
		t.Errorf("no new control client started:\n%s", after)
	}
	execs := strings.Count(strings.Join(h.tmuxCalls(), "\n"), "capture-pane")
	typed("through-the-new-client")
	if n := strings.Count(strings.Join(h.tmuxCalls(), "\n"), "capture-pane"); n != execs {
		t.Errorf("%d more capture-pane execs with the new control client up", n-execs)
	}
}

// A watched pane (pane_watch, docs/architecture.md#capture-by-control-mode)
// is refreshed by the watched rounds, without waiting for the capture
// interval: here that interval is an hour, so every snapshot of the
// watched run comes from them, and the unwatched run gets none.
func TestWatchedPaneRefreshed(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.CaptureInterval = time.Hour
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	from := orch.mark()
	orch.send(h.dispatchFrame(runA, 1))
	orch.send(h.dispatchFrame(runB, 1))
	for _, id := range []string{runA, runB} {
		ack, _ := orch.wait(from, "run_dispatch_ack", isType(wire.FrameRunDispatchAck, id))
		if ack.Accepted == nil || !*ack.Accepted {
			t.Fatalf("dispatch of %s refused: %q", id, ack.Reason)
		}
	}
	snapshotOf := func(runID, text string) func(wiretest.Frame) bool {
		return func(f wiretest.Frame) bool {
			return f.Type == wire.FrameSnapshot && f.RunID == runID && strings.Contains(f.Capture, text)
		}
	}
	// pane_watch is for a live session: sent again until the session is.
	eventually.Wait(t, eventually.Medium, "a snapshot of the watched run", func() bool {
		orch.send(wire.PaneWatchFrame{RunID: runA, Attempt: wire.IntPtr(1)})
		return orch.count(from, snapshotOf(runA, "fake pam:")) > 0
	})
	keysAt := orch.mark()
	orch.send(wire.SendKeysFrame{RunID: runA, Attempt: wire.IntPtr(1), Keys: []wire.Key{{Text: "watched-typing"}}})
	orch.wait(keysAt, "a snapshot with the typing", snapshotOf(runA, "watched-typing"))
	if _, ok := h.session(runB); !ok {
		t.Fatal("run B has no session")
	}
	if n := orch.count(from, isType(wire.FrameSnapshot, runB)); n != 0 {
		t.Fatalf("%d snapshots of the unwatched run within the capture interval", n)
	}
	// A pane_watch naming another attempt, or a run this worker does not
	// have, is ignored.
	orch.send(wire.PaneWatchFrame{RunID: runB, Attempt: wire.IntPtr(2)})
	orch.send(wire.PaneWatchFrame{RunID: "0c0c0c0c-3333-4333-8333-333333333333", Attempt: wire.IntPtr(1)})
	keysAt = orch.mark()
	orch.send(wire.SendKeysFrame{RunID: runA, Attempt: wire.IntPtr(1), Keys: []wire.Key{{Text: "more-typing"}}})
	orch.wait(keysAt, "a snapshot with more typing", snapshotOf(runA, "more-typing"))
	if n := orch.count(from, isType(wire.FrameSnapshot, runB)); n != 0 {
		t.Fatalf("%d snapshots of run B after a pane_watch of another attempt", n)
	}
}
