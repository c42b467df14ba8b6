// Package worker is `pam worker`, the agent of one execution host
// (docs/architecture.md#internal-api, docs/architecture.md#worker-duties): it registers with the orchestrator, keeps one
// outbound WebSocket uplink, and runs each dispatched run as a session
// whose foreground command is `pam exec run`: a tmux session (package
// tmux) or a PTY holder (package holder, PAM_EXECUTOR=pty), behind the
// executor seam (executor.go). It polls the panes, uplinks changed
// snapshots and keeps the run logs.
//
// Worker down is not runs down: the tmux server or the holders own the
// sessions, the worker leaves them running when it stops and adopts them
// when it starts.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	lru "github.com/hashicorp/golang-lru/v2"

	"pam/internal/apiclient"
	"pam/internal/clock"
	"pam/internal/datadir"
	"pam/internal/defaults"
	screenread "pam/internal/screen"
	"pam/internal/tmux"
	"pam/internal/wire"
	"pam/internal/workspace"
)

// Options configure a worker; package cli fills them from PAM_* settings.
type Options struct {
	// URL is where the orchestrator is (PAM_URL).
	URL string
	// Token is the worker token of this host.
	Token string
	// HostName is the name to register as.
	HostName string
	// DataDir is PAM_DATA_DIR: the worker's files are in <DataDir>/worker,
	// the run logs in <DataDir>/runs.
	DataDir string
	// ConfigDir (PAM_CONFIG_DIR) is handed to `pam exec run`; empty means
	// its default.
	ConfigDir string
	// Executor is "tmux" or "pty" (the built-in PTY holder, package
	// holder).
	Executor string
	// Sessions, when set, runs the sessions in place of the executor
	// Executor names (which is still what registration reports): the
	// simulated fleet of `pam-bench fleet` (internal/fleetsim) runs real
	// workers on fake sessions with it. Nil in pam itself.
	Sessions Executor
	// MaxRuns is how many runs this host takes at once.
	MaxRuns int
	// Timers (PAM_HEARTBEAT_INTERVAL, PAM_CAPTURE_INTERVAL,
	// PAM_IDLE_AFTER, PAM_LIVENESS_INTERVAL, PAM_STOP_GRACE,
	// PAM_RECONCILE_INTERVAL, PAM_ORPHAN_HOLD).
	HeartbeatInterval time.Duration
	CaptureInterval   time.Duration
	IdleAfter         time.Duration
	LivenessInterval  time.Duration
	StopGrace         time.Duration
	ReconcileInterval time.Duration
	OrphanHold        time.Duration
	// HoldOpen (PAM_HOLD_OPEN) is handed to each session's wrapper, and
	// tells reconciliation when a finished run's session is past it.
	HoldOpen time.Duration
	// WorktreeRetention (PAM_WORKTREE_RETENTION) and WorktreeBudget
	// (PAM_WORKTREE_BUDGET, bytes) bound the worktrees of finished runs
	// (docs/architecture.md#workspaces).
	WorktreeRetention time.Duration
	WorktreeBudget    int64
	// RunLogRetention (PAM_RUN_LOG_RETENTION): the log of a run that
	// ended is removed once it is this old (runlogs.go).
	RunLogRetention time.Duration
	// Git is the git binary for workspaces; empty means git on PATH.
	Git string
	// CAFile is an extra CA bundle to trust for URL (PAM_CA_FILE).
	CAFile string
	// PamBinary is the absolute path of pam, the sessions' foreground
	// command (`pam exec run …`).
	PamBinary string
	// Version is reported at registration and in worker.json.
	Version string
	// Protocol is the uplink protocol version claimed at registration; 0
	// is wire.UplinkProtocol. Only tests set another, to play a worker of
	// an older or newer build.
	Protocol int
	// Logger gets the worker's events; nil discards them.
	Logger *slog.Logger
	// Providers maps each provider usable on this host to the absolute
	// path of its binary; called at registration and on each dispatch.
	Providers func() map[string]string
	// Resumable lists the providers of this host's catalog that can
	// resume a conversation (resume_args), reported at registration so
	// that the server refuses a continue this host could not resume
	// (docs/architecture.md#resume-and-continue); nil reports none.
	Resumable func() []string
	// ContinueMessages maps providers of this host's catalog to their
	// continue_message, reported at registration: what the server types
	// into a run here when its usage limit resets
	// (docs/architecture.md#continue-when-a-limit-resets); nil reports
	// none.
	ContinueMessages func() map[string]string
	// Screens returns the named provider's screen patterns (the host
	// catalog's, compiled), which every changed capture of its runs is
	// read with (docs/architecture.md#the-screen-is-read); nil, or a nil
	// result, reads with the generic set alone.
	Screens func(provider string) *screenread.Patterns
	// PassEnv returns the variables of the worker's environment that the
	// named provider's CLI gets (its pass_env and PAM_PASS_ENV), by name;
	// called on each dispatch, the values go into the dispatch file only.
	// Nil passes none.
	PassEnv func(provider string) map[string]string
	// Reconcile receives a value for each reconciliation asked for from
	// outside (SIGHUP); nil for none.
	Reconcile <-chan struct{}
	// Tmux configures how tmux runs (tests use a private TMUX_TMPDIR).
	Tmux tmux.Options
	// BackoffMin and BackoffMax bound the reconnect backoff; default 1s
	// and 30s.
	BackoffMin, BackoffMax time.Duration
	// LogMaxBytes is the size past which a run log is rotated; default
	// 64 MiB.
	LogMaxBytes int64
	// Clock is the time the worker's expiring timers are judged at (the
	// orphan hold, a finished run's hold-open, worktree and run log
	// retention); nil is time.Now. The tickers that pace its loops stay
	// real, and so does the capture schedule (docs/architecture.md#time).
	Clock func() time.Time

	// hooks are seams for this package's tests; nil elsewhere.
	hooks *hooks
}

