package worker

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"pam/internal/eventually"
	"pam/internal/tmux"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

const (
	relay1 = "aaaaaaaa-0000-4000-8000-000000000001"
	relay2 = "aaaaaaaa-0000-4000-8000-000000000002"
)

// tmuxClients lists the tmux clients attached on the private socket,
// but for the worker's control-mode client, which captures the panes
// (docs/architecture.md#capture-by-control-mode) and is no relay.
func (h *harness) tmuxClients() string {
	cmd := exec.Command("tmux", "-L", tmux.Socket, "list-clients", "-F", "#{?client_control_mode,,#{session_name}}")
	cmd.Env = append(os.Environ(), "TMUX_TMPDIR="+h.tmuxDir)
	out, _ := cmd.Output()
	return strings.Join(strings.Fields(string(out)), "\n")
}

func (h *harness) windowWidth(session string) string {
	cmd := exec.Command("tmux", "-L", tmux.Socket, "display-message", "-p", "-t", "="+session+":", "#{window_width}")
	cmd.Env = append(os.Environ(), "TMUX_TMPDIR="+h.tmuxDir)
	out, _ := cmd.Output()
	return strings.TrimSpace(string(out))
}

func isRelay(typ, id string) func(wiretest.Frame) bool {
	return func(f wiretest.Frame) bool { return f.Type == typ && f.AttachID == id }
}

// The worker relays several terminals at once, each to its own session,
// refuses an attach_open that does not name one of its live sessions by
// its own name, and tears relays down on attach_close and when the
// uplink drops, leaving the sessions running.
func TestRelays(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.start()
	h.spawnRun(runA, 1)
	h.spawnRun(runB, 1)
	open := func(id, runID, session string, rows, cols int) {
		orch.send(wire.AttachOpenFrame{AttachID: id, RunID: runID, SessionName: session, Rows: rows, Cols: cols})
	}

	for _, c := range []struct {
		runID, session string
		rows, cols     int
		reason         string
	}{
		{runA, "pam-0b0b0b0b", 24, 80, "session_name"},
		{runA, "pam-0a0a0a0a;x", 24, 80, "session_name"},
		{"0c0c0c0c-3333-4333-8333-333333333333", "pam-0c0c0c0c", 24, 80, "no live session"},
		{"../etc", "pam-0a0a0a0a", 24, 80, "run_id"},
		{runA, "pam-0a0a0a0a", 0, 80, "out of bounds"},
		{runA, "pam-0a0a0a0a", 24, 5000, "out of bounds"},
	} {
		from := orch.mark()
		open(relay1, c.runID, c.session, c.rows, c.cols)
		f, _ := orch.wait(from, "a refusal", isRelay(wire.FrameAttachClosed, relay1))
		if !strings.Contains(f.Reason, c.reason) {
			t.Errorf("attach_open %+v: reason %q, want %q", c, f.Reason, c.reason)
		}
	}
	if cl := h.tmuxClients(); cl != "" {
		t.Fatalf("a refused attach left a client: %q", cl)
	}

	from := orch.mark()
	open(relay1, runA, "pam-0a0a0a0a", 30, 100)
	open(relay2, runB, "pam-0b0b0b0b", 24, 80)
	output := func(id string) string {
		orch.mu.Lock()
		defer orch.mu.Unlock()
		var b strings.Builder
		for _, f := range orch.frames[from:] {
			if f.Type == wire.FrameAttachOutput && f.AttachID == id {
				b.Write(f.Bytes)
			}
		}
		return b.String()
	}
	for _, id := range []string{relay1, relay2} {
		// The status line names the window (the task's slug).
		eventually.Wait(t, eventually.Medium, "the screen on "+id, func() bool { return strings.Contains(output(id), "fix-the-login-bug") })
	}
	eventually.Wait(t, eventually.Medium, "the window to take the relay's size", func() bool { return h.windowWidth("pam-0a0a0a0a") == "100" })
	orch.send(wire.AttachInputFrame{AttachID: relay1, Bytes: []byte("typed-into-a")})
	eventually.Wait(t, eventually.Medium, "the typing in pane A", func() bool {
		out, _ := h.tm.Capture(t.Context(), mustSession(t, "pam-0a0a0a0a"))
		return strings.Contains(out, "typed-into-a")
	})
	eventually.Wait(t, eventually.Medium, "the echo on relay 1", func() bool { return strings.Contains(output(relay1), "typed-into-a") })
	if out, _ := h.tm.Capture(t.Context(), mustSession(t, "pam-0b0b0b0b")); strings.Contains(out, "typed-into-a") {
		t.Fatal("relay 1's input reached run B")
	}
	orch.send(wire.AttachResizeFrame{AttachID: relay1, Rows: 40, Cols: 120})
	eventually.Wait(t, eventually.Medium, "the window to follow a resize", func() bool { return h.windowWidth("pam-0a0a0a0a") == "120" })

	// attach_close tears down that relay only.
	from = orch.mark()
	orch.send(wire.AttachCloseFrame{AttachID: relay1})
	f, _ := orch.wait(from, "attach_closed of relay 1", isRelay(wire.FrameAttachClosed, relay1))
	if !strings.Contains(f.Reason, "orchestrator") {
		t.Errorf("close reason %q", f.Reason)
	}
	eventually.Wait(t, eventually.Medium, "one client left", func() bool { return h.tmuxClients() == "pam-0b0b0b0b" })

	// The uplink drops: relay 2 goes with it; both sessions stay.
	orch.drop()
	eventually.Wait(t, eventually.Medium, "no clients left", func() bool { return h.tmuxClients() == "" })
	for _, id := range []string{runA, runB} {
		if _, ok := h.session(id); !ok {
			t.Fatalf("session of %s ended with its relay", id)
		}
	}
	// Frames for relays that are gone are ignored (send waits for the
	// worker's next uplink).
	orch.send(wire.AttachInputFrame{AttachID: relay2, Bytes: []byte("late")})
	orch.send(wire.AttachResizeFrame{AttachID: relay2, Rows: 10, Cols: 10})
	orch.send(wire.AttachCloseFrame{AttachID: relay2})
}

func mustSession(t testing.TB, s string) tmux.SessionName {
	t.Helper()
	n, err := tmux.ParseSessionName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
