package dispatch

import (
	"context"
	"time"

	"pam/internal/wire"
)

// fleetDuties applies the host timers of docs/architecture.md#central-duties and returns how many hosts
// and runs changed: hosts silent past PAM_HOST_OFFLINE_AFTER go offline,
// hosts silent past PAM_HOST_LOST_AFTER lose their runs (host_lost), and
// runs whose pane has not changed for PAM_CLI_HANG_TIMEOUT on an online
// host fail cli_hang and their sessions are stopped.
func (d *Dispatcher) fleetDuties(ctx context.Context) int {
	changed := 0
	// Restart grace: no host goes offline until PAM_HOST_OFFLINE_AFTER has
	// passed since this server started (docs/architecture.md#central-duties).
	if time.Since(d.started) > d.o.HostOfflineAfter {
		if n, err := d.store.MarkOffline(ctx, d.o.HostOfflineAfter); err != nil {
			d.logErr(ctx, "mark hosts offline", err)
		} else {
			changed += n
		}
	}
	// Both bounds count from this serve's start at the earliest, so an
	// outage of serve itself is never held against a host or a run.
	if n, err := d.store.MarkHostsLost(ctx, d.o.HostLostAfter, d.started); err != nil {
		d.logErr(ctx, "mark hosts lost", err)
	} else if n > 0 {
		d.o.Logger.Warn("host lost: its runs failed host_lost", "runs", n, "lost_after", d.o.HostLostAfter)
		changed += n
	}
	hung, err := d.store.FailHungRuns(ctx, d.o.CLIHangTimeout, d.o.HostOfflineAfter, d.started)
	if err != nil {
		d.logErr(ctx, "fail hung runs", err)
	}
	for _, h := range hung {
		d.o.Logger.Warn("run failed cli_hang: no pane change", "run_id", h.RunID, "attempt", h.Attempt, "host_id", h.HostID, "hang_timeout", d.o.CLIHangTimeout)
		// The graceful ladder: the CLI may still be saved by SIGTERM.
		if err := d.fleet.Send(h.HostID, wire.Frame{Type: wire.FrameRunStop, RunID: h.RunID, Attempt: wire.IntPtr(h.Attempt)}); err != nil {
			d.o.Logger.Warn("push run_stop of a hung run", "run_id", h.RunID, "host_id", h.HostID, "err", err)
		}
	}
	return changed + len(hung)
}
