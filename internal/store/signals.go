package store

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"pam/internal/wire"
)

// authority orders the sources that may decide a run's status (§6):
// manual > provider-hook > wrapper.
var authority = map[string]int{wire.SourceWrapper: 1, wire.SourceProviderHook: 2, wire.SourceManual: 3}

// Ingest is the outcome of a signal: the result of §10's table, the run
// as it is afterwards, and whether the sending host must stop its session.
type Ingest struct {
	Result       string
	Run          wire.Run
	StopSender   bool // stale_offer: that incarnation must not run twice
	StatusChange bool // the run's status changed (dispatcher: capacity may have freed)
}

// IngestSignal applies one signal from host senderHost in the normative
// order of §10: first the epoch/dedup/ordering guard, then the guarded
// status write, then the journal — all in one transaction, with the run
// row locked so concurrent signals of one run are applied one at a time.
func (s *Store) IngestSignal(ctx context.Context, runID, senderHost string, sig wire.Signal) (Ingest, error) {
	if err := validateSignal(sig); err != nil {
		return Ingest{}, err
	}
	var res Ingest
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := runByID(ctx, tx, runID, true)
		if err != nil {
			return err
		}
		// A worker speaks only for runs offered to or placed on its host.
		var known bool
		if err := tx.QueryRow(ctx, `SELECT $2::uuid = host_id OR EXISTS (SELECT 1 FROM run_offers WHERE run_id = $1 AND host_id = $2)
			FROM runs WHERE id = $1`, r.ID, senderHost).Scan(&known); err != nil {
			return err
		}
		if !known {
			return wire.NotFound("run")
		}
		res, err = s.applySignal(ctx, tx, r, senderHost, sig)
		return err
	})
	return res, err
}

func validateSignal(sig wire.Signal) error {
	switch sig.Kind {
	case wire.SignalStarted, wire.SignalFinished, wire.SignalCompleted, wire.SignalFailed, wire.SignalProgress:
	default:
		return wire.Invalid("kind", "kind must be one of started, finished, completed, failed, progress")
	}
	switch sig.Source {
	case wire.SourceWrapper, wire.SourceProviderHook:
	case wire.SourceManual:
		return wire.Invalid("source", "source manual is produced by the public API, never accepted here")
	default:
		return wire.Invalid("source", "source must be wrapper or provider-hook")
	}
	if len(sig.Payload) > 64<<10 {
		return wire.Invalid("payload", "payload must be at most 64 KiB")
	}
	if len(sig.Payload) > 0 && !json.Valid(sig.Payload) {
		return wire.Invalid("payload", "payload must be JSON")
	}
	return nil
}

