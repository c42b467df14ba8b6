package server_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pam/internal/wire"
)

// TestRegisterProtocolMismatch: serve refuses a worker that claims
// another uplink protocol version (older or newer, or none) with 400
// protocol_mismatch naming both versions and listing the ones it speaks;
// the host stays as it was, and the same worker registers once it
// claims this build's version. The worker's side, and a serve that
// answers another version, are in internal/worker (TestProtocolMismatch).
func TestRegisterProtocolMismatch(t *testing.T) {
	e := newRunEnv(t, runOpts{})
	var created wire.HostCreated
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": "old-worker", "max_runs": 1}, &created)
	reg := wire.Register{HostName: "old-worker", Platform: "linux", InstanceID: "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f",
		Providers: []string{"shell"}, Executor: "tmux", MaxRuns: 1}
	for _, claimed := range []int{wire.UplinkProtocol + 1, wire.UplinkProtocol - 1, 99} {
		reg.Protocol = claimed
		code, body := e.callAs(created.WorkerToken, "POST", "/api/internal/worker/register", reg)
		var env struct {
			Error struct {
				Code    string         `json:"code"`
				Message string         `json:"message"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &env); err != nil || code != 400 || env.Error.Code != wire.CodeProtocolMismatch {
			t.Fatalf("protocol %d: %d %s, want 400 protocol_mismatch", claimed, code, body)
		}
		msg := env.Error.Message
		if !strings.Contains(msg, "protocol 1,") || !strings.Contains(msg, "the worker "+strconv.Itoa(claimed)) {
			t.Errorf("protocol %d: message %q does not name both versions", claimed, msg)
		}
		if ps, _ := env.Error.Details["protocols"].([]any); !slices.Equal(ps, []any{float64(wire.UplinkProtocol)}) {
			t.Errorf("protocol %d: details %v, want protocols [%d]", claimed, env.Error.Details, wire.UplinkProtocol)
		}
	}
	var h wire.Host
	e.must(200, "GET", "/api/v1/hosts/"+created.Host.ID, nil, &h)
	if h.Status != created.Host.Status {
		t.Errorf("refused registrations changed the host: %s, was %s", h.Status, created.Host.Status)
	}
	reg.Protocol = wire.UplinkProtocol
	if code, body := e.callAs(created.WorkerToken, "POST", "/api/internal/worker/register", reg); code != 200 {
		t.Fatalf("register with protocol %d: %d %s", wire.UplinkProtocol, code, body)
	}
}
