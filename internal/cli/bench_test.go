package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pam/internal/benchtable"
)

// pam bench load refuses a load it cannot drive before starting
// anything, as a usage error; PAM_EXECUTOR is its default executor.
func TestBenchLoadUsage(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--runs", "0"}, "runs 0"},
		{[]string{"--runs", "5000"}, "runs 5000"},
		{[]string{"--duration", "10ms"}, "duration"},
		{[]string{"--executor", "docker"}, `executor "docker"`},
		{[]string{"--subscribers", "0"}, "subscriber"},
	} {
		r := e.pam(append([]string{"bench", "load"}, tt.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, "Usage: pam bench load") {
			t.Errorf("pam bench load %s: %v; want exit 2 naming %q", strings.Join(tt.args, " "), r, tt.want)
		}
	}
	e.setenv("PAM_EXECUTOR", "podman")
	if r := e.pam("bench", "load"); r.code != 2 || !strings.Contains(r.stderr, `executor "podman"`) {
		t.Errorf("PAM_EXECUTOR=podman: %v", r)
	}
}

// pam bench table reads go test -bench output on stdin and reports named
// by their files; a report that cannot be read and a driver given as
// --skipped are listed as not run, with why.
func TestBenchTable(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	dir := t.TempDir()
	load := filepath.Join(dir, "load.json")
	rep := benchtable.Report{Figures: []benchtable.Row{{Figure: "serve RSS", Stat: "peak under load", Value: 40, Unit: "MiB",
		Goal: "≤ 64 MiB", Met: benchtable.Ptr(true), Samples: 60}}}
	b, _ := json.Marshal(rep)
	if err := os.WriteFile(load, b, 0o644); err != nil {
		t.Fatal(err)
	}
	e.stdin = strings.NewReader("pkg: pam/internal/server\nBenchmarkDispatchLatency-2   \t     400\t   3000000 ns/op\t         2.000 p50-ms\t         6.000 p99-ms\n")
	out := e.mustPam("bench", "table", "--benchtime", "3s", load, filepath.Join(dir, "fleet.json"), "--skipped", "pam bench other=not in this binary")
	for _, s := range []string{"-benchtime=3s", "dispatch latency, idle: p50", "2.00 ms", "400",
		"[pam bench load]", "serve RSS: peak under load", "40.0 MiB", "yes",
		"[pam bench fleet]", "(not run: open ", "[pam bench other]", "(not run: not in this binary)"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	if r := e.pam("bench", "table", "--skipped", "nameless"); r.code != 2 {
		t.Errorf("--skipped without a reason: %v", r)
	}
}
