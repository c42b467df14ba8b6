package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"pam/internal/lifecycle"
	"pam/internal/runwrite"
	"pam/internal/wire"
)

// Ingest is the outcome of a signal: the result of the signal table of docs/architecture.md#signal-ingest, the run
// as it is afterwards, and whether the sending host must stop its session.
type Ingest struct {
	Result       string
	Run          wire.Run
	StopSender   bool // stale_offer: that incarnation must not run twice
	StatusChange bool // the run's status changed (dispatcher: capacity may have freed)
}

// IngestSignal applies one signal from host senderHost in the normative
// order of docs/architecture.md#internal-api: first the epoch/dedup/ordering guard, then the guarded
// status write, then the journal — all in one transaction, with the run
// row locked so concurrent signals of one run are applied one at a time.
func (s *Store) IngestSignal(ctx context.Context, runID, senderHost string, sig wire.Signal) (Ingest, error) {
	return s.ingestOne(ctx, SignalIn{RunID: runID, Sender: senderHost, Signal: sig})
}

// ingestOne is IngestSignal of one signal of a batch, with what the
// server knows besides it (the screen's question).
func (s *Store) ingestOne(ctx context.Context, in SignalIn) (Ingest, error) {
	runID, senderHost, sig := in.RunID, in.Sender, in.Signal
	if err := sig.Validate(); err != nil {
		return Ingest{}, err // the refusal the sender reads, as is
	}
	var res Ingest
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := runByID(ctx, tx, runID, true)
		if err != nil {
			return err
		}
		known, err := senderKnown(ctx, tx, r.ID, senderHost)
		if err != nil {
			return err
		}
		if !known {
			return wire.NotFound("run")
		}
		if err := tokenExpired(in, r, s.now()); err != nil {
			return err
		}
		res, err = s.applySignal(ctx, tx, r, senderHost, sig, in.Screen)
		return err
	})
	if err != nil {
		return Ingest{}, fmt.Errorf("ingest signal %s of run %s: %w", sig.Kind, runID, err)
	}
	return res, nil
}

// senderKnown reports whether runID was offered to or placed on host: a
// worker speaks only for those runs.
func senderKnown(ctx context.Context, tx *Tx, runID, host string) (bool, error) {
	var known bool
	if err := tx.QueryRow(ctx, `SELECT coalesce($2::uuid = host_id, false) OR EXISTS (SELECT 1 FROM run_offers WHERE run_id = $1 AND host_id = $2)
		FROM runs WHERE id = $1`, runID, host).Scan(&known); err != nil {
		return false, fmt.Errorf("read the sender of run %s: %w", runID, err)
	}
	return known, nil
}

func (s *Store) applySignal(ctx context.Context, tx *Tx, r wire.Run, sender string, sig wire.Signal, screen *wire.AttentionDetail) (Ingest, error) {
	var facts lifecycle.SignalFacts
	if sig.Attempt != nil && *sig.Attempt <= r.Attempt {
		var err error
		if facts, err = signalFacts(ctx, tx, r, *sig.Attempt, sig.Kind); err != nil {
			return Ingest{}, err
		}
	}
	facts.Screen = screen
	d, err := s.decideSignal(r, sender, sig, facts)
	if err != nil {
		return Ingest{}, err
	}
	out, err := s.apply(ctx, tx, r, d)
	if err != nil {
		return Ingest{}, err
	}
	return Ingest{Result: d.Result, Run: out, StopSender: d.StopSender, StatusChange: d.Changed()}, nil
}

// decideSignal is the decision about sig (lifecycle.IngestSignal) from
// the run and the facts read under its lock.
func (s *Store) decideSignal(r wire.Run, sender string, sig wire.Signal, f lifecycle.SignalFacts) (runwrite.Decision, error) {
	return s.decideSignalAt(r, sender, sig, f, s.now())
}

