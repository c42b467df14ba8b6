package tmux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// control is one tmux control-mode client on pam's server (tmux -C,
// docs/architecture.md#capture-by-control-mode): commands written to it
// run in the server with no process forked per command, and their
// replies come back in order. A capture-pane exec costs a fork and a
// whole tmux client each time; the same command here costs the server's
// work alone.
//
// A control client must be attached to a session to stay. It is attached
// to the worker's helper session (HelperSession), never to a run's: tmux
// 3.3 crashes when a control client is notified while it connects or
// while it leaves cleanly, and a run's session ending would make it leave
// at any time. So it connects once, while pam's own tmux calls wait
// (Tmux.quiet), and it only ever leaves by SIGKILL, which the server
// handles in one step. It holds the write end of its own input as well,
// so that the worker dying does not end that input (a clean leave);
// instead the kernel kills it (Pdeathsig, on Linux).
type control struct {
	cmd     *exec.Cmd
	stdin   *os.File // our write end of the client's input
	timeout time.Duration
	stderr  *boundedBuffer

	mu      sync.Mutex
	pending []pendingReply // one per command sent, in order
	closed  bool
	exited  bool   // "%exit" was read before the end
	reason  string // its reason, if any

	done   chan struct{} // closed when the output has ended
	waited chan struct{} // closed when the process has been reaped
}

// errControlClosed is a command sent to, or waiting on, a control client
// that has gone.
var errControlClosed = errors.New("tmux control client gone")

// helperRe is the form of a helper session's name: not a run's name, so
// that no listing of pam's sessions ever shows it.
var helperRe = regexp.MustCompile(`^pam-capture-[0-9a-f]{8}$`)

// HelperSession is the name of the session a worker's control client is
// attached to: pam-capture- and the first 8 hex characters of the
// worker's instance id (each worker sharing the socket has its own).
// It runs sleep(1) and nothing else; it is not a run, does not match
// ^pam-[0-9a-f]{8}$, and so is never listed, adopted or judged.
func HelperSession(instance string) string {
	if !ValidRunID(instance) {
		return "pam-capture-00000000"
	}
	return "pam-capture-" + instance[:8]
}

// helperLife is what the helper session's sleep is given: as long as
// sleep(1) accepts everywhere.
const helperLife = "2147483647"

// startControl starts a control-mode client attached to the helper
// session, creating it if need be, with the same socket, configuration
// and clean environment as every other invocation. The creating
// invocation hardens the server first, as NewSession does, in case it is
// the one that starts it. It returns once tmux has run those commands;
// meanwhile no other tmux call of t starts (Tmux.quiet).
func (t *Tmux) startControl(ctx context.Context, helper, sleep string) (*control, error) {
	if !helperRe.MatchString(helper) {
		return nil, fmt.Errorf("control client: %w %q", ErrInvalidName, helper)
	}
	cmds := append(hardenCommands(), []string{"new-session", "-A", "-s", helper, "-x", "80", "-y", "24", "--", sleep, helperLife})
	args := commandLine(cmds...)
	args = append(args[:4:4], append([]string{"-C"}, args[4:]...)...)
	cmd := exec.Command(t.bin, args...)
	cmd.Env = t.env
	cmd.Dir = "/"
	cmd.SysProcAttr = controlProcAttr()
	// The input and the output are pipes of our own, not StdinPipe and
	// StdoutPipe: the client hands them to the server, which reads and
	// writes them directly; exec.Cmd.Wait would close them under replies.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("control client: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("control client: %w", err)
	}
	growPipe(outW)
	cmd.Stdin, cmd.Stdout = inR, outW
	cmd.ExtraFiles = []*os.File{inW} // its input never ends while it lives
	c := &control{cmd: cmd, stdin: inW, timeout: t.timeout, stderr: &boundedBuffer{max: 4 << 10},
		done: make(chan struct{}), waited: make(chan struct{})}
	cmd.Stderr = c.stderr

	t.quiet.Lock()
	defer t.quiet.Unlock()
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("control client: %w", err)
	}
	started := make(chan controlEvent, 1)
	go c.read(outR, len(cmds), started)
	go c.reap(outR)
	timer := time.NewTimer(t.timeout)
	defer timer.Stop()
	var failure error
	select {
	case ev := <-started:
		if !ev.failed {
			return c, nil
		}
		failure = classify(&Error{Args: args, Stderr: ev.body + c.stderr.String(), Err: errControlClosed})
	case <-c.done:
		c.Kill()
		msg := c.stderr.String()
		if r := c.exitReason(); r != "" {
			msg = r + ": " + msg
		}
		failure = classify(&Error{Args: args, Stderr: msg, Err: errControlClosed})
	case <-timer.C:
		failure = &Error{Args: args, Err: fmt.Errorf("no answer within %s: %w", t.timeout, context.DeadlineExceeded)}
	case <-ctx.Done():
		failure = &Error{Args: args, Err: ctx.Err()}
	}
	c.Kill()
	return nil, fmt.Errorf("control client on %s: %w", helper, failure)
}

