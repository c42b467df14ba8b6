package tmux

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pam/internal/eventually"
)

// screenScript fills a pane with what a capture must carry through
// control mode unchanged: colours (8, 256, 24-bit), attributes, wide
// characters, a line longer than the pane (it wraps), tabs, backslashes,
// octal-looking text, and lines that look like control-mode guard lines
// and notifications.
const screenScript = `printf '\033[1;31mbold red\033[0m \033[4munder\033[24m \033[7mrev\033[27m \033[3mitalic\033[0m\n'
printf '\033[38;5;208m256-orange\033[0m \033[38;2;10;200;30;48;2;1;2;3mtruecolor\033[0m\n'
printf 'wide: 日本語テキスト 한국어 ✓ 🙂 end\n'
printf 'tab\there\tand\\\\back\\\\slash \\033 \\\\012 100%%\n'
printf '%%end 1796111838 272 1\n'
printf '%%error 1 2 1\n'
printf '%%begin 1796111838 273 1\n'
printf '%%exit\n'
printf '%%output %%1 hello\\015\\012\n'
i=0; while [ $i -lt 300 ]; do printf 'x%03d' $i; i=$((i+1)); done; printf '\n'
printf '\033[32m%s\033[0m\n' "$(printf 'g%.0s' $(seq 1 230))"
printf 'ready-marker\n'
exec sleep 600
`

// instB is a second worker instance: its helper session is its own.
const instB = "1b1b1b1b-2222-4222-8222-222222222222"

func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "screen.sh")
	if err := os.WriteFile(p, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// What the control client returns for a pane is byte for byte what
// `capture-pane -p -e` writes when run as a process: colours, attributes,
// wide characters, wrapped and over-long lines, and pane text that looks
// like control-mode protocol all survive unchanged.
func TestControlCaptureEqualsExec(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	name := mustName(t, "pam-0123abcd")
	s.spawn(name, runA, "/bin/sh", writeScript(t, screenScript))
	want := waitCapture(t, s.tm, name, "ready-marker")
	for _, w := range []string{"\x1b[1m", "日本語", "🙂", "%end 1796111838 272 1", "x299", `\\`} {
		if !strings.Contains(want, w) {
			t.Fatalf("the screen lacks %q; the test would prove little:\n%s", w, want)
		}
	}
	ctl, err := s.tm.startControl(ctx(t), HelperSession(instA), "sleep")
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Kill()
	for i := range 3 {
		got, err := ctl.run(ctx(t), "capture-pane", "-p", "-e", "-t", name.target())
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("capture %d through control mode differs from exec:\ncontrol %q\nexec    %q", i, got, want)
		}
	}
	// The Capturer's answer too, and a missing session is ErrNoSession.
	cp := s.tm.NewCapturer(CapturerOptions{Instance: instB})
	defer cp.Close()
	cp.Refresh(ctx(t), []SessionName{name})
	got, err := cp.Capture(ctx(t), name)
	if err != nil || got != want {
		t.Fatalf("Capturer.Capture = %q, %v; want exec's %q", got, err, want)
	}
	if st := cp.Stats(); st.Control != 1 || st.Exec != 0 {
		t.Fatalf("stats %+v: the capture did not go through the control client", st)
	}
	if _, err := cp.Capture(ctx(t), mustName(t, "pam-0123abce")); !errors.Is(err, ErrNoSession) {
		t.Fatalf("capture of a missing session: %v, want ErrNoSession", err)
	}
	// Tmux refusing a command is an error in step: the next reply is
	// still the next command's.
	if _, err := ctl.run(ctx(t), "no-such-command"); err == nil {
		t.Fatal("an unknown command succeeded")
	}
	if got, err := ctl.run(ctx(t), "display-message", "-p", "-t", name.target(), "#{session_name}"); err != nil || got != name.String()+"\n" {
		t.Fatalf("reply after an error = %q, %v", got, err)
	}
}

