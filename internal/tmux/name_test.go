package tmux

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pam/internal/wire"
)

var badNames = []string{
	"",
	"pam-",
	"pam-1234567",   // 7 hex
	"pam-123456789", // 9 hex
	"pam-ABCDEF12",  // uppercase hex
	"pam-abcdeF12",
	"pam-1234567g",
	"pam-*",
	"pam-1234*",
	"pam-12345678;x",
	"pam-12345678 ",
	" pam-12345678",
	"pam-12345678\n",
	"pam-12345678:",
	"=pam-12345678",
	"-t",
	"-L",
	"PAM-12345678",
	"pam_12345678",
	"pam-１２３４５６７８", // fullwidth digits
	"pam-1234567é",
	"pam-12345678x",
	"x-pam-12345678",
}

func TestParseSessionName(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"pam-12345678", "pam-abcdef01", "pam-00000000", "pam-ffffffff"} {
		n, err := ParseSessionName(s)
		if err != nil || n.String() != s {
			t.Errorf("ParseSessionName(%q) = %v, %v", s, n, err)
		}
	}
	for _, s := range badNames {
		if _, err := ParseSessionName(s); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParseSessionName(%q) accepted", s)
		}
	}
}

func TestSessionForRun(t *testing.T) {
	t.Parallel()
	n, err := SessionForRun("0123abcd-0000-4000-8000-000000000000")
	if err != nil || n.String() != "pam-0123abcd" {
		t.Fatalf("SessionForRun = %v, %v", n, err)
	}
	for _, id := range []string{"", "0123ABCD-0000-4000-8000-000000000000", "{0123abcd-0000-4000-8000-000000000000}",
		"0123abcd000040008000000000000000", "urn:uuid:0123abcd-0000-4000-8000-000000000000", "../../etc/passwd"} {
		if _, err := SessionForRun(id); err == nil {
			t.Errorf("SessionForRun(%q) accepted", id)
		}
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"Fix the login bug", "fix-the-login-bug"},
		{"  --Hello,  World!! ", "hello-world"},
		{"", DefaultTitle},
		{"!!!", DefaultTitle},
		{"日本語", DefaultTitle},
		{"Café au lait", "caf-au-lait"},
		{"$(rm -rf /); `x`", "rm-rf-x"},
		{"a very long task title that goes on and on and on forever", "a-very-long-task-title-that-goes-on-and"},
		{"0123456789012345678901234567890123456789-tail", "0123456789012345678901234567890123456789"},
		{"012345678901234567890123456789012345678 x", "012345678901234567890123456789012345678"},
	}
	for _, tt := range tests {
		got := Slug(tt.in)
		if got != tt.want {
			t.Errorf("Slug(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if !ValidTitle(got) {
			t.Errorf("Slug(%q) = %q is not a valid title", tt.in, got)
		}
	}
}

// recorder is a fake tmux that appends each invocation to a log file.
func recorder(t *testing.T, script string) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "calls")
	bin = filepath.Join(dir, "tmux")
	body := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\037' \"$a\"; done >> " + log + "\nprintf '\\n' >> " + log + "\n" + script
	if err := os.WriteFile(bin, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

// Every operation refuses a malformed name before tmux runs: the fake
// tmux never records an invocation. The names are forged inside the
// package (ParseSessionName would not even produce them) to prove the
// check before each call, not only at parse time.
func TestInvalidNameNeverRunsTmux(t *testing.T) {
	t.Parallel()
	bin, log := recorder(t, "exit 0\n")
	tm, err := New(Options{Binary: bin, TmuxTmpDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	cwd := t.TempDir()
	for _, s := range badNames {
		n := SessionName{s: s}
		calls := map[string]error{
			"NewSession":  tm.NewSession(c, Spawn{Name: n, Cwd: cwd, RunID: "0123abcd-0000-4000-8000-000000000000", Attempt: 1, Instance: instA, Command: []string{"/bin/sleep", "1"}}),
			"SendKeys":    tm.SendKeys(c, n, []wire.Key{{Key: "Enter"}}),
			"KillSession": tm.KillSession(c, n),
			"Stop":        tm.Stop(c, n, time.Second, false),
			"StopForce":   tm.Stop(c, n, 0, true),
		}
		_, calls["Pane"] = tm.Pane(c, n)
		_, calls["Alive"] = tm.Alive(c, n)
		_, calls["Capture"] = tm.Capture(c, n)
		_, calls["AttachCommand"] = tm.AttachCommand(n)
		for op, err := range calls {
			if !errors.Is(err, ErrInvalidName) {
				t.Errorf("%s(%q): err = %v, want ErrInvalidName", op, s, err)
			}
		}
	}
	if b, err := os.ReadFile(log); err == nil {
		t.Fatalf("tmux ran for an invalid name:\n%s", b)
	}
}
