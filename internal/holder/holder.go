// Package holder is pam's built-in PTY holder, the `pty` executor
// (docs/architecture.md#the-pty-holder): a detached process per run that
// owns a pseudoterminal, runs the run's program on it, and serves a Unix
// socket that any number of readers attach to and leave. Closing every
// reader never signals the program; the terminal can leave, the run
// stays.
//
// The holder reads the PTY once and offers each chunk to every reader
// without waiting on any of them: each reader has its own pending
// buffer and one that falls 1 MiB behind is released alone. Input is
// queued and written by a goroutine of its own, so a large paste never
// makes the output path wait on the program.
package holder

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
)

// Defaults of Options.
const (
	// DefaultRows and DefaultCols are a new PTY's size, as a tmux
	// session's (220×50).
	DefaultRows = 50
	DefaultCols = 220
	// DefaultTerm is the TERM the program draws for when none is given.
	DefaultTerm = "xterm-256color"
	// DefaultPreattach bounds the output kept for the first reader.
	DefaultPreattach = 256 << 10
	// DefaultPendingLimit is how far a reader may fall behind before it
	// is released (1 MiB).
	DefaultPendingLimit = 1 << 20
	// DefaultInputLimit bounds the input queued for the program; a
	// reader sending past it waits (only that reader).
	DefaultInputLimit = 4 << 20
)

const (
	// readChunk is the most PTY output one read (and one frame) carries.
	readChunk = 32 << 10
	// helloWait bounds how long a new connection may take to say hello.
	helloWait = 5 * time.Second
	// redrawPause is how long the PTY keeps the interim size of a
	// redraw, so that the program sees a real change: a program that
	// reads its size after both changes would see the old size and, like
	// ncurses, not repaint.
	redrawPause = 40 * time.Millisecond
	// drainWait bounds how long output is read after the program exited
	// (a background process may hold the terminal open).
	drainWait = time.Second
	// flushWait bounds how long readers get to take their last bytes.
	flushWait = 2 * time.Second
	// killWait bounds how long a SIGKILLed program takes to be reaped.
	killWait = 5 * time.Second
)

// maxSocketPath is the longest socket path Linux takes (sun_path is 108
// bytes with its terminating NUL).
const maxSocketPath = 107

// Options describe one holder.
type Options struct {
	// Dir is the holders folder (<data>/worker/holders): made 0700.
	Dir string
	// Name is the holder's name, the run's session name
	// (^pam-[0-9a-f]{8}$).
	Name string
	// RunID, Attempt and Instance are recorded in the note, for the
	// worker's reconciliation (the tmux executor's @pam_* options).
	RunID    string
	Attempt  int
	Instance string
	// Cwd is the program's working directory and, resolved to its full
	// path, the workspace only one live holder may have.
	Cwd string
	// Term is the TERM the program draws for; default DefaultTerm.
	Term string
	// Command is the program and its arguments; Command[0] is absolute.
	Command []string
	// Env is the program's environment (TERM is set from Term).
	Env []string
	// Rows and Cols are the PTY's first size; default 50×220.
	Rows, Cols int
	// PreattachLimit, PendingLimit and InputLimit override the bounds
	// (tests use small ones); zero means the default.
	PreattachLimit, PendingLimit, InputLimit int
	// Logger gets the holder's failures; nil writes them to <name>.log.
	Logger *slog.Logger
	// Ready, when set, is called once: nil when the socket accepts and
	// the program runs, else why the holder could not start.
	Ready func(error)

	// onSignal, when set, is handed the holder once it runs (Main
	// turns signals to the holder into stops of its program).
	onSignal func(*holder)
}

func (o *Options) check() error {
	if !ValidName(o.Name) {
		return fmt.Errorf("holder name %q: want pam-<8 lowercase hex>", o.Name)
	}
	if !filepath.IsAbs(o.Dir) {
		return fmt.Errorf("holders folder %q is not absolute", o.Dir)
	}
	if n := len(SocketPath(o.Dir, o.Name)); n > maxSocketPath {
		return fmt.Errorf("holder %s: socket path %s is %d bytes, more than a Unix socket takes (%d): use a shorter PAM_DATA_DIR",
			o.Name, SocketPath(o.Dir, o.Name), n, maxSocketPath)
	}
	if len(o.Command) == 0 || !filepath.IsAbs(o.Command[0]) {
		return fmt.Errorf("holder %s: the command needs an absolute program path", o.Name)
	}
	if !filepath.IsAbs(o.Cwd) {
		return fmt.Errorf("holder %s: working directory %q is not absolute", o.Name, o.Cwd)
	}
	if st, err := os.Stat(o.Cwd); err != nil {
		return fmt.Errorf("holder %s: working directory: %w", o.Name, err)
	} else if !st.IsDir() {
		return fmt.Errorf("holder %s: working directory %s is not a directory", o.Name, o.Cwd)
	}
	if o.Term == "" {
		o.Term = DefaultTerm
	}
	if o.Rows <= 0 || o.Cols <= 0 {
		o.Rows, o.Cols = DefaultRows, DefaultCols
	}
	if o.Rows > MaxDim || o.Cols > MaxDim {
		return fmt.Errorf("holder %s: size %dx%d out of range", o.Name, o.Rows, o.Cols)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.PreattachLimit, DefaultPreattach)
	def(&o.PendingLimit, DefaultPendingLimit)
	def(&o.InputLimit, DefaultInputLimit)
	return nil
}

