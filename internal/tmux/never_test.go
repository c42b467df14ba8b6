package tmux

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"pam/internal/wire"
)

// fakeTmux answers like tmux would, with foreign sessions on the socket,
// and records every invocation.
const fakeTmux = `
for a in "$@"; do
	case "$a" in
	list-sessions)
		printf 'pam-0123abcd\t0123abcd-1111-4111-8111-111111111111\t1\t1\t0\t1a1a1a1a-2222-4222-8222-222222222222\n'
		printf 'pam-0123abcd-mine\t\t\t1\t0\t\n'
		printf 'work\t\t\t1\t0\t\n'
		printf 'pam-*\t\t\t1\t0\t\n'
		exit 0;;
	display-message)
		printf 'pam-0123abcd\t1\t0\t\t/dev/null\n'
		exit 0;;
	capture-pane)
		printf 'screen\n'
		exit 0;;
	esac
done
exit 0
`

// The NEVER list (docs/architecture.md#tmux-safety), checked on the argv of every invocation a
// recording fake tmux sees across all operations: always -L pam, never
// kill-server, never a -t that is not an exact, validated session name,
// and no argument that tmux would split into a command of its own.
func TestNeverList(t *testing.T) {
	t.Parallel()
	bin, log := recorder(t, fakeTmux)
	tm, err := New(Options{Binary: bin, TmuxTmpDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	list, err := tm.ListSessions(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != name {
		t.Errorf("ListSessions = %+v: foreign names must not be listed", list)
	}
	for _, l := range list {
		_, _ = tm.Capture(c, l.Name)
		_, _ = tm.Alive(c, l.Name)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Error(err)
		}
	}
	must(tm.NewSession(c, Spawn{Name: name, Cwd: t.TempDir(), Title: "t", RunID: runA, Attempt: 3, Instance: instA,
		Command: []string{"/usr/bin/pam", "exec", "run", "x;", "kill-server;", ";", `\;`, "--data-dir=/d", runA}}))
	_, err = tm.Pane(c, name)
	must(err)
	_, err = tm.Capture(c, name)
	must(err)
	must(tm.SendKeys(c, name, []wire.Key{{Text: "-t"}, {Key: "Enter"}, {Text: "kill-server"}, {Key: "C-c"}}))
	attach, err := tm.AttachCommand(name)
	must(err)
	must(attach.Run()) // the fake records it like any other invocation
	must(tm.KillSession(c, name))
	must(tm.Stop(c, name, 100*time.Millisecond, false))
	must(tm.Stop(c, name, time.Second, true))
	// Invalid names never reach the fake at all (TestInvalidNameNeverRunsTmux).

	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	target := regexp.MustCompile(`^=pam-[0-9a-f]{8}:$`)
	allowed := map[string]bool{"new-session": true, "set-option": true, "list-sessions": true, "display-message": true,
		"capture-pane": true, "send-keys": true, "kill-session": true,
		"set-buffer": true, "paste-buffer": true, "delete-buffer": true, "attach-session": true,
		"list-keys": true, "unbind-key": true, "bind-key": true}
	calls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(calls) < 10 {
		t.Fatalf("only %d invocations recorded", len(calls))
	}
	for _, call := range calls {
		args := strings.Split(strings.TrimSuffix(call, "\x1f"), "\x1f")
		if len(args) < 5 || args[0] != "-L" || args[1] != "pam" || args[2] != "-f" || args[3] != os.DevNull {
			t.Errorf("invocation without -L pam -f /dev/null first: %q", args)
			continue
		}
		// Split into commands exactly as tmux does: an argument ending in
		// an unescaped ";" ends a command.
		var cmds [][]string
		cur := []string{}
		for _, a := range args[4:] {
			if strings.HasSuffix(a, ";") && !strings.HasSuffix(a, `\;`) {
				if rest := strings.TrimSuffix(a, ";"); rest != "" {
					cur = append(cur, rest)
				}
				cmds = append(cmds, cur)
				cur = []string{}
				continue
			}
			cur = append(cur, a)
		}
		cmds = append(cmds, cur)
		for _, cmd := range cmds {
			if len(cmd) == 0 || !allowed[cmd[0]] {
				t.Errorf("command %q in %q is not one pam runs", cmd, args)
				continue
			}
			{
				// Everything after -- is data: the program's argv of
				// new-session, the literal text of set-buffer.
				for i, a := range cmd {
					if a == "--" {
						cmd = cmd[:i]
						break
					}
				}
			}
			for i, a := range cmd {
				if a == "kill-server" {
					t.Errorf("kill-server in %q", args)
				}
				if a == "-t" && (i+1 >= len(cmd) || !target.MatchString(cmd[i+1])) {
					t.Errorf("-t without an exact validated target in %q", args)
				}
				if strings.ContainsAny(a, "*?[") {
					t.Errorf("glob-like argument %q in %q", a, args)
				}
			}
		}
	}
}
