package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/tmux"
	"pam/internal/wire"
)

// TestPTYExecutor drives a session through the pty executor with the
// real pam binary as its holder: the session is listed with its run,
// attempt and instance; Capture renders the screen model with colour;
// keys and an attach reach the program; the stop ladder ends it.
func TestPTYExecutor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pam")
	}
	pam := pamtest.Pam(t)
	e := newPTYExecutor(Options{PamBinary: pam}, filepath.Join(t.TempDir(), "worker"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	name := mustSession(t, "pam-"+runA[:8])
	const instance = "5e5e5e5e-1111-4111-8111-111111111111"
	err := e.NewSession(t.Context(), tmux.Spawn{Name: name, Cwd: t.TempDir(), RunID: runA, Attempt: 2, Instance: instance,
		Command: []string{"/bin/sh", "-c", `printf '\033[31mred-text\033[0m ready\n'; exec cat`}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.KillSession(t.Context(), name) })
	list, err := e.ListSessions(t.Context())
	if err != nil || len(list) != 1 || list[0].Name != name || list[0].RunID != runA || list[0].Attempt != 2 || list[0].Instance != instance || list[0].PanePID <= 0 {
		t.Fatalf("sessions = %+v, %v", list, err)
	}
	capture := func() string { s, _ := e.Capture(t.Context(), name); return s }
	eventually.Wait(t, 10*time.Second, "the coloured text in the capture", func() bool {
		c := capture()
		return strings.Contains(c, "red-text") && strings.Contains(c, "31m")
	})
	if err := e.SendKeys(t.Context(), name, []wire.Key{{Text: "typed-keys"}, {Key: "Enter"}}); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, 10*time.Second, "the typed keys echoed", func() bool { return strings.Count(capture(), "typed-keys") >= 2 })

	a, err := e.Attach(name, 30, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("from-attach\r")); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		var b strings.Builder
		buf := make([]byte, 4096)
		for !strings.Contains(b.String(), "from-attach") {
			n, err := a.Read(buf)
			if err != nil {
				break
			}
			b.Write(buf[:n])
		}
		got <- b.String()
	}()
	select {
	case s := <-got:
		if !strings.Contains(s, "from-attach") {
			t.Fatalf("attach output: %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no echo through the attach")
	}
	a.Close()
	eventually.Wait(t, 10*time.Second, "the model to follow the attach's size", func() bool {
		sc, err := e.screen(name.String(), true)
		if err != nil {
			return false
		}
		sc.mu.Lock()
		defer sc.mu.Unlock()
		return sc.term.Width() == 100 && sc.term.Height() == 30
	})

	if err := e.Stop(t.Context(), name, 5*time.Second, false); err != nil {
		t.Fatal(err)
	}
	if list, _ := e.ListSessions(t.Context()); len(list) != 0 {
		t.Fatalf("sessions after stop = %+v", list)
	}
	if _, err := e.Capture(t.Context(), name); err == nil || !isGone(err) {
		t.Fatalf("capture after stop: %v, want ErrNoSession", err)
	}
	eventually.Wait(t, 10*time.Second, "the screen readers to end", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.screens) == 0
	})
	// The holder ends after its socket closes; holder.Start reaps it.
	eventually.Wait(t, 10*time.Second, "the holder to be reaped", func() bool { return goleak.Find() == nil })
}

// A name a live holder has is tmux.ErrSessionExists, as with tmux: the
// spawn then stops the earlier incarnation and creates again.
func TestPTYExecutorNameTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pam")
	}
	pam := pamtest.Pam(t)
	e := newPTYExecutor(Options{PamBinary: pam}, filepath.Join(t.TempDir(), "worker"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	name := mustSession(t, "pam-"+runA[:8])
	const instance = "5e5e5e5e-1111-4111-8111-111111111111"
	sp := tmux.Spawn{Name: name, Cwd: t.TempDir(), RunID: runA, Attempt: 1, Instance: instance, Command: []string{"/bin/sleep", "300"}}
	if err := e.NewSession(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.KillSession(context.Background(), name) })
	sp.Attempt = 2
	if err := e.NewSession(t.Context(), sp); !errors.Is(err, tmux.ErrSessionExists) {
		t.Fatalf("a second session of the name: %v, want ErrSessionExists", err)
	}
	if err := e.Stop(t.Context(), name, time.Second, true); err != nil {
		t.Fatal(err)
	}
	if err := e.NewSession(t.Context(), sp); err != nil {
		t.Fatalf("after the stop: %v", err)
	}
	if list, err := e.ListSessions(t.Context()); err != nil || len(list) != 1 || list[0].Attempt != 2 {
		t.Fatalf("sessions = %+v, %v", list, err)
	}
	if err := e.Stop(t.Context(), name, time.Second, true); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, 10*time.Second, "the holders to be reaped", func() bool { return goleak.Find() == nil })
}
