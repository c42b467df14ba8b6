package worker

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// TestMain fails the package when a goroutine outlives its tests: Run's
// loops, the spawn and stop operations and the attach relays must all
// have ended when Run returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pamtest.M(m)) }

// The whole chain on one host with the real wrapper: the worker writes
// the dispatch file, tmux runs `pam exec run`, the wrapper finds the
// dispatch through --data-dir, runs the provider and posts its signals
// with the run's signal token.
func TestRealWrapper(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds pam")
	}
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.PamBinary = pamtest.Pam(t)
	h.opts.ConfigDir = t.TempDir() // built-in providers only
	h.start()
	orch.wait(0, "a heartbeat", isType(wire.FrameHeartbeat, ""))
	f := h.dispatchFrame(runA, 1)
	f.Prompt = "echo hello-from-$((6*7))"
	from := orch.mark()
	orch.send(f)
	orch.wait(from, "the provider's output in a snapshot", func(f wiretest.Frame) bool {
		return f.Type == wire.FrameSnapshot && f.RunID == runA && strings.Contains(f.Capture, "hello-from-42")
	})
	eventually.Wait(t, 15*time.Second, "started and finished signals", func() bool {
		orch.mu.Lock()
		defer orch.mu.Unlock()
		kinds := map[string]bool{}
		for _, s := range orch.signals {
			if s.RunID == runA && s.Auth == "Bearer "+f.SignalToken && s.Body.Attempt != nil && *s.Body.Attempt == 1 {
				kinds[s.Body.Kind] = true
			}
		}
		return kinds[wire.SignalStarted] && kinds[wire.SignalFinished]
	})
	// The wrapper holds the session open; a stop ends it.
	if _, ok := h.session(runA); !ok {
		t.Fatal("the session did not stay open after the CLI exited")
	}
	orch.send(wire.RunStopFrame{RunID: runA, Attempt: wire.IntPtr(1)})
	eventually.Wait(t, 15*time.Second, "the session to go", func() bool { _, ok := h.session(runA); return !ok })
}
