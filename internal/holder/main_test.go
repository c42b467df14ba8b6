package holder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"pam/internal/eventually"
)

// The test binary is every process these tests need: run with a first
// argument naming a role, it is the holder command (as `pam exec hold`
// is) or one of the programs a holder runs, all real processes on a real
// PTY. Run without one, it runs the tests and fails the package when a
// goroutine outlives them.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		if role, ok := roles[os.Args[1]]; ok {
			os.Exit(role(os.Args[2:]))
		}
	}
	goleak.VerifyTestMain(m)
}

var roles = map[string]func(args []string) int{
	"__hold": func(args []string) int { return Main(args, os.Stderr) },
	// __sleep: stays until signalled; records every signal it gets in
	// the file named by its argument, one name a line.
	"__sleep": func(args []string) int {
		sigs := make(chan os.Signal, 8)
		signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGWINCH)
		fmt.Println("sleeping")
		for s := range sigs {
			if len(args) > 0 {
				f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
				if err == nil {
					fmt.Fprintln(f, s.(syscall.Signal).String())
					f.Close()
				}
			}
			if s == syscall.SIGTERM {
				fmt.Println("terminated, unwinding")
				return 7
			}
		}
		return 0
	},
	// __flood N RATE REPORT: writes REPORT.ready, waits for SIGUSR1, writes N bytes of output
	// (no newline, so the terminal adds nothing) in 32 KiB writes, at
	// most RATE MiB/s (0: as fast as the terminal takes them), then
	// writes "TOTAL_NS MAX_WRITE_NS" to REPORT and exits: how long the
	// whole flood and its slowest single write took.
	"__flood": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		rate, _ := strconv.Atoi(args[1])
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGUSR1)
		fmt.Print("ready")
		// A SIGUSR1 before Notify would be dropped (Go ignores it): the
		// test sends it once this file exists.
		_ = os.WriteFile(args[2]+".ready", nil, 0o600)
		<-sigs
		chunk := []byte(strings.Repeat("abcdefghijklmnopqrstuvwxyz012345", 1024)) // 32 KiB
		start := time.Now()
		var slowest time.Duration
		// Paced without catching up: a chunk at most every interval, so
		// a pause of the program is never followed by a burst.
		interval := time.Duration(0)
		if rate > 0 {
			interval = time.Duration(float64(len(chunk)) / float64(rate<<20) * float64(time.Second))
		}
		next := start
		for done := 0; done < n; {
			if interval > 0 {
				time.Sleep(time.Until(next))
				next = time.Now().Add(interval)
			}
			k := min(n-done, len(chunk))
			t0 := time.Now()
			if _, err := os.Stdout.Write(chunk[:k]); err != nil {
				return 3
			}
			slowest = max(slowest, time.Since(t0))
			done += k
		}
		el := time.Since(start)
		_ = os.WriteFile(args[2], []byte(fmt.Sprintf("%d %d", el.Nanoseconds(), slowest.Nanoseconds())), 0o600)
		return 0
	},
	// __painter: paints its screen at start and again on every SIGWINCH:
	// clear, then "painted #N at RxC" (N counts paints) on the first row
	// and a frame on the last row; it never reads its input.
	"__painter": func(args []string) int {
		sigs := make(chan os.Signal, 8)
		signal.Notify(sigs, syscall.SIGWINCH, syscall.SIGTERM)
		paint := func(n int) {
			ws, _ := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
			fmt.Printf("\x1b[H\x1b[2Jpainted #%d at %dx%d\x1b[%d;1Hbottom line", n, ws.Row, ws.Col, ws.Row)
		}
		paint(0)
		for n := 1; ; n++ {
			if s := <-sigs; s == syscall.SIGTERM {
				return 0
			}
			paint(n)
		}
	},
	// __ticker: writes a line with the wall clock in nanoseconds every
	// millisecond until signalled; it never reads its input.
	"__ticker": func(args []string) int {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		t := time.NewTicker(time.Millisecond)
		for {
			select {
			case <-sigs:
				return 0
			case <-t.C:
				fmt.Printf("tick %d\n", time.Now().UnixNano())
			}
		}
	},
	// __reader DIR NAME: attaches as a reader and counts output bytes
	// until the connection ends, then prints "bytes N exit REASON". It
	// reads lean (payloads discarded, not copied) so that it keeps up
	// with a flood on a loaded machine.
	"__reader": func(args []string) int {
		c, err := Dial(args[0], args[1], Hello{})
		if err != nil {
			fmt.Println("dial:", err)
			return 1
		}
		fmt.Println("attached")
		total, reason := 0, "none"
		br := c.br
		var h [headerLen]byte
		for {
			if _, err := io.ReadFull(br, h[:]); err != nil {
				break
			}
			n := int(binary.BigEndian.Uint32(h[1:]))
			if FrameType(h[0]) == FrameExit {
				p := make([]byte, n)
				if _, err := io.ReadFull(br, p); err != nil {
					break
				}
				var e Exit
				_ = json.Unmarshal(p, &e)
				reason = e.Reason
				continue
			}
			if _, err := br.Discard(n); err != nil {
				break
			}
			if FrameType(h[0]) == FrameOutput {
				total += n
			}
		}
		fmt.Printf("bytes %d exit %s\n", total, reason)
		return 0
	},
}

