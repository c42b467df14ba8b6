package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/runwrite"
	"pam/internal/wire"
)

// Policy is the restart policy the store's decisions apply.
type Policy = runwrite.Policy

// errGuardLost means a guarded status write found the run no longer in
// the status it was decided from: someone else moved it first.
var errGuardLost = errors.New("run changed concurrently")

// runPayload is the common part of every run.* event payload.
func runPayload(r wire.Run, extra map[string]any) map[string]any {
	p := map[string]any{"run_id": r.ID, "attempt": r.Attempt, "task_id": r.TaskID}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

func runEvent(topic wire.Topic, r wire.Run, extra map[string]any) NewEvent {
	host := ""
	if r.HostID != nil {
		host = *r.HostID
	}
	return NewEvent{Topic: topic, RunID: r.ID, ProjectID: r.ProjectID, HostID: host, Payload: runPayload(r, extra)}
}

// now is the time decisions are made at: the store's clock, so that tests
// of the store can move it.
func (s *Store) now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

// apply carries out decision d about run r inside tx: each step's guarded
// write, then the events that journal it (with the run as it is after the
// write), then what the decision records besides statuses. It returns the
// run as it ends up. The caller holds r's row lock. The writes whose
// results are not read wait for the next statement when tx pipelines
// (pipeline.go).
func (s *Store) apply(ctx context.Context, tx *Tx, r wire.Run, d runwrite.Decision) (wire.Run, error) {
	if d.Processed != "" {
		if err := tx.execLater(ctx, `INSERT INTO processed_signals (run_id, attempt, kind) VALUES ($1, $2, $3)`, r.ID, r.Attempt, d.Processed); err != nil {
			return r, fmt.Errorf("record signal %s of run %s: %w", d.Processed, r.ID, err)
		}
	}
	if d.Refusal != nil {
		// Counted always; journaled (in Steps) only the first time.
		if err := tx.execLater(ctx, `INSERT INTO signal_refusals (run_id, attempt, kind, result) VALUES ($1, $2, $3, $4)
			ON CONFLICT (run_id, attempt, kind, result) DO UPDATE SET count = signal_refusals.count + 1, last_at = now()`,
			r.ID, d.Refusal.Attempt, d.Refusal.Kind, d.Refusal.Result); err != nil {
			return r, fmt.Errorf("count %s signal %s of run %s: %w", d.Refusal.Result, d.Refusal.Kind, r.ID, err)
		}
	}
	if d.Changed() {
		if err := s.flushRunProgress(ctx, tx, r.ID); err != nil {
			return r, fmt.Errorf("journal the held progress of run %s: %w", r.ID, err)
		}
	}
	for _, st := range d.Steps {
		var err error
		if r, err = write(ctx, tx, r, st); err != nil {
			return r, fmt.Errorf("%s run %s: %w", st.Write, r.ID, err)
		}
		events := make([]NewEvent, 0, len(st.Events))
		for _, e := range st.Events {
			events = append(events, runEvent(e.Topic, r, e.Extra))
		}
		if err := tx.Journal(ctx, events...); err != nil {
			return r, err
		}
		if st.Write == runwrite.ToRunning {
			if err := moveItem(ctx, tx, r.TaskID, "doing", "todo"); err != nil {
				return r, err
			}
		}
	}
	if d.ProgressSeq > 0 {
		if err := s.recordProgress(ctx, tx, r, d); err != nil {
			return r, err
		}
	}
	if d.CompleteSource != "" {
		return s.complete(ctx, tx, r, d.CompleteSource)
	}
	return r, nil
}

// recordProgress records the run's last applied progress seq and how
// it was journaled: a run.progress written now starts the run's progress
// window again; one held back is counted and kept (the newest only) for
// the trailing flush (FlushProgress).
func (s *Store) recordProgress(ctx context.Context, tx *Tx, r wire.Run, d runwrite.Decision) error {
	var err error
	switch {
	case d.Progress != nil && !d.Progress.Journaled:
		held, herr := heldProgress(r, d.Progress.Held)
		if herr != nil {
			return herr
		}
		err = tx.execLater(ctx, `UPDATE runs SET last_progress_seq = $2, progress_coalesced = progress_coalesced + 1, progress_held = $3::jsonb,
			updated_at = now() WHERE id = $1`, r.ID, d.ProgressSeq, held)
	case d.Progress != nil:
		err = tx.execLater(ctx, `UPDATE runs SET last_progress_seq = $2, progress_journaled_at = $3, progress_coalesced = 0, progress_held = NULL,
			updated_at = now() WHERE id = $1`, r.ID, d.ProgressSeq, s.now())
	default:
		err = tx.execLater(ctx, `UPDATE runs SET last_progress_seq = $2, updated_at = now() WHERE id = $1`, r.ID, d.ProgressSeq)
	}
	if err != nil {
		return fmt.Errorf("record progress of run %s: %w", r.ID, err)
	}
	return nil
}

// heldProgress is the payload of a run.progress held back, as kept on
// the run until the trailing flush journals it: the event's payload
// with the attempt it was made at (the run may have moved on by then).
func heldProgress(r wire.Run, extra map[string]any) (string, error) {
	p := runPayload(r, extra)
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("hold progress of run %s: %w", r.ID, err)
	}
	return string(b), nil
}