// hooks are called at fixed points of the worker's loops, so that a test
// can wait for a number of passes instead of sleeping ("nothing happened"
// proves something only after the loop ran), or act between two steps of
// a pass to reproduce a race deterministically. A nil func is skipped.
type hooks struct {
	livenessListed func() // checkLiveness: sessions listed, nothing judged yet
	livenessPass   func() // after each pass of the liveness loop
	reconcilePass  func() // after each pass of the reconciliation loop
	workspacesPass func() // after each worktree clean-up pass
}

// pass calls the hook that pick returns, if there is one.
func (h *hooks) pass(pick func(*hooks) func()) {
	if h == nil {
		return
	}
	if f := pick(h); f != nil {
		f()
	}
}

// Defaults of the options a caller may leave zero.
const (
	defaultLogMaxBytes = 64 << 20
	// snapshotCacheSize bounds the worker-side snapshot cache (docs/architecture.md#tmux).
	snapshotCacheSize = 1000
)

func (o *Options) defaults() error {
	o.URL = strings.TrimRight(o.URL, "/")
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("orchestrator URL %q: want http://host:port or https://host:port", o.URL)
	}
	if o.Token == "" {
		return errors.New("no worker token")
	}
	if o.Executor == "" {
		o.Executor = "tmux"
	}
	if o.Executor != "tmux" && o.Executor != "pty" {
		return fmt.Errorf("executor %q: want tmux or pty", o.Executor)
	}
	if o.DataDir == "" {
		return errors.New("no data dir")
	}
	if !filepath.IsAbs(o.PamBinary) {
		return fmt.Errorf("pam binary %q is not an absolute path", o.PamBinary)
	}
	if o.HostName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("host name: %w", err)
		}
		o.HostName = h
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.HeartbeatInterval, defaults.HeartbeatInterval)
	def(&o.CaptureInterval, defaults.CaptureInterval)
	def(&o.IdleAfter, defaults.IdleAfter)
	def(&o.LivenessInterval, defaults.LivenessInterval)
	def(&o.StopGrace, defaults.StopGrace)
	def(&o.ReconcileInterval, defaults.ReconcileInterval)
	def(&o.OrphanHold, defaults.OrphanHold)
	def(&o.HoldOpen, defaults.HoldOpen)
	def(&o.WorktreeRetention, defaults.WorktreeRetention)
	def(&o.RunLogRetention, defaults.RunLogRetention)
	if o.WorktreeBudget <= 0 {
		o.WorktreeBudget = defaults.WorktreeBudget
	}
	def(&o.BackoffMin, time.Second)
	def(&o.BackoffMax, 30*time.Second)
	if o.MaxRuns <= 0 {
		o.MaxRuns = defaults.MaxRuns
	}
	if o.LogMaxBytes <= 0 {
		o.LogMaxBytes = defaultLogMaxBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Resumable == nil {
		o.Resumable = func() []string { return nil }
	}
	if o.ContinueMessages == nil {
		o.ContinueMessages = func() map[string]string { return nil }
	}
	if o.Providers == nil {
		o.Providers = func() map[string]string { return nil }
	}
	return nil
}

// now is the worker's clock (Options.Clock).
func (w *agent) now() time.Time { return clock.Or(w.o.Clock)() }

