package e2e

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// cliAttach is `pam run attach` running on a real PTY, as under a
// terminal emulator. The test keeps the PTY's terminal side open to read
// its mode (termios) before, during and after.
type cliAttach struct {
	t      *testing.T
	cmd    *exec.Cmd
	master *os.File
	slave  *os.File
	out    *pamtest.Buffer
	exited chan struct{}
	before *unix.Termios
}

func (s *system) cliAttach(t *testing.T, runID string) *cliAttach {
	t.Helper()
	return s.cliAttachArgs(t, []string{"run", "attach", runID})
}

// cliAttachArgs is cliAttach for `pam args…` with env added.
func (s *system) cliAttachArgs(t *testing.T, args []string, env ...string) *cliAttach {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close(); slave.Close() })
	if err := pty.Setsize(master, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	cmd := pamtest.Command(t, args...)
	cmd.Env = append(append(cmd.Env, "PAM_URL="+s.url, "PAM_TOKEN="+s.token, "TERM=xterm-256color"), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	a := &cliAttach{t: t, cmd: cmd, master: master, slave: slave, out: &pamtest.Buffer{}, exited: make(chan struct{}), before: before}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			a.out.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		select {
		case <-a.exited:
		default:
			_ = cmd.Process.Kill()
			<-a.exited
		}
	})
	return a
}

func (a *cliAttach) waitOutput(want string) {
	a.t.Helper()
	if eventually.Within(20*time.Second, func() bool { return strings.Contains(a.out.String(), want) }) {
		return
	}
	state := "still running"
	select {
	case <-a.exited:
		state = "exited " + a.cmd.ProcessState.String()
	default:
	}
	a.t.Fatalf("pam %s did not show %q within 20s (%s); its output: %q", strings.Join(a.cmd.Args[1:], " "), want, state, tail(a.out.String(), 600))
}

func (a *cliAttach) mode() *unix.Termios {
	a.t.Helper()
	tio, err := unix.IoctlGetTermios(int(a.slave.Fd()), unix.TCGETS)
	if err != nil {
		a.t.Fatal(err)
	}
	return tio
}

// attached waits until pam run attach holds the lease and the terminal
// is raw.
func (a *cliAttach) attached() {
	a.t.Helper()
	a.waitOutput("detach with Ctrl-\\")
	eventually.Wait(a.t, eventually.Medium, "raw mode", func() bool { return a.mode().Lflag&(unix.ICANON|unix.ECHO) == 0 })
}

// ended waits for the command to exit with code and checks the terminal
// is exactly as it was before.
func (a *cliAttach) ended(code int, says string) {
	a.t.Helper()
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		a.t.Fatalf("pam run attach did not exit; output %q", tail(a.out.String(), 500))
	}
	if got := a.cmd.ProcessState.ExitCode(); got != code {
		a.t.Errorf("exit status %d, want %d; output %q", got, code, tail(a.out.String(), 500))
	}
	if after := a.mode(); *after != *a.before {
		a.t.Errorf("terminal mode not restored:\nbefore %+v\nafter  %+v", a.before, after)
	}
	eventually.Wait(a.t, eventually.Short, "the exit message "+says, func() bool { return strings.Contains(a.out.String(), says) })
	a.t.Logf("exit %d; output ends %q", a.cmd.ProcessState.ExitCode(), tail(a.out.String(), 120))
	if !strings.Contains(a.out.String(), "\x1b[?1049l") {
		a.t.Errorf("the screen modes were not reset on exit")
	}
}

// pam run attach restores the terminal after a detach (Ctrl-\), after the
// run ends, and after the server goes away.
func TestCLIAttachRestoresTerminal(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("term-cli")
	r := s.startRun(s.task(), readEcho)

	t.Run("detach", func(t *testing.T) {
		a := s.cliAttach(t, r.ID)
		a.attached()
		if _, err := a.master.Write([]byte("typed\r")); err != nil {
			t.Fatal(err)
		}
		a.waitOutput("got:typed cols:100")
		if _, err := a.master.Write([]byte{0x1c}); err != nil {
			t.Fatal(err)
		}
		a.ended(0, "detached from run")
	})
	t.Run("run ends", func(t *testing.T) {
		a := s.cliAttach(t, r.ID) // the detach released the lease
		a.attached()
		s.must(202, "POST", "/api/v1/runs/"+r.ID+"/stop", nil, nil)
		a.ended(0, "ended")
	})
	t.Run("server goes away", func(t *testing.T) {
		s2 := newSystem(t)
		s2.worker("term-cli-2")
		r2 := s2.startRun(s2.task(), "cat")
		a := s2.cliAttach(t, r2.ID)
		a.attached()
		pid, err := listenerPID(s2.url)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		a.ended(1, "connection to the orchestrator lost")
	})
	t.Run("lease held", func(t *testing.T) {
		s3 := newSystem(t)
		s3.worker("term-cli-3")
		r3 := s3.startRun(s3.task(), "cat")
		holder := s3.attach(r3.ID, nil)
		holder.waitFrame(wire.WSLeaseAcquired, "")
		a := s3.cliAttach(t, r3.ID)
		select {
		case <-a.exited:
		case <-time.After(20 * time.Second):
			t.Fatal("pam run attach did not give up on a held lease")
		}
		// The message may still be in flight from the PTY after the exit.
		a.waitOutput("held by")
		if a.cmd.ProcessState.ExitCode() != 1 {
			t.Errorf("lease held: exit %d, output %q", a.cmd.ProcessState.ExitCode(), a.out.String())
		}
		if after := a.mode(); *after != *a.before {
			t.Errorf("terminal mode changed by a refused attach")
		}
	})
}

// pam run watch prints each snapshot and ends when the run does.
func TestCLIWatch(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("term-watch")
	r := s.startRun(s.task(), "echo watched-line; sleep 2; echo second-line; sleep 1")
	cmd := pamtest.Command(t, "run", "watch", r.ID)
	cmd.Env = append(cmd.Env, "PAM_URL="+s.url, "PAM_TOKEN="+s.token)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(eventually.Long):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("pam run watch did not end with the run: %s", out)
	}
	text := string(out)
	if err != nil || !strings.Contains(text, "--- pane seq ") || !strings.Contains(text, "watched-line") ||
		!strings.Contains(text, "second-line") || !strings.Contains(text, "run "+r.ID+" is exited") {
		t.Fatalf("pam run watch: %v\n%s", err, text)
	}
}
