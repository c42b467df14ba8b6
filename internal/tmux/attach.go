package tmux

import (
	"os"
	"os/exec"
	"slices"
	"strings"
)

// AttachTerm is the TERM of an interactive attach client: the relay's far
// end is xterm.js or the operator's own terminal emulator, both xterm
// compatible, whatever TERM the worker itself was started with (often
// none, or "dumb", under a service manager).
const AttachTerm = "xterm-256color"

// AttachCommand builds the tmux client of an interactive relay:
// `tmux -L pam -f /dev/null attach-session -t =NAME:`, with the same
// clean environment as every other invocation. The caller starts it on a
// PTY sized to the remote terminal (tmux sizes the window to its latest
// client) and owns its lifetime: SIGHUP (what a terminal hangup sends)
// detaches the client at once, which never ends the session.
func (t *Tmux) AttachCommand(name SessionName) (*exec.Cmd, error) {
	if err := name.check(); err != nil {
		return nil, err
	}
	cmd := exec.Command(t.bin, "-L", Socket, "-f", os.DevNull, "attach-session", "-t", name.target())
	env := slices.DeleteFunc(slices.Clone(t.env), func(kv string) bool { return strings.HasPrefix(kv, "TERM=") })
	cmd.Env = append(env, "TERM="+AttachTerm)
	cmd.Dir = "/"
	return cmd, nil
}
