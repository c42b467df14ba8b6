// Package benchproc starts the child processes of the bench drivers
// (internal/loadtest, internal/fleetsim) and of the tests (package
// pamtest): one way to start, reap and stop a process, in a group of its
// own. It is part of the measuring tool (cmd/pam-bench) and of the
// tests, not of bin/pam.
package benchproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Proc is a process a driver or a test started (pamtest's are too). It
// runs in a process group of its own, so that a terminal's Ctrl-C
// reaches only the driver, which then stops everything in order; on
// Linux it also gets SIGTERM if the driver dies outright.
type Proc struct {
	// Name labels it in messages ("serve", "worker").
	Name string
	// Log is the file its stdout and stderr are appended to; empty for a
	// process started by StartCmd, whose output goes where its caller
	// said.
	Log string
	cmd *exec.Cmd
	// from is where its own output starts in Log: a file a restarted
	// process shares with the one before it.
	from int64
	done chan struct{}
	err  error // the exit, once done is closed
}

// Start runs `bin args...` in dir with env, its stdout and stderr
// appended to the file logPath.
func Start(name, bin, dir, logPath string, env []string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	p, err := StartCmd(name, cmd, func() { f.Close() })
	if err != nil {
		f.Close()
		return nil, err
	}
	p.Log, p.from = logPath, fi.Size()
	return p, nil
}

// StartCmd starts cmd, made by the caller, as Start does (a process
// group of its own, SIGTERM when this process dies) and reaps it in the
// background; reaped, when not nil, is called once it has been.
func StartCmd(name string, cmd *exec.Cmd, reaped func()) (*Proc, error) {
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if reaped != nil {
			reaped()
		}
		close(p.done)
	}()
	return p, nil
}

// PID is the process's id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// State says how it exited, once it has.
func (p *Proc) State() string {
	if !p.Exited() {
		return "running"
	}
	if p.cmd.ProcessState != nil {
		return p.cmd.ProcessState.String()
	}
	return fmt.Sprint(p.err)
}

// Stop sends SIGTERM, waits up to grace, then kills; it returns once the
// process is reaped.
func (p *Proc) Stop(grace time.Duration) { p.StopWith(syscall.SIGTERM, grace) }

// StopWith is Stop with another signal than SIGTERM.
func (p *Proc) StopWith(sig syscall.Signal, grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Output is what the process wrote so far to its Log.
func (p *Proc) Output() string {
	if p.Log == "" {
		return ""
	}
	b, _ := os.ReadFile(p.Log)
	if int64(len(b)) < p.from {
		return ""
	}
	return string(b[p.from:])
}

// Tail is the last n lines of its output, for an error message.
func (p *Proc) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var listenRe = regexp.MustCompile(`pam serve listening on (\S+)`)

// WaitListening waits until a `pam serve` prints where it listens and
// returns that URL; it fails if the process exits first, ctx ends or d
// passes.
func (p *Proc) WaitListening(ctx context.Context, d time.Duration) (string, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := listenRe.FindStringSubmatch(p.Output()); m != nil {
			return m[1], nil
		}
		select {
		case <-p.done:
			if m := listenRe.FindStringSubmatch(p.Output()); m != nil {
				return m[1], nil
			}
			return "", fmt.Errorf("pam %s exited (%s) before listening:\n%s", p.Name, p.State(), p.Tail(20))
		case <-timer.C:
			return "", errors.New("pam " + p.Name + " did not listen within " + d.String())
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for pam %s to listen: %w", p.Name, ctx.Err())
		case <-tick.C:
		}
	}
}
