package dispatch

import (
	"context"

	"pam/internal/wire"
)

// fleetDuties applies the host and pane timers of docs/architecture.md#central-duties and returns how many hosts
// and runs changed: hosts silent past PAM_HOST_OFFLINE_AFTER go offline,
// hosts silent past PAM_HOST_LOST_AFTER lose their runs (host_lost), a
// working run whose pane has not changed for PAM_CLI_HANG_TIMEOUT on an
// online host fails cli_hang, and a run whose agent completed and then
// sat idle for PAM_COMPLETED_STOP_AFTER is stopped
// (docs/architecture.md#working-waiting-hung); the sessions of both are
// stopped.
func (d *Dispatcher) fleetDuties(ctx context.Context) int {
	changed := 0
	// Restart grace: no host goes offline until PAM_HOST_OFFLINE_AFTER has
	// passed since this server started (docs/architecture.md#central-duties).
	if d.store.Now().Sub(d.started) > d.o.HostOfflineAfter {
		if n, err := d.store.MarkOffline(ctx, d.o.HostOfflineAfter); err != nil {
			d.logErr(ctx, "mark hosts offline", err)
		} else {
			changed += n
		}
	}
	// Every bound counts from this serve's start at the earliest, so an
	// outage of serve itself is never held against a host or a run.
	if n, err := d.runs.MarkHostsLost(ctx, d.o.HostLostAfter, d.started); err != nil {
		d.logErr(ctx, "mark hosts lost", err)
	} else if n > 0 {
		d.o.Logger.Warn("host lost: its runs failed host_lost", "runs", n, "lost_after", d.o.HostLostAfter)
		changed += n
	}
	hung, err := d.runs.FailHungRuns(ctx, d.o.CLIHangTimeout, d.o.HostOfflineAfter, d.started)
	if err != nil {
		d.logErr(ctx, "fail hung runs", err)
	}
	for _, h := range hung {
		d.o.Logger.Warn("run failed cli_hang: no pane change", "run_id", h.RunID, "attempt", h.Attempt, "host_id", h.HostID, "hang_timeout", d.o.CLIHangTimeout)
		d.stopSession(h.HostID, h.RunID, h.Attempt)
	}
	changed += len(hung)
	// A run's progress held back within its second is journaled once the
	// second has passed (docs/architecture.md#bounded-journal).
	if _, err := d.store.FlushProgress(ctx); err != nil {
		d.logErr(ctx, "flush held progress", err)
	}
	if d.o.CompletedStopAfter > 0 {
		idle, err := d.runs.StopCompletedRuns(ctx, d.o.CompletedStopAfter, d.o.HostOfflineAfter, d.started)
		if err != nil {
			d.logErr(ctx, "stop completed idle runs", err)
		}
		for _, s := range idle {
			d.o.Logger.Info("run stopped: completed, then idle", "run_id", s.RunID, "attempt", s.Attempt, "host_id", s.HostID,
				"stop_after", d.o.CompletedStopAfter)
			d.stopSession(s.HostID, s.RunID, s.Attempt)
		}
		changed += len(idle)
	}
	return changed
}

// stopSession tells a host to stop a run's session the graceful way
// (SIGTERM first: the CLI may still save its state). A host that is not
// connected finds the ended run when its reconciliation runs.
func (d *Dispatcher) stopSession(hostID, runID string, attempt int) {
	if err := d.fleet.Send(hostID, wire.RunStopFrame{RunID: runID, Attempt: wire.IntPtr(attempt)}); err != nil {
		d.o.Logger.Warn("push run_stop", "run_id", runID, "host_id", hostID, "err", err)
	}
}
