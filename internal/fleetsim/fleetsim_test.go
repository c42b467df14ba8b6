package fleetsim_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/fleetsim"
	"pam/internal/pamtest"
)

// TestMain fails the package when a goroutine outlives its tests: Run
// must stop every simulated worker and its connections.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pamtest.M(m)) }

// A small fleet of real workers on fake sessions through every phase
// against a real serve: all hosts connect, every run is dispatched once
// and starts, placement spreads over equal hosts, screens are uplinked,
// the fleet comes back after a serve restart, and every run ends exited 0
// on the host that ran it.
func TestSmallFleet(t *testing.T) {
	pamtest.Require(t, "postgres")
	if testing.Short() {
		t.Skip("runs pam serve")
	}
	res, err := fleetsim.Run(t.Context(), fleetsim.Options{
		Pam: pamtest.Pam(t), Environ: os.Environ(), Workers: 20, RunsPerWorker: 2,
		// Short intervals, so that a short hold judges the heartbeat rate
		// and every worker reconciles during it.
		HeartbeatInterval: 500 * time.Millisecond, ReconcileInterval: time.Second, SnapshotInterval: 500 * time.Millisecond,
		Hold: 4 * time.Second, Timeout: 3 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.HostsConnected != 20 {
		t.Errorf("%d of 20 hosts connected", res.HostsConnected)
	}
	if res.SpreadMin != 1 || res.SpreadMax != 1 {
		t.Errorf("20 runs on 20 equal hosts spread %d..%d per host, want 1 each", res.SpreadMin, res.SpreadMax)
	}
	if !res.Restarted || res.SettleHosts != 20 || res.Settle >= time.Minute {
		t.Errorf("reconnect storm: restarted %v, %d of 20 back in %s", res.Restarted, res.SettleHosts, res.Settle)
	}
	if res.Lost != 0 || res.Duplicates != 0 {
		t.Errorf("%d runs lost, %d duplicated", res.Lost, res.Duplicates)
	}
	if len(res.DispatchLatency) != 40 {
		t.Errorf("%d dispatch latencies, want one per run (40)", len(res.DispatchLatency))
	}
	if res.HeartbeatRate < 0.9*res.HeartbeatOffered {
		t.Errorf("%.1f heartbeats/s acked of %.1f offered", res.HeartbeatRate, res.HeartbeatOffered)
	}
	if res.SnapshotsSent < 40 {
		t.Errorf("%d snapshots sent, want at least one per run (40)", res.SnapshotsSent)
	}
	// Uplinks go down in the restart, and the workers say what failed
	// meanwhile; a signal whose answer was lost on a busy machine is
	// posted again and answered duplicate. Nothing else may go wrong.
	for k, v := range res.Anomalies {
		if k != "uplink down" && !strings.HasPrefix(k, "while serve restarted: ") && !strings.HasSuffix(k, "(retried after a lost answer)") {
			t.Errorf("%s: %d", k, v)
		}
	}
	if len(res.Errors) > 0 {
		t.Errorf("errors: %s", strings.Join(res.Errors, "; "))
	}
	for _, r := range res.Rows() {
		if r.Met != nil && !*r.Met {
			t.Errorf("goal not met: %s = %v %s (%s): %s", r.Stat, r.Value, r.Unit, r.Goal, r.Note)
		}
	}
}

// Rows have the shape the make bench table reads (one object per figure,
// every key present, null where there is nothing to say).
func TestRowsShape(t *testing.T) {
	res := &fleetsim.Result{Reached: fleetsim.PhaseVerified, Workers: 2, RunsPerWorker: 1, Runs: 2, HostsConnected: 2, SpreadMin: 1, SpreadMax: 1,
		HeartbeatInterval: time.Second, Hold: 2 * time.Second, Restarted: true, Settle: 3 * time.Second, SettleHosts: 2,
		DispatchLatency: []time.Duration{time.Millisecond, 3 * time.Millisecond}}
	b, err := json.Marshal(map[string]any{"figures": res.Rows()})
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Figures []map[string]any }
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	want := []string{"baseline", "baseline_name", "figure", "goal", "met", "note", "samples", "stat", "unit", "value"}
	var stats []string
	for _, row := range out.Figures {
		var keys []string
		for k := range row {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			t.Errorf("row keys %v, want %v", keys, want)
		}
		if row["figure"] != fleetsim.Figure {
			t.Errorf("figure %v", row["figure"])
		}
		stats = append(stats, row["stat"].(string))
	}
	for _, s := range []string{"hosts held", "heartbeats", "dispatch rate", "dispatch spread", "reconnect storm settle", "runs lost", "runs duplicated"} {
		if !slices.Contains(stats, s) {
			t.Errorf("no %q row in %v", s, stats)
		}
	}
	// A simulation that stopped early reports only what it measured.
	res.Reached = fleetsim.PhaseConnected
	for _, r := range res.Rows() {
		if r.Stat == "dispatch rate" || r.Stat == "runs lost" || r.Stat == "heartbeats" {
			t.Errorf("row %q of a simulation that never dispatched", r.Stat)
		}
	}
	if p := fleetsim.Percentile(res.DispatchLatency, 0.99); p != 3*time.Millisecond {
		t.Errorf("p99 of 1ms, 3ms = %s", p)
	}
}
