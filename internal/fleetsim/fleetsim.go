// Package fleetsim is the simulated fleet of `pam-bench fleet`: a real
// `pam serve` (embedded PostgreSQL, loopback only) and hundreds of real
// workers (package worker) in this process, each a host of its own with
// its own data dir — registration, the uplink, heartbeats, dispatch,
// reconciliation, capture, the spool and its replay, reconnects with the
// worker's backoff — whose sessions are fake (fakeSessions: no tmux, no
// process; a "wrapper" posts started and finished with the real
// wrapper's sender). It measures
// what one serve holds: hosts connected, heartbeats sustained, dispatch
// rate and spread, serve's CPU and memory, and how long a reconnect storm
// after a serve restart takes to settle (docs/scaling.md).
package fleetsim

import (
	"log/slog"
	"time"

	"pam/internal/defaults"
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
	// changes (the worker's capture uplinks a snapshot of it); 0 never
	// after its first.
	SnapshotInterval time.Duration
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

	// SnapshotsSent counts the changed screens the workers' captures
	// took, each uplinked as a snapshot: every session's first and, with
	// SnapshotInterval, its changes.
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
	// Anomalies counts signal answers other than applied, refused
	// offers, uplinks down and every warning a worker logged, by kind
	// (those while serve restarted apart); Errors holds the first few
	// error messages.
	Anomalies map[string]int64
	Errors    []string
}
