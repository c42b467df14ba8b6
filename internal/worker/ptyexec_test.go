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
	"pam/internal/holder"
	"pam/internal/pamtest"
	"pam/internal/tmux"
	"pam/internal/wire"
)

// testPTYExecutor is a pty executor whose holders are the real pam
// binary (built for the tests), in a data dir of the test's.
func testPTYExecutor(t *testing.T) *ptyExecutor {
	t.Helper()
	if testing.Short() {
		t.Skip("builds pam")
	}
	return newPTYExecutor(Options{PamBinary: pamtest.Pam(t)}, filepath.Join(t.TempDir(), "worker"), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// TestPTYExecutor drives a session through the pty executor with the
// real pam binary as its holder: the session is listed with its run,
// attempt and instance; Capture renders the screen model with colour;
// keys and an attach reach the program; the stop ladder ends it.
func TestPTYExecutor(t *testing.T) {
	e := testPTYExecutor(t)
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
	eventually.Wait(t, eventually.Medium, "the coloured text in the capture", func() bool {
		c := capture()
		return strings.Contains(c, "red-text") && strings.Contains(c, "31m")
	})
	if err := e.SendKeys(t.Context(), name, []wire.Key{{Text: "typed-keys"}, {Key: "Enter"}}); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Medium, "the typed keys echoed", func() bool { return strings.Count(capture(), "typed-keys") >= 2 })

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
	case <-time.After(eventually.Medium):
		t.Fatal("no echo through the attach")
	}
	a.Close()
	eventually.Wait(t, eventually.Medium, "the model to follow the attach's size", func() bool {
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
	eventually.Wait(t, eventually.Medium, "the screen readers to end", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.screens) == 0
	})
	// The holder ends after its socket closes; holder.Start reaps it.
	eventually.Wait(t, eventually.Medium, "the holder to be reaped", func() bool { return goleak.Find() == nil })
}

// A name a live holder has is tmux.ErrSessionExists, as with tmux: the
// spawn then stops the earlier incarnation and creates again.
func TestPTYExecutorNameTaken(t *testing.T) {
	e := testPTYExecutor(t)
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
	eventually.Wait(t, eventually.Medium, "the holders to be reaped", func() bool { return goleak.Find() == nil })
}

// TestPTYScreenFloodSkips: a session that floods (≈ 24 MiB of scrolling
// lines) then waits: the model skips what scrolled by within its budget
// (a fresh model, at least once) and the capture still ends on the
// flood's last lines, as the program's terminal shows them.
func TestPTYScreenFloodSkips(t *testing.T) {
	e := testPTYExecutor(t)
	name := mustSession(t, "pam-"+runA[:8])
	flood := `i=0; line=$(printf '%0100d' 0); while [ $i -lt 2500 ]; do printf '%s\n'` + strings.Repeat(` "$line"`, 100) +
		`; i=$((i+1)); done; echo flood-tail-one; echo flood-tail-two; exec cat`
	err := e.NewSession(t.Context(), tmux.Spawn{Name: name, Cwd: t.TempDir(), RunID: runA, Attempt: 1, Instance: "5e5e5e5e-1111-4111-8111-111111111111",
		Command: []string{"/bin/sh", "-c", flood}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.KillSession(t.Context(), name) })
	sc, err := e.screen(name.String(), false)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			sc.mu.Lock()
			r := sc.resets
			sc.mu.Unlock()
			sc.qmu.Lock()
			t.Logf("first screen ended %v resets %d queued %d eof %v; last capture:\n%q", sc.ended(), r, sc.qn, sc.eof, last)
			sc.qmu.Unlock()
			evs, _ := holder.ReadEvents(holder.EventsPath(e.dir, name.String()))
			t.Logf("holder events: %+v", evs)
		}
	})
	eventually.Wait(t, 60*time.Second, "the flood's last lines in the capture", func() bool {
		c, _ := e.Capture(t.Context(), name)
		last = c
		lines := strings.Split(strings.TrimRight(c, "\n"), "\n")
		n := len(lines)
		return n >= 3 && strings.HasPrefix(lines[n-3], "0000") && lines[n-2] == "flood-tail-one" && lines[n-1] == "flood-tail-two"
	})
	sc.mu.Lock()
	resets := sc.resets
	sc.mu.Unlock()
	if resets == 0 {
		t.Error("the model parsed every byte of a 24 MiB flood: it never skipped")
	}
	evs, _ := holder.ReadEvents(holder.EventsPath(e.dir, name.String()))
	for _, ev := range evs {
		if ev.Event == "reader_released" {
			t.Errorf("the model's reader fell 1 MiB behind and was released: %+v", ev)
		}
	}
	t.Logf("model restarted %d times during the flood", resets)
}
