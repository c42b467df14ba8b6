package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"pam/internal/lifecycle"
	"pam/internal/runwrite"
	"pam/internal/store"
	"pam/internal/wire"
)

// DecideSignal is the decision about sig (lifecycle.IngestSignal) from the
// run and the facts read under its lock, at now: the store.SignalRule the
// ingest, one signal or a group commit, applies.
func (s *Service) DecideSignal(r wire.Run, sender string, sig wire.Signal, f runwrite.SignalFacts, now time.Time) (runwrite.Decision, error) {
	return lifecycle.IngestSignal(lifecycle.FromWire(r), lifecycle.Signal{Kind: sig.Kind, Source: sig.Source, Attempt: sig.Attempt,
		Seq: sig.Seq, Payload: sig.Payload, Sender: sender}, f, s.st.Policy, now)
}

// IngestSignal applies one signal from host senderHost in its own
// transaction (store.IngestSignal), decided by DecideSignal.
func (s *Service) IngestSignal(ctx context.Context, runID, senderHost string, sig wire.Signal) (store.Ingest, error) {
	return s.st.IngestSignal(ctx, s.DecideSignal, runID, senderHost, sig)
}

// IngestSignals applies signals in one transaction (store.IngestSignals,
// the group commit), each decided by DecideSignal.
func (s *Service) IngestSignals(ctx context.Context, in []store.SignalIn) ([]store.SignalOut, bool) {
	return s.st.IngestSignals(ctx, s.DecideSignal, in)
}

// RunStateReport applies a worker's run_state frame about its own run:
// spawn_failed, session_lost, tmux_crash and wrapper_died fail the current
// attempt (with the restart policy); stale_session and orphan_detected are
// journaled (an orphan_detected without run_id names no run at all, and
// one naming a run never offered to this host is journaled for the host,
// with the run id and attempt in its payload). Any other report about a
// run never offered to hostID is not_found.
func (s *Service) RunStateReport(ctx context.Context, hostID string, f wire.RunStateFrame) (wire.Run, bool, error) {
	var out wire.Run
	changed := false
	if f.State == wire.StateOrphanDetected {
		offered, err := s.st.OrphanOffered(ctx, hostID, f.RunID)
		if err != nil {
			return wire.Run{}, false, err
		}
		if !offered {
			return wire.Run{}, false, s.st.JournalOrphan(ctx, hostID, f.RunID, f.Attempt, f.Detail) // names what it did
		}
	}
	err := s.st.InTx(ctx, func(tx *store.Tx) error {
		r, err := tx.LockRun(ctx, f.RunID)
		if err != nil {
			return err
		}
		// A worker speaks only for runs offered to its host: another's
		// run is not_found, and nothing is journaled.
		offered, err := tx.OfferedTo(ctx, hostID, r.ID)
		if err != nil {
			return err
		}
		if !offered {
			return wire.NotFound("run")
		}
		d, err := lifecycle.StateReport(lifecycle.FromWire(r), hostID, f.Attempt, f.State, f.Detail, s.st.Policy, s.st.Now())
		if err != nil {
			return err
		}
		if d.Report != "" {
			// Journaled once per (host, run, kind) an hour, counted
			// in between (docs/architecture.md#bounded-journal).
			due, repeats, err := tx.ReportDue(ctx, hostID, r.ID, d.Report)
			if err != nil || !due {
				out = r
				return err
			}
			for _, st := range d.Steps {
				for _, ev := range st.Events {
					ev.Extra[store.PayloadRepeats] = repeats
				}
			}
		}
		out, err = s.st.Apply(ctx, tx, r, d)
		if errors.Is(err, store.ErrGuardLost) {
			out = r
			return nil
		}
		changed = err == nil && d.Changed()
		return err
	})
	if err != nil {
		return wire.Run{}, false, fmt.Errorf("apply the %s report of run %s: %w", f.State, f.RunID, err)
	}
	return out, changed, nil
}
