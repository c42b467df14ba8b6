package tmux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Capturer is how the worker captures panes (docs/architecture.md#capture-by-control-mode):
// through one control-mode client for the whole server, so that a
// capture forks nothing, and only for panes that may have changed since
// their last capture, so that an idle pane costs nothing but its line in
// one list-panes per round. While the control client is down it
// captures by exec, exactly as Tmux.Capture, and starts a new client
// with backoff.
//
// The worker calls Start once, then per round Refresh with the sessions
// it captures, MayHaveChanged for each, and CaptureAll for those that
// may have; Close when it stops. It is safe for concurrent use.
type Capturer struct {
	t          *Tmux
	log        *slog.Logger
	helper     string // the helper session (HelperSession)
	sleep      string // sleep(1), the helper session's program
	backoffMin time.Duration
	backoffMax time.Duration

	mu        sync.Mutex
	ctl       *control
	ctlSince  time.Time
	helperPID int // the helper's sleep, ended by Close
	retryAt   time.Time
	backoff   time.Duration
	// marks are the panes' change marks from the last Refresh; nil when
	// unknown (no control client), and then every pane may have changed.
	marks map[SessionName]paneMark
	// seen is, per session, the mark and the time of its last capture.
	seen  map[SessionName]seenMark
	stats CaptureStats
}

// CapturerOptions configure a Capturer.
type CapturerOptions struct {
	// Instance is the worker's instance id: it names the helper session
	// the control client is attached to (HelperSession).
	Instance string
	// Logger gets the control client's starts and losses; nil discards.
	Logger *slog.Logger
	// BackoffMin and BackoffMax bound the wait before another control
	// client is started after one failed to start or died; default 1s
	// and 30s. The backoff grows with each failure and starts over once
	// a client has lasted BackoffMax.
	BackoffMin, BackoffMax time.Duration
}

// CaptureStats count what a Capturer did, for tests and benchmarks.
type CaptureStats struct {
	// Control and Exec count captures through the control client and by
	// exec (while it was down, or for a reply too large for it).
	Control, Exec int64
	// Skipped counts MayHaveChanged answering false: captures not made.
	Skipped int64
	// Starts counts control clients started; Lost, those that went.
	Starts, Lost int64
}

// paneMark is what list-panes says of a session's active pane that
// changes whenever its screen may have: the pane, its size, and
// window_activity, the second of the last output tmux read from it.
type paneMark struct {
	pane     string
	size     string
	activity int64
}

type seenMark struct {
	mark paneMark
	at   time.Time // when its capture was asked for
}

// markFormat is one line per pane of list-panes -a; the session name is
// last since a foreign session's name may hold spaces.
const markFormat = "#{window_active} #{pane_active} #{pane_id} #{pane_width}x#{pane_height} #{window_activity} #{session_name}"

// NewCapturer returns a Capturer on t's server. It starts no process
// before Start or Refresh.
func (t *Tmux) NewCapturer(o CapturerOptions) *Capturer {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = time.Second
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = max(30*time.Second, o.BackoffMin)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		sleep = "/bin/sleep"
	}
	return &Capturer{t: t, log: o.Logger, helper: HelperSession(o.Instance), sleep: sleep,
		backoffMin: o.BackoffMin, backoffMax: o.BackoffMax, backoff: o.BackoffMin, seen: map[SessionName]seenMark{}}
}

// Start starts the control client now, if there is none: the worker
// calls it before it starts any session of its own, so that the client
// connects while the server is quiet. A server that is not running is
// started, hardened, with the helper session alone. On failure captures
// go by exec, and Refresh tries again after the backoff.
func (c *Capturer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctl != nil {
		return nil
	}
	return c.startLocked(ctx)
}

// Refresh prepares a round of captures of the sessions in live: it
// starts a control client if there is none, there are sessions, and the
// backoff allows; and it reads every pane's change mark through it in
// one list-panes. When the marks cannot be read every pane counts as
// changed.
func (c *Capturer) Refresh(ctx context.Context, live []SessionName) {
	c.mu.Lock()
	c.marks = nil
	for name := range c.seen {
		if !containsName(live, name) {
			delete(c.seen, name)
		}
	}
	if c.ctl != nil {
		select {
		case <-c.ctl.Done():
			c.forgetLocked(c.ctl, errControlClosed)
		default:
		}
	}
	if c.ctl == nil && len(live) > 0 && !time.Now().Before(c.retryAt) {
		_ = c.startLocked(ctx)
	}
	ctl := c.ctl
	c.mu.Unlock()
	if ctl == nil {
		return
	}
	out, err := ctl.run(ctx, "list-panes", "-a", "-F", markFormat)
	if err != nil {
		if errors.Is(err, errControlClosed) {
			c.lost(ctl, err)
		} else if ctx.Err() == nil {
			c.log.Warn("capture: list panes", "err", err)
		}
		return
	}
	marks := parseMarks(out)
	c.mu.Lock()
	if c.ctl == ctl {
		c.marks = marks
	}
	c.mu.Unlock()
}

