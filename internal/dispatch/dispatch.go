// Package dispatch places pending runs on hosts (docs/architecture.md#central-duties): one loop per active
// server that applies the central timeouts, offers due runs to eligible
// connected hosts (claims are FOR UPDATE SKIP LOCKED in the store, so
// several dispatchers on one database never double-dispatch), and pushes
// run_dispatch down the chosen host's uplink. It wakes on events — a new
// run, a host coming online, a run ending, an ack — and otherwise on a
// short tick and at the next backoff deadline. Every timer is judged at
// the store's clock (store.Store.Clock), so a test can move time past a
// timeout and wake a pass instead of waiting for it; the tick only paces
// the passes.
package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"pam/internal/defaults"
	"pam/internal/runs"
	"pam/internal/signaltoken"
	"pam/internal/store"
	"pam/internal/wire"
)

// Sender pushes frames to connected workers (fleet.Fleet).
type Sender interface {
	Connected(hostID string) bool
	Send(hostID string, f wire.Frame) error
}

// Options are the timers of docs/architecture.md#configuration-and-files-on-disk the dispatcher applies.
type Options struct {
	// AckTimeout is PAM_DISPATCH_ACK_TIMEOUT: an offer not acked within it
	// is withdrawn, and a host that refused a run is not offered it again
	// within it.
	AckTimeout       time.Duration
	DispatchTimeout  time.Duration // PAM_DISPATCH_TIMEOUT
	SpawnTimeout     time.Duration // PAM_SPAWN_TIMEOUT
	HostOfflineAfter time.Duration // PAM_HOST_OFFLINE_AFTER
	HostLostAfter    time.Duration // PAM_HOST_LOST_AFTER; default 24h
	CLIHangTimeout   time.Duration // PAM_CLI_HANG_TIMEOUT; default 30m
	Tick             time.Duration // fallback pass interval; default 1s
	Batch            int           // runs claimed per pass; default 100
	Logger           *slog.Logger
	// OnChange is called after a pass changed runs (so the caller can,
	// e.g., wake other loops); may be nil.
	OnChange func()
	// AfterPass is called after every pass, changed or not; may be nil.
	// Tests wait for passes with it: "nothing was offered" means something
	// only once a pass has run.
	AfterPass func()
	// CompletedStopAfter is PAM_COMPLETED_STOP_AFTER: a run whose agent
	// completed and then had no input and no pane change this long is
	// stopped. Default 1h; defaults.Never (or any negative) never.
	CompletedStopAfter time.Duration
}

// Dispatcher is the placement loop.
type Dispatcher struct {
	store   *store.Store
	runs    *runs.Service
	fleet   Sender
	o       Options
	wake    chan struct{}
	started time.Time
}

// New returns a dispatcher; call Run.
func New(s *store.Store, f Sender, o Options) *Dispatcher {
	if o.Tick <= 0 {
		o.Tick = time.Second
	}
	if o.Batch <= 0 {
		o.Batch = 100
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = defaults.DispatchAckTimeout
	}
	if o.DispatchTimeout <= 0 {
		o.DispatchTimeout = defaults.DispatchTimeout
	}
	if o.SpawnTimeout <= 0 {
		o.SpawnTimeout = defaults.SpawnTimeout
	}
	if o.HostOfflineAfter <= 0 {
		o.HostOfflineAfter = defaults.HostOfflineAfter
	}
	if o.HostLostAfter <= 0 {
		o.HostLostAfter = defaults.HostLostAfter
	}
	if o.CLIHangTimeout <= 0 {
		o.CLIHangTimeout = defaults.CLIHangTimeout
	}
	if o.CompletedStopAfter == 0 {
		o.CompletedStopAfter = defaults.CompletedStopAfter
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{store: s, runs: runs.New(s), fleet: f, o: o, wake: make(chan struct{}, 1)}
}

// Wake asks for a pass now. It never blocks.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run loops until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.started = d.store.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.wake:
		case <-timer.C:
		}
		again := d.pass(ctx)
		if d.o.AfterPass != nil {
			d.o.AfterPass()
		}
		next := d.o.Tick
		if again {
			next = 0 // a full batch: more may be due
		} else if due, err := d.store.NextDue(ctx); err == nil && !due.IsZero() {
			next = min(next, max(due.Sub(d.store.Now()), time.Millisecond))
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// pass runs the duties once and reports whether it should run again at
// once (the batch was full).
func (d *Dispatcher) pass(ctx context.Context) bool {
	// Offers first, then the timeouts: a run is judged past its dispatch
	// timeout only after this pass looked for a host for it, so a pass
	// that comes late (a loaded server) still records whether a host was
	// eligible but for capacity (dispatch_timeout) or none was
	// (no_eligible_host), and a run placeable now is placed, not failed.
	offers, err := d.runs.ClaimAndOffer(ctx, d.fleet.Connected, d.o.Batch, d.o.AckTimeout)
	if err != nil {
		d.logErr(ctx, "claim runs", err)
	}
	// The offers go down the uplinks before the host timers and the
	// sweep: a run's start waits for neither (three statements and a
	// transaction, 10–40 ms under load), and an offer just made is never
	// past its ack timeout. Only connected hosts get offers, so a host
	// the timers would mark offline now gets none either way.
	d.push(ctx, offers)
	changed := d.fleetDuties(ctx)
	n, err := d.runs.Sweep(ctx, d.o.AckTimeout, d.o.DispatchTimeout, d.o.SpawnTimeout)
	if err != nil {
		d.logErr(ctx, "sweep timeouts", err)
	}
	changed += n
	if changed+len(offers) > 0 && d.o.OnChange != nil {
		d.o.OnChange()
	}
	return len(offers) >= d.o.Batch
}

// push sends each offer's run_dispatch to its host.
func (d *Dispatcher) push(ctx context.Context, offers []store.Offer) {
	for _, o := range offers {
		f, err := d.dispatchFrame(ctx, o)
		if err == nil {
			err = d.fleet.Send(o.HostID, f)
		}
		if err != nil {
			// The ack timeout withdraws the offer and it goes elsewhere.
			d.o.Logger.Warn("push run_dispatch", "run_id", o.Run.ID, "host_id", o.HostID, "err", err)
			continue
		}
		d.o.Logger.Debug("run offered", "run_id", o.Run.ID, "attempt", o.Run.Attempt, "host_id", o.HostID)
	}
}

// dispatchFrame is the run_dispatch frame of an offer with the signal
// token of the offered attempt and host.
func (d *Dispatcher) dispatchFrame(ctx context.Context, o store.Offer) (wire.RunDispatchFrame, error) {
	key, err := d.store.SignalSecret(ctx)
	if err != nil {
		return wire.RunDispatchFrame{}, fmt.Errorf("dispatch run %s: %w", o.Run.ID, err)
	}
	f, err := d.store.DispatchFrame(ctx, o)
	if err != nil {
		return wire.RunDispatchFrame{}, err
	}
	f.SignalToken = signaltoken.Mint(key, o.Run.ID, o.Run.Attempt, o.HostID)
	return f, nil
}

func (d *Dispatcher) logErr(ctx context.Context, what string, err error) {
	if ctx.Err() == nil {
		d.o.Logger.Warn("dispatch: "+what, "err", err)
	}
}