// write makes one step's guarded status write and what goes with it in
// run_attempts. A write whose guard no longer holds is errGuardLost.
func write(ctx context.Context, tx *Tx, r wire.Run, st runwrite.Step) (wire.Run, error) {
	var row pgx.Row
	switch st.Write {
	case runwrite.JournalOnly:
		return r, nil
	case runwrite.Offer:
		row = tx.QueryRow(ctx, `UPDATE runs SET host_id = $3, offered_at = $4, updated_at = now()
			WHERE id = $1 AND status = 'pending' AND attempt = $2 RETURNING `+runColumns, r.ID, st.Attempt, st.HostID, tx.Now())
	case runwrite.Withdraw:
		row = tx.QueryRow(ctx, `UPDATE runs SET host_id = NULL, offered_at = NULL, updated_at = now()
			WHERE id = $1 AND status = 'pending' AND attempt = $2 RETURNING `+runColumns, r.ID, st.Attempt)
	case runwrite.ToSpawning:
		row = tx.QueryRow(ctx, `UPDATE runs SET status = 'spawning', spawning_at = $3, updated_at = now()
			WHERE id = $1 AND status = 'pending' AND attempt = $2 AND host_id IS NOT NULL RETURNING `+runColumns, r.ID, st.Attempt, tx.Now())
	case runwrite.ToRunning:
		// The start is the run's first input
		// (docs/architecture.md#working-waiting-hung), made when the host
		// spawned the CLI: a completion the CLI's hook posted that
		// overtook this started signal came after it, not before.
		row = tx.QueryRow(ctx, `UPDATE runs SET status = 'running', started_at = $5, last_input_at = coalesce(spawning_at, $5), status_source = $4, updated_at = now()
			WHERE id = $1 AND status = $2 AND attempt = $3 RETURNING `+runColumns, r.ID, st.From, st.Attempt, nullStr(st.Source), tx.Now())
	case runwrite.ToExited, runwrite.ToFailed, runwrite.ToStopped:
		// A run that is not running waits for nobody: its attention goes
		// with the status (the decision journals it).
		row = tx.QueryRow(ctx, `UPDATE runs SET status = $4, failure_reason = $5, exit_code = $6, finished_at = $8,
			status_source = $7, attention = 'none', attention_since = NULL, attention_detail = NULL, updated_at = now()
			WHERE id = $1 AND status = $2 AND attempt = $3 RETURNING `+runColumns,
			r.ID, st.From, st.Attempt, st.To, nullStr(st.Reason), st.ExitCode, nullStr(st.Source), tx.Now())
	case runwrite.Requeue:
		// A fresh retry forgets the agent's conversation: the new attempt
		// starts afresh, and so does any after it.
		row = tx.QueryRow(ctx, `UPDATE runs SET status = 'pending', attempt = attempt + 1,
			max_attempts = CASE WHEN $4 THEN greatest(max_attempts, attempt + 1) ELSE max_attempts END,
			next_attempt_at = $3, pending_since = $3, host_id = NULL,
			failure_reason = NULL, exit_code = NULL, last_progress_seq = 0, ever_matched = false,
			offered_at = NULL, spawning_at = NULL, started_at = NULL, finished_at = NULL, status_source = NULL,
			agent_session_id = CASE WHEN $5 THEN NULL ELSE agent_session_id END, updated_at = now()
			WHERE id = $1 AND status = 'failed' AND attempt = $2 RETURNING `+runColumns, r.ID, st.Attempt, st.NextAttemptAt, st.RaiseMax, st.Fresh)
	case runwrite.SetAgentSession:
		row = tx.QueryRow(ctx, `UPDATE runs SET agent_session_id = $4, updated_at = now()
			WHERE id = $1 AND status = $2 AND attempt = $3 RETURNING `+runColumns, r.ID, st.From, st.Attempt, st.AgentSessionID)
	case runwrite.SetAttention:
		// attention_since moves only when the attention changes: a
		// new detail of the same question keeps it.
		row = tx.QueryRow(ctx, `UPDATE runs SET attention = $4,
			attention_since = CASE WHEN $4 = 'none' THEN NULL WHEN attention = $4 THEN attention_since ELSE $6::timestamptz END,
			attention_detail = CASE WHEN $4 = 'none' THEN NULL ELSE $5::jsonb END, updated_at = now()
			WHERE id = $1 AND status = 'running' AND attempt = $2 AND attention = $3 RETURNING `+runColumns,
			r.ID, st.Attempt, st.AttentionFrom, st.Attention, st.AttentionDetail, tx.Now())
	default:
		return r, fmt.Errorf("unknown write %d", st.Write)
	}
	out, err := scanRun(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, errGuardLost
	}
	if err != nil {
		return r, err
	}
	switch st.Write {
	case runwrite.Offer:
		if _, err := tx.Exec(ctx, `INSERT INTO run_offers (run_id, attempt, host_id) VALUES ($1, $2, $3)
			ON CONFLICT (run_id, attempt, host_id) DO UPDATE SET offered_at = $4, refused_at = NULL`, r.ID, st.Attempt, st.HostID, tx.Now()); err != nil {
			return out, err
		}
		_, err = tx.Exec(ctx, `INSERT INTO run_attempts (run_id, attempt, host_id, offered_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (run_id, attempt) DO UPDATE SET host_id = $3, offered_at = $4`, r.ID, st.Attempt, st.HostID, tx.Now())
	case runwrite.ToRunning:
		_, err = tx.Exec(ctx, `UPDATE run_attempts SET started_at = $3 WHERE run_id = $1 AND attempt = $2`, r.ID, st.Attempt, tx.Now())
	case runwrite.ToExited, runwrite.ToFailed, runwrite.ToStopped:
		err = endAttempt(ctx, tx, r.ID, st.Attempt, st.To, nullStr(st.Reason), st.ExitCode)
	}
	return out, err
}

// endAttempt records how an attempt ended in run_attempts.
func endAttempt(ctx context.Context, tx *Tx, runID string, attempt int, outcome string, reason *string, exitCode *int) error {
	_, err := tx.Exec(ctx, `INSERT INTO run_attempts (run_id, attempt, ended_at, outcome, failure_reason, exit_code)
		VALUES ($1, $2, $6, $3, $4, $5)
		ON CONFLICT (run_id, attempt) DO UPDATE SET ended_at = $6, outcome = $3, failure_reason = $4, exit_code = $5`,
		runID, attempt, outcome, reason, exitCode, tx.Now())
	if err != nil {
		return fmt.Errorf("end attempt %d of run %s: %w", attempt, runID, err)
	}
	return nil
}

func nullStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
