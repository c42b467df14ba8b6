// Package fleetsim is the simulated fleet of `pam-bench fleet`: a real
// `pam serve` (embedded PostgreSQL, loopback only) and hundreds of
// in-process workers that speak the real worker protocol to it — register,
// the uplink WebSocket, heartbeats at the default interval, dispatch acks,
// reconciliation calls — with fake sessions in place of tmux, whose
// wrappers post started and finished as `pam exec run` does. It measures
// what one serve holds: hosts connected, heartbeats sustained, dispatch
// rate and spread, serve's CPU and memory, and how long a reconnect storm
// after a serve restart takes to settle (docs/scaling.md).
package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"pam/internal/procfs"
	"pam/internal/embeddb"

	"pam/internal/apiclient"
	"pam/internal/defaults"
	"pam/internal/wire"
)

// Provider is the provider every simulated host offers and every run
// asks for.
const Provider = "shell"

// Options says what fleet to simulate. Zero fields take the defaults
// noted.
type Options struct {
	// Pam is the pam binary that runs serve (os.Executable for the CLI).
	Pam string
	// Workers is how many simulated workers (hosts); default 500.
	Workers int
	// RunsPerWorker is each worker's max_runs and how many runs per
	// worker are created; default 10.
	RunsPerWorker int
	// Hold is how long the full fleet is held before the restart, for the
	// steady-state figures; default 60s.
	Hold time.Duration
	// HeartbeatInterval and ReconcileInterval are the workers'; default
	// the real worker's (PAM_HEARTBEAT_INTERVAL, PAM_RECONCILE_INTERVAL).
	HeartbeatInterval, ReconcileInterval time.Duration
	// SnapshotInterval is how often each live fake session's screen
	// changes (a snapshot frame); 0 never after the greeting.
	SnapshotInterval time.Duration
	// UplinkSignals sends the fake wrappers' signals on the uplink
	// instead of over HTTP with the signal token.
	UplinkSignals bool
	// NoRestart skips the reconnect storm.
	NoRestart bool
	// Down is how long serve stays stopped in the reconnect storm (an
	// upgrade, a failover): the workers' backoff grows meanwhile.
	Down time.Duration
	// Timeout bounds the whole simulation; default 15m.
	Timeout time.Duration
	// Environ is the environment serve starts with (PATH, HOME, TMPDIR),
	// less its PAM_ settings; ServeEnv is added to it (PAM_LOG_LEVEL=warn,
	// say).
	Environ, ServeEnv []string
	// Logger gets the simulation's progress; nil discards it.
	Logger *slog.Logger
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Workers, 500)
	def(&o.RunsPerWorker, 10)
	defd(&o.Hold, time.Minute)
	defd(&o.HeartbeatInterval, defaults.HeartbeatInterval)
	defd(&o.ReconcileInterval, defaults.ReconcileInterval)
	defd(&o.Timeout, 15*time.Minute)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Phase is how far a simulation got: a result's figures hold for the
// phases it reached.
type Phase int

// The phases, in order.
const (
	PhaseStarted    Phase = iota // serve listens
	PhaseConnected               // every worker admitted
	PhaseDispatched              // every run started
	PhaseHeld                    // the hold is over
	PhaseRestarted               // every worker back after the restart
	PhaseVerified                // every run read back
)

