package tmux

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pam/internal/eventually"

	"pam/internal/wire"
)

const runA = "0123abcd-1111-4111-8111-111111111111"

// instA is the worker instance id the tests' sessions carry.
const instA = "1a1a1a1a-2222-4222-8222-222222222222"

func TestNewSessionCaptureList(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	marker := filepath.Join(t.TempDir(), "pwned")
	// The cwd holds tmux formats: expanded, #(…) would run a shell
	// command, and the pane would start elsewhere (tmux falls back to
	// $HOME for a missing directory).
	cwd := filepath.Join(t.TempDir(), "d#(echo x)#{session_name}##")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	err := s.tm.NewSession(c, Spawn{
		Name: name, Cwd: cwd, Title: "fix-login", RunID: runA, Attempt: 2, Instance: instA,
		Command: []string{"/bin/sh", "-c", `printf 'arg1=[%s] arg2=[%s] arg3=[%s]\n' "$1" "$2" "$3"; pwd; exec sleep 300`, "sh",
			"; touch " + marker, "kill-server;", "$(touch " + marker + ")"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// pwd runs after printf: wait for its line, not only the first one.
	out := waitCapture(t, s.tm, name, cwd+"\n")
	want := "arg1=[; touch " + marker + "] arg2=[kill-server;] arg3=[$(touch " + marker + ")]"
	if !strings.Contains(out, want) {
		t.Errorf("arguments did not arrive literally; want %q in\n%s", want, out)
	}
	if !strings.Contains(out, "\n"+cwd+"\n") {
		t.Errorf("pane cwd is not %q:\n%s", cwd, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("an argument or the cwd was run by a shell")
	}

	list, err := s.tm.ListSessions(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != name || list[0].RunID != runA || list[0].Attempt != 2 || list[0].Instance != instA || list[0].PanePID <= 0 || list[0].PaneDead {
		t.Fatalf("ListSessions = %+v", list)
	}
	if got, _ := s.raw("display-message", "-p", "-t", "=pam-0123abcd:", "#{window_name} #{window_width}x#{window_height}"); strings.TrimSpace(got) != "fix-login 220x50" {
		t.Errorf("window = %q", got)
	}
	p, err := s.tm.Pane(c, name)
	if err != nil || p.PID != list[0].PanePID || p.Dead || !strings.HasPrefix(p.TTY, "/dev/") {
		t.Errorf("Pane = %+v, %v", p, err)
	}
	if alive, err := s.tm.Alive(c, name); !alive || err != nil {
		t.Errorf("Alive = %v, %v", alive, err)
	}
	// One session only: "kill-server;" did not become a second command.
	if got, _ := s.raw("list-sessions", "-F", "#{session_name}"); strings.TrimSpace(got) != "pam-0123abcd" {
		t.Errorf("sessions on the socket: %q", got)
	}
}

func TestNewSessionRefusals(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	cwd := t.TempDir()
	file := filepath.Join(cwd, "f")
	os.WriteFile(file, nil, 0o600)
	ok := Spawn{Name: name, Cwd: cwd, RunID: runA, Attempt: 1, Instance: instA, Command: []string{"/bin/sleep", "300"}}
	for what, mod := range map[string]func(*Spawn){
		"one-element command (would be a shell)": func(s *Spawn) { s.Command = []string{"/bin/sleep"} },
		"relative command":                       func(s *Spawn) { s.Command = []string{"sleep", "300"} },
		"relative cwd":                           func(s *Spawn) { s.Cwd = "tmp" },
		"missing cwd":                            func(s *Spawn) { s.Cwd = filepath.Join(cwd, "nope") },
		"cwd is a file":                          func(s *Spawn) { s.Cwd = file },
		"bad run id":                             func(s *Spawn) { s.RunID = "not-a-uuid" },
		"uppercase run id":                       func(s *Spawn) { s.RunID = strings.ToUpper(runA) },
		"attempt 0":                              func(s *Spawn) { s.Attempt = 0 },
		"no instance id":                         func(s *Spawn) { s.Instance = "" },
		"bad instance id":                        func(s *Spawn) { s.Instance = "x;kill-server" },
	} {
		sp := ok
		mod(&sp)
		if err := s.tm.NewSession(c, sp); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	if list, err := s.tm.ListSessions(c); err != nil || len(list) != 0 {
		t.Errorf("sessions after refusals: %v, %v", list, err)
	}
	// A title that is not a slug falls back to "run".
	ok.Title = "Not A Slug; x"
	if err := s.tm.NewSession(c, ok); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.raw("display-message", "-p", "-t", "=pam-0123abcd:", "#{window_name}"); strings.TrimSpace(got) != "run" {
		t.Errorf("window name = %q, want run", got)
	}
	// A second session of the same name fails with ErrSessionExists and
	// leaves the options of the first alone (the spawn path then stops
	// the earlier incarnation and creates again).
	again := ok
	again.Attempt = 2
	if err := s.tm.NewSession(c, again); !errors.Is(err, ErrSessionExists) {
		t.Errorf("duplicate session: %v, want ErrSessionExists", err)
	}
	if list, err := s.tm.ListSessions(c); err != nil || len(list) != 1 || list[0].Attempt != 1 {
		t.Errorf("sessions after the duplicate: %+v, %v", list, err)
	}
}

// The tmux server and its sessions get a clean environment: a secret in
// the worker's environment reaches neither. Not parallel: it sets the
// process environment.
func TestCleanEnvironment(t *testing.T) {
	t.Setenv("PAM_WORKER_TOKEN", "secret-worker-token")
	t.Setenv("PAM_SIGNAL_TOKEN", "secret-signal-token")
	t.Setenv("TMUX", "/tmp/other-tmux,1,0")
	s := newServer(t)
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	s.spawn(name, runA, "/bin/sh", "-c", "env; echo END-OF-ENV; exec sleep 300")
	out := waitCapture(t, s.tm, name, "END-OF-ENV")
	global, err := s.raw("show-environment", "-g")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.raw("show-environment", "-t", "=pam-0123abcd")
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"pane env": out, "global env": global, "session env": sess} {
		if strings.Contains(text, "secret") || strings.Contains(text, "PAM_WORKER_TOKEN") {
			t.Errorf("%s holds the secret:\n%s", what, text)
		}
	}
	for _, v := range []string{"PATH=", "HOME=", "LANG=", "SHELL=", "USER="} {
		if !strings.Contains(global, v) {
			t.Errorf("global env lacks %s:\n%s", v, global)
		}
	}
	// The global environment is exactly the clean set (plus TMUX_TMPDIR).
	for _, line := range strings.Split(strings.TrimSpace(global), "\n") {
		k, _, _ := strings.Cut(line, "=")
		switch strings.TrimPrefix(k, "-") {
		case "PATH", "HOME", "USER", "SHELL", "LANG", "TERM", "TMUX_TMPDIR",
			"PWD", // set by tmux itself from its working directory, "/"
			// update-environment entries tmux marks as removed ("-NAME").
			"DISPLAY", "KRB5CCNAME", "SSH_ASKPASS", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_CONNECTION", "WINDOWID", "XAUTHORITY":
		default:
			t.Errorf("unexpected variable in the server's environment: %q", line)
		}
	}
	_ = c
}

// A session on the same socket whose name does not match the regex is
// never listed and never touched, even where tmux would prefix-match it.
func TestForeignSessionsUntouched(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	foreign := []string{"pam-0123abcd-mine", "pam-0123abcdx", "work", "pam-0123ABCD"}
	for _, f := range foreign {
		if out, err := s.raw("new-session", "-d", "-s", f, "--", "/bin/sleep", "300"); err != nil {
			t.Fatalf("raw new-session %s: %v %s", f, err, out)
		}
	}
	ours := mustName(t, "pam-0123abcd") // a prefix of two foreign names
	list, err := s.tm.ListSessions(c)
	if err != nil || len(list) != 0 {
		t.Fatalf("ListSessions = %+v, %v", list, err)
	}
	if alive, err := s.tm.Alive(c, ours); alive || err != nil {
		t.Errorf("Alive = %v, %v", alive, err)
	}
	if _, err := s.tm.Pane(c, ours); !errors.Is(err, ErrNoSession) {
		t.Errorf("Pane: %v", err)
	}
	if _, err := s.tm.Capture(c, ours); !errors.Is(err, ErrNoSession) {
		t.Errorf("Capture: %v", err)
	}
	if err := s.tm.SendKeys(c, ours, []wire.Key{{Key: "C-c"}}); !errors.Is(err, ErrNoSession) {
		t.Errorf("SendKeys: %v", err)
	}
	if err := s.tm.KillSession(c, ours); !errors.Is(err, ErrNoSession) {
		t.Errorf("KillSession: %v", err)
	}
	if err := s.tm.Stop(c, ours, time.Second, false); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := s.tm.Stop(c, ours, 0, true); err != nil {
		t.Errorf("Stop force: %v", err)
	}
	got, err := s.raw("list-sessions", "-F", "#{session_name}")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range foreign {
		if !strings.Contains(got, f+"\n") {
			t.Errorf("foreign session %s was touched; sessions now:\n%s", f, got)
		}
	}
	// Once one of ours exists next to them, only ours is listed.
	s.spawn(ours, runA, "/bin/sleep", "300")
	if list, err := s.tm.ListSessions(c); err != nil || len(list) != 1 || list[0].Name != ours {
		t.Errorf("ListSessions = %+v, %v", list, err)
	}
}

func TestNoServer(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	if list, err := s.tm.ListSessions(c); err != nil || list != nil {
		t.Errorf("ListSessions = %v, %v", list, err)
	}
	if alive, err := s.tm.Alive(c, name); alive || err != nil {
		t.Errorf("Alive = %v, %v", alive, err)
	}
	if _, err := s.tm.Capture(c, name); !errors.Is(err, ErrNoSession) {
		t.Errorf("Capture: %v", err)
	}
	if err := s.tm.Stop(c, name, time.Second, false); err != nil {
		t.Errorf("Stop: %v", err)
	}
	// A server that started and then lost its last session: same answer.
	s.spawn(name, runA, "/bin/sh", "-c", "exit 0")
	eventually.Wait(t, eventually.Medium, "the session to end", func() bool {
		list, err := s.tm.ListSessions(c)
		return err == nil && len(list) == 0
	})
}

func TestSendKeys(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	s.spawn(name, runA, "/bin/cat", "-")
	keys := []wire.Key{
		{Text: "-t"}, {Key: "Enter"},
		{Text: "Enter"}, {Key: "Enter"},
		{Text: "C-c"}, {Key: "Enter"},
		{Text: "x -- y"}, {Key: "Enter"},
		{Text: "--"}, {Key: "Enter"},
		{Paste: "-l"}, {Key: "Enter"},
		{Text: "end"}, {Key: "Enter"},
	}
	if err := s.tm.SendKeys(c, name, keys); err != nil {
		t.Fatal(err)
	}
	var out string
	eventually.Wait(t, eventually.Medium, "cat to print the last line", func() bool {
		out, _ = s.tm.Capture(c, name)
		return strings.Count(out, "end\n") == 2
	})
	// The terminal echoes each line and cat prints it again.
	lines := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		lines[l]++
	}
	for _, line := range []string{"-t", "Enter", "C-c", "x -- y", "--", "-l", "end"} {
		if lines[line] != 2 {
			t.Errorf("text %q did not arrive literally:\n%s", line, out)
		}
	}
	// Refused by the allowlist, before tmux runs.
	for _, bad := range [][]wire.Key{
		{{Text: "$(touch /tmp/x)"}}, {{Text: "a; b"}}, {{Text: "`id`"}}, {{Text: "a|b"}}, {{Text: "a&"}},
		{{Text: "\x1b[2J"}}, {{Text: "\x02d"}}, {{Key: "C-b"}}, {{Key: "-t"}}, {{Key: "Enter;"}}, {},
		{{Paste: "ok\x1b[201~"}}, {{Key: "F1"}},
	} {
		err := s.tm.SendKeys(c, name, bad)
		var we *wire.Error
		if !errors.As(err, &we) {
			t.Errorf("SendKeys(%q) = %v, want a wire error", bad, err)
		}
	}
	// A C-c key ends cat and with it the session.
	if err := s.tm.SendKeys(c, name, []wire.Key{{Key: "C-c"}}); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Medium, "cat to end on C-c", func() bool {
		alive, err := s.tm.Alive(c, name)
		return err == nil && !alive
	})
}

// pgidOf is the process group of the session's pane process.
func pgidOf(t *testing.T, s *server, name SessionName) int {
	t.Helper()
	p, err := s.tm.Pane(ctx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	g, err := syscall.Getpgid(p.PID)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestStopGraceful(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	// A shell that is not exec'd, so the group has two processes.
	s.spawn(name, runA, "/bin/sh", "-c", "sleep 300; echo unreachable")
	g := pgidOf(t, s, name)
	start := time.Now()
	if err := s.tm.Stop(c, name, 20*time.Second, false); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Stop took %s: SIGTERM should have ended sleep well within the grace", d)
	}
	if alive, _ := s.tm.Alive(c, name); alive {
		t.Error("session still alive")
	}
	if groupAlive(g) {
		t.Error("process group still alive")
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	s.spawn(name, runA, "/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done")
	waitCapture(t, s.tm, name, "ready")
	g := pgidOf(t, s, name)
	const grace = 700 * time.Millisecond
	start := time.Now()
	if err := s.tm.Stop(c, name, grace, false); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < grace {
		t.Errorf("Stop returned after %s, before the grace of %s", d, grace)
	}
	if alive, _ := s.tm.Alive(c, name); alive {
		t.Error("session still alive")
	}
	eventually.Wait(t, eventually.Short, "the group to die", func() bool { return !groupAlive(g) })
}

func TestStopForce(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	s.spawn(name, runA, "/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done")
	waitCapture(t, s.tm, name, "ready")
	g := pgidOf(t, s, name)
	start := time.Now()
	if err := s.tm.Stop(c, name, time.Minute, true); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("forced Stop took %s", d)
	}
	if alive, _ := s.tm.Alive(c, name); alive {
		t.Error("session still alive")
	}
	eventually.Wait(t, eventually.Short, "the group to die", func() bool { return !groupAlive(g) })
	// Stopping a stopped session is fine.
	if err := s.tm.Stop(c, name, time.Second, false); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// The terminal's foreground group is signalled too: a CLI moved into a
// process group of its own (as an interactive shell's job would be) is
// stopped with the pane.
func TestStopForegroundGroup(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := ctx(t)
	name := mustName(t, "pam-0123abcd")
	// sh -m (job control) runs sleep in its own foreground group.
	s.spawn(name, runA, "/bin/sh", "-mc", "sleep 300; echo after")
	var fg int
	eventually.Wait(t, eventually.Medium, "a separate foreground group", func() bool {
		p, err := s.tm.Pane(c, name)
		if err != nil {
			t.Fatal(err)
		}
		fg = foregroundGroup(p.PID)
		g, _ := syscall.Getpgid(p.PID)
		return fg > 0 && fg != g
	})
	if err := s.tm.Stop(c, name, 20*time.Second, false); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Short, "the foreground group to die", func() bool { return !groupAlive(fg) })
}
