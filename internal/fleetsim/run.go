package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"pam/internal/apiclient"
	"pam/internal/embeddb"
	"pam/internal/procfs"
	"pam/internal/wire"
)

// runner is one simulation under way: its serve, its hosts and what it
// measured so far.
type runner struct {
	o       Options
	log     *slog.Logger
	pam     string // absolute: the workers' PamBinary
	dataDir string // serve's
	hostDir string // the hosts' data dirs
	logPath string // serve's output, of both starts
	res     *Result
	s       *sim

	spMu sync.Mutex
	sp   *serveProc // the current serve: replaced by the restart

	op       *apiclient.Client
	taskID   string
	hosts    []*simHost
	started  time.Time // when the workers were started
	postedMu sync.Mutex
	posted   map[string]time.Time // POST /runs of each run
}

func (r *runner) current() *serveProc { r.spMu.Lock(); defer r.spMu.Unlock(); return r.sp }

// Run simulates the fleet and returns what it measured. It is bounded by
// o.Timeout and ctx, and cleans up on every return: workers stopped,
// serve and its database stopped, the temporary data dir removed.
func Run(ctx context.Context, o Options) (res *Result, err error) {
	o.defaults()
	if o.Pam == "" {
		return nil, errors.New("fleetsim: Options.Pam is the pam binary to run serve with")
	}
	pam, err := filepath.Abs(o.Pam)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := checkFileLimit(o.Workers); err != nil {
		return nil, err
	}
	dir, err := makeDir()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r := &runner{o: o, log: o.Logger, pam: pam, dataDir: filepath.Join(dir, "serve"), hostDir: filepath.Join(dir, "hosts"),
		logPath: filepath.Join(dir, "serve.out"), posted: map[string]time.Time{}}
	r.res = &Result{Workers: o.Workers, RunsPerWorker: o.RunsPerWorker, Runs: o.Workers * o.RunsPerWorker,
		HeartbeatInterval: o.HeartbeatInterval, Hold: o.Hold, SnapshotInterval: o.SnapshotInterval}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nserve's last output:\n%s", err, tail(r.logPath, 20))
		}
	}()
	if err := r.startServe(ctx); err != nil {
		return nil, err
	}
	defer func() { r.current().stop() }()
	r.s = newSim(o, r.sp.url)
	defer r.s.report(r.res) // what was counted, however far it got
	defer r.sample(ctx)()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	defer r.op.HTTP.CloseIdleConnections()
	defer r.startWorkers(ctx)()
	for _, phase := range []func(context.Context) error{r.connect, r.dispatch, r.hold, r.restart, r.finish} {
		if err := phase(ctx); err != nil {
			return r.res, err
		}
	}
	return r.res, nil
}

// checkFileLimit raises the open files limit and checks it is enough:
// a worker holds a few descriptors here (uplink, HTTP, its wrappers'
// HTTP) and serve as many, plus the database's.
func checkFileLimit(workers int) error {
	need := uint64(4*workers + 512)
	limit, err := raiseFileLimit()
	if err != nil {
		return fmt.Errorf("fleetsim: raise the open files limit: %w", err)
	}
	if limit < need {
		return fmt.Errorf("fleetsim: %d workers need about %d open files, the limit is %d: lower --workers or raise ulimit -Hn", workers, need, limit)
	}
	return nil
}

