package holder

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A holder runs as `pam exec hold [flags] -- PROGRAM ARGS…`: the worker
// (or a test) starts it with Start, detached in a session of its own
// with no controlling terminal, and waits on a pipe until it says it
// serves (or why it cannot). Main is that command.

// readyFD is the descriptor of the readiness pipe in the holder: the
// first of exec.Cmd.ExtraFiles.
const readyFD = 3

// StartTimeout bounds how long Start waits for a holder to say it
// serves.
const StartTimeout = 15 * time.Second

// Spec is what Start needs to start a holder.
type Spec struct {
	// Argv runs the holder command, before its flags: for pam,
	// [pam, "exec", "hold"].
	Argv []string
	// Env is the environment of the holder and its program: nothing
	// secret (the dispatch file carries that). TERM in it is ignored;
	// Options.Term is the program's TERM.
	Env []string
	// Options describe the holder; Logger and Ready are not used (a
	// holder process logs to <name>.log and answers on the pipe).
	Options
}

// args is the argv after Spec.Argv: flags, then "--" and the command.
func (s Spec) args() []string {
	o := s.Options
	a := []string{
		"--dir=" + o.Dir, "--name=" + o.Name, "--cwd=" + o.Cwd,
		"--run-id=" + o.RunID, "--attempt=" + strconv.Itoa(o.Attempt), "--instance=" + o.Instance,
		"--term=" + o.Term, "--rows=" + strconv.Itoa(o.Rows), "--cols=" + strconv.Itoa(o.Cols),
		fmt.Sprintf("--ready-fd=%d", readyFD),
	}
	if o.PreattachLimit > 0 {
		a = append(a, "--preattach="+strconv.Itoa(o.PreattachLimit))
	}
	if o.PendingLimit > 0 {
		a = append(a, "--pending-limit="+strconv.Itoa(o.PendingLimit))
	}
	if o.InputLimit > 0 {
		a = append(a, "--input-limit="+strconv.Itoa(o.InputLimit))
	}
	return append(append(a, "--"), o.Command...)
}

// Start starts a detached holder and waits until it serves: it returns
// the holder's pid, or the reason the holder gave for not starting (the
// name or the workspace is held by a live holder, the program cannot
// start, …). The holder is a session leader with no controlling
// terminal, its standard files are /dev/null but for errors, which go to
// <name>.log, and it outlives the caller. The caller reaps it while it
// lives (a goroutine waits on it); after the caller ends, init does.
func Start(ctx context.Context, s Spec) (int, error) {
	if len(s.Argv) == 0 || !strings.HasPrefix(s.Argv[0], "/") {
		return 0, errors.New("start holder: the holder command needs an absolute path")
	}
	if !ValidName(s.Name) {
		return 0, fmt.Errorf("start holder: name %q: want pam-<8 lowercase hex>", s.Name)
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return 0, fmt.Errorf("start holder %s: %w", s.Name, err)
	}
	if err := os.Chmod(s.Dir, 0o700); err != nil {
		return 0, fmt.Errorf("start holder %s: %w", s.Name, err)
	}
	logf, err := os.OpenFile(LogPath(s.Dir, s.Name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("start holder %s: %w", s.Name, err)
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("start holder %s: %w", s.Name, err)
	}
	defer pr.Close()
	cmd := exec.Command(s.Argv[0], append(s.Argv[1:], s.args()...)...)
	cmd.Env = s.Env
	cmd.Dir = "/"
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{pw}
	// A session of its own: no controlling terminal, and no signal sent
	// to the caller's process group or terminal reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return 0, fmt.Errorf("start holder %s: %w", s.Name, err)
	}
	pw.Close()
	// The process started here only starts the holder and exits (see
	// Main); it is reaped as soon as it does. Start does not wait for
	// that: a race-detector build sleeps a second on exit, and the run's
	// program is already running. The holder, a child of nobody here,
	// leaves no goroutine behind in the caller.
	go func() { _ = cmd.Wait() }()

	answer := make(chan []byte, 1)
	go func() {
		// One line is the answer; without one, EOF (the holder exited).
		line, _ := bufio.NewReaderSize(io.LimitReader(pr, 4<<10), 4<<10).ReadString('\n')
		answer <- []byte(line)
	}()
	timer := time.NewTimer(StartTimeout)
	defer timer.Stop()
	var b []byte
	select {
	case b = <-answer:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("start holder %s: %w", s.Name, ctx.Err())
	case <-timer.C:
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("start holder %s: no answer within %s", s.Name, StartTimeout)
	}
	msg := strings.TrimSpace(string(b))
	switch {
	case strings.HasPrefix(msg, "ok "):
		pid, err := strconv.Atoi(strings.TrimPrefix(msg, "ok "))
		if err != nil || pid <= 1 {
			return 0, fmt.Errorf("start holder %s: unexpected answer %q", s.Name, msg)
		}
		return pid, nil
	case strings.HasPrefix(msg, "error: "):
		return 0, fmt.Errorf("start holder %s: %w", s.Name, startError(strings.TrimPrefix(msg, "error: ")))
	case msg == "":
		return 0, fmt.Errorf("start holder %s: it exited without an answer (see %s)", s.Name, LogPath(s.Dir, s.Name))
	default:
		return 0, fmt.Errorf("start holder %s: unexpected answer %q", s.Name, msg)
	}
}