// The control client changes no option, adds no key binding and sizes
// no window; its helper session is no pam session (ListSessions does not
// show it), and Close takes it away again, so that the server still ends
// with pam's last session.
func TestControlLeavesServerAsIs(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	name := mustName(t, "pam-0123abcd")
	s.spawn(name, runA, "/bin/sh", "-c", "echo hi; exec sleep 600")
	before, _ := s.raw("show-options", "-g")
	cp := s.tm.NewCapturer(CapturerOptions{Instance: instA})
	defer cp.Close()
	if err := cp.Start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if cp.ControlPID() == 0 {
		t.Fatal("no control client started")
	}
	helper := HelperSession(instA)
	if out, _ := s.raw("list-sessions", "-F", "#{session_name}"); out != name.String()+"\n"+helper+"\n" {
		t.Errorf("sessions %q, want %s and the helper %s", out, name, helper)
	}
	if after, _ := s.raw("show-options", "-g"); after != before {
		t.Errorf("global options changed:\nbefore %s\nafter %s", before, after)
	}
	if keys, _ := s.raw("list-keys"); keys != "" {
		t.Errorf("key bindings appeared:\n%s", keys)
	}
	if w, _ := s.raw("display-message", "-p", "-t", name.target(), "#{window_width}x#{window_height}"); w != "220x50\n" {
		t.Errorf("window size %q: the control client sized it", w)
	}
	ss, err := s.tm.ListSessions(ctx(t))
	if err != nil || len(ss) != 1 || ss[0].Name != name {
		t.Errorf("ListSessions = %+v, %v", ss, err)
	}
	cp.Close()
	eventually.Wait(t, eventually.Short, "the helper session to go", func() bool {
		out, _ := s.raw("list-sessions", "-F", "#{session_name}")
		return out == name.String()+"\n"
	})
	if clients, _ := s.raw("list-clients"); clients != "" {
		t.Errorf("clients left: %q", clients)
	}
}

// A control client started on a server that is not running starts it,
// hardened before the helper session exists, as NewSession would.
func TestControlStartsHardenedServer(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	cp := s.tm.NewCapturer(CapturerOptions{Instance: instA})
	defer cp.Close()
	if err := cp.Start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.raw("list-keys"); keys != "" {
		t.Errorf("key bindings on a server the control client started:\n%s", keys)
	}
	if p, _ := s.raw("show-options", "-gv", "prefix"); p != "None\n" {
		t.Errorf("prefix %q", p)
	}
	if ss, err := s.tm.ListSessions(ctx(t)); err != nil || len(ss) != 0 {
		t.Errorf("ListSessions = %+v, %v: the helper is no pam session", ss, err)
	}
}

// An idle pane is not captured again; a pane with output is, and output
// within the second of a capture is never missed: the pane is captured
// once more at the next round.
func TestCapturerSkipsUnchangedPanes(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	idle, busy := mustName(t, "pam-0123abcd"), mustName(t, "pam-0123abce")
	s.spawn(idle, runA, "/bin/sh", "-c", "echo idle-ready; exec sleep 600")
	s.spawn(busy, "0123abce-1111-4111-8111-111111111111", "/bin/sh", "-c", "exec cat")
	waitCapture(t, s.tm, idle, "idle-ready")
	cp := s.tm.NewCapturer(CapturerOptions{Instance: instA})
	defer cp.Close()
	live := []SessionName{idle, busy}
	round := func() map[SessionName]bool {
		cp.Refresh(ctx(t), live)
		took := map[SessionName]bool{}
		for _, n := range live {
			if cp.MayHaveChanged(n) {
				if _, err := cp.Capture(ctx(t), n); err != nil {
					t.Fatal(err)
				}
				took[n] = true
			}
		}
		return took
	}
	if took := round(); !took[idle] || !took[busy] {
		t.Fatalf("first round captured %v: every pane is captured once", took)
	}
	// Within two seconds of its last output, the idle pane stops being
	// captured (window_activity has whole seconds).
	if !eventually.Within(eventually.Short, func() bool {
		time.Sleep(100 * time.Millisecond) // rounds are a tick apart in the worker
		return !round()[idle]
	}) {
		t.Fatal("the idle pane is still captured every round")
	}
	if cp.Stats().Skipped == 0 {
		t.Fatal("no capture was skipped")
	}
	for range 3 {
		if round()[idle] {
			t.Fatal("the idle pane was captured again")
		}
	}
	// Output right after a capture, in the same second: the next round
	// captures the pane, and sees the output.
	for i := range 3 {
		cp.Refresh(ctx(t), live)
		if _, err := cp.Capture(ctx(t), busy); err != nil {
			t.Fatal(err)
		}
		marker := "typed-" + string(rune('a'+i))
		if _, err := s.raw("send-keys", "-t", busy.target(), "-l", marker); err != nil {
			t.Fatal(err)
		}
		// The keys reach the pane and cat echoes them; give tmux the time
		// to read the echo before looking.
		if !eventually.Within(eventually.Short, func() bool {
			out, _ := s.tm.Capture(t.Context(), busy)
			return strings.Contains(out, marker)
		}) {
			t.Fatal("the typing never showed")
		}
		cp.Refresh(ctx(t), live)
		if !cp.MayHaveChanged(busy) {
			t.Fatalf("round %d: output after the last capture was not seen as a change", i)
		}
		out, err := cp.Capture(ctx(t), busy)
		if err != nil || !strings.Contains(out, marker) {
			t.Fatalf("capture after the output = %q, %v", out, err)
		}
	}
}

