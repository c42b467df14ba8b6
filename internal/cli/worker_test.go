package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pam/internal/worker"
)

// captureWorker makes worker.Run in e a stub that records the Options the
// last command line resolved to, and returns where they land.
func captureWorker(e *testEnv) *worker.Options {
	var got worker.Options
	e.worker = func(ctx context.Context, o worker.Options) error { got = o; return nil }
	return &got
}

func TestWorkerNeedsToken(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	dir := e.dir
	got := captureWorker(e)
	r := e.pam("worker")
	if r.code != 1 || !strings.Contains(r.stderr, "no worker token") || !strings.Contains(r.stderr, filepath.Join(dir, "worker", "token")) {
		t.Errorf("without a token: %v", r)
	}
	if got.Token != "" {
		t.Error("the worker ran")
	}
}

func TestWorkerOptions(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	dir := e.dir
	got := captureWorker(e)
	// The token file is the fallback; the variable wins over it.
	os.MkdirAll(filepath.Join(dir, "worker"), 0o700)
	os.WriteFile(filepath.Join(dir, "worker", "token"), []byte("file-token\n"), 0o600)
	e.setenv("PAM_URL", "http://orch.example:7898")
	e.setenv("PAM_ALLOW_INSECURE", "1")
	e.setenv("PAM_MAX_RUNS", "3")
	if r := e.pam("worker", "--stop-grace", "2s", "--host-name", "h1", "--config-dir", t.TempDir()); r.code != 0 {
		t.Fatal(r)
	}
	if got.Token != "file-token" || got.URL != "http://orch.example:7898" || got.MaxRuns != 3 || got.StopGrace != 2*time.Second ||
		got.HostName != "h1" || got.DataDir != dir || got.Executor != "tmux" || got.HeartbeatInterval != 30*time.Second ||
		got.CaptureInterval != time.Second || got.IdleAfter != 30*time.Second || got.LivenessInterval != 10*time.Second ||
		!filepath.IsAbs(got.PamBinary) || got.Providers == nil || got.Reconcile == nil || got.Logger == nil ||
		got.ReconcileInterval != 30*time.Second || got.OrphanHold != time.Hour || got.HoldOpen != 5*time.Minute {
		t.Errorf("options = %+v", *got)
	}
	e.setenv("PAM_WORKER_TOKEN", "env-token")
	if r := e.pam("worker"); r.code != 0 || got.Token != "env-token" {
		t.Errorf("env token: %v %q", r, got.Token)
	}
	if r := e.pam("worker", "--executor", "nope"); r.code != 2 {
		t.Errorf("bad executor: %v", r)
	}
	if r := e.pam("worker", "--url", "ftp://x"); r.code != 2 {
		t.Errorf("bad url: %v", r)
	}
}

// PAM_PASS_ENV adds to each provider's pass_env, and the values come from
// the worker's own environment, set or not; a PAM_* name or a non-name
// stops the worker from starting.
func TestWorkerPassEnv(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	got := captureWorker(e)
	e.setenv("PAM_WORKER_TOKEN", "env-token")
	e.setenv("ANTHROPIC_API_KEY", "sk-ant")
	e.setenv("CORP_TOKEN", "corp")
	e.setenv("OPENAI_API_KEY", "sk-oai") // codex's, not claude's
	e.setenv("PAM_PASS_ENV", "CORP_TOKEN, NOT_SET")
	if r := e.pam("worker", "--config-dir", t.TempDir()); r.code != 0 {
		t.Fatal(r)
	}
	if got.PassEnv == nil {
		t.Fatal("no PassEnv")
	}
	want := map[string]string{"ANTHROPIC_API_KEY": "sk-ant", "CORP_TOKEN": "corp"}
	if p := got.PassEnv("claude"); len(p) != len(want) || p["ANTHROPIC_API_KEY"] != "sk-ant" || p["CORP_TOKEN"] != "corp" {
		t.Errorf("claude gets %v, want %v", p, want)
	}
	if p := got.PassEnv("shell"); len(p) != 1 || p["CORP_TOKEN"] != "corp" {
		t.Errorf("shell gets %v, want CORP_TOKEN alone", p)
	}
	for _, bad := range []string{"PAM_WORKER_TOKEN", "A-B"} {
		r := e.pam("worker", "--pass-env", bad)
		if r.code != 2 || !strings.Contains(r.stderr, "PAM_PASS_ENV") || !strings.Contains(r.stderr, bad) {
			t.Errorf("--pass-env %s: %v", bad, r)
		}
	}
}