// Result is what one simulation measured.
type Result struct {
	// Reached is the last phase completed.
	Reached Phase

	Workers, RunsPerWorker, Runs int
	HeartbeatInterval            time.Duration
	Hold                         time.Duration
	SnapshotInterval             time.Duration

	// ServeStart is how long the first serve took to listen (initdb
	// included); HostsConnected how many workers were admitted, within
	// ConnectTime of their start.
	ServeStart     time.Duration
	HostsConnected int
	ConnectTime    time.Duration

	// CreateRate is POST /runs per second (8 clients); DispatchRate runs
	// started per second, from the first POST of a batch to the started
	// signal of its last run; DispatchLatency (sorted) is each run's POST
	// → run_dispatch at its worker.
	CreateRate      float64
	DispatchRate    float64
	DispatchLatency []time.Duration
	// DispatchEvents is how many events the journal took while the runs
	// were created, placed and started (every write of a run's status is
	// journaled in its transaction): the database's write load.
	DispatchEvents int
	// SpreadMin and SpreadMax are the fewest and most runs on one host
	// with the fleet half full (equal hosts).
	SpreadMin, SpreadMax int

	// Heartbeats acked per second during the hold, against the rate the
	// fleet offers (Workers / HeartbeatInterval); HeartbeatAck (sorted)
	// is each one's send → heartbeat_ack.
	HeartbeatRate, HeartbeatOffered float64
	HeartbeatAck                    []time.Duration

	// CPU in percent of one core, of serve and of its database's
	// processes, while runs were dispatched and during the hold.
	ServeCPUDispatch, ServeCPUHold float64
	DBCPUDispatch, DBCPUHold       float64
	// ServeRSSPeak is serve's largest resident set seen (sampled every
	// 250 ms); ServeRSSHold its resident set at the end of the hold.
	ServeRSSPeak, ServeRSSHold int64
	// DBBackendsMax is the most client backends (serve's connections to
	// PostgreSQL) seen.
	DBBackendsMax int
	// Runtime is what serve's /metrics said at the end of the hold:
	// goroutines, heap and stacks in use, uplinks connected.
	Runtime serveMetrics

	// SnapshotsSent counts the snapshot frames the workers sent: their
	// greetings' and, with SnapshotInterval, their sessions' changes.
	SnapshotsSent int64

	// Restarted says the reconnect storm ran: serve was stopped, kept
	// down for Down, and started again on its data dir and port.
	// ServeRestart is stop → listening again; Settle is stop → every
	// worker admitted again (its heartbeat acked), SettleHosts how many
	// were by then.
	Restarted    bool
	Down         time.Duration
	ServeRestart time.Duration
	Settle       time.Duration
	SettleHosts  int

	// Lost counts runs that did not end exited on the host that ran
	// them; Duplicates runs offered to more than one host or at more
	// than attempt 1.
	Lost, Duplicates int
	// Anomalies counts signal answers other than applied, error frames,
	// frames that failed validation and failed reconciliation calls, by
	// kind; Errors holds the first few error messages.
	Anomalies map[string]int64
	Errors    []string
}

// sim is the shared state of one simulation.
type sim struct {
	o    Options
	base string // serve's URL (the port is kept across the restart)

	snapshotsSent                                    atomic.Int64
	refusals, protocolErrors, errorFrames            atomic.Int64
	reconcileErrors, startedApplied, finishedApplied atomic.Int64

	mu         sync.Mutex
	measureHB  bool
	hbAck      []time.Duration
	admitted   map[*simWorker]time.Time // latest admission of each worker
	dispatched map[string]*dispatchNote // by run id
	anomalies  map[string]int64
	errs       []string
}

// dispatchNote is what the workers saw of one run's offers.
type dispatchNote struct {
	first      time.Time
	hosts      []string
	maxAttempt int
}

const maxErrors = 20

func (s *sim) noteErr(what string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < maxErrors {
		s.errs = append(s.errs, what+": "+err.Error())
	}
}

// noteDown records why an uplink ended or failed: expected while serve
// restarts, an anomaly otherwise (counted, never fatal).
func (s *sim) noteDown(err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	s.anomalies["uplink down"]++
	s.mu.Unlock()
}

func (s *sim) noteAdmitted(w *simWorker, at time.Time) {
	s.mu.Lock()
	s.admitted[w] = at
	s.mu.Unlock()
}

// admittedSince counts workers admitted at or after t.
func (s *sim) admittedSince(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, at := range s.admitted {
		if !at.Before(t) {
			n++
		}
	}
	return n
}

