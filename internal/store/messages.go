package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

// JournalRun journals topic about a run with the run's common payload
// (run_id, attempt, task_id) plus extra, for what happens to a run without
// changing its row: a lease taken or released, a message delivered.
func (s *Store) JournalRun(ctx context.Context, topic wire.Topic, runID string, extra map[string]any) error {
	return s.JournalRunBy(ctx, topic, runID, "", extra)
}

// JournalRunBy is JournalRun with the event's actor (wire.Event's actor;
// "" for none).
func (s *Store) JournalRunBy(ctx context.Context, topic wire.Topic, runID, actor string, extra map[string]any) error {
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := runByID(ctx, tx, runID, false)
		if err != nil {
			return err
		}
		ev := runEvent(topic, r, extra)
		ev.Actor = actor
		return tx.Journal(ctx, ev)
	})
	if err != nil {
		return fmt.Errorf("journal %s of run %s: %w", topic, runID, err)
	}
	return nil
}

// ActorPam is the actor of the events of pam's own decisions.
const ActorPam = "pam"

// LimitedRun is a running run stopped at a usage limit, with what
// lifecycle.ContinueDue reads besides the run
// (docs/architecture.md#continue-when-a-limit-resets).
type LimitedRun struct {
	Run wire.Run
	// AutoContinue is the run's project's auto_continue.
	AutoContinue bool
	// Continued is the resets_at of the last continue pam sent this
	// attempt (its run.message by actor pam), nil when none.
	Continued *time.Time
	// ContinueMessage is the continue_message of the run's provider in
	// the catalog of the host the run is on, as its worker reported it;
	// nil when that worker did not say.
	ContinueMessage *string
}

// LimitedRuns lists the running runs whose attention is rate_limited with
// a resets_at, oldest first.
func (s *Store) LimitedRuns(ctx context.Context) ([]LimitedRun, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+runColumns+`, auto_continue_, continued_, continue_message_ FROM (
			SELECT r.*, p.auto_continue AS auto_continue_, h.continue_messages->>r.provider AS continue_message_,
				(SELECT max((e.payload->>'resets_at')::timestamptz) FROM events e
					WHERE e.run_id = r.id AND e.topic = $1 AND e.actor = $2 AND (e.payload->>'attempt')::int = r.attempt) AS continued_
			FROM runs r JOIN projects p ON p.id = r.project_id LEFT JOIN hosts h ON h.id = r.host_id
			WHERE r.status = 'running' AND r.attention = 'rate_limited' AND r.attention_detail->>'resets_at' IS NOT NULL) limited
		ORDER BY created_at`, string(wire.TopicRunMessage), ActorPam)
	if err != nil {
		return nil, fmt.Errorf("list rate-limited runs: %w", err)
	}
	defer rows.Close()
	var out []LimitedRun
	for rows.Next() {
		var l LimitedRun
		r, err := scanRun(withExtra{rows, []any{&l.AutoContinue, &l.Continued, &l.ContinueMessage}})
		if err != nil {
			return nil, fmt.Errorf("list rate-limited runs: %w", err)
		}
		l.Run = r
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list rate-limited runs: %w", err)
	}
	return out, nil
}

// withExtra scans a run's columns followed by extra ones.
type withExtra struct {
	row   pgx.Row
	extra []any
}

func (w withExtra) Scan(dest ...any) error { return w.row.Scan(append(dest, w.extra...)...) }
