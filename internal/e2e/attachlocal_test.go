package e2e

import (
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// TestAttachLocal: on the worker host of a run under the pty executor,
// `pam run attach --local` reads the run's holder directly, several
// terminals at once. A read-only one cannot type; --write takes the
// run's attach lease first (a second --write is refused lease_held), and
// what it types reaches the program and every reader.
func TestAttachLocal(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	data, _ := s.worker("local-host", "PAM_EXECUTOR=pty")
	task := s.task()
	var r wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell",
		"prompt": "echo local-ready; exec cat"}, &r)
	s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
	env := "PAM_DATA_DIR=" + data

	a := s.cliAttachArgs(t, []string{"run", "attach", "--local", r.ID[:8]}, env)
	b := s.cliAttachArgs(t, []string{"run", "attach", "--local", r.ID}, env)
	a.waitOutput("read-only")
	b.waitOutput("read-only")
	eventually.Wait(t, eventually.Medium, "raw mode", func() bool { return a.mode().Lflag&0o2 == 0 })
	if _, err := a.master.Write([]byte("from-a-readonly\r")); err != nil {
		t.Fatal(err)
	}

	w := s.cliAttachArgs(t, []string{"run", "attach", "--local", "--write", r.ID}, env)
	w.waitOutput("under the run's lease")
	second := s.cliAttachArgs(t, []string{"run", "attach", "--local", "--write", r.ID}, env)
	select {
	case <-second.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("a second --write did not end")
	}
	if code := second.cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("a second --write: exit %d, %q; want refused, the lease held", code, tail(second.out.String(), 300))
	}
	second.waitOutput("held by")
	eventually.Wait(t, eventually.Medium, "raw mode", func() bool { return w.mode().Lflag&0o2 == 0 })
	if _, err := w.master.Write([]byte("typed-locally\r")); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*cliAttach{a, b, w} {
		x.waitOutput("typed-locally")
	}
	var p wire.Pane
	eventually.Wait(t, eventually.Medium, "the pane to show the typed line", func() bool {
		s.must(200, "GET", "/api/v1/runs/"+r.ID+"/pane", nil, &p)
		return strings.Contains(p.Capture, "typed-locally")
	})
	if strings.Contains(p.Capture, "from-a-readonly") {
		t.Fatalf("a read-only local terminal typed into the run: %q", p.Capture)
	}
	// Detaching leaves the run running.
	for _, x := range []*cliAttach{a, b, w} {
		if _, err := x.master.Write([]byte{0x1c}); err != nil {
			t.Fatal(err)
		}
		x.ended(0, "detached")
	}
	s.must(200, "GET", "/api/v1/runs/"+r.ID, nil, &r)
	if r.Status != "running" {
		t.Fatalf("run %s after the local terminals left", r.Status)
	}
}