// The operator token does not belong on a worker host: every agent there
// runs as the worker's uid. pam worker still starts, but warns — in its
// log and in a plain line on stderr — when PAM_TOKEN is in its
// environment or a token file is in its data dir, and says nothing when
// neither is.
func TestWorkerWarnsOperatorToken(t *testing.T) {
	t.Parallel()
	const warning = "pam worker: warning: the operator token is on this worker host"
	e := isolate(t)
	got := captureWorker(e)
	e.setenv("PAM_WORKER_TOKEN", "env-token")
	cfg := t.TempDir()
	if r := e.pam("worker", "--config-dir", cfg); r.code != 0 || strings.Contains(r.stderr, "operator token") {
		t.Fatalf("without an operator token: %v", r)
	}
	e.setenv("PAM_TOKEN", testToken)
	r := e.pam("worker", "--config-dir", cfg)
	if r.code != 0 || got.Token != "env-token" || !strings.Contains(r.stderr, warning) || !strings.Contains(r.stderr, "PAM_TOKEN") ||
		!strings.Contains(r.stderr, "level=WARN") || !strings.Contains(r.stderr, "README") || strings.Contains(r.stderr, testToken) {
		t.Fatalf("with PAM_TOKEN set: %v", r)
	}
	e.setenv("PAM_TOKEN", "")
	writeToken(t, e.dir, testToken)
	r = e.pam("worker", "--config-dir", cfg)
	if r.code != 0 || !strings.Contains(r.stderr, warning) || !strings.Contains(r.stderr, filepath.Join(e.dir, "token")) || strings.Contains(r.stderr, testToken) {
		t.Fatalf("with a token file in the data dir: %v", r)
	}
}

// Plain http:// to another machine would carry the worker's and the
// operator's tokens in clear: the worker and the CLI refuse it (a usage
// error naming PAM_ALLOW_INSECURE) unless PAM_ALLOW_INSECURE is set;
// https:// anywhere and http:// to this machine are fine.
func TestPlainHTTPRefused(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	got := captureWorker(e)
	e.setenv("PAM_WORKER_TOKEN", "env-token")
	cfg := t.TempDir()
	for _, u := range []string{"http://10.1.2.3:7898", "http://orch.example:7898", "http://[2001:db8::1]:7898"} {
		r := e.pam("worker", "--config-dir", cfg, "--url", u)
		if r.code != 2 || !strings.Contains(r.stderr, "PAM_ALLOW_INSECURE") || got.Token != "" {
			t.Fatalf("worker to %s: %v", u, r)
		}
		r = e.pam("project", "list", "--url", u)
		if r.code != 2 || !strings.Contains(r.stderr, "PAM_ALLOW_INSECURE") {
			t.Fatalf("CLI to %s: %v", u, r)
		}
	}
	for _, u := range []string{"https://orch.example:7898", "http://127.0.0.1:7898", "http://localhost:7898", "http://[::1]:7898"} {
		if r := e.pam("worker", "--config-dir", cfg, "--url", u); r.code != 0 || got.URL != u {
			t.Fatalf("worker to %s: %v", u, r)
		}
	}
	e.setenv("PAM_ALLOW_INSECURE", "true")
	if r := e.pam("worker", "--config-dir", cfg, "--url", "http://10.1.2.3:7898"); r.code != 0 || got.URL != "http://10.1.2.3:7898" {
		t.Fatalf("worker with PAM_ALLOW_INSECURE: %v", r)
	}
	e.setenv("PAM_ALLOW_INSECURE", "")
	if r := e.pam("worker", "--config-dir", cfg, "--url", "http://10.1.2.4:7898", "--allow-insecure"); r.code != 0 || got.URL != "http://10.1.2.4:7898" {
		t.Fatalf("worker with --allow-insecure: %v", r)
	}
}
