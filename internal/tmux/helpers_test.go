package tmux

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
)

// server is a private tmux server for one test: its own TMUX_TMPDIR
// (short, because a Unix socket path has at most ~104 bytes), killed and
// removed when the test ends.
type server struct {
	t   *testing.T
	dir string
	tm  *Tmux
}

func newServer(t *testing.T) *server {
	t.Helper()
	// Test-only: the whole private server goes when the test ends, on its
	// own socket directory. Production code has no kill-server at all.
	dir := pamtest.NewTmux(t).Dir
	s := &server{t: t, dir: dir}
	var err error
	s.tm, err = New(Options{TmuxTmpDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// raw runs tmux on the private socket directly, for setting up what pam
// would never do (foreign sessions) and for looking behind its back.
func (s *server) raw(args ...string) (string, error) {
	cmd := exec.Command("tmux", append([]string{"-L", Socket, "-f", os.DevNull}, args...)...)
	cmd.Env = []string{"TMUX_TMPDIR=" + s.dir, "PATH=" + os.Getenv("PATH"), "HOME=" + s.dir}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// waitCapture waits until the pane shows want and returns the capture.
func waitCapture(t *testing.T, tm *Tmux, name SessionName, want string) string {
	t.Helper()
	var last string
	var err error
	if !eventually.Within(eventually.Medium, func() bool {
		var out string
		if out, err = tm.Capture(t.Context(), name); err != nil {
			return true
		}
		last = out
		return strings.Contains(out, want)
	}) || err != nil {
		t.Fatalf("pane never showed %q (err %v):\n%s", want, err, last)
	}
	return last
}

func mustName(t *testing.T, s string) SessionName {
	t.Helper()
	n, err := ParseSessionName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// spawn creates a session running cmd in a temp dir.
func (s *server) spawn(name SessionName, runID string, cmd ...string) {
	s.t.Helper()
	err := s.tm.NewSession(ctx(s.t), Spawn{Name: name, Cwd: s.t.TempDir(), Title: "test-task", RunID: runID, Attempt: 1, Instance: instA, Command: cmd})
	if err != nil {
		s.t.Fatal(err)
	}
}

// The harness kills pam's tmux servers by this name.
func TestSocketMatchesHarness(t *testing.T) {
	if Socket != pamtest.TmuxSocket {
		t.Fatalf("tmux.Socket %q, pamtest.TmuxSocket %q", Socket, pamtest.TmuxSocket)
	}
}
