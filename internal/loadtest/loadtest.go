// Package loadtest is `pam-bench load` (docs/bench.md#pam-bench-load): it
// starts a real `pam serve` (embedded PostgreSQL in a folder of its own,
// loopback only) and a real `pam worker` (tmux, or PAM_EXECUTOR=pty) as
// processes, loads them the way a busy deployment does — live shell
// runs, SSE subscribers, pane viewers, a steady stream of events — and
// measures what the goals of docs/bench.md are about: dispatch latency
// under that load next to idle, SSE delivery latency, and the memory of
// serve and of the worker. At the end it checks that every subscriber saw
// every event exactly once, in order. Everything it started is ended
// before Run returns, also on failure or when ctx is cancelled (Ctrl-C).
package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"pam/internal/embeddb"

	"pam/internal/apiclient"
	"pam/internal/benchproc"
	"pam/internal/benchtable"
	"pam/internal/datadir"
	"pam/internal/wire"
)

// Options say how big a load to drive. The defaults of `pam-bench load`
// are the sizes of the goals (docs/bench.md); a smaller load is measured
// the same way but its rows are not judged against the goals.
type Options struct {
	// Pam is the pam binary to start (the running executable).
	Pam string
	// Environ is the environment the processes start from; every PAM_*
	// and tmux variable in it is dropped for the driver's own.
	Environ []string
	// Executor is the worker's PAM_EXECUTOR: tmux or pty.
	Executor string
	// Runs is how many live shell runs the worker holds.
	Runs int
	// Subscribers and Viewers are the SSE clients and pane WebSockets.
	Subscribers, Viewers int
	// Duration is how long the full load lasts.
	Duration time.Duration
	// EventRate is the events per second written during the load.
	EventRate int
	// CachedRuns is how many runs pass through the probe host before the
	// load (the idle dispatch baseline), each leaving a full screen in
	// serve's pane cache.
	CachedRuns int
	// DispatchRate is how many probe runs per second are dispatched
	// during the load, each a dispatch latency sample.
	DispatchRate int
	// Dir is where the driver's temporary folder goes ("" = /tmp).
	Dir string
	// Keep leaves the folder (logs, databases) in place.
	Keep bool
	// Profile, when set, is where serve's CPU profile of the load goes
	// (GET /debug/pprof/profile for the load's duration, less a second).
	Profile string
	// Logger gets the progress.
	Logger *slog.Logger
}

// The load of the goals (docs/bench.md); below it a row is not judged.
const (
	goalRuns        = 200
	goalSubscribers = 100
	goalViewers     = 50
	goalEventRate   = 1000
	goalCachedRuns  = 1000
	goalSessions    = 100
)

// MaxRuns bounds Runs and CachedRuns: a host takes at most 1,000 runs.
const MaxRuns = 990

// Check says what is wrong with the options, before anything starts.
func (o Options) Check() error {
	switch {
	case o.Pam == "":
		return errors.New("no pam binary")
	case o.Executor != "tmux" && o.Executor != "pty":
		return fmt.Errorf("executor %q: want tmux or pty", o.Executor)
	case o.Runs < 1 || o.Runs > MaxRuns:
		return fmt.Errorf("runs %d: want 1 to %d", o.Runs, MaxRuns)
	case o.Subscribers < 1 || o.Viewers < 0:
		return errors.New("want at least one subscriber and no negative viewers")
	case o.Duration < time.Second:
		return fmt.Errorf("duration %s: want at least 1s", o.Duration)
	case o.EventRate < 1 || o.DispatchRate < 1:
		return errors.New("event and dispatch rates must be at least 1/s")
	case o.CachedRuns < 1 || o.CachedRuns > 100_000:
		return fmt.Errorf("cached runs %d: want 1 to 100,000", o.CachedRuns)
	}
	return nil
}

// Result is what a load run measured.
type Result struct {
	// Rows are the figures, in the shape the table reads.
	Rows []benchtable.Row
	// Events is how many journal events each subscriber was checked for;
	// Lost, Duplicate and OutOfOrder sum the misses over all of them.
	Events                      int
	Subscribers                 int
	Lost, Duplicate, OutOfOrder int64
}