// makeDir makes the simulation's folder: short (the database's Unix
// socket path must stay short) and traversable, so that the database can
// run as the postgres user when pam runs as root.
func makeDir() (string, error) {
	tmp := os.TempDir()
	if len(tmp) > 40 {
		tmp = "/tmp"
	}
	dir, err := os.MkdirTemp(tmp, "pam-fleet-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// startServe starts the first serve, on a free port.
func (r *runner) startServe(ctx context.Context) error {
	t0 := time.Now()
	sp, err := startServe(ctx, r.o.Pam, r.o.Environ, r.dataDir, 0, r.o.ServeEnv, r.logPath)
	if err != nil {
		return err
	}
	r.sp = sp
	r.res.ServeStart = time.Since(t0)
	r.log.Info("serve listening", "url", sp.url, "pid", sp.PID(), "took", r.res.ServeStart.Round(time.Millisecond))
	return nil
}

// sample reads serve's memory and its database's connections every
// 250 ms until the returned stop is called.
func (r *runner) sample(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			p := r.current()
			if u, ok := procfs.ReadStat(p.PID()); ok {
				r.res.ServeRSSPeak = max(r.res.ServeRSSPeak, u.RSS)
			}
			if _, n := clusterUsage(embeddb.RunningPID(filepath.Join(p.dataDir, "postgres"))); n > r.res.DBBackendsMax {
				r.res.DBBackendsMax = n
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// usage is the CPU time serve and its database have used so far.
func (r *runner) usage() (serveCPU, dbCPU time.Duration) {
	p := r.current()
	u, _ := procfs.ReadStat(p.PID())
	db, _ := clusterUsage(embeddb.RunningPID(filepath.Join(p.dataDir, "postgres")))
	return u.CPU, db
}

// setup makes the project and task the runs are of, and the hosts, each
// with its worker token.
func (r *runner) setup(ctx context.Context) error {
	op, err := apiclient.New(r.sp.url, r.sp.token, "")
	if err != nil {
		return err
	}
	r.op = op
	autoDone := false
	proj, err := op.CreateProject(ctx, wire.CreateProject{Name: "fleet bench", AutoDone: &autoDone})
	if err != nil {
		return fmt.Errorf("create the project: %w", err)
	}
	task, err := op.CreateWorkItem(ctx, proj.Slug, wire.CreateWorkItem{Kind: "task", Title: "simulated runs"})
	if err != nil {
		return fmt.Errorf("create the task: %w", err)
	}
	r.taskID = task.ID
	r.hosts = make([]*simHost, r.o.Workers)
	return parallel(ctx, 16, r.o.Workers, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("sim-%04d", i)
		maxRuns := r.o.RunsPerWorker
		h, err := op.CreateHost(ctx, wire.CreateHost{Name: name, MaxRuns: &maxRuns})
		if err != nil {
			return fmt.Errorf("create host %s: %w", name, err)
		}
		r.hosts[i] = newSimHost(r.s, r.hostDir, name, h.Host.ID, h.WorkerToken)
		return nil
	})
}

// startWorkers starts every host's worker at once; the returned stop
// ends them and waits.
func (r *runner) startWorkers(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	r.started = time.Now()
	for _, h := range r.hosts {
		wg.Go(func() { h.run(ctx, r.pam) })
	}
	return func() { cancel(); wg.Wait() }
}

// connect waits for every worker to be admitted.
func (r *runner) connect(ctx context.Context) error {
	n, err := waitFor(ctx, 3*time.Minute, func() (int, bool) { n := r.s.admittedSince(r.started); return n, n == r.o.Workers })
	r.res.HostsConnected, r.res.ConnectTime = n, time.Since(r.started)
	if err != nil {
		return fmt.Errorf("%d of %d workers connected: %w", n, r.o.Workers, err)
	}
	r.res.Reached = PhaseConnected
	r.log.Info("fleet connected", "hosts", n, "took", r.res.ConnectTime.Round(time.Millisecond))
	return nil
}

// dispatch creates the runs, half (the spread of equal hosts half full
// is read then) and then the rest (every host full), and waits for each
// batch to start.
func (r *runner) dispatch(ctx context.Context) error {
	_, lastEvent, err := countEvents(ctx, r.op, 0)
	if err != nil {
		return err
	}
	cpu0, db0 := r.usage()
	d0 := time.Now()
	var creating, dispatching time.Duration
	half := r.res.Runs / 2
	for bi, batch := range []int{half, r.res.Runs - half} {
		c, d, err := r.startBatch(ctx, batch)
		creating, dispatching = creating+c, dispatching+d
		if err != nil {
			return err
		}
		if bi == 0 {
			r.res.SpreadMin, r.res.SpreadMax = math.MaxInt, 0
			for _, h := range r.hosts {
				n := h.ex.live()
				r.res.SpreadMin, r.res.SpreadMax = min(r.res.SpreadMin, n), max(r.res.SpreadMax, n)
			}
		}
	}
	cpu1, db1 := r.usage()
	wall := time.Since(d0)
	res := r.res
	if res.DispatchEvents, _, err = countEvents(ctx, r.op, lastEvent); err != nil {
		return err
	}
	res.ServeCPUDispatch, res.DBCPUDispatch = percent(cpu1-cpu0, wall), percent(db1-db0, wall)
	res.CreateRate = float64(res.Runs) / creating.Seconds()
	res.DispatchRate = float64(res.Runs) / dispatching.Seconds()
	r.s.mu.Lock()
	for id, n := range r.s.dispatched {
		if t, ok := r.posted[id]; ok {
			res.DispatchLatency = append(res.DispatchLatency, n.first.Sub(t))
		}
	}
	r.s.mu.Unlock()
	slices.Sort(res.DispatchLatency)
	res.Reached = PhaseDispatched
	return nil
}

// startBatch creates n runs from 8 clients and waits until they all
// started; it returns how long the creating and the whole batch took.
func (r *runner) startBatch(ctx context.Context, n int) (creating, dispatching time.Duration, err error) {
	target := r.s.startedApplied.Load() + int64(n)
	b0 := time.Now()
	err = parallel(ctx, 8, n, func(ctx context.Context, i int) error {
		t := time.Now()
		run, err := r.op.CreateRun(ctx, wire.CreateRun{TaskID: r.taskID, Provider: Provider})
		if err != nil {
			return fmt.Errorf("create a run: %w", err)
		}
		r.postedMu.Lock()
		r.posted[run.ID] = t
		r.postedMu.Unlock()
		return nil
	})
	if err != nil {
		return time.Since(b0), 0, err
	}
	creating = time.Since(b0)
	got, err := waitFor(ctx, 5*time.Minute, func() (int, bool) {
		n := r.s.startedApplied.Load()
		return int(n), n >= target
	})
	dispatching = time.Since(b0)
	if err != nil {
		return creating, dispatching, fmt.Errorf("%d of %d runs started: %w", got, target, err)
	}
	r.log.Info("runs started", "runs", target, "took", dispatching.Round(time.Millisecond))
	return creating, dispatching, nil
}

// hold keeps the full fleet at its heartbeat interval for o.Hold: the
// steady-state figures.
func (r *runner) hold(ctx context.Context) error {
	res := r.res
	r.s.measureHeartbeats(true)
	cpu0, db0 := r.usage()
	h0 := time.Now()
	if err := sleep(ctx, r.o.Hold); err != nil {
		return fmt.Errorf("hold the fleet: %w", err)
	}
	held := time.Since(h0)
	cpu1, db1 := r.usage()
	res.HeartbeatAck = r.s.measureHeartbeats(false)
	slices.Sort(res.HeartbeatAck)
	res.HeartbeatRate = float64(len(res.HeartbeatAck)) / held.Seconds()
	res.HeartbeatOffered = float64(r.o.Workers) / r.o.HeartbeatInterval.Seconds()
	res.ServeCPUHold, res.DBCPUHold = percent(cpu1-cpu0, held), percent(db1-db0, held)
	res.Reached = PhaseHeld
	if u, ok := procfs.ReadStat(r.current().PID()); ok {
		res.ServeRSSHold = u.RSS
	}
	var err error
	if res.Runtime, err = scrapeMetrics(ctx, r.op.HTTP, r.sp.url, r.sp.token); err != nil {
		r.s.noteErr("serve metrics", err.Error())
	}
	r.log.Info("hold done", "heartbeats_per_s", fmt.Sprintf("%.1f", res.HeartbeatRate), "serve_cpu_pct", fmt.Sprintf("%.1f", res.ServeCPUHold))
	return nil
}

// restart is the reconnect storm: serve stops (as for an upgrade) and
// starts again on its data dir and port; every worker comes back with
// its own backoff and jitter.
func (r *runner) restart(ctx context.Context) error {
	if r.o.NoRestart {
		return nil
	}
	r.s.restarting.Store(true)
	defer r.s.restarting.Store(false)
	port := r.current().port
	k := time.Now()
	r.current().stop()
	if err := sleep(ctx, r.o.Down); err != nil {
		return fmt.Errorf("keep serve down: %w", err)
	}
	np, err := startServe(ctx, r.o.Pam, r.o.Environ, r.dataDir, port, r.o.ServeEnv, r.logPath)
	if err != nil {
		return fmt.Errorf("restart serve: %w", err)
	}
	r.spMu.Lock()
	r.sp = np
	r.spMu.Unlock()
	r.log.Info("serve restarted", "pid", np.PID())
	res := r.res
	res.Restarted, res.Down, res.ServeRestart = true, r.o.Down, time.Since(k)
	n, err := waitFor(ctx, 3*time.Minute, func() (int, bool) { n := r.s.admittedSince(k); return n, n == r.o.Workers })
	res.Settle, res.SettleHosts = time.Since(k), n
	if err != nil {
		return fmt.Errorf("%d of %d workers back after the restart: %w", n, r.o.Workers, err)
	}
	res.Reached = PhaseRestarted
	r.log.Info("reconnect storm settled", "hosts", n, "took", res.Settle.Round(time.Millisecond), "serve_restart", res.ServeRestart.Round(time.Millisecond))
	return nil
}

// finish ends every fake session's CLI with exit code 0 and reads every
// run back: each must end exited, once.
func (r *runner) finish(ctx context.Context) error {
	target := r.s.finishedApplied.Load() + int64(r.res.Runs)
	for _, h := range r.hosts {
		h.ex.finishAll()
	}
	if got, err := waitFor(ctx, 5*time.Minute, func() (int, bool) {
		n := r.s.finishedApplied.Load()
		return int(n), n >= target
	}); err != nil {
		return fmt.Errorf("%d of %d runs finished: %w", got, r.res.Runs, err)
	}
	if err := r.verify(ctx); err != nil {
		return err
	}
	r.res.Reached = PhaseVerified
	return nil
}

// verify reads every host's runs back from serve: each created run must
// have exited, on the one host that was offered it, at attempt 1.
func (r *runner) verify(ctx context.Context) error {
	var mu sync.Mutex
	ok := map[string]bool{}
	err := parallel(ctx, 8, len(r.hosts), func(ctx context.Context, i int) error {
		runs, err := r.op.ListRuns(ctx, apiclient.RunFilter{HostID: r.hosts[i].hostID, Limit: 1000})
		if err != nil {
			return fmt.Errorf("list the runs of %s: %w", r.hosts[i].name, err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, run := range runs {
			if run.Status == wire.RunExited && run.ExitCode != nil && *run.ExitCode == 0 && run.Attempt == 1 {
				ok[run.ID] = true
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for id := range r.posted {
		if !ok[id] {
			r.res.Lost++
		}
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	for _, n := range r.s.dispatched {
		if len(n.hosts) > 1 || n.maxAttempt > 1 {
			r.res.Duplicates++
		}
	}
	return nil
}
