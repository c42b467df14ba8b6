package loadtest_test

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/benchtable"
	"pam/internal/loadtest"
	"pam/internal/pamtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pamtest.M(m)) }

// A small load, as `pam-bench load` drives it, against real processes
// (serve with its embedded database, a worker, tmux or PTY holders):
// every figure is reported, the dispatch and SSE rows have samples behind them, every
// subscriber saw every event exactly once — and nothing the driver
// started is left once it exits: its folder is gone and no process names
// it.
func TestBenchLoadSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pam and drives a load for seconds")
	}
	if os.Getenv("PAM_EXECUTOR") != "pty" {
		pamtest.Require(t, "tmux")
	}
	pamtest.Require(t, "postgres")
	tmp := pamtest.ShortDir(t, "pamlt-")
	// The processes start from the harness's environment (race reports,
	// coverage), with their temporary files in tmp too.
	harness := pamtest.Command(t)
	executor := os.Getenv("PAM_EXECUTOR")
	if executor == "" {
		executor = "tmux"
	}
	var log strings.Builder
	res, err := loadtest.Run(t.Context(), loadtest.Options{Pam: harness.Path, Environ: append(harness.Env, "TMPDIR="+tmp),
		Executor: executor, Runs: 5, Subscribers: 5, Viewers: 2, Duration: 3 * time.Second, CachedRuns: 20,
		EventRate: 100, DispatchRate: 20, Dir: tmp, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatalf("load: %v\nlog:\n%s", err, log.String())
	}
	out, _ := json.MarshalIndent(benchtable.Report{Figures: res.Rows}, "", "  ")
	var rep benchtable.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("not a report: %v\n%s", err, out)
	}
	rows := map[string]benchtable.Row{}
	for _, r := range rep.Figures {
		rows[r.Figure+": "+r.Stat] = r
	}
	for _, name := range []string{
		"dispatch latency under load: p50", "dispatch latency under load: p99",
		"SSE delivery under load: p99", "SSE events written under load: events/s",
		"SSE events lost: ", "SSE events duplicated or out of order: ",
		"pane snapshot to viewer under load: p99", "serve RSS: peak under load", "worker RSS: 5 sessions",
		"CPU under load: serve", "CPU under load: PostgreSQL", "CPU under load: worker",
	} {
		if _, ok := rows[name]; !ok {
			t.Errorf("no row %q in\n%s", name, out)
		}
	}
	for _, name := range []string{"dispatch latency under load: p99", "SSE delivery under load: p99", "SSE events lost: "} {
		if r := rows[name]; r.Samples <= 0 {
			t.Errorf("%s: %d samples", name, r.Samples)
		}
	}
	if r := rows["dispatch latency under load: p99"]; r.Value <= 0 || r.Baseline == nil || *r.Baseline <= 0 || r.BaselineName != "idle" {
		t.Errorf("dispatch p99 %v, baseline %v %q", r.Value, r.Baseline, r.BaselineName)
	}
	for _, name := range []string{"SSE events lost: ", "SSE events duplicated or out of order: "} {
		if r := rows[name]; r.Value != 0 || r.Met == nil || !*r.Met {
			t.Errorf("%s: %v (met %v): %s", name, r.Value, r.Met, r.Note)
		}
	}
	if r := rows["serve RSS: peak under load"]; r.Value < 5 || r.Met != nil {
		t.Errorf("serve RSS %v MiB, met %v: a small load is measured, not judged", r.Value, r.Met)
	}
	if !res.Clean() || !strings.Contains(res.Summary(), "0 lost, 0 duplicate, 0 out of order") {
		t.Errorf("the summary does not state the check: %s", res.Summary())
	}

	left, _ := os.ReadDir(tmp)
	for _, e := range left {
		t.Errorf("left behind in %s: %s", tmp, e.Name())
	}
	// The database names the folder on its command line, the tmux server
	// and the sessions' processes in their environment (TMUX_TMPDIR).
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		environ, _ := os.ReadFile(filepath.Join(p, "environ"))
		if strings.Contains(string(cmdline), tmp) || strings.Contains(string(environ), tmp) {
			t.Errorf("process %s still names the load's folder: %s", filepath.Base(p), strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
}