// agent is one running worker: the state its loops and handlers share.
type agent struct {
	o          Options
	log        *slog.Logger
	tm         Executor // tmux, the PTY holder or Options.Sessions (executor.go)
	dir        string   // <data>/worker
	instanceID string
	client     *apiclient.Client

	mu      sync.Mutex
	runs    map[string]*run // by run id
	conn    *websocket.Conn // the uplink, nil while down
	hostID  string
	pending []wire.Frame // run_state frames waiting for an uplink

	// snapMu orders snapshot sends: the capture loop's and the resend of
	// every latest snapshot when the uplink (re)connects.
	snapMu sync.Mutex
	snaps  *lru.Cache[string, snapshot]

	ops sync.WaitGroup // spawn, stop, log and relay goroutines

	// pruning: a prune of the mirrors is under way (one at a time, off
	// the reconcile loop: a gc of a large repository takes minutes).
	pruning atomic.Bool

	// hotWake wakes the capture loop when a pane becomes watched.
	hotWake chan struct{}

	relays relaySet // interactive attach relays (attach.go)

	ws *workspace.Manager // the runs' git worktrees (workspaces.go)

	rs reliability // reconciliation, liveness and spool replay (reconcile.go)
}

// runState is where a run is in this worker's hands.
type runState int

const (
	stateSpawning runState = iota // acked; stopping the old session, creating the new
	stateLive                     // its session runs; captured
	stateStopping                 // the stop ladder runs
)

// run is a run this worker started or adopted.
type run struct {
	id      string
	attempt int
	name    tmux.SessionName
	state   runState
	// gen changes on every (re)spawn, so that a late goroutine of an
	// earlier incarnation cannot forget the current one.
	gen uint64
	// op serialises spawn and stop of this run's session.
	op sync.Mutex

	// Capture schedule.
	next       time.Time
	interval   time.Duration
	lastChange time.Time
	// lastCapture is when the pane was last captured; watchedUntil, until
	// when a viewer watches it (pane_watch), which captures it faster.
	lastCapture  time.Time
	watchedUntil time.Time
	// idleSent: run_state idle went up for the pane's current quiet
	// spell; a change or input starts a new one.
	idleSent bool
	// ended: the orchestrator says the run is over and its session is in
	// hold-open; it no longer counts against MaxRuns (activeCount). A new
	// attempt of the run clears it.
	ended bool
	// provider is the run's provider, from its dispatch (an adopted run's
	// is read from its dispatch file when its screen is first read;
	// providerRead says it was); working, that its screen shows the
	// agent busy, which is never idle.
	provider     string
	providerRead bool
	working      bool
}

// Run starts the worker and runs it until ctx ends. It fails at once if
// the data dir is held by another worker, tmux is missing, or the options
// are unusable; network trouble never ends it (it reconnects with
// backoff). When ctx ends it closes the uplink and returns nil, leaving
// every session running.
func Run(ctx context.Context, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	dir := filepath.Join(o.DataDir, "worker")
	unlock, err := lockDataDir(o.DataDir, dir)
	if err != nil {
		return err
	}
	defer unlock()
	w, err := newAgent(o, dir)
	if err != nil {
		return err
	}
	// The client's keep-alive connections (two goroutines each) are the
	// worker's too: closed once nothing uses the client any more.
	defer w.client.HTTP.CloseIdleConnections()
	tm := w.tm
	w.log.Info("worker starting", "host", o.HostName, "instance_id", w.instanceID, "url", o.URL, "data_dir", o.DataDir, "max_runs", o.MaxRuns)
	// A tmux server an earlier pam started keeps tmux's default key
	// bindings, which would let an attach relay drive the whole server:
	// no relay opens before they are gone (docs/architecture.md#tmux-safety).
	if err := tm.Harden(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped while starting (SIGTERM): a clean stop, as later.
			w.log.Info("worker stopped while starting")
			return nil
		}
		return err
	}
	// The capture's control client connects now, before this worker
	// starts or stops any session (docs/architecture.md#capture-by-control-mode);
	// captures go by exec until it is up (the failure is logged there).
	if bc, ok := tm.(batchCapturer); ok {
		_ = bc.start(ctx)
	}
	w.startReconcile(ctx)

	var loops sync.WaitGroup
	loops.Go(func() { w.uplinkLoop(ctx) })
	loops.Go(func() { w.captureLoop(ctx) })
	loops.Go(func() { w.livenessLoop(ctx) })
	loops.Go(func() { w.reconcileLoop(ctx) })
	loops.Go(func() { w.replayLoop(ctx) })
	loops.Wait()
	w.ops.Wait()
	if bc, ok := tm.(batchCapturer); ok {
		bc.close()
	}
	w.log.Info("worker stopped; sessions left running", "sessions", w.count())
	return nil
}

