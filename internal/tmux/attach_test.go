package tmux

import (
	"bytes"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pam/internal/eventually"

	"github.com/creack/pty"

	"pam/internal/wire"
)

// Text goes in as a bracketed paste exactly when the pane's program has
// asked for bracketed-paste mode, and literally otherwise; no paste
// buffer is left behind.
func TestSendKeysBracketedPaste(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	on, off := mustName(t, "pam-0123abcd"), mustName(t, "pam-0123abce")
	// cat -v shows the paste brackets as ^[[200~ … ^[[201~.
	s.spawn(on, runA, "/bin/sh", "-c", `printf '\033[?2004h'; exec cat -v`)
	s.spawn(off, "0123abce-1111-4111-8111-111111111111", "/bin/sh", "-c", `exec cat -v`)
	keys := []wire.Key{{Text: "-hello world"}, {Key: "Enter"}}
	for _, n := range []SessionName{on, off} {
		if err := s.tm.SendKeys(c, n, keys); err != nil {
			t.Fatal(err)
		}
	}
	// The terminal echoes the paste as it arrives and cat prints it again
	// after Enter: wait for both, then check there are exactly two, both
	// bracketed. (Counting right after the first showed up raced cat.)
	var got string
	eventually.Wait(t, 10*time.Second, "the echo and cat's copy of the paste", func() bool {
		got, _ = s.tm.Capture(c, on)
		return strings.Count(got, "-hello world") >= 2
	})
	if strings.Count(got, "^[[200~-hello world^[[201~") != 2 || strings.Count(got, "-hello world") != 2 {
		t.Errorf("bracketed pane:\n%s", got)
	}
	got = waitCapture(t, s.tm, off, "-hello world")
	if strings.Contains(got, "200~") {
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
	eventually.Wait(t, 10*time.Second, "the window to take the client's size", func() bool { return width() == "100" })
	if _, err := f.Write([]byte("typed-through\r")); err != nil {
		t.Fatal(err)
	}
	waitCapture(t, s.tm, name, "typed-through\ntyped-through")
	eventually.Wait(t, 10*time.Second, "the echo on the client", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(out.String(), "typed-through")
	})
	if err := pty.Setsize(f, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, 10*time.Second, "the window to follow a resize", func() bool { return width() == "120" })
	_ = cmd.Process.Signal(syscall.SIGHUP) // the terminal hangs up
	f.Close()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case <-waitErr:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the attach client did not exit on a hangup")
	}
	<-readDone
	if alive, err := s.tm.Alive(c, name); err != nil || !alive {
		t.Fatalf("detaching ended the session: alive=%v err=%v", alive, err)
	}
}
