package tmux

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pam/internal/eventually"

	"github.com/creack/pty"

	"pam/internal/wire"
)

// A paste goes in as a bracketed paste exactly when the pane's program
// has asked for bracketed-paste mode, and literally otherwise; a text is
// typed, never bracketed; no paste buffer is left behind.
func TestSendKeysBracketedPaste(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	on, off := mustName(t, "pam-0123abcd"), mustName(t, "pam-0123abce")
	// cat -v shows the paste brackets as ^[[200~ … ^[[201~.
	s.spawn(on, runA, "/bin/sh", "-c", `printf '\033[?2004h'; echo ready; exec cat -v`)
	s.spawn(off, "0123abce-1111-4111-8111-111111111111", "/bin/sh", "-c", `echo ready; exec cat -v`)
	keys := []wire.Key{{Paste: "-hello world"}, {Key: "Enter"}, {Text: "-typed"}, {Key: "Enter"}}
	for _, n := range []SessionName{on, off} {
		// The program has asked for bracketed paste (or not) before the
		// keys go in: tmux reads the mode from its output, in order.
		waitCapture(t, s.tm, n, "ready")
		if err := s.tm.SendKeys(c, n, keys); err != nil {
			t.Fatal(err)
		}
	}
	// The terminal echoes the paste as it arrives and cat prints it again
	// after Enter: wait for both, then check there are exactly two, both
	// bracketed. (Counting right after the first showed up raced cat.)
	var got string
	eventually.Wait(t, eventually.Medium, "the echo and cat's copy of the paste and the text", func() bool {
		got, _ = s.tm.Capture(c, on)
		return strings.Count(got, "-hello world") >= 2 && strings.Count(got, "-typed") >= 2
	})
	if strings.Count(got, "^[[200~-hello world^[[201~") != 2 || strings.Count(got, "-hello world") != 2 {
		t.Errorf("bracketed pane:\n%s", got)
	}
	if strings.Count(got, "-typed") != 2 || strings.Contains(got, "~-typed") || strings.Contains(got, "-typed^[") {
		t.Errorf("the typed text was bracketed:\n%s", got)
	}
	got = waitCapture(t, s.tm, off, "-typed")
	if strings.Contains(got, "200~") || !strings.Contains(got, "-hello world") {
		t.Errorf("a pane without bracketed-paste mode got the brackets:\n%s", got)
	}
	if out, _ := s.raw("list-buffers"); strings.TrimSpace(out) != "" {
		t.Errorf("paste buffers left behind: %q", out)
	}
}

// The attach client runs in a PTY: typed bytes reach the pane, the pane's
// output comes back, the window follows the PTY's size, and a hangup
// detaches without ending the session. (The window is one row
// shorter than the PTY: tmux's status line takes it.)
func TestAttachCommandInPTY(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	s.spawn(name, runA, "/bin/cat", "-")
	cmd, err := s.tm.AttachCommand(name)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"-L", "pam", "-f", "/dev/null", "attach-session", "-t", "=pam-0123abcd:"}; strings.Join(cmd.Args[1:], " ") != strings.Join(want, " ") {
		t.Fatalf("argv %q, want %q", cmd.Args[1:], want)
	}
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		b := make([]byte, 4096)
		for {
			n, err := f.Read(b)
			mu.Lock()
			out.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	width := func() string {
		o, _ := s.raw("display-message", "-p", "-t", "=pam-0123abcd:", "#{window_width}")
		return strings.TrimSpace(o)
	}
	eventually.Wait(t, eventually.Medium, "the window to take the client's size", func() bool { return width() == "100" })
	if _, err := f.Write([]byte("typed-through\r")); err != nil {
		t.Fatal(err)
	}
	waitCapture(t, s.tm, name, "typed-through\ntyped-through")
	eventually.Wait(t, eventually.Medium, "the echo on the client", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(out.String(), "typed-through")
	})
	if err := pty.Setsize(f, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Medium, "the window to follow a resize", func() bool { return width() == "120" })
	_ = cmd.Process.Signal(syscall.SIGHUP) // the terminal hangs up
	f.Close()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case <-waitErr:
	case <-time.After(eventually.Medium):
		_ = cmd.Process.Kill()
		t.Fatal("the attach client did not exit on a hangup")
	}
	<-readDone
	if alive, err := s.tm.Alive(c, name); err != nil || !alive {
		t.Fatalf("detaching ended the session: alive=%v err=%v", alive, err)
	}
}

// attachPTY starts the attach client of name in a PTY whose output is
// drained (a client that cannot write would stall), and waits until the
// server counts it as attached. The client is hung up when the test ends.
func (s *server) attachPTY(name SessionName) (*os.File, *exec.Cmd) {
	s.t.Helper()
	cmd, err := s.tm.AttachCommand(name)
	if err != nil {
		s.t.Fatal(err)
	}
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		s.t.Fatal(err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(io.Discard, f)
	}()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	s.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGHUP)
		f.Close()
		select {
		case <-waitErr:
		case <-time.After(eventually.Medium):
			_ = cmd.Process.Kill()
			<-waitErr
		}
		<-readDone
	})
	eventually.Wait(s.t, eventually.Medium, "the attach client to be attached", func() bool {
		out, _ := s.raw("list-clients", "-F", "#{client_session}")
		return strings.Contains(out, name.String())
	})
	return f, cmd
}