func (s *sim) heartbeatAcked(d time.Duration) {
	s.mu.Lock()
	if s.measureHB {
		s.hbAck = append(s.hbAck, d)
	}
	s.mu.Unlock()
}

func (s *sim) noteDispatch(runID, hostID string, attempt int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.dispatched[runID]
	if n == nil {
		n = &dispatchNote{first: time.Now()}
		s.dispatched[runID] = n
	}
	if !slices.Contains(n.hosts, hostID) {
		n.hosts = append(n.hosts, hostID)
	}
	n.maxAttempt = max(n.maxAttempt, attempt)
}

// signalResult counts one signal's answer: result for an answer, code
// for a refusal or a failure to deliver.
func (s *sim) signalResult(kind, result, code string) {
	if code == "" && result == wire.ResultApplied {
		switch kind {
		case wire.SignalStarted:
			s.startedApplied.Add(1)
			return
		case wire.SignalFinished:
			s.finishedApplied.Add(1)
			return
		}
	}
	key := "signal " + kind + " " + result
	if code != "" {
		key = "signal " + kind + " refused " + code
	}
	s.mu.Lock()
	s.anomalies[key]++
	s.mu.Unlock()
}

// Run simulates the fleet and returns what it measured. It is bounded by
// o.Timeout and ctx, and cleans up on every return: workers stopped,
// serve and its database stopped, the temporary data dir removed.
func Run(ctx context.Context, o Options) (res *Result, err error) {
	o.defaults()
	if o.Pam == "" {
		return nil, errors.New("fleetsim: Options.Pam is the pam binary to run serve with")
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	log := o.Logger

	// Two descriptors per worker here (uplink, HTTP) and as many in serve,
	// plus the wrappers' HTTP connections and the database's.
	need := uint64(3*o.Workers + 512)
	limit, err := raiseFileLimit()
	if err != nil {
		return nil, fmt.Errorf("fleetsim: raise the open files limit: %w", err)
	}
	if limit < need {
		return nil, fmt.Errorf("fleetsim: %d workers need about %d open files, the limit is %d: lower --workers or raise ulimit -Hn", o.Workers, need, limit)
	}

	tmp := os.TempDir()
	if len(tmp) > 40 { // the database's Unix socket path must stay short
		tmp = "/tmp"
	}
	dir, err := os.MkdirTemp(tmp, "pam-fleet-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// Traversable, so the database can run as the postgres user when pam
	// runs as root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "serve")
	// Serve's output, of both starts.
	logPath := filepath.Join(dir, "serve.out")
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\nserve's last output:\n%s", err, tail(logPath, 20))
		}
	}()

	res = &Result{Workers: o.Workers, RunsPerWorker: o.RunsPerWorker, Runs: o.Workers * o.RunsPerWorker,
		HeartbeatInterval: o.HeartbeatInterval, Hold: o.Hold, SnapshotInterval: o.SnapshotInterval}
	t0 := time.Now()
	var spMu sync.Mutex
	sp, err := startServe(ctx, o.Pam, o.Environ, dataDir, 0, o.ServeEnv, logPath)
	if err != nil {
		return nil, err
	}
	current := func() *serveProc { spMu.Lock(); defer spMu.Unlock(); return sp }
	defer func() { current().stop() }()
	res.ServeStart = time.Since(t0)
	log.Info("serve listening", "url", sp.url, "pid", sp.PID(), "took", res.ServeStart.Round(time.Millisecond))

	s := &sim{o: o, base: sp.url, admitted: map[*simWorker]time.Time{}, dispatched: map[string]*dispatchNote{}, anomalies: map[string]int64{}}
	defer s.report(res) // what was counted, however far it got

	// Serve's memory and connections, sampled throughout.
	sampCtx, stopSampling := context.WithCancel(ctx)
	var sampWG sync.WaitGroup
	defer func() { stopSampling(); sampWG.Wait() }()
	sampWG.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			p := current()
			if u, ok := procfs.ReadStat(p.PID()); ok {
				res.ServeRSSPeak = max(res.ServeRSSPeak, u.RSS)
			}
			if _, n := clusterUsage(embeddb.RunningPID(filepath.Join(p.dataDir, "postgres"))); n > res.DBBackendsMax {
				res.DBBackendsMax = n
			}
			select {
			case <-sampCtx.Done():
				return
			case <-t.C:
			}
		}
	})
	usage := func() (serveCPU, dbCPU time.Duration) {
		p := current()
		u, _ := procfs.ReadStat(p.PID())
		db, _ := clusterUsage(embeddb.RunningPID(filepath.Join(p.dataDir, "postgres")))
		return u.CPU, db
	}

	op, err := apiclient.New(sp.url, sp.token, "")
	if err != nil {
		return nil, err
	}
	defer op.HTTP.CloseIdleConnections()
	autoDone := false
	proj, err := op.CreateProject(ctx, wire.CreateProject{Name: "fleet bench", AutoDone: &autoDone})
	if err != nil {
		return nil, fmt.Errorf("create the project: %w", err)
	}
	task, err := op.CreateWorkItem(ctx, proj.Slug, wire.CreateWorkItem{Kind: "task", Title: "simulated runs"})
	if err != nil {
		return nil, fmt.Errorf("create the task: %w", err)
	}

	// Hosts, each with its worker token.
	workers := make([]*simWorker, o.Workers)
	err = parallel(ctx, 16, o.Workers, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("sim-%04d", i)
		maxRuns := o.RunsPerWorker
		h, err := op.CreateHost(ctx, wire.CreateHost{Name: name, MaxRuns: &maxRuns})
		if err != nil {
			return fmt.Errorf("create host %s: %w", name, err)
		}
		workers[i] = newSimWorker(s, name, h.Host.ID, h.WorkerToken)
		return nil
	})
	if err != nil {
		return nil, err
	}

	// The fleet comes up all at once.
	wctx, stopWorkers := context.WithCancel(ctx)
	var wwg sync.WaitGroup
	defer func() { stopWorkers(); wwg.Wait() }()
	start := time.Now()
	for _, w := range workers {
		wwg.Go(func() { w.run(wctx) })
	}
	n, err := waitFor(ctx, 3*time.Minute, func() (int, bool) { n := s.admittedSince(start); return n, n == o.Workers })
	res.HostsConnected, res.ConnectTime = n, time.Since(start)
	if err != nil {
		return res, fmt.Errorf("%d of %d workers connected: %w", n, o.Workers, err)
	}
	res.Reached = PhaseConnected
	log.Info("fleet connected", "hosts", n, "took", res.ConnectTime.Round(time.Millisecond))

	// Dispatch: half the runs (the spread of equal hosts half full), then
	// the rest (every host full).
	posted := map[string]time.Time{}
	var postedMu sync.Mutex
	_, lastEvent, err := countEvents(ctx, op, 0)
	if err != nil {
		return res, err
	}
	cpu0, db0 := usage()
	d0 := time.Now()
	var creating, dispatching time.Duration
	half := res.Runs / 2
	for bi, batch := range []int{half, res.Runs - half} {
		target := s.startedApplied.Load() + int64(batch)
		b0 := time.Now()
		err := parallel(ctx, 8, batch, func(ctx context.Context, i int) error {
			t := time.Now()
			r, err := op.CreateRun(ctx, wire.CreateRun{TaskID: task.ID, Provider: Provider})
			if err != nil {
				return fmt.Errorf("create a run: %w", err)
			}
			postedMu.Lock()
			posted[r.ID] = t
			postedMu.Unlock()
			return nil
		})
		if err != nil {
			return res, err
		}
		creating += time.Since(b0)
		got, err := waitFor(ctx, 5*time.Minute, func() (int, bool) {
			n := s.startedApplied.Load()
			return int(n), n >= target
		})
		dispatching += time.Since(b0)
		if err != nil {
			return res, fmt.Errorf("%d of %d runs started: %w", got, target, err)
		}
		if bi == 0 {
			res.SpreadMin, res.SpreadMax = math.MaxInt, 0
			for _, w := range workers {
				n := w.live()
				res.SpreadMin, res.SpreadMax = min(res.SpreadMin, n), max(res.SpreadMax, n)
			}
		}
		log.Info("runs started", "runs", target, "took", time.Since(b0).Round(time.Millisecond))
	}
	cpu1, db1 := usage()
	wall := time.Since(d0)
	if res.DispatchEvents, _, err = countEvents(ctx, op, lastEvent); err != nil {
		return res, err
	}
	res.ServeCPUDispatch, res.DBCPUDispatch = percent(cpu1-cpu0, wall), percent(db1-db0, wall)
	res.CreateRate = float64(res.Runs) / creating.Seconds()
	res.DispatchRate = float64(res.Runs) / dispatching.Seconds()
	s.mu.Lock()
	for id, n := range s.dispatched {
		if t, ok := posted[id]; ok {
			res.DispatchLatency = append(res.DispatchLatency, n.first.Sub(t))
		}
	}
	s.mu.Unlock()
	slices.Sort(res.DispatchLatency)
	res.Reached = PhaseDispatched

	// Hold: the full fleet at its heartbeat interval.
	s.mu.Lock()
	s.measureHB, s.hbAck = true, nil
	s.mu.Unlock()
	cpu0, db0 = usage()
	h0 := time.Now()
	if err := sleep(ctx, o.Hold); err != nil {
		return res, fmt.Errorf("hold the fleet: %w", err)
	}
	held := time.Since(h0)
	cpu1, db1 = usage()
	s.mu.Lock()
	s.measureHB = false
	res.HeartbeatAck = slices.Clone(s.hbAck)
	s.mu.Unlock()
	slices.Sort(res.HeartbeatAck)
	res.HeartbeatRate = float64(len(res.HeartbeatAck)) / held.Seconds()
	res.HeartbeatOffered = float64(o.Workers) / o.HeartbeatInterval.Seconds()
	res.ServeCPUHold, res.DBCPUHold = percent(cpu1-cpu0, held), percent(db1-db0, held)
	res.Reached = PhaseHeld
	if u, ok := procfs.ReadStat(current().PID()); ok {
		res.ServeRSSHold = u.RSS
	}
	if res.Runtime, err = scrapeMetrics(ctx, op.HTTP, sp.url, sp.token); err != nil {
		s.noteErr("serve metrics", err)
	}
	log.Info("hold done", "heartbeats_per_s", fmt.Sprintf("%.1f", res.HeartbeatRate), "serve_cpu_pct", fmt.Sprintf("%.1f", res.ServeCPUHold))

	// The reconnect storm: serve stops (as for an upgrade) and starts
	// again on its data dir and port; every worker comes back with its
	// own backoff and jitter.
	if !o.NoRestart {
		port := current().port
		k := time.Now()
		current().stop()
		if err := sleep(ctx, o.Down); err != nil {
			return res, fmt.Errorf("keep serve down: %w", err)
		}
		np, err := startServe(ctx, o.Pam, o.Environ, dataDir, port, o.ServeEnv, logPath)
		if err != nil {
			return res, fmt.Errorf("restart serve: %w", err)
		}
		spMu.Lock()
		sp = np
		spMu.Unlock()
		log.Info("serve restarted", "pid", np.PID())
		res.Restarted, res.Down, res.ServeRestart = true, o.Down, time.Since(k)
		n, err := waitFor(ctx, 3*time.Minute, func() (int, bool) { n := s.admittedSince(k); return n, n == o.Workers })
		res.Settle, res.SettleHosts = time.Since(k), n
		if err != nil {
			return res, fmt.Errorf("%d of %d workers back after the restart: %w", n, o.Workers, err)
		}
		res.Reached = PhaseRestarted
		log.Info("reconnect storm settled", "hosts", n, "took", res.Settle.Round(time.Millisecond), "serve_restart", res.ServeRestart.Round(time.Millisecond))
	}

	// Every fake session ends; every run must end exited (code 0), once.
	target := s.finishedApplied.Load() + int64(res.Runs)
	for _, w := range workers {
		w.finishAll()
	}
	if got, err := waitFor(ctx, 5*time.Minute, func() (int, bool) {
		n := s.finishedApplied.Load()
		return int(n), n >= target
	}); err != nil {
		return res, fmt.Errorf("%d of %d runs finished: %w", got, res.Runs, err)
	}
	if err := verify(ctx, op, s, workers, posted, res); err != nil {
		return res, err
	}
	res.Reached = PhaseVerified
	return res, nil
}