// reap waits for the process. The server holds the output pipe too and
// lets go of it once it has seen the client go; should it not, the read
// end is closed after a grace, so that done never waits on the server.
func (c *control) reap(stdout *os.File) {
	_ = c.cmd.Wait()
	close(c.waited)
	select {
	case <-c.done:
	case <-time.After(time.Second):
		_ = stdout.Close()
	}
}

// read hands each reply to the command waiting for it and the end of
// the start commands (n replies, or the first refusal) to started; it
// closes done when the output ends, and every command still waiting then
// fails.
func (c *control) read(stdout *os.File, n int, started chan<- controlEvent) {
	defer stdout.Close()
	p := newControlReader(stdout)
	for {
		ev, err := p.next()
		if err != nil {
			break
		}
		switch ev.kind {
		case ctlExit:
			c.mu.Lock()
			c.exited, c.reason = true, ev.line
			c.mu.Unlock()
		case ctlReply:
			if ev.flags != 1 {
				// A command the client was started with: not an answer to
				// anything written here.
				if n > 0 {
					if n--; n == 0 || ev.failed {
						n = 0
						started <- ev
					}
				}
				continue
			}
			c.mu.Lock()
			if len(c.pending) > 0 {
				p := c.pending[0]
				c.pending = c.pending[1:]
				p.b.events[p.i], p.b.got[p.i] = ev, true
				if p.b.left--; p.b.left == 0 {
					close(p.b.done)
				}
			}
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	c.closed = true
	for _, p := range c.pending {
		if p.b.left > 0 {
			p.b.left = 0
			close(p.b.done)
		}
	}
	c.pending = nil
	c.mu.Unlock()
	close(c.done)
}

// run sends one command (each argument quoted for tmux's parser) and
// returns its output, as runAll does for one.
func (c *control) run(ctx context.Context, args ...string) (string, error) {
	r := c.runAll(ctx, [][]string{args})
	return r[0].out, r[0].err
}

// reply is the answer to one command of runAll.
type reply struct {
	// out is the command's output, each line ending in "\n".
	out string
	// err is a command tmux refused: an *Error holding its message,
	// classified like an exec's (ErrNoSession for a missing target); or
	// errControlClosed when the client went (or did not answer within
	// the timeout, and was killed: every later reply would be out of
	// step); or ctx's error.
	err error
}

// batch is the replies of one runAll, filled in by the reader (under
// control.mu) as they come.
type batch struct {
	events []controlEvent
	got    []bool
	left   int
	done   chan struct{} // closed when every reply is in, or the client went
}

// pendingReply is one reply a batch waits for.
type pendingReply struct {
	b *batch
	i int
}

// runAll sends cmds in one write and returns their replies in order.
// tmux reads the lines together and runs them back to back: a round of
// captures costs one wake-up of the server and of this process, not one
// per command.
func (c *control) runAll(ctx context.Context, cmds [][]string) []reply {
	replies := make([]reply, len(cmds))
	b := &batch{events: make([]controlEvent, len(cmds)), got: make([]bool, len(cmds)), done: make(chan struct{})}
	var lines strings.Builder
	var queued []pendingReply
	for i, args := range cmds {
		line, err := controlLine(args)
		if err != nil {
			replies[i].err = err
			continue
		}
		lines.WriteString(line)
		queued = append(queued, pendingReply{b, i})
	}
	if len(queued) == 0 {
		return replies
	}
	b.left = len(queued)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fillReplies(replies, cmds, b, errControlClosed)
	}
	// Written and queued under one lock: replies come in the order the
	// lines were written. The pipe takes a round of commands at once.
	if _, err := io.WriteString(c.stdin, lines.String()); err != nil {
		c.mu.Unlock()
		c.Kill()
		return fillReplies(replies, cmds, b, fmt.Errorf("%w: write: %w", errControlClosed, err))
	}
	c.pending = append(c.pending, queued...)
	c.mu.Unlock()

	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	select {
	case <-b.done:
	case <-timer.C:
		c.Kill() // b.done is closed once the reader has ended
		<-b.done
	case <-ctx.Done():
		// What came in is kept; the rest will go to an abandoned batch.
		c.mu.Lock()
		defer c.mu.Unlock()
		return fillReplies(replies, cmds, b, ctx.Err())
	}
	return fillReplies(replies, cmds, b, errControlClosed)
}

// fillReplies turns the events of b into replies; a reply that never
// came is missing. Called once b is complete, or under control.mu.
func fillReplies(replies []reply, cmds [][]string, b *batch, missing error) []reply {
	for i := range replies {
		if replies[i].err != nil {
			continue
		}
		if !b.got[i] {
			replies[i].err = missing
			continue
		}
		ev := b.events[i]
		switch {
		case ev.overflow:
			replies[i].err = &Error{Args: cmds[i], Err: fmt.Errorf("control mode: reply larger than %d bytes or a line longer than %d", maxControlBody, maxControlLine)}
		case ev.failed:
			replies[i].err = classify(&Error{Args: cmds[i], Stderr: ev.body, Err: errors.New("tmux refused the command")})
		default:
			replies[i].out = ev.body
		}
	}
	return replies
}

// controlLine is one command as a line of control-mode input: every
// argument single-quoted, so that tmux's parser takes it literally (no
// variables, no ~, no ;, no { }). An argument holding a quote or a
// control character cannot be written this way and is refused; pam's
// arguments (validated names, fixed formats) never do.
func controlLine(args []string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("control mode: empty command")
	}
	var b strings.Builder
	for i, a := range args {
		for _, r := range a {
			if r == '\'' || r < 0x20 || r == 0x7f {
				return "", fmt.Errorf("control mode: argument %q cannot be quoted", a)
			}
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('\'')
		b.WriteString(a)
		b.WriteByte('\'')
	}
	b.WriteByte('\n')
	return b.String(), nil
}

// Done is closed when the client has gone.
func (c *control) Done() <-chan struct{} { return c.done }

// Exited reports whether the client said %exit before going, as it does
// when its session ends or the server exits; a client killed by a signal
// goes without a word.
func (c *control) Exited() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exited
}

func (c *control) exitReason() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// PID is the client's process id.
func (c *control) PID() int { return c.cmd.Process.Pid }

// Kill ends the client (SIGKILL: the server sees its connection drop and
// forgets it in one step, the one way of leaving that tmux 3.3 survives
// whatever else happens meanwhile) and waits until it is reaped and its
// output has ended.
func (c *control) Kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.waited
	<-c.done
	c.mu.Lock()
	_ = c.stdin.Close()
	c.mu.Unlock()
}

// helperPID asks for the pid of the helper session's sleep.
func (c *control) helperPID(ctx context.Context, helper string) int {
	out, err := c.run(ctx, "display-message", "-p", "-t", "="+helper+":", "#{session_name} #{pane_pid}")
	if err != nil {
		return 0
	}
	name, pid, ok := strings.Cut(strings.TrimSpace(out), " ")
	if !ok || name != helper {
		return 0
	}
	n, _ := strconv.Atoi(pid)
	return n
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.b.Len(); room > 0 {
		b.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