// Killing the control client (SIGKILL) loses no capture: the next one
// goes by exec at once, and a new client is started after the backoff.
// A client whose helper session is taken away leaves with %exit and is
// replaced at the next round, with a new helper.
func TestCapturerFallbackAndRestart(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	a, b := mustName(t, "pam-0123abcd"), mustName(t, "pam-0123abce")
	s.spawn(a, runA, "/bin/sh", "-c", "echo a-ready; exec sleep 600")
	s.spawn(b, "0123abce-1111-4111-8111-111111111111", "/bin/sh", "-c", "echo b-ready; exec sleep 600")
	waitCapture(t, s.tm, b, "b-ready")
	cp := s.tm.NewCapturer(CapturerOptions{Instance: instA, BackoffMin: 200 * time.Millisecond, BackoffMax: time.Second})
	defer cp.Close()
	live := []SessionName{a, b}
	cp.Refresh(ctx(t), live)
	pid := cp.ControlPID()
	if pid == 0 {
		t.Fatal("no control client")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The server holds the client's pipes and may answer a command or two
	// before it notices the client went; every capture succeeds anyway,
	// and once the loss shows, captures go by exec.
	eventually.Wait(t, eventually.Short, "a capture by exec", func() bool {
		out, err := cp.Capture(ctx(t), a)
		if err != nil || !strings.Contains(out, "a-ready") {
			t.Fatalf("capture with the control client killed = %q, %v", out, err)
		}
		return cp.Stats().Exec > 0
	})
	if st := cp.Stats(); st.Exec != 1 || st.Lost != 1 {
		t.Fatalf("stats %+v: want one capture by exec and the client lost", st)
	}
	control := cp.Stats().Control
	cp.Refresh(ctx(t), live) // within the backoff: no new client yet
	if cp.ControlPID() != 0 {
		t.Fatal("a new client started before the backoff")
	}
	var again int
	eventually.Wait(t, eventually.Short, "a new control client", func() bool {
		cp.Refresh(ctx(t), live)
		again = cp.ControlPID()
		return again != 0
	})
	if again == pid {
		t.Fatal("the killed client's pid came back")
	}
	if _, err := cp.Capture(ctx(t), b); err != nil {
		t.Fatal(err)
	}
	if st := cp.Stats(); st.Control != control+1 || st.Starts != 2 {
		t.Fatalf("stats %+v: want the capture through the new client", st)
	}

	// The helper session is killed under it: the client leaves with
	// %exit, and the next round starts another without waiting.
	if _, err := s.raw("kill-session", "-t", "="+HelperSession(instA)+":"); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Short, "the client to leave with its helper", func() bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		select {
		case <-cp.ctl.Done():
			return true
		default:
			return false
		}
	})
	cp.Refresh(ctx(t), live)
	if p := cp.ControlPID(); p == 0 || p == again {
		t.Fatalf("no new client replaced the one whose helper went (pid %d)", p)
	}
	if _, err := cp.Capture(ctx(t), a); err != nil {
		t.Fatal(err)
	}
	if st := cp.Stats(); st.Control != control+2 || st.Starts != 3 || st.Lost != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// A control client left attached to the helper session (a worker that
// died where the kernel could not kill its client with it) is killed
// when the next Capturer starts.
func TestCapturerSweepsLeftoverClient(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	name := mustName(t, "pam-0123abcd")
	s.spawn(name, runA, "/bin/sh", "-c", "exec sleep 600")
	old, err := s.tm.startControl(ctx(t), HelperSession(instA), "sleep")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Kill()
	cp := s.tm.NewCapturer(CapturerOptions{Instance: instA})
	defer cp.Close()
	if err := cp.Start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Done():
	case <-time.After(eventually.Short):
		t.Fatal("the leftover control client is still there")
	}
	if out, _ := s.raw("list-clients", "-F", "#{client_pid}"); out != strconv.Itoa(cp.ControlPID())+"\n" {
		t.Errorf("clients %q, want only the new control client %d", out, cp.ControlPID())
	}
}
