package worker

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/tmux"
	"pam/internal/wire"
)

// TestExecutorsSendTheSameBytes: a keys request reaches the program as
// the same bytes whichever executor runs it (docs/api.md#keys): every
// named key as tmux 3.3 sends it, a text typed as is (never bracketed),
// a paste with its newlines as carriage returns; and, once the program
// asked for application cursor keys and bracketed paste, the arrows in
// their application form and the paste bracketed. The program reads its
// terminal raw and writes what it gets to a file.
func TestExecutorsSendTheSameBytes(t *testing.T) {
	keys := []wire.Key{
		{Key: "Escape"}, {Key: "Tab"}, {Key: "BTab"}, {Key: "Space"}, {Key: "BSpace"}, {Key: "DC"},
		{Key: "Up"}, {Key: "Down"}, {Key: "Right"}, {Key: "Left"},
		{Key: "Home"}, {Key: "End"}, {Key: "PageUp"}, {Key: "PageDown"},
		{Key: "1"}, {Key: "y"}, {Key: "n"}, {Key: "0"}, {Key: "9"}, {Key: "Enter"}, {Key: "C-d"}, {Key: "C-c"},
		{Text: "-t Enter~"}, {Paste: "x\ny"}, {Key: "Enter"},
	}
	named := "\x1b\t\x1b[Z \x7f\x1b[3~"
	tail := "\x1b[1~\x1b[4~\x1b[5~\x1b[6~" + "1yn09\r\x04\x03" + "-t Enter~"
	modes := []struct {
		name, setup, want string
	}{
		{"plain", "", named + "\x1b[A\x1b[B\x1b[C\x1b[D" + tail + "x\ry" + "\r"},
		{"app-cursor-and-paste", `printf '\033[?1h\033[?2004h'; `, named + "\x1bOA\x1bOB\x1bOC\x1bOD" + tail + "\x1b[200~x\ry\x1b[201~" + "\r"},
	}
	tm, err := tmux.New(tmux.Options{TmuxTmpDir: pamtest.NewTmux(t).Dir})
	if err != nil {
		t.Fatal(err)
	}
	executors := []struct {
		name string
		ex   Executor
	}{{"tmux", tmuxExecutor{tm}}, {"pty", testPTYExecutor(t)}}
	for _, x := range executors {
		for i, m := range modes {
			t.Run(x.name+"/"+m.name, func(t *testing.T) {
				dir := t.TempDir()
				out := filepath.Join(dir, "got")
				run := []string{runA, runB}[i]
				name := mustSession(t, "pam-"+run[:8])
				err := x.ex.NewSession(t.Context(), tmux.Spawn{Name: name, Cwd: dir, RunID: run, Attempt: 1, Instance: "5e5e5e5e-1111-4111-8111-111111111111",
					Command: []string{"/bin/sh", "-c", m.setup + "stty raw -echo; echo ready; exec cat > " + out}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = x.ex.KillSession(t.Context(), name) })
				eventually.Wait(t, eventually.Medium, "the program ready", func() bool {
					s, _ := x.ex.Capture(t.Context(), name)
					return bytes.Contains([]byte(s), []byte("ready"))
				})
				if err := x.ex.SendKeys(t.Context(), name, keys); err != nil {
					t.Fatal(err)
				}
				var got []byte
				if !eventually.Within(eventually.Medium, func() bool {
					got, _ = os.ReadFile(out)
					return len(got) >= len(m.want)
				}) || string(got) != m.want {
					t.Errorf("the program read\n%q\nwant\n%q", got, m.want)
				}
			})
		}
	}
}
