package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pam/internal/benchtable"
)

// result is what one pam-bench invocation did.
type result struct {
	code           int
	stdout, stderr string
}

// bench runs pam-bench in this process with stdin and the environment
// vars (NAME=VALUE) on top of none.
func bench(t *testing.T, stdin string, vars []string, args ...string) result {
	t.Helper()
	var out, errb strings.Builder
	e := env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, environ: vars,
		getenv: func(k string) string {
			for _, kv := range vars {
				if name, v, ok := strings.Cut(kv, "="); ok && name == k {
					return v
				}
			}
			return ""
		}}
	code := run(context.Background(), args, e)
	return result{code, out.String(), errb.String()}
}

// pam-bench load refuses a load it cannot drive before starting
// anything, as a usage error; PAM_EXECUTOR is its default executor.
func TestBenchLoadUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--runs", "0"}, "runs 0"},
		{[]string{"--runs", "5000"}, "runs 5000"},
		{[]string{"--duration", "10ms"}, "duration"},
		{[]string{"--executor", "docker"}, `executor "docker"`},
		{[]string{"--subscribers", "0"}, "subscriber"},
		{[]string{"--runs", "x"}, "invalid value"},
		{[]string{"extra"}, "no arguments"},
	} {
		r := bench(t, "", nil, append([]string{"load"}, tt.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, "Usage: pam-bench load") {
			t.Errorf("pam-bench load %s: %+v; want exit 2 naming %q", strings.Join(tt.args, " "), r, tt.want)
		}
	}
	if r := bench(t, "", []string{"PAM_EXECUTOR=podman"}, "load"); r.code != 2 || !strings.Contains(r.stderr, `executor "podman"`) {
		t.Errorf("PAM_EXECUTOR=podman: %+v", r)
	}
	if r := bench(t, "", nil, "load", "--pam", filepath.Join(t.TempDir(), "nopam"), "--runs", "1", "--duration", "1s", "--cached-runs", "1"); r.code != 1 || !strings.Contains(r.stderr, "nopam") {
		t.Errorf("a --pam that is not there: %+v", r)
	}
}

// pam-bench names its commands, and refuses one it does not have.
func TestBenchUsage(t *testing.T) {
	t.Parallel()
	r := bench(t, "", nil, "--help")
	for _, c := range []string{"load", "fleet", "table"} {
		if r.code != 0 || !strings.Contains(r.stdout, "\n  "+c+" ") {
			t.Errorf("pam-bench --help lacks %s: %+v", c, r)
		}
	}
	if r := bench(t, "", nil); r.code != 2 || !strings.Contains(r.stderr, "Usage: pam-bench") {
		t.Errorf("pam-bench: %+v", r)
	}
	if r := bench(t, "", nil, "serve"); r.code != 2 || !strings.Contains(r.stderr, `unknown command "serve"`) {
		t.Errorf("pam-bench serve: %+v", r)
	}
	if r := bench(t, "", nil, "fleet", "--workers", "0"); r.code != 2 || !strings.Contains(r.stderr, "--workers") {
		t.Errorf("pam-bench fleet --workers 0: %+v", r)
	}
	if r := bench(t, "", nil, "fleet", "--help"); r.code != 0 || !strings.Contains(r.stdout, "-runs-per-worker") {
		t.Errorf("pam-bench fleet --help: %+v", r)
	}
}

// pam-bench table reads go test -bench output on stdin and reports named
// by their files; a report that cannot be read and a driver given as
// --skipped are listed as not run, with why.
func TestBenchTable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	load := filepath.Join(dir, "load.json")
	rep := benchtable.Report{Figures: []benchtable.Row{{Figure: "serve RSS", Stat: "peak under load", Value: 40, Unit: "MiB",
		Goal: "≤ 64 MiB", Met: benchtable.Ptr(true), Samples: 60}}}
	b, _ := json.Marshal(rep)
	if err := os.WriteFile(load, b, 0o644); err != nil {
		t.Fatal(err)
	}
	stdin := "pkg: pam/internal/server\nBenchmarkDispatchLatency-2   \t     400\t   3000000 ns/op\t         2.000 p50-ms\t         6.000 p99-ms\n"
	r := bench(t, stdin, nil, "table", "--benchtime", "3s", load, filepath.Join(dir, "fleet.json"), "--skipped", "pam-bench other=not in this binary")
	if r.code != 0 {
		t.Fatalf("pam-bench table: %+v", r)
	}
	for _, s := range []string{"-benchtime=3s", "dispatch latency, idle: p50", "2.00 ms", "400",
		"[pam-bench load]", "serve RSS: peak under load", "40.0 MiB", "yes",
		"[pam-bench fleet]", "(not run: open ", "[pam-bench other]", "(not run: not in this binary)"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("table lacks %q:\n%s", s, r.stdout)
		}
	}
	if r := bench(t, "", nil, "table", "--skipped", "nameless"); r.code != 2 {
		t.Errorf("--skipped without a reason: %+v", r)
	}
}

// The measuring tool stays out of the product: bin/pam links none of
// its packages.
func TestProductDoesNotLinkBench(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "pam/cmd/pam").Output()
	if err != nil {
		t.Fatalf("go list -deps pam/cmd/pam: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch pkg {
		case "pam/internal/loadtest", "pam/internal/fleetsim", "pam/internal/benchtable", "pam/internal/benchproc", "pam/cmd/pam-bench":
			t.Errorf("bin/pam links %s", pkg)
		}
	}
	if !strings.Contains(string(out), "pam/internal/cli") {
		t.Errorf("go list -deps pam/cmd/pam does not list pam/internal/cli:\n%s", out)
	}
}
