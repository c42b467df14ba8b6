package store

import (
	"context"
	"fmt"
	"time"

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

// SignalRule decides about a signal (lifecycle.IngestSignal, asked by
// package runs) from the run and the facts read under its lock, at now.
// The ingest is a transaction of its own, or one of a group commit, so
// store runs it and asks the rule it is given for each signal.
type SignalRule func(r wire.Run, sender string, sig wire.Signal, f runwrite.SignalFacts, now time.Time) (runwrite.Decision, error)

// IngestSignal applies one signal from host senderHost in the normative
// order of docs/architecture.md#internal-api: first the epoch/dedup/ordering guard, then the guarded
// status write (as decide says), then the journal — all in one
// transaction, with the run row locked so concurrent signals of one run
// are applied one at a time.
func (s *Store) IngestSignal(ctx context.Context, decide SignalRule, runID, senderHost string, sig wire.Signal) (Ingest, error) {
	return s.ingestOne(ctx, decide, SignalIn{RunID: runID, Sender: senderHost, Signal: sig})
}

// ingestOne is IngestSignal of one signal of a batch, with what the
// server knows besides it (the screen's question).
func (s *Store) ingestOne(ctx context.Context, decide SignalRule, in SignalIn) (Ingest, error) {
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
		res, err = s.applySignal(ctx, tx, decide, r, senderHost, sig, in.Screen)
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

func (s *Store) applySignal(ctx context.Context, tx *Tx, decide SignalRule, r wire.Run, sender string, sig wire.Signal, screen *wire.AttentionDetail) (Ingest, error) {
	var facts runwrite.SignalFacts
	if sig.Attempt != nil && *sig.Attempt <= r.Attempt {
		var err error
		if facts, err = signalFacts(ctx, tx, r, *sig.Attempt, sig.Kind); err != nil {
			return Ingest{}, err
		}
	}
	facts.Screen = screen
	d, err := decide(r, sender, sig, facts, s.now())
	if err != nil {
		return Ingest{}, err
	}
	out, err := s.apply(ctx, tx, r, d)
	if err != nil {
		return Ingest{}, err
	}
	return Ingest{Result: d.Result, Run: out, StopSender: d.StopSender, StatusChange: d.Changed()}, nil
}

// signalFacts reads what the decision about a signal of kind at attempt
// needs besides the run: whether that one-shot kind was already processed
// for the run's attempt, the last applied progress seq, and the results
// signals of that kind and attempt were already set aside with. The run
// row is locked, so they hold until the transaction ends.
func signalFacts(ctx context.Context, tx *Tx, r wire.Run, attempt int, kind string) (runwrite.SignalFacts, error) {
	var f runwrite.SignalFacts
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

// OrphanOffered reports whether a host that reports an orphan session
// naming runID was ever offered that run ("" names none: false).
func (s *Store) OrphanOffered(ctx context.Context, hostID, runID string) (bool, error) {
	offered := false
	if runID != "" {
		if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_offers WHERE run_id = $1 AND host_id = $2)`, runID, hostID).Scan(&offered); err != nil {
			return false, fmt.Errorf("orphan report: %w", translate(err))
		}
	}
	return offered, nil
}

// JournalOrphan journals an orphan session a host reported that names no
// run it was offered (journalOrphan).
func (s *Store) JournalOrphan(ctx context.Context, hostID, runID string, attempt *int, detail string) error {
	return s.journalOrphan(ctx, hostID, runID, attempt, detail)
}

// OfferedTo reports, inside tx, whether runID was ever offered to hostID.
func (tx *Tx) OfferedTo(ctx context.Context, hostID, runID string) (bool, error) {
	return offeredTo(ctx, tx, hostID, runID)
}

// ReportDue says whether a worker's report of kind about a run is
// journaled now (once per host, run and kind an hour) and how many
// repeats it stands for (docs/architecture.md#bounded-journal).
func (tx *Tx) ReportDue(ctx context.Context, hostID, runID, kind string) (due bool, repeats int, err error) {
	return reportDue(ctx, tx, hostID, runID, kind)
}