func (s *Store) applySignal(ctx context.Context, tx *Tx, r wire.Run, sender string, sig wire.Signal) (Ingest, error) {
	// 1. Epoch, dedup and ordering guard.
	if sig.Attempt == nil {
		return Ingest{}, wire.Errorf(http.StatusBadRequest, "missing_attempt", "signal has no attempt").With("current_attempt", r.Attempt)
	}
	att := *sig.Attempt
	if att > r.Attempt {
		return Ingest{}, wire.Errorf(http.StatusConflict, "invalid_attempt", "signal attempt exceeds the run's current attempt").
			With("signal_attempt", att).With("current_attempt", r.Attempt)
	}
	if sig.Kind == wire.SignalProgress && sig.Seq == nil {
		return Ingest{}, wire.Errorf(http.StatusBadRequest, "missing_seq", "progress signal has no seq")
	}
	if att < r.Attempt {
		return Ingest{Result: wire.ResultStaleAttempt, Run: r}, tx.Journal(ctx, runEvent("run.stale_signal", r,
			map[string]any{"kind": sig.Kind, "source": sig.Source, "signal_attempt": att, "host_id": sender}))
	}
	if r.HostID == nil || *r.HostID != sender {
		// The offer to this host was withdrawn; the run is elsewhere (or
		// waiting for another offer) at this very attempt.
		return Ingest{Result: wire.ResultStaleOffer, Run: r, StopSender: true}, tx.Journal(ctx, runEvent("run.signal_received", r,
			map[string]any{"kind": sig.Kind, "source": sig.Source, "result": wire.ResultStaleOffer, "from_host_id": sender}))
	}
	if tombstoned(r) {
		// A late signal of an attempt that host_lost ended is journaled
		// and nothing else: the tombstone wins (§11).
		return Ingest{Result: wire.ResultIgnored, Run: r}, tx.Journal(ctx, runEvent("run.signal_received", r,
			map[string]any{"kind": sig.Kind, "source": sig.Source, "result": wire.ResultIgnored, "status": r.Status, "failure_reason": wire.FailHostLost}))
	}
	if sig.Kind == wire.SignalProgress {
		if *sig.Seq <= 0 || *sig.Seq <= s.lastProgressSeq(ctx, tx, r.ID) {
			return Ingest{Result: wire.ResultOutOfOrder, Run: r}, nil
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET last_progress_seq = $2, updated_at = now() WHERE id = $1`, r.ID, *sig.Seq); err != nil {
			return Ingest{}, err
		}
		return Ingest{Result: wire.ResultApplied, Run: r}, tx.Journal(ctx, runEvent("run.progress", r,
			map[string]any{"seq": *sig.Seq, "source": sig.Source, "payload": rawOrNull(sig.Payload)}))
	}
	tag, err := tx.Exec(ctx, `INSERT INTO processed_signals (run_id, attempt, kind) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, r.ID, att, sig.Kind)
	if err != nil {
		return Ingest{}, err
	}
	if tag.RowsAffected() == 0 {
		return Ingest{Result: wire.ResultDuplicate, Run: r}, nil
	}
	if sig.Kind == wire.SignalCompleted {
		out, err := s.complete(ctx, tx, r, sig.Source)
		return Ingest{Result: wire.ResultApplied, Run: out}, err
	}

	// 2. The guarded status write, 3. the journal.
	out, applied, err := s.transition(ctx, tx, r, sig)
	if err != nil {
		return Ingest{}, err
	}
	if !applied {
		return Ingest{Result: wire.ResultIgnored, Run: r}, tx.Journal(ctx, runEvent("run.signal_received", r,
			map[string]any{"kind": sig.Kind, "source": sig.Source, "result": wire.ResultIgnored, "status": r.Status}))
	}
	return Ingest{Result: wire.ResultApplied, Run: out, StatusChange: true}, nil
}

func (s *Store) lastProgressSeq(ctx context.Context, tx *Tx, runID string) int64 {
	var n int64
	_ = tx.QueryRow(ctx, `SELECT last_progress_seq FROM runs WHERE id = $1`, runID).Scan(&n)
	return n
}

func rawOrNull(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// transition applies started, finished or failed to a run of the sender's
// host at its current attempt, per §6. applied=false means the status
// does not take the signal (terminal, or a higher authority decided).
func (s *Store) transition(ctx context.Context, tx *Tx, r wire.Run, sig wire.Signal) (wire.Run, bool, error) {
	if !Active(r.Status) {
		return r, false, nil
	}
	if r.StatusSource != nil && authority[*r.StatusSource] > authority[sig.Source] {
		return r, false, nil
	}
	switch sig.Kind {
	case wire.SignalStarted:
		if r.Status == wire.RunRunning {
			return r, false, nil
		}
		if r.Status == wire.RunPending { // started overtook the ack
			var err error
			if r, err = s.markSpawning(ctx, tx, r); err != nil {
				return r, false, err
			}
		}
		out, err := scanRun(tx.QueryRow(ctx, `UPDATE runs SET status = 'running', started_at = now(), status_source = $4, updated_at = now()
			WHERE id = $1 AND status = $2 AND attempt = $3 RETURNING `+runColumns, r.ID, r.Status, r.Attempt, sig.Source))
		if err != nil {
			return r, false, err
		}
		if _, err := tx.Exec(ctx, `UPDATE run_attempts SET started_at = now() WHERE run_id = $1 AND attempt = $2`, r.ID, r.Attempt); err != nil {
			return out, false, err
		}
		if err := tx.Journal(ctx, runEvent("run.started", out, map[string]any{"provider": out.Provider, "session_name": out.SessionName, "source": sig.Source})); err != nil {
			return out, false, err
		}
		return out, true, moveItem(ctx, tx, r.TaskID, "doing", "todo")

	case wire.SignalFinished:
		code, err := exitCodeOf(sig.Payload)
		if err != nil {
			return r, false, err
		}
		if r.Status == wire.RunPending { // finished overtook the ack and started
			if r, err = s.markSpawning(ctx, tx, r); err != nil {
				return r, false, err
			}
		}
		// run.finished journals the CLI's exit; then exited or failed.
		if err := tx.Journal(ctx, runEvent("run.finished", r, map[string]any{"exit_code": code, "source": sig.Source})); err != nil {
			return r, false, err
		}
		if code != 0 {
			out, err := s.failRun(ctx, tx, r, wire.FailExitNonzero, &code, sig.Source)
			return out, err == nil, err
		}
		out, err := scanRun(tx.QueryRow(ctx, `UPDATE runs SET status = 'exited', exit_code = 0, finished_at = now(), status_source = $4, updated_at = now()
			WHERE id = $1 AND status = $2 AND attempt = $3 RETURNING `+runColumns, r.ID, r.Status, r.Attempt, sig.Source))
		if err != nil {
			return r, false, err
		}
		zero := 0
		if err := endAttempt(ctx, tx, r.ID, r.Attempt, "exited", nil, &zero); err != nil {
			return out, false, err
		}
		return out, true, tx.Journal(ctx, runEvent("run.exited", out, map[string]any{"exit_code": 0}))

	case wire.SignalFailed:
		reason := wire.FailProviderFailed
		var p struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(sig.Payload, &p) == nil && p.Reason == wire.FailSpawnFailed {
			reason = wire.FailSpawnFailed
		}
		if r.Status == wire.RunPending {
			var err error
			if r, err = s.markSpawning(ctx, tx, r); err != nil {
				return r, false, err
			}
		}
		out, err := s.failRun(ctx, tx, r, reason, nil, sig.Source)
		return out, err == nil, err
	}
	return r, false, nil
}

func exitCodeOf(payload json.RawMessage) (int, error) {
	var p struct {
		ExitCode *int `json:"exit_code"`
	}
	if len(payload) == 0 || json.Unmarshal(payload, &p) != nil || p.ExitCode == nil {
		return 0, wire.Invalid("payload.exit_code", "a finished signal carries payload {\"exit_code\": N}")
	}
	return *p.ExitCode, nil
}

// markSpawning records that the offered host accepted the run (or that a
// later signal proved it did): pending → spawning, run.spawning.
func (s *Store) markSpawning(ctx context.Context, tx *Tx, r wire.Run) (wire.Run, error) {
	out, err := scanRun(tx.QueryRow(ctx, `UPDATE runs SET status = 'spawning', spawning_at = now(), updated_at = now()
		WHERE id = $1 AND status = 'pending' AND attempt = $2 AND host_id IS NOT NULL RETURNING `+runColumns, r.ID, r.Attempt))
	if err != nil {
		return r, err
	}
	return out, tx.Journal(ctx, runEvent("run.spawning", out, map[string]any{"host_id": out.HostID}))
}

// RunStateReport applies a worker's run_state frame about its own run:
// spawn_failed, session_lost, tmux_crash and wrapper_died fail the current
// attempt (with the restart policy); stale_session and orphan_detected are
// journaled (an orphan_detected without run_id names no run at all).
func (s *Store) RunStateReport(ctx context.Context, hostID string, f wire.Frame) (wire.Run, bool, error) {
	var out wire.Run
	changed := false
	if f.State == wire.StateOrphanDetected && f.RunID == "" {
		return wire.Run{}, false, s.journalOrphan(ctx, hostID, f.Detail)
	}
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := runByID(ctx, tx, f.RunID, true)
		if err != nil {
			return err
		}
		if f.Attempt == nil || *f.Attempt != r.Attempt || r.HostID == nil || *r.HostID != hostID {
			topic := "run.signal_received"
			switch f.State {
			case wire.StateStaleSession:
				topic = "run.stale_session"
			case wire.StateOrphanDetected:
				topic = "run.orphan_detected"
			}
			return tx.Journal(ctx, runEvent(topic, r, map[string]any{"state": f.State, "detail": f.Detail, "reported_attempt": f.Attempt, "from_host_id": hostID}))
		}
		reason := ""
		switch f.State {
		case wire.StateSpawnFailed:
			reason = wire.FailSpawnFailed
		case wire.StateSessionLost:
			reason = wire.FailSessionLost
		case wire.StateTmuxCrash:
			reason = wire.FailTmuxCrash
		case wire.StateWrapperDied:
			reason = wire.FailWrapperDied
		case wire.StateStaleSession:
			return tx.Journal(ctx, runEvent("run.stale_session", r, map[string]any{"detail": f.Detail, "host_id": hostID}))
		case wire.StateOrphanDetected:
			return tx.Journal(ctx, runEvent("run.orphan_detected", r, map[string]any{"detail": f.Detail, "host_id": hostID}))
		default:
			return wire.Invalid("state", "unknown run_state %q", f.State)
		}
		if !Active(r.Status) {
			out = r
			return nil
		}
		if r.Status == wire.RunPending {
			if r, err = s.markSpawning(ctx, tx, r); err != nil {
				return err
			}
		}
		out, err = s.failRun(ctx, tx, r, reason, nil, wire.SourceWrapper)
		if errors.Is(err, errGuardLost) {
			return nil
		}
		changed = err == nil
		return err
	})
	return out, changed, err
}