// testBin is the absolute path of the test binary.
func testBin(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fixture is a holders folder and a workspace for one test.
type fixture struct {
	t   testing.TB
	dir string // holders folder
	ws  string // a workspace
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, dir: filepath.Join(base, "holders"), ws: ws}
}

// spec is a holder running the test binary in role with args.
func (f *fixture) spec(name, cwd, role string, args ...string) Spec {
	bin := testBin(f.t)
	return Spec{
		Argv: []string{bin, "__hold"},
		// GORACE: a race build sleeps a second before it exits, and
		// Start's goroutine that reaps the starting process lives as long:
		// longer than goleak waits when a test starts a holder last.
		Env: []string{"PATH=/usr/bin:/bin", "HOME=" + cwd, "LANG=C.UTF-8", "GORACE=atexit_sleep_ms=0"},
		Options: Options{
			Dir: f.dir, Name: name, Cwd: cwd, RunID: "6f1c2a3b-0000-4000-8000-000000000001", Attempt: 1,
			Command: append([]string{bin, role}, args...),
		},
	}
}

// start starts a holder and arranges for it to be killed at the end.
func (f *fixture) start(s Spec) int {
	f.t.Helper()
	pid, err := Start(context.Background(), s)
	if err != nil {
		f.t.Fatalf("start holder: %v", err)
	}
	n, _ := ReadNote(s.Dir, s.Name)
	f.t.Cleanup(func() { killHolder(pid, n.ChildPID) })
	return pid
}

// killHolder ends a holder the way a test's cleanup must: SIGKILL to
// its program's process group (the test programs ignore the hangup a
// dying holder leaves them) and to the holder.
func killHolder(pid, child int) {
	if child > 1 {
		_ = syscall.Kill(-child, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// listening reports whether the holder's socket accepts a connection.
// A holder killed with SIGKILL is not its starter's child (it was
// started detached), so a test waits for its process to go and its
// socket to stop accepting: the process shows as a zombie while its
// other threads still exit, its files open.
func listening(dir, name string) bool {
	c, err := net.Dial("unix", SocketPath(dir, name))
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// dial attaches a reader, closed at the end of the test.
func (f *fixture) dial(name string, h Hello) *Conn {
	f.t.Helper()
	c, err := Dial(f.dir, name, h)
	if err != nil {
		f.t.Fatalf("dial: %v", err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// events reads the holder's journal.
func (f *fixture) events(name string) []Event {
	ev, err := ReadEvents(EventsPath(f.dir, name))
	if err != nil && !os.IsNotExist(err) {
		f.t.Fatalf("events: %v", err)
	}
	return ev
}

// hasEvent reports whether the journal has an event of kind.
func (f *fixture) hasEvent(name, kind string) bool {
	for _, e := range f.events(name) {
		if e.Event == kind {
			return true
		}
	}
	return false
}

// processGone reports whether pid no longer exists (or is a zombie).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// readerProc is a reader in a process of its own (one a test can stop
// with SIGSTOP).
type readerProc struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

// startReader starts `__reader dir name` and waits until it attached.
func startReader(t *testing.T, dir, name string) *readerProc {
	t.Helper()
	cmd := exec.Command(testBin(t), "__reader", dir, name)
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &readerProc{cmd: cmd, out: &bytes.Buffer{}, done: make(chan struct{})}
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done })
	attached := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		br := bufio.NewReader(pr)
		line, _ := br.ReadString('\n')
		attached <- line
		p.out.WriteString(line)
		_, _ = io.Copy(p.out, br)
	}()
	go func() { _ = cmd.Wait(); pw.Close(); <-copied; close(p.done) }()
	select {
	case line := <-attached:
		if line != "attached\n" {
			t.Fatalf("reader: %q", line)
		}
	case <-time.After(eventually.Medium):
		t.Fatal("the reader process did not attach")
	}
	return p
}

// wait waits for the reader to end and returns what it printed.
func (p *readerProc) wait(t *testing.T) string {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(eventually.Long):
		t.Fatal("the reader process did not end")
	}
	return p.out.String()
}

// waitReady waits until a __flood program that reports to report is
// ready for its SIGUSR1.
func waitReady(t testing.TB, report string) {
	t.Helper()
	if !eventually.Within(eventually.Medium, func() bool {
		_, err := os.Stat(report + ".ready")
		return err == nil
	}) {
		t.Fatal("the flood program never got ready")
	}
}