// holder is one running holder.
type holder struct {
	o    Options
	log  *slog.Logger
	jr   *journal
	ptmx *os.File
	cmd  *exec.Cmd
	ln   *net.UnixListener

	mu       sync.Mutex
	readers  map[int]*reader
	all      map[net.Conn]struct{} // every open connection
	nextID   int
	everRead bool   // a reader has attached: no more pre-attach output
	pre      []byte // output before the first reader, newest kept
	rows     int
	cols     int
	ending   bool

	sizeMu sync.Mutex // orders resizes and redraws
	input  *inputQueue

	exited chan struct{} // the program was reaped
	code   int           // its exit code, once exited is closed
	killed chan struct{} // a kill was asked for
	kill   sync.Once
	conns  sync.WaitGroup // serveConn goroutines
}

// reader is one attached connection.
type reader struct {
	id      int
	conn    net.Conn
	write   bool
	pending []byte        // encoded frames not yet handed to the socket (h.mu)
	wake    chan struct{} // cap 1: pending grew, or the reader ends
	quit    chan struct{} // closed when the reader is dropped
	closing bool          // flush what is pending, then close (h.mu)
	gone    bool          // dropped (h.mu)
	// released: dropped for falling PendingLimit behind (h.mu)
	released bool
	// skip: past PendingLimit its pending output is dropped instead
	// (Hello.Skip); skips counts how often, dropped how many bytes (h.mu).
	skip    bool
	skips   int
	dropped int64
}

// Serve runs a holder until its program ends (or a kill, or ctx ends,
// which kills it too). It returns nil when the holder ran; an error
// before o.Ready(nil) means it never started (the name or workspace is
// held, the command cannot start, …), and o.Ready gets it too.
func Serve(ctx context.Context, o Options) (err error) {
	ready := o.Ready
	if ready == nil {
		ready = func(error) {}
	}
	started := false
	defer func() {
		if !started {
			ready(err)
		}
	}()
	if err := o.check(); err != nil {
		return err
	}
	if err := makePrivateDir(o.Dir); err != nil {
		return err
	}
	ws, err := Workspace(o.Cwd)
	if err != nil {
		return err
	}
	release, err := takeLocks(o, ws)
	if err != nil {
		return err
	}
	defer release()

	logger := o.Logger
	if logger == nil {
		el, err := openErrLog(o.Dir, o.Name)
		if err != nil {
			return err
		}
		defer el.close()
		logger = slog.New(slog.NewTextHandler(el, nil)).With("holder", o.Name)
	}
	jr, err := openJournal(o.Dir, o.Name)
	if err != nil {
		return err
	}
	defer jr.close()

	ln, err := listenSocket(o)
	if err != nil {
		return err
	}
	defer ln.Close()
	cmd, ptmx, err := startProgram(o)
	if err != nil {
		return err
	}
	h := &holder{
		o: o, log: logger, jr: jr, ptmx: ptmx, cmd: cmd, ln: ln,
		readers: map[int]*reader{}, all: map[net.Conn]struct{}{}, rows: o.Rows, cols: o.Cols,
		input:  newInputQueue(o.InputLimit),
		exited: make(chan struct{}), killed: make(chan struct{}),
	}
	note := Note{
		Name: o.Name, PID: os.Getpid(), ChildPID: cmd.Process.Pid, RunID: o.RunID, Attempt: o.Attempt,
		Instance: o.Instance, Cwd: o.Cwd, Term: o.Term, StartedAt: time.Now().UTC(),
	}
	if err := writeNote(o.Dir, note); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = ptmx.Close()
		return fmt.Errorf("holder %s: %w", o.Name, err)
	}
	defer os.Remove(NotePath(o.Dir, o.Name))
	if o.onSignal != nil {
		o.onSignal(h)
	}
	h.event(Event{Event: "started", PID: note.PID, ChildPID: note.ChildPID, RunID: o.RunID, Attempt: o.Attempt,
		Rows: o.Rows, Cols: o.Cols, Detail: "workspace " + ws})
	started = true
	ready(nil)
	h.run(ctx)
	return nil
}

// makePrivateDir makes the holders folder, only its user's: every
// holder's socket there takes input for a program.
func makePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("holders folder: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("holders folder: %w", err)
	}
	return nil
}