// startError is a holder's refusal, keeping ErrHeld recognisable.
func startError(msg string) error {
	if strings.Contains(msg, ErrHeld.Error()) {
		return &heldError{msg: msg}
	}
	return errors.New(msg)
}

type heldError struct{ msg string }

func (e *heldError) Error() string { return e.msg }
func (e *heldError) Unwrap() error { return ErrHeld }

// Main is the holder command: it parses args (the flags Start writes,
// "--", the program), serves until the program ends, and returns the
// process's exit status: 0 when the holder ran (whatever its program's
// code), 1 when it could not start, 2 for bad arguments.
func Main(args []string, stderr io.Writer) int {
	o, readyFile, err := parseArgs(args)
	closeInherited(readyFD)
	if err != nil {
		fmt.Fprintln(stderr, "pam exec hold:", err)
		return 2
	}
	if os.Getenv(detachedEnv) == "" {
		return detach(readyFile, stderr)
	}
	o.Env = slices.DeleteFunc(o.Env, func(kv string) bool { return strings.HasPrefix(kv, detachedEnv+"=") })
	answered := false
	o.Ready = func(err error) {
		answered = true
		if readyFile == nil {
			if err != nil {
				fmt.Fprintln(stderr, "pam exec hold:", err)
			}
			return
		}
		if err != nil {
			fmt.Fprintf(readyFile, "error: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Fprintf(readyFile, "ok %d\n", os.Getpid())
		}
		readyFile.Close()
	}
	// The holder outlives terminals: a hangup means nothing to it, and a
	// SIGTERM or SIGINT sent to it is a cooperative stop of its program,
	// which ends the holder when the program ends.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	stop := make(chan struct{})
	defer close(stop)
	o.onSignal = func(h *holder) {
		go func() {
			for {
				select {
				case <-sigs:
					h.event(Event{Event: "stop", Detail: "signal to the holder"})
					h.signalProgram(syscall.SIGTERM)
				case <-stop:
					return
				}
			}
		}()
	}
	err = Serve(context.Background(), o)
	if err != nil && !answered {
		fmt.Fprintln(stderr, "pam exec hold:", err)
	}
	if err != nil {
		return 1
	}
	return 0
}

// detachedEnv marks the holder process proper: the process Start runs
// starts it again, detached, with this set, and exits.
const detachedEnv = "PAM_HOLDER_DETACHED"

// detach is the first stage of a holder: it starts the holder proper —
// this same command line, in a session of its own, with the readiness
// pipe — and exits at once. The holder is then nobody's child but
// init's: its starter reaps this first stage right away and keeps
// nothing (no goroutine, no process) for it. The holder writes the
// answer on the pipe itself.
func detach(ready *os.File, stderr io.Writer) int {
	fail := func(err error) int {
		if ready != nil {
			fmt.Fprintf(ready, "error: start the holder: %s\n", err)
		}
		fmt.Fprintln(stderr, "pam exec hold:", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), detachedEnv+"=1")
	cmd.Dir = "/"
	cmd.Stderr = stderr
	if ready != nil {
		cmd.ExtraFiles = []*os.File{ready}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	return 0
}

// parseArgs reads the flags Spec.args writes.
func parseArgs(args []string) (Options, *os.File, error) {
	var o Options
	fs := flag.NewFlagSet("pam exec hold", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.Dir, "dir", "", "holders folder")
	fs.StringVar(&o.Name, "name", "", "holder (session) name")
	fs.StringVar(&o.Cwd, "cwd", "", "working directory")
	fs.StringVar(&o.RunID, "run-id", "", "run id")
	fs.IntVar(&o.Attempt, "attempt", 0, "attempt")
	fs.StringVar(&o.Instance, "instance", "", "worker instance id")
	fs.StringVar(&o.Term, "term", "", "TERM of the program")
	fs.IntVar(&o.Rows, "rows", 0, "rows")
	fs.IntVar(&o.Cols, "cols", 0, "cols")
	fs.IntVar(&o.PreattachLimit, "preattach", 0, "output kept for the first reader")
	fs.IntVar(&o.PendingLimit, "pending-limit", 0, "pending bytes past which a reader is released")
	fs.IntVar(&o.InputLimit, "input-limit", 0, "queued input bound")
	fd := fs.Int("ready-fd", -1, "readiness pipe")
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	o.Command = fs.Args()
	o.Env = os.Environ()
	var ready *os.File
	if *fd >= 0 {
		// The program must not inherit the pipe: the starter reads the
		// answer line, and nothing else may keep the pipe open.
		syscall.CloseOnExec(*fd)
		ready = os.NewFile(uintptr(*fd), "ready")
		if ready == nil {
			return o, nil, fmt.Errorf("ready fd %d", *fd)
		}
	}
	if len(o.Command) == 0 {
		return o, ready, errors.New("no program after --")
	}
	return o, ready, nil
}

// closeInherited closes every descriptor above 2 this process inherited
// by accident, but keep: the holder lives for hours, and a pipe its
// starter's parent forgot to mark close-on-exec (a test runner's, a
// service manager's) would be held open — and handed to the program —
// all that time. Go opens its own descriptors close-on-exec, so one
// without the flag came from outside.
func closeInherited(keep int) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 || fd == keep {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC == 0 {
			_ = unix.Close(fd)
		}
	}
}