// decideSignalAt is decideSignal at a given time.
func (s *Store) decideSignalAt(r wire.Run, sender string, sig wire.Signal, f lifecycle.SignalFacts, now time.Time) (runwrite.Decision, error) {
	return lifecycle.IngestSignal(lifecycle.FromWire(r), lifecycle.Signal{Kind: sig.Kind, Source: sig.Source, Attempt: sig.Attempt,
		Seq: sig.Seq, Payload: sig.Payload, Sender: sender}, f, s.Policy, now)
}

// signalFacts reads what the decision about a signal of kind at attempt
// needs besides the run: whether that one-shot kind was already processed
// for the run's attempt, the last applied progress seq, and the results
// signals of that kind and attempt were already set aside with. The run
// row is locked, so they hold until the transaction ends.
func signalFacts(ctx context.Context, tx *Tx, r wire.Run, attempt int, kind string) (lifecycle.SignalFacts, error) {
	var f lifecycle.SignalFacts
	var journaledAt *time.Time
	err := tx.QueryRow(ctx, `SELECT last_progress_seq, progress_journaled_at, progress_coalesced,
		EXISTS (SELECT 1 FROM processed_signals WHERE run_id = $1 AND attempt = $2 AND kind = $3),
		ARRAY(SELECT result FROM signal_refusals WHERE run_id = $1 AND attempt = $4 AND kind = $3 ORDER BY result)
		FROM runs WHERE id = $1`,
		r.ID, r.Attempt, kind, attempt).Scan(&f.LastProgressSeq, &journaledAt, &f.ProgressCoalesced, &f.Processed, &f.Refused)
	if err != nil {
		return f, fmt.Errorf("read signal facts of run %s: %w", r.ID, err)
	}
	if journaledAt != nil {
		f.ProgressJournaledAt = *journaledAt
	}
	return f, nil
}

// RunStateReport applies a worker's run_state frame about its own run:
// spawn_failed, session_lost, tmux_crash and wrapper_died fail the current
// attempt (with the restart policy); stale_session and orphan_detected are
// journaled (an orphan_detected without run_id names no run at all, and
// one naming a run never offered to this host is journaled for the host,
// with the run id and attempt in its payload). Any other report about a
// run never offered to hostID is not_found.
func (s *Store) RunStateReport(ctx context.Context, hostID string, f wire.Frame) (wire.Run, bool, error) {
	var out wire.Run
	changed := false
	if f.State == wire.StateOrphanDetected {
		offered := false
		if f.RunID != "" {
			if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_offers WHERE run_id = $1 AND host_id = $2)`, f.RunID, hostID).Scan(&offered); err != nil {
				return wire.Run{}, false, fmt.Errorf("orphan report: %w", translate(err))
			}
		}
		if !offered {
			return wire.Run{}, false, s.journalOrphan(ctx, hostID, f.RunID, f.Attempt, f.Detail) // names what it did
		}
	}
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := runByID(ctx, tx, f.RunID, true)
		if err != nil {
			return err
		}
		// A worker speaks only for runs offered to its host: another's
		// run is not_found, and nothing is journaled.
		offered, err := offeredTo(ctx, tx, hostID, r.ID)
		if err != nil {
			return err
		}
		if !offered {
			return wire.NotFound("run")
		}
		d, err := lifecycle.StateReport(lifecycle.FromWire(r), hostID, f.Attempt, f.State, f.Detail, s.Policy, s.now())
		if err != nil {
			return err
		}
		if d.Report != "" {
			// Journaled once per (host, run, kind) an hour, counted
			// in between (docs/architecture.md#bounded-journal).
			due, repeats, err := reportDue(ctx, tx, hostID, r.ID, d.Report)
			if err != nil || !due {
				out = r
				return err
			}
			for _, st := range d.Steps {
				for _, ev := range st.Events {
					ev.Extra[PayloadRepeats] = repeats
				}
			}
		}
		out, err = s.apply(ctx, tx, r, d)
		if errors.Is(err, errGuardLost) {
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
