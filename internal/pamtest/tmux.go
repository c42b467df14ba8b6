package pamtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TmuxSocket is pam's tmux socket name (tmux -L pam); internal/tmux's
// tests check it matches tmux.Socket.
const TmuxSocket = "pam"

// Tmux is a private tmux socket folder (TMUX_TMPDIR): whatever tmux
// servers run in it belong to one test and end with it.
type Tmux struct {
	// Dir is the TMUX_TMPDIR.
	Dir string
}

// NewTmux requires tmux and makes a private TMUX_TMPDIR whose servers,
// whatever their socket names, are killed when the test ends (sessions
// belong to the tmux server, not to the worker that made them).
func NewTmux(t testing.TB) *Tmux {
	t.Helper()
	Require(t, "tmux")
	x := &Tmux{Dir: ShortDir(t, "pamx-")}
	t.Cleanup(func() {
		socks, _ := filepath.Glob(filepath.Join(x.Dir, "tmux-*", "*"))
		for _, s := range socks {
			// Test-only, on the private socket folder.
			_ = exec.Command("tmux", "-S", s, "kill-server").Run()
		}
	})
	return x
}

// Env is the environment entry that points tmux at the folder.
func (x *Tmux) Env() string { return "TMUX_TMPDIR=" + x.Dir }

// Command is `tmux -L pam args...` on the private folder.
func (x *Tmux) Command(args ...string) *exec.Cmd {
	cmd := exec.Command("tmux", append([]string{"-L", TmuxSocket}, args...)...)
	cmd.Env = append(os.Environ(), x.Env())
	return cmd
}

// Run runs `tmux -L pam args...` on the private folder and returns its
// combined output.
func (x *Tmux) Run(args ...string) (string, error) {
	out, err := x.Command(args...).CombinedOutput()
	return string(out), err
}