// RefreshPanes reads the change marks of names alone, one
// display-message each, in one batch: for a few watched panes several
// times a second, where a list-panes -a of every pane would cost the
// server far more (each pane's line costs it about 15 µs). It starts no
// control client: without one it reports false, and the marks stay
// unknown.
func (c *Capturer) RefreshPanes(ctx context.Context, names []SessionName) bool {
	c.mu.Lock()
	c.marks = nil
	ctl := c.ctl
	c.mu.Unlock()
	if ctl == nil {
		return false
	}
	cmds := make([][]string, 0, len(names))
	for _, n := range names {
		if n.check() == nil {
			cmds = append(cmds, []string{"display-message", "-p", "-t", n.target(), markFormat})
		}
	}
	marks := map[SessionName]paneMark{}
	for _, r := range ctl.runAll(ctx, cmds) {
		switch {
		case r.err == nil:
			// display-message formats a missing target with no session:
			// parseMarks keeps only lines naming a pam session.
			for n, m := range parseMarks(r.out) {
				marks[n] = m
			}
		case errors.Is(r.err, errControlClosed):
			c.lost(ctl, r.err)
			return false
		case ctx.Err() != nil:
			return false
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctl != ctl {
		return false
	}
	c.marks = marks
	return true
}

// startLocked starts a control client; on failure it sets the backoff.
func (c *Capturer) startLocked(ctx context.Context) error {
	c.sweepLocked(ctx)
	ctl, err := c.t.startControl(ctx, c.helper, c.sleep)
	if err != nil {
		if ctx.Err() == nil {
			c.retryAt = time.Now().Add(c.backoff)
			c.log.Warn("capture: control client did not start; capturing by exec", "err", err, "retry_in", c.backoff)
			c.backoff = min(2*c.backoff, c.backoffMax)
		}
		return err
	}
	c.ctl, c.ctlSince = ctl, time.Now()
	c.helperPID = ctl.helperPID(ctx, c.helper)
	c.stats.Starts++
	c.log.Debug("capture: control client started", "helper", c.helper, "pid", ctl.PID())
	return nil
}

// sweepLocked kills any control client left attached to the helper
// session (a worker that died where the kernel could not kill its
// client with it), by SIGKILL, the one safe way out for it.
func (c *Capturer) sweepLocked(ctx context.Context) {
	out, err := c.t.run(ctx, []string{"list-clients", "-t", "=" + c.helper + ":", "-F", "#{client_control_mode} #{client_pid}"})
	if err != nil {
		return // no helper, no server: nothing left over
	}
	for line := range strings.SplitSeq(out, "\n") {
		mode, pid, ok := strings.Cut(line, " ")
		if n, err := strconv.Atoi(pid); ok && mode == "1" && err == nil && n > 1 {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	}
}

// lost forgets ctl after a failure through it, and kills it.
func (c *Capturer) lost(ctl *control, err error) {
	c.mu.Lock()
	c.forgetLocked(ctl, err)
	c.mu.Unlock()
}

// forgetLocked kills ctl and forgets it, if it is the current client. A
// client that left saying %exit (its helper session or the server went)
// is replaced at the next round; one that died silently (killed) or
// stopped answering, after the backoff.
func (c *Capturer) forgetLocked(ctl *control, err error) {
	ctl.Kill()
	if c.ctl != ctl {
		return
	}
	c.ctl, c.marks = nil, nil
	c.stats.Lost++
	if time.Since(c.ctlSince) >= c.backoffMax {
		c.backoff = c.backoffMin
	}
	if ctl.Exited() {
		c.retryAt = time.Time{}
		c.log.Info("capture: control client left; starting another", "reason", ctl.exitReason())
		return
	}
	c.retryAt = time.Now().Add(c.backoff)
	c.log.Warn("capture: control client lost; capturing by exec", "err", err, "retry_in", c.backoff)
	c.backoff = min(2*c.backoff, c.backoffMax)
}

// MayHaveChanged reports whether the pane of name may show something
// else than at its last capture. It is false only when the last Refresh
// read the pane's mark, that mark equals the one seen at the last
// capture, and the pane's last output is from a second before the one
// that capture was asked in (window_activity counts whole seconds: output
// within that second may have come after the capture, so the pane is
// captured once more — one extra capture, never a missed change).
func (c *Capturer) MayHaveChanged(name SessionName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.marks == nil {
		return true
	}
	m, ok := c.marks[name]
	if !ok {
		return true // gone, or not listed yet: the capture says which
	}
	s, ok := c.seen[name]
	if !ok || s.mark != m || m.activity >= s.at.Unix() {
		return true
	}
	c.stats.Skipped++
	return false
}

// Capture returns the visible pane text with its ANSI escape sequences,
// byte for byte what `capture-pane -p -e` writes, as CaptureAll does for
// one session.
func (c *Capturer) Capture(ctx context.Context, name SessionName) (string, error) {
	r := c.CaptureAll(ctx, []SessionName{name})[0]
	return r.Text, r.Err
}

// Captured is one pane's capture of CaptureAll.
type Captured struct {
	Name SessionName
	// Text is what `capture-pane -p -e` writes for the pane.
	Text string
	// Err is ErrNoSession when the session is gone.
	Err error
}

// CaptureAll captures the panes of names: through the control client in
// one batch when there is one, else (and for any capture it failed, or
// when it goes under the call) by exec, one process each, as
// Tmux.Capture.
func (c *Capturer) CaptureAll(ctx context.Context, names []SessionName) []Captured {
	res := make([]Captured, len(names))
	var cmds [][]string
	var idx []int
	for i, n := range names {
		res[i].Name = n
		if err := n.check(); err != nil {
			res[i].Err = err
			continue
		}
		cmds = append(cmds, []string{"capture-pane", "-p", "-e", "-t", n.target()})
		idx = append(idx, i)
	}
	c.mu.Lock()
	ctl := c.ctl
	marks := c.marks
	c.mu.Unlock()
	at := time.Now()
	todo := idx // what is left for exec
	if ctl != nil && len(cmds) > 0 {
		todo = nil
		var lostErr error
		for k, r := range ctl.runAll(ctx, cmds) {
			i := idx[k]
			switch {
			case r.err == nil:
				res[i].Text = r.out
				c.captured(names[i], marks[names[i]], at, &c.stats.Control)
			case gone(r.err):
				res[i].Err = fmt.Errorf("capture %s: %w", names[i], ErrNoSession)
			case errors.Is(r.err, errControlClosed):
				lostErr = r.err
				todo = append(todo, i)
			case ctx.Err() != nil:
				res[i].Err = fmt.Errorf("capture %s: %w", names[i], r.err)
			default:
				c.log.Warn("capture: through the control client; capturing by exec", "session", names[i].String(), "err", r.err)
				todo = append(todo, i)
			}
		}
		if lostErr != nil {
			c.lost(ctl, lostErr)
		}
	}
	for _, i := range todo {
		res[i].Text, res[i].Err = c.t.Capture(ctx, names[i])
		if res[i].Err == nil {
			c.captured(names[i], marks[names[i]], at, &c.stats.Exec)
		}
	}
	return res
}

func (c *Capturer) captured(name SessionName, mark paneMark, at time.Time, count *int64) {
	c.mu.Lock()
	c.seen[name] = seenMark{mark: mark, at: at}
	*count++
	c.mu.Unlock()
}

// Stats returns the counts so far.
func (c *Capturer) Stats() CaptureStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// ControlPID is the pid of the current control client, 0 when there is
// none: for tests that kill it, and for the benchmark's CPU accounting.
func (c *Capturer) ControlPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctl == nil {
		return 0
	}
	return c.ctl.PID()
}

// Close kills the control client and then ends the helper session's
// sleep, so that the helper goes with the worker (and the server with
// its last session, as it did before). The runs' sessions are not
// touched. The Capturer stays usable: the next Refresh starts another.
func (c *Capturer) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctl := c.ctl
	c.ctl, c.marks = nil, nil
	if ctl == nil {
		return
	}
	ctl.Kill()
	// The server has seen the client go (its output ended with it): the
	// helper session can go without a control client attached to it.
	if c.helperPID > 1 {
		_ = syscall.Kill(c.helperPID, syscall.SIGTERM)
		c.helperPID = 0
	}
}

// parseMarks reads list-panes output in markFormat: the mark of each pam
// session's active pane in its current window. Lines of other sessions,
// and malformed ones, are skipped.
func parseMarks(out string) map[SessionName]paneMark {
	marks := map[SessionName]paneMark{}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.SplitN(line, " ", 6)
		if len(f) != 6 || f[0] != "1" || f[1] != "1" {
			continue
		}
		name, err := ParseSessionName(f[5])
		if err != nil {
			continue
		}
		activity, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			continue
		}
		marks[name] = paneMark{pane: f[2], size: f[3], activity: activity}
	}
	return marks
}

func containsName(list []SessionName, n SessionName) bool {
	for _, l := range list {
		if l == n {
			return true
		}
	}
	return false
}