// report copies the counters into res.
func (s *sim) report(res *Result) {
	res.SnapshotsSent = s.snapshotsSent.Load()
	s.mu.Lock()
	res.Anomalies = maps.Clone(s.anomalies)
	res.Errors = slices.Clone(s.errs)
	s.mu.Unlock()
	for k, v := range map[string]int64{"refused offers": s.refusals.Load(), "invalid frames from serve": s.protocolErrors.Load(),
		"error frames": s.errorFrames.Load(), "reconcile calls failed": s.reconcileErrors.Load()} {
		if v > 0 {
			res.Anomalies[k] = v
		}
	}
}

// verify reads every host's runs back from serve: each created run must
// have exited, on the one host that was offered it, at attempt 1.
func verify(ctx context.Context, op *apiclient.Client, s *sim, workers []*simWorker, posted map[string]time.Time, res *Result) error {
	var mu sync.Mutex
	ok := map[string]bool{}
	err := parallel(ctx, 8, len(workers), func(ctx context.Context, i int) error {
		runs, err := op.ListRuns(ctx, apiclient.RunFilter{HostID: workers[i].hostID, Limit: 1000})
		if err != nil {
			return fmt.Errorf("list the runs of %s: %w", workers[i].name, err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range runs {
			if r.Status == wire.RunExited && r.ExitCode != nil && *r.ExitCode == 0 && r.Attempt == 1 {
				ok[r.ID] = true
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for id := range posted {
		if !ok[id] {
			res.Lost++
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.dispatched {
		if len(n.hosts) > 1 || n.maxAttempt > 1 {
			res.Duplicates++
		}
	}
	return nil
}

// countEvents pages through the journal after seq after and returns how
// many events it holds and the last one's seq.
func countEvents(ctx context.Context, op *apiclient.Client, after int64) (int, int64, error) {
	n := 0
	for {
		evs, err := op.ListEvents(ctx, after, "", 1000)
		if err != nil {
			return n, after, fmt.Errorf("read the journal: %w", err)
		}
		if len(evs) == 0 {
			return n, after, nil
		}
		n += len(evs)
		after = evs[len(evs)-1].Seq
	}
}

// parallel runs fn(i) for i in [0, n) on k goroutines; the first error
// stops the rest and is returned.
func parallel(ctx context.Context, k, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// waitFor polls cond every 50 ms until it holds, d passes or ctx ends;
// it returns cond's last count.
func waitFor(ctx context.Context, d time.Duration, cond func() (int, bool)) (int, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		n, done := cond()
		if done {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-deadline.C:
			return n, fmt.Errorf("not within %s", d)
		case <-t.C:
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func percent(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * cpu.Seconds() / wall.Seconds()
}

// raiseFileLimit raises this process's soft limit of open files to the
// hard one and returns it: a simulated fleet holds a few descriptors per
// worker. Serve raises its own (the Go runtime does at start).
func raiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, err
		}
	}
	return l.Cur, nil
}

// tail is the last n lines of a file, for an error message.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := ""
	for _, l := range lines {
		out += "  " + l + "\n"
	}
	return out
}

// Percentile is the q-quantile (0 < q ≤ 1) of sorted durations, by the
// nearest rank; 0 for none.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
