package worker

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// logBuffer collects a worker's log for a test to read while it runs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestProtocolMismatch: a worker and an orchestrator of different uplink
// protocol versions refuse each other at registration, whichever is the
// newer, with protocol_mismatch naming both versions; the worker logs it
// as an error, never opens the uplink, and keeps retrying with backoff
// until one of them is upgraded.
func TestProtocolMismatch(t *testing.T) {
	for _, tc := range []struct {
		name         string
		orch, worker int // 0 is this build's
		wantLog      string
	}{
		// The fake answers as serve does (wire.CheckUplinkProtocol).
		{"the worker speaks another version", 0, wire.UplinkProtocol + 1,
			"protocol_mismatch: this server speaks uplink protocol 1, the worker 2"},
		{"the orchestrator speaks another version", wire.UplinkProtocol + 1, 0,
			"protocol_mismatch: the orchestrator speaks uplink protocol 2, this worker 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orch := newFakeOrch(t)
			orch.protocol = tc.orch
			h := newHarness(t, orch)
			h.opts.Protocol = tc.worker
			var logs logBuffer
			h.opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			h.start()
			eventually.Wait(t, eventually.Medium, "two refused registrations", func() bool { return len(orch.regs()) >= 2 })
			eventually.Wait(t, eventually.Medium, "the mismatch logged as an error", func() bool {
				for _, line := range strings.Split(logs.String(), "\n") {
					if strings.Contains(line, "level=ERROR") && strings.Contains(line, tc.wantLog) {
						return true
					}
				}
				return false
			})
			want := tc.worker
			if want == 0 {
				want = wire.UplinkProtocol
			}
			for _, reg := range orch.regs() {
				if reg.Protocol != want {
					t.Errorf("registered claiming protocol %d, want %d", reg.Protocol, want)
				}
			}
			orch.mu.Lock()
			dials := orch.dials
			orch.mu.Unlock()
			if dials != 0 {
				t.Errorf("the worker opened the uplink %d times across a protocol mismatch", dials)
			}
		})
	}
}