// takeLocks takes the name's lock, then the workspace's: one holder per
// name and one per workspace. release gives both back.
func takeLocks(o Options, ws string) (release func(), err error) {
	who := fmt.Sprintf("session %s, pid %d", o.Name, os.Getpid())
	nameLock, err := tryFlock(lockPath(o.Dir, o.Name), who)
	// A List sweeping a dead holder's files holds the name lock for a
	// moment: that is no live holder, so wait it out.
	for deadline := time.Now().Add(time.Second); err != nil && strings.Contains(err.Error(), sweeping) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		nameLock, err = tryFlock(lockPath(o.Dir, o.Name), who)
	}
	if err != nil {
		return nil, fmt.Errorf("holder %s: the name is %w", o.Name, err)
	}
	wsLock, err := tryFlock(workspaceLockPath(o.Dir, ws), who)
	if err != nil {
		nameLock.release()
		return nil, fmt.Errorf("holder %s: workspace %s is %w", o.Name, ws, err)
	}
	return func() { wsLock.release(); nameLock.release() }, nil
}

// listenSocket listens on the holder's socket, for its user only. Both
// locks are the caller's: whatever socket file is there belongs to a
// holder that is gone, and is replaced.
func listenSocket(o Options) (*net.UnixListener, error) {
	sock := SocketPath(o.Dir, o.Name)
	if err := os.Remove(sock); err != nil && !isNotExist(err) {
		return nil, fmt.Errorf("holder %s: remove the stale socket: %w", o.Name, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("holder %s: listen: %w", o.Name, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("holder %s: socket mode: %w", o.Name, err)
	}
	return ln, nil
}

// startProgram starts the held command on a new PTY of the asked size,
// its TERM the holder's; the PTY's master is made pollable (its reads
// park a goroutine, not a thread, and Close unblocks them).
func startProgram(o Options) (*exec.Cmd, *os.File, error) {
	cmd := exec.Command(o.Command[0], o.Command[1:]...)
	cmd.Dir = o.Cwd
	cmd.Env = append(withoutTerm(o.Env), "TERM="+o.Term)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: uint16(o.Rows), Cols: uint16(o.Cols)})
	if err != nil {
		return nil, nil, fmt.Errorf("holder %s: start %s: %w", o.Name, o.Command[0], err)
	}
	if ptmx, err = pollable(ptmx); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, nil, fmt.Errorf("holder %s: %w", o.Name, err)
	}
	return cmd, ptmx, nil
}

// run serves readers until the program ends or is killed.
func (h *holder) run(ctx context.Context) {
	go func() {
		err := h.cmd.Wait()
		h.code = exitCode(h.cmd.ProcessState, err)
		close(h.exited)
	}()
	outDone := make(chan struct{})
	go func() { defer close(outDone); h.outputLoop() }()
	inDone := make(chan struct{})
	go func() { defer close(inDone); h.inputLoop() }()
	acceptDone := make(chan struct{})
	go func() { defer close(acceptDone); h.acceptLoop() }()

	reason := "exited"
	select {
	case <-h.exited:
	case <-h.killed:
		reason = "killed"
	case <-ctx.Done():
		h.requestKill("shutdown")
		reason = "killed"
	}
	if reason == "killed" {
		select {
		case <-h.exited:
		case <-time.After(killWait):
			h.log.Error("the killed program was not reaped", "pid", h.cmd.Process.Pid)
		}
	}
	// What the program wrote last still reaches the readers.
	select {
	case <-outDone:
	case <-time.After(drainWait):
	}
	code := -1
	select {
	case <-h.exited:
		code = h.code
	default:
	}
	h.event(Event{Event: reason, Code: &code})
	_ = h.ln.Close()
	<-acceptDone
	h.finish(Exit{Reason: reason, Code: code})
	h.input.close()
	_ = h.ptmx.Close()
	<-inDone
	h.event(Event{Event: "holder_exit"})
}

// outputLoop reads the PTY once and offers each chunk to every reader.
func (h *holder) outputLoop() {
	buf := make([]byte, readChunk)
	for {
		n, err := h.ptmx.Read(buf)
		if n > 0 {
			h.broadcast(buf[:n])
		}
		if err != nil {
			return // EIO: no process has the terminal open any more
		}
	}
}

// event journals e; a failure goes to the log.
func (h *holder) event(e Event) {
	if err := h.jr.add(e); err != nil {
		h.log.Error("journal", "event", e.Event, "err", err)
	}
}

// poke wakes a goroutine waiting on c without ever blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// exitCode is the program's exit code, -1 when a signal ended it.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1
	}
	_ = err
	return ps.ExitCode()
}

// withoutTerm drops TERM from env: the holder sets it.
func withoutTerm(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if len(kv) >= 5 && kv[:5] == "TERM=" {
			continue
		}
		out = append(out, kv)
	}
	return out
}
