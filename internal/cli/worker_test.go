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

// captureWorker replaces runWorker for one test and returns where the
// resolved Options land.
func captureWorker(t *testing.T) *worker.Options {
	t.Helper()
	var got worker.Options
	old := runWorker
	runWorker = func(ctx context.Context, o worker.Options) error { got = o; return nil }
	t.Cleanup(func() { runWorker = old })
	return &got
}

func TestWorkerNeedsToken(t *testing.T) {
	dir := isolate(t)
	got := captureWorker(t)
	r := pam(t, "worker")
	if r.code != 1 || !strings.Contains(r.stderr, "no worker token") || !strings.Contains(r.stderr, filepath.Join(dir, "worker", "token")) {
		t.Errorf("without a token: %v", r)
	}
	if got.Token != "" {
		t.Error("the worker ran")
	}
}

func TestWorkerOptions(t *testing.T) {
	dir := isolate(t)
	got := captureWorker(t)
	// The token file is the fallback; the variable wins over it.
	os.MkdirAll(filepath.Join(dir, "worker"), 0o700)
	os.WriteFile(filepath.Join(dir, "worker", "token"), []byte("file-token\n"), 0o600)
	t.Setenv("PAM_URL", "http://orch.example:7898")
	t.Setenv("PAM_MAX_RUNS", "3")
	if r := pam(t, "worker", "--stop-grace", "2s", "--host-name", "h1", "--config-dir", t.TempDir()); r.code != 0 {
		t.Fatal(r)
	}
	if got.Token != "file-token" || got.URL != "http://orch.example:7898" || got.MaxRuns != 3 || got.StopGrace != 2*time.Second ||
		got.HostName != "h1" || got.DataDir != dir || got.Executor != "tmux" || got.HeartbeatInterval != 30*time.Second ||
		got.CaptureInterval != time.Second || got.IdleAfter != 30*time.Second || got.LivenessInterval != 10*time.Second ||
		!filepath.IsAbs(got.PamBinary) || got.Providers == nil || got.Reconcile == nil || got.Logger == nil ||
		got.ReconcileInterval != 30*time.Second || got.OrphanHold != time.Hour || got.HoldOpen != 5*time.Minute {
		t.Errorf("options = %+v", *got)
	}
	t.Setenv("PAM_WORKER_TOKEN", "env-token")
	if r := pam(t, "worker"); r.code != 0 || got.Token != "env-token" {
		t.Errorf("env token: %v %q", r, got.Token)
	}
	if r := pam(t, "worker", "--executor", "nope"); r.code != 2 {
		t.Errorf("bad executor: %v", r)
	}
	if r := pam(t, "worker", "--url", "ftp://x"); r.code != 2 {
		t.Errorf("bad url: %v", r)
	}
}