// Clean reports whether every subscriber saw every event exactly once,
// in order.
func (r Result) Clean() bool { return r.Lost == 0 && r.Duplicate == 0 && r.OutOfOrder == 0 }

// Summary is the line that states the check.
func (r Result) Summary() string {
	verdict := "every subscriber saw every event exactly once, in order"
	if !r.Clean() {
		verdict = "FAILED"
	}
	return fmt.Sprintf("events: %d subscribers × %d journal events: %d lost, %d duplicate, %d out of order — %s",
		r.Subscribers, r.Events, r.Lost, r.Duplicate, r.OutOfOrder, verdict)
}

// load is one run of the driver and everything it started.
type load struct {
	o   Options
	log *slog.Logger
	dir string

	serve, worker *benchproc.Proc
	api           *apiclient.Client
	sess          *sessions
	probe         *probe

	projectID, taskID, workerHost string
	items                         []string
	live                          []string // live run ids
}

// Run drives the load and returns its figures. Every process and tmux
// server it started has ended when it returns.
func Run(ctx context.Context, o Options) (res Result, err error) {
	if err := o.Check(); err != nil {
		return Result{}, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	dir, err := shortTempDir(o.Dir)
	if err != nil {
		return Result{}, fmt.Errorf("load folder: %w", err)
	}
	l := &load{o: o, log: o.Logger, dir: dir}
	defer func() { err = l.cleanup(err) }()
	return l.run(ctx)
}

// run brings the system up, measures it idle, loads it and measures it
// again, then checks what the subscribers received.
func (l *load) run(ctx context.Context) (Result, error) {
	if err := l.bringUp(ctx); err != nil {
		return Result{}, err
	}
	idle, err := l.idleDispatch(ctx)
	if err != nil {
		return Result{}, err
	}
	mem, err := l.startLiveRuns(ctx)
	if err != nil {
		return Result{}, err
	}

	// The clients run on loadCtx until the check has what it needs;
	// whatever happens, they have ended when run returns.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var clients sync.WaitGroup
	defer func() { stopLoad(); clients.Wait() }()
	start, err := eventSeq(ctx, l.api)
	if err != nil {
		return Result{}, err
	}
	subs, viewers, err := l.connectClients(ctx, loadCtx, &clients, start)
	if err != nil {
		return Result{}, err
	}
	m, err := l.driveLoad(ctx, loadCtx)
	if err != nil {
		return Result{}, err
	}

	journal, err := l.awaitSubscribers(ctx, start, subs)
	if err != nil {
		return Result{}, err
	}
	stopLoad()
	clients.Wait()
	for _, s := range subs {
		if err := s.err(); err != nil {
			return Result{}, err
		}
	}
	v := check(subs, journal)
	res := Result{Events: v.events, Subscribers: len(subs), Lost: v.lost, Duplicate: v.duplicate + v.extra, OutOfOrder: v.outOfOrder}
	res.Rows = l.rows(idle, m, subs, viewers, v, mem)
	return res, nil
}

// bringUp starts serve, makes what the runs belong to, starts the worker
// and connects the probe host.
func (l *load) bringUp(ctx context.Context) error {
	if err := l.startServe(ctx); err != nil {
		return err
	}
	if err := l.plan(ctx); err != nil {
		return err
	}
	if err := l.startWorker(ctx); err != nil {
		return err
	}
	var err error
	l.probe, err = newProbe(ctx, l.api, l.taskID)
	return err
}

// idleDispatch passes the cached runs through the probe host before any
// load: their dispatch latencies are the idle baseline, and their screens
// fill serve's pane cache as a long-running serve's would be.
func (l *load) idleDispatch(ctx context.Context) ([]time.Duration, error) {
	l.log.Info("idle dispatch baseline", "runs", l.o.CachedRuns)
	idle := make([]time.Duration, 0, l.o.CachedRuns)
	for range l.o.CachedRuns {
		d, err := l.probe.cycle(ctx)
		if err != nil {
			return nil, fmt.Errorf("idle dispatch: %w", err)
		}
		idle = append(idle, d)
	}
	return idle, nil
}

// sessionMemory is the worker's resident memory, and that of what holds
// its sessions, once a number of sessions run.
type sessionMemory struct {
	sessions     int
	worker, sess int64
}

// startLiveRuns starts the live runs in two steps: up to goalSessions
// first, so that the worker's memory is read at the goal's number of
// sessions, then the rest.
func (l *load) startLiveRuns(ctx context.Context) (sessionMemory, error) {
	first := min(l.o.Runs, goalSessions)
	if err := l.startRuns(ctx, first); err != nil {
		return sessionMemory{}, err
	}
	mem := sessionMemory{sessions: first}
	mem.worker, mem.sess = l.settle(ctx)
	if l.o.Runs > first {
		if err := l.startRuns(ctx, l.o.Runs-first); err != nil {
			return sessionMemory{}, err
		}
	}
	return mem, nil
}

// connectClients starts the SSE subscribers (from the event after start)
// and the pane viewers on loadCtx, counted in clients, and waits until
// every subscriber is connected, so that the load meets them all.
func (l *load) connectClients(ctx, loadCtx context.Context, clients *sync.WaitGroup, start int64) ([]*subscriber, []*viewer, error) {
	l.log.Info("subscribers and viewers", "subscribers", l.o.Subscribers, "viewers", l.o.Viewers)
	streams := &http.Client{Transport: l.api.HTTP.Transport}
	subs := make([]*subscriber, l.o.Subscribers)
	for i := range subs {
		subs[i] = &subscriber{base: l.api.BaseURL, token: l.api.Token, hc: streams}
		clients.Go(func() { subs[i].run(loadCtx, start) })
	}
	viewers := make([]*viewer, l.o.Viewers)
	for i := range viewers {
		viewers[i] = &viewer{api: l.api, runID: l.live[i%len(l.live)]}
		clients.Go(func() { viewers[i].run(loadCtx) })
	}
	err := waitFor(ctx, 60*time.Second, "every subscriber to connect", func() (bool, error) {
		for _, s := range subs {
			if err := s.err(); err != nil {
				return false, err
			}
			if !s.connected.Load() {
				return false, nil
			}
		}
		return true, nil
	})
	return subs, viewers, err
}

// driveLoad runs the load for its duration and measures it, with serve's
// CPU profile of it taken meanwhile when one was asked for.
func (l *load) driveLoad(ctx, loadCtx context.Context) (measured, error) {
	o := l.o
	l.log.Info("load", "duration", o.Duration, "events/s", o.EventRate, "dispatches/s", o.DispatchRate)
	profiled := make(chan error, 1)
	if o.Profile != "" {
		go func() { profiled <- l.profileServe(ctx, o.Profile, o.Duration-time.Second) }()
	} else {
		profiled <- nil
	}
	m := l.measureLoad(ctx, loadCtx)
	if err := <-profiled; err != nil {
		return measured{}, err
	}
	return m, m.err
}

// awaitSubscribers reads the journal's events since start, the ones every
// subscriber should have seen, and gives the subscribers up to a minute
// to catch up with the last; one still behind is counted as losing what
// it lacks.
func (l *load) awaitSubscribers(ctx context.Context, start int64, subs []*subscriber) ([]int64, error) {
	l.log.Info("checking what the subscribers received")
	end, err := eventSeq(ctx, l.api)
	if err != nil {
		return nil, err
	}
	journal, err := journalSeqs(ctx, l.api, start, end)
	if err != nil {
		return nil, err
	}
	if len(journal) > 0 {
		lastSeq := journal[len(journal)-1]
		_ = waitFor(ctx, 60*time.Second, "every subscriber to catch up", func() (bool, error) {
			for _, s := range subs {
				if s.last.Load() < lastSeq && s.err() == nil {
					return false, nil
				}
			}
			return true, nil
		})
	}
	return journal, nil
}

// startServe runs pam serve on the embedded database and a free loopback
// port, and builds the operator's client.
func (l *load) startServe(ctx context.Context) error {
	data := filepath.Join(l.dir, "serve")
	l.log.Info("starting pam serve (embedded PostgreSQL)", "dir", data)
	var err error
	l.serve, err = startProc("serve", l.o.Pam, l.dir, childEnv(l.o.Environ,
		"PAM_DATA_DIR="+data, "PAM_BIND=127.0.0.1", "PAM_PORT=0", "PAM_LOG_LEVEL=warn"), "serve")
	if err != nil {
		return err
	}
	base, err := l.serve.WaitListening(ctx, 3*time.Minute)
	if err != nil {
		return err
	}
	if u, err := url.Parse(base); err != nil || u.Hostname() != "127.0.0.1" {
		return fmt.Errorf("pam serve listens on %s, not on loopback", base)
	}
	token, err := datadir.ReadToken(data)
	if err != nil {
		return fmt.Errorf("serve's token: %w", err)
	}
	l.api, err = apiclient.New(base, token, "")
	if err != nil {
		return err
	}
	// Many clients at once: keep their connections instead of churning.
	l.api.HTTP.Transport.(*http.Transport).MaxIdleConnsPerHost = 512
	return nil
}

// profileServe writes serve's CPU profile of the next d (at least a
// second) to file.
func (l *load) profileServe(ctx context.Context, file string, d time.Duration) error {
	secs := max(int(d/time.Second), 1)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", l.api.BaseURL+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+l.api.Token)
	resp, err := l.api.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("profile serve: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile serve: %s", resp.Status)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile serve: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	l.log.Info("serve's CPU profile written", "file", file, "seconds", secs)
	return nil
}

// plan makes the project, the task every run belongs to, and the work
// items the generator rewrites.
func (l *load) plan(ctx context.Context) error {
	p, err := l.api.CreateProject(ctx, wire.CreateProject{Name: "pam load"})
	if err != nil {
		return fmt.Errorf("load project: %w", err)
	}
	l.projectID = p.ID
	task, err := l.api.CreateWorkItem(ctx, p.ID, wire.CreateWorkItem{Kind: "task", Title: "load runs"})
	if err != nil {
		return fmt.Errorf("load task: %w", err)
	}
	l.taskID = task.ID
	senders := min(max(l.o.EventRate/50, 4), 32)
	for i := range senders {
		it, err := l.api.CreateWorkItem(ctx, p.ID, wire.CreateWorkItem{Kind: "task", Title: "events " + strconv.Itoa(i)})
		if err != nil {
			return fmt.Errorf("generator item: %w", err)
		}
		l.items = append(l.items, it.ID)
	}
	return nil
}

// startWorker provisions the worker's host and runs pam worker on the
// driver's own tmux socket folder.
func (l *load) startWorker(ctx context.Context) error {
	maxRuns := l.o.Runs + 10
	h, err := l.api.CreateHost(ctx, wire.CreateHost{Name: "pam-load-worker", MaxRuns: &maxRuns})
	if err != nil {
		return fmt.Errorf("worker host: %w", err)
	}
	l.workerHost = h.Host.ID
	data, tmuxDir := filepath.Join(l.dir, "worker"), filepath.Join(l.dir, "tmux")
	if l.sess, err = newSessions(l.o.Executor, tmuxDir, data); err != nil {
		return err
	}
	l.log.Info("starting pam worker", "executor", l.o.Executor)
	l.worker, err = startProc("worker", l.o.Pam, l.dir, childEnv(l.o.Environ,
		"PAM_URL="+l.api.BaseURL, "PAM_WORKER_TOKEN="+h.WorkerToken, "PAM_HOST_NAME=pam-load-worker",
		"PAM_DATA_DIR="+data, "PAM_CONFIG_DIR="+data, "TMUX_TMPDIR="+tmuxDir, "PAM_EXECUTOR="+l.o.Executor,
		"PAM_MAX_RUNS="+strconv.Itoa(maxRuns), "PAM_LOG_LEVEL=warn"), "worker")
	if err != nil {
		return err
	}
	return waitFor(ctx, 60*time.Second, "the worker to come online", func() (bool, error) {
		if l.worker.Exited() {
			return false, fmt.Errorf("pam worker exited (%s):\n%s", l.worker.State(), l.worker.Tail(20))
		}
		h, err := l.api.GetHost(ctx, l.workerHost)
		return err == nil && h.Status == "online", nil
	})
}

// livePrompt is what every live run runs: a line a second, forever.
const livePrompt = `i=0; while :; do i=$((i+1)); echo "pam load: line $i"; sleep 1; done`

// startRuns starts n live shell runs on the worker and waits until they
// all run.
func (l *load) startRuns(ctx context.Context, n int) error {
	l.log.Info("starting live runs", "runs", n, "live", len(l.live))
	prompt := livePrompt
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		// A folder per run: the PTY executor holds a run's folder
		// (one live holder per workspace).
		cwd := filepath.Join(l.dir, "runs", strconv.Itoa(len(l.live)+i))
		if err := os.MkdirAll(cwd, 0o755); err != nil {
			return fmt.Errorf("run folder: %w", err)
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := l.api.CreateRun(ctx, wire.CreateRun{TaskID: l.taskID, Provider: "shell", HostID: &l.workerHost, Prompt: &prompt, Cwd: &cwd})
			if err != nil {
				errs[i] = err
				return
			}
			ids[i] = r.ID
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("start live runs: %w", err)
	}
	l.live = append(l.live, ids...)
	want := len(l.live)
	return waitFor(ctx, time.Minute+time.Duration(n)*500*time.Millisecond, fmt.Sprintf("%d live runs to run", want), func() (bool, error) {
		if l.worker.Exited() {
			return false, fmt.Errorf("pam worker exited (%s):\n%s", l.worker.State(), l.worker.Tail(20))
		}
		failed, err := l.api.ListRuns(ctx, apiclient.RunFilter{HostID: l.workerHost, Status: "failed", Limit: 1})
		if err == nil && len(failed) > 0 {
			return false, fmt.Errorf("live run %s failed: %s", failed[0].ID, optional(failed[0].FailureReason))
		}
		running, err := l.api.ListRuns(ctx, apiclient.RunFilter{HostID: l.workerHost, Status: "running", Limit: 1000})
		return err == nil && len(running) >= want, nil
	})
}

func optional(s *string) string {
	if s == nil {
		return "no reason"
	}
	return *s
}

// settle lets the runs' panes be captured a few times, then reads the
// worker's resident memory and that of what holds the sessions (the
// largest of a few reads).
func (l *load) settle(ctx context.Context) (worker, sess int64) {
	for range 12 {
		worker = max(worker, rssBytes(l.worker.PID()))
		sess = max(sess, l.sess.rss(ctx))
		select {
		case <-ctx.Done():
			return worker, sess
		case <-time.After(250 * time.Millisecond):
		}
	}
	return worker, sess
}

// cleanup ends everything the driver started, in order — the probe, the
// worker, its sessions, serve (which stops its database) and, if serve
// could not, the database — and removes the folder unless asked to keep
// it. A failure of the run comes back with the end of the processes'
// logs.
func (l *load) cleanup(runErr error) error {
	if l.probe != nil {
		l.probe.close()
	}
	var errs []error
	if l.worker != nil {
		l.worker.Stop(15 * time.Second)
	}
	if l.sess != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := l.sess.kill(ctx); err != nil {
			errs = append(errs, fmt.Errorf("end the sessions: %w", err))
		}
		cancel()
	}
	if l.serve != nil {
		l.serve.Stop(60 * time.Second)
		if pm := embeddb.RunningPID(filepath.Join(l.dir, "serve", "postgres")); pm > 0 {
			// SIGQUIT: PostgreSQL's immediate shutdown.
			if err := endProcess(pm, syscall.SIGQUIT, 10*time.Second); err != nil {
				errs = append(errs, fmt.Errorf("end the embedded database: %w", err))
			}
		}
	}
	if err := sweep(l.dir); err != nil {
		errs = append(errs, fmt.Errorf("end what is left in %s: %w", l.dir, err))
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		for _, p := range []*benchproc.Proc{l.serve, l.worker} {
			if p != nil {
				if t := p.Tail(15); t != "" {
					runErr = fmt.Errorf("%w\n--- end of %s's log:\n%s", runErr, p.Name, t)
				}
			}
		}
	}
	if l.o.Keep {
		l.log.Info("kept the load folder", "dir", l.dir)
	} else if err := os.RemoveAll(l.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", l.dir, err))
	}
	return errors.Join(append([]error{runErr}, errs...)...)
}