// Whoever holds the attach lease of run A types into A's pane and nowhere
// else (docs/architecture.md#tmux-safety): the prefix, the command prompt,
// the session tree, new windows and detaching are all out of reach, so
// the bytes that would have driven tmux arrive in A's pane as input. The
// server, run B's session and B's screen are untouched.
func TestAttachCannotDriveTmux(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	a, b := mustName(t, "pam-0123abcd"), mustName(t, "pam-0123abce")
	// cat -v shows control characters as ^X: what reached the pane.
	s.spawn(a, runA, "/bin/sh", "-c", "exec cat -v")
	s.spawn(b, "0123abce-1111-4111-8111-111111111111", "/bin/sh", "-c", "echo b-ready; exec cat -v")
	bBefore := waitCapture(t, s.tm, b, "b-ready")
	f, _ := s.attachPTY(a)
	for _, in := range []string{
		"\x02:send-keys -t =pam-0123abce: injected Enter\r", // C-b : (command prompt) into run B
		"\x02c",    // new window
		"\x02\"",   // split the pane
		"\x02(",    // switch to the previous session (B)
		"\x02s",    // the session tree
		"\x02d",    // detach
		"\x02\x02", // send-prefix
		"\x02:kill-server\r",
		"end-of-input\r",
	} {
		if _, err := f.Write([]byte(in)); err != nil {
			t.Fatal(err)
		}
	}
	// cat -v prints each line after the terminal's echo: twice means cat
	// read everything typed before it.
	var got string
	if !eventually.Within(eventually.Medium, func() bool {
		got, _ = s.tm.Capture(t.Context(), a)
		return strings.Count(got, "end-of-input") >= 2
	}) {
		if out, err := s.raw("list-sessions"); err != nil {
			t.Fatalf("the tmux server is gone (%v: %s); A's pane never saw the typed bytes", err, out)
		}
		t.Fatalf("A's pane never received the typed bytes:\n%s", got)
	}
	for _, want := range []string{"^B:send-keys -t =pam-0123abce: injected Enter", `^Bc^B"^B(^Bs^Bd^B^B^B:kill-server`} {
		if !strings.Contains(got, want) {
			t.Errorf("A's pane did not receive %q as input:\n%s", want, got)
		}
	}
	list, err := s.raw("list-sessions", "-F", "#{session_name} #{session_windows} #{window_panes}")
	if err != nil {
		t.Fatalf("the tmux server is gone: %v %s", err, list)
	}
	if want := "pam-0123abcd 1 1\npam-0123abce 1 1\n"; list != want {
		t.Errorf("sessions %q, want %q", list, want)
	}
	if bAfter, err := s.tm.Capture(t.Context(), b); err != nil || bAfter != bBefore {
		t.Errorf("B's pane changed (err %v):\nbefore:\n%s\nafter:\n%s", err, bBefore, bAfter)
	}
	if clients, _ := s.raw("list-clients", "-F", "#{client_session}"); clients != "pam-0123abcd\n" {
		t.Errorf("attached clients %q: the client detached or switched sessions", clients)
	}
	if keys, _ := s.raw("list-keys"); keys != "" {
		t.Errorf("key bindings left:\n%s", keys)
	}
}

// A server started by an earlier pam (or by hand) with tmux's defaults is
// hardened by Harden: every key table emptied, no prefix, mouse off; and
// Harden is idempotent and starts no server of its own.
func TestHardenAdoptedServer(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	if err := s.tm.Harden(c); err != nil {
		t.Fatalf("no server: %v", err)
	}
	if out, err := s.raw("list-sessions"); err == nil {
		t.Fatalf("Harden started a server: %s", out)
	}
	for _, args := range [][]string{
		{"new-session", "-d", "-s", "pam-0123abcd", "--", "/bin/sleep", "300"},
		{"bind-key", "-T", "custom-table", "x", "kill-server"},
		{"set-option", "-g", "mouse", "on"},
	} {
		if out, err := s.raw(args...); err != nil {
			t.Fatalf("%q: %v %s", args, err, out)
		}
	}
	if keys, _ := s.raw("list-keys"); !strings.Contains(keys, "-T prefix") || !strings.Contains(keys, "custom-table") {
		t.Fatalf("the old server has no default bindings to remove:\n%s", keys)
	}
	for range 2 {
		if err := s.tm.Harden(c); err != nil {
			t.Fatal(err)
		}
		if keys, _ := s.raw("list-keys"); keys != "" {
			t.Errorf("key bindings left:\n%s", keys)
		}
		for opt, want := range map[string]string{"prefix": "None", "prefix2": "None", "mouse": "off"} {
			if got, _ := s.raw("show-options", "-gv", opt); strings.TrimSpace(got) != want {
				t.Errorf("%s = %q, want %s", opt, got, want)
			}
		}
	}
}

// The key tables are read from list-keys, -r (repeat) or not.
func TestParseKeyTables(t *testing.T) {
	out := "bind-key    -T copy-mode    C-Space              send-keys -X begin-selection\n" +
		"bind-key -r -T prefix       Up                   select-pane -U\n" +
		"bind-key    -T prefix       c                    new-window\n" +
		"bind-key    -T root         MouseDown1Pane       select-pane -t = \\; send-keys -M\n"
	if got := strings.Join(parseKeyTables(out), ","); got != "copy-mode,prefix,root" {
		t.Errorf("tables %q", got)
	}
	if got := parseKeyTables(""); len(got) != 0 {
		t.Errorf("tables of nothing: %q", got)
	}
}