// lockDataDir makes the worker's folders under dataDir and takes the
// worker's lock: one worker per data dir.
func lockDataDir(dataDir, dir string) (unlock func(), err error) {
	// The data dir itself may be shared with serve (and need 0711 for its
	// database): create it private, but never change an existing mode.
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := datadir.Ensure(dir, false); err != nil {
		return nil, err
	}
	lock, err := datadir.TryLock(filepath.Join(dir, lockFile))
	if errors.Is(err, datadir.ErrLocked) {
		return nil, fmt.Errorf("another worker runs on this data dir: %w", err)
	}
	if err != nil {
		return nil, err
	}
	for _, d := range []string{filepath.Join(dir, dispatchDir), filepath.Join(dataDir, "runs")} {
		if err := datadir.Ensure(d, false); err != nil {
			lock.Unlock()
			return nil, err
		}
	}
	return func() { lock.Unlock() }, nil
}

// newAgent makes the worker's parts (its instance id, executor, API
// client, workspaces) and leaves the note that says it runs. Its client
// has made no request yet when it fails: nothing to close.
func newAgent(o Options, dir string) (*agent, error) {
	instanceID, err := loadInstanceID(dir)
	if err != nil {
		return nil, err
	}
	tm, err := newExecutor(o, dir, instanceID)
	if err != nil {
		return nil, err
	}
	client, err := apiclient.New(o.URL, o.Token, o.CAFile)
	if err != nil {
		return nil, err
	}
	snaps, _ := lru.New[string, snapshot](snapshotCacheSize)
	w := &agent{
		o: o, log: o.Logger, tm: tm, dir: dir, instanceID: instanceID, client: client,
		runs: map[string]*run{}, snaps: snaps, hotWake: make(chan struct{}, 1),
	}
	if p, ok := tm.(*ptyExecutor); ok {
		p.finished = w.attemptOver
	}
	w.rs.init(dir)
	if w.ws, err = workspace.New(workspace.Options{DataDir: o.DataDir, Git: o.Git, Logger: o.Logger}); err != nil {
		return nil, err
	}
	w.checkNote()
	if err := writeNote(dir, Note{
		PID: os.Getpid(), HostName: o.HostName, InstanceID: instanceID, Executor: o.Executor,
		StartedAt: time.Now().UTC(), Version: o.Version,
	}); err != nil {
		return nil, err
	}
	return w, nil
}

// mine reports whether a session is this worker's to judge: created by
// this instance, or by an older pam that recorded no @pam_instance. A
// session of another instance sharing the socket (another worker of the
// same user, with another data dir) is never adopted, stopped or killed
// (docs/architecture.md#tmux-safety).
func (w *agent) mine(s tmux.Session) bool {
	return s.Instance == "" || s.Instance == w.instanceID
}

// ownSessions lists the pam sessions on the socket that are mine.
func (w *agent) ownSessions(ctx context.Context) ([]tmux.Session, error) {
	list, err := w.tm.ListSessions(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list, func(s tmux.Session) bool { return !w.mine(s) }), nil
}

// adopt takes over the sessions a previous worker left running: any
// pam-* session of this instance (or of none) carrying a valid
// @pam_run_id that matches its name. Others are left alone for
// reconciliation to judge.
func (w *agent) adopt(ctx context.Context) {
	list, err := w.ownSessions(ctx)
	if err != nil {
		w.log.Warn("list sessions at start", "err", err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, s := range list {
		want, err := tmux.SessionForRun(s.RunID)
		if err != nil || want != s.Name || s.Attempt < 1 {
			continue
		}
		w.runs[s.RunID] = &run{id: s.RunID, attempt: s.Attempt, name: s.Name, state: stateLive,
			next: now, interval: w.o.CaptureInterval, lastChange: now}
		w.log.Info("session adopted", "run_id", s.RunID, "attempt", s.Attempt, "session", s.Name.String())
	}
}

func (w *agent) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.runs)
}

// resumable is the providers usable here that can resume a
// conversation, sorted, never nil: what registration reports.
func (w *agent) resumable() []string {
	usable := w.o.Providers()
	out := []string{}
	for _, name := range w.o.Resumable() {
		if _, ok := usable[name]; ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// continueMessages is the continue_message of each provider usable
// here that has one, never nil: what registration reports.
func (w *agent) continueMessages() map[string]string {
	usable := w.o.Providers()
	out := map[string]string{}
	for name, text := range w.o.ContinueMessages() {
		if _, ok := usable[name]; ok {
			out[name] = text
		}
	}
	return out
}

// providers is Providers() with its names sorted, for registration.
func (w *agent) providerNames() []string {
	return slices.Sorted(maps.Keys(w.o.Providers()))
}
