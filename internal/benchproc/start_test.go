package benchproc

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pam/internal/procfs"
)

// A started process is waited on for its listening line, stopped, and
// reaped; a second one appending to the same log waits for its own line,
// not the first's; one that exits first fails the wait with its output.
func TestStartListenStop(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "serve.out")
	ctx := context.Background()
	first, err := Start("serve", "sh", dir, log, nil, "-c", "echo pam serve listening on http://127.0.0.1:1; exec sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	url, err := first.WaitListening(ctx, time.Minute)
	if err != nil || url != "http://127.0.0.1:1" {
		t.Fatalf("first: %q, %v", url, err)
	}
	first.Stop(10 * time.Second)
	if !first.Exited() || procfs.Alive(first.PID()) {
		t.Fatalf("first not ended: %s", first.State())
	}

	second, err := Start("serve", "sh", dir, log, nil, "-c", "echo starting; exec sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop(10 * time.Second)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if url, err := second.WaitListening(short, time.Minute); err == nil {
		t.Fatalf("second listened on %q before saying so (the first's line?)", url)
	}
	if out := second.Output(); out != "starting\n" {
		t.Errorf("second's output %q", out)
	}

	gone, err := Start("serve", "sh", dir, filepath.Join(dir, "gone.out"), nil, "-c", "echo no database; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.WaitListening(ctx, time.Minute); err == nil || !strings.Contains(err.Error(), "no database") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("exit before listening: %v", err)
	}
}
