package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"pam/internal/wire"
)

// NewEvent is an event to journal. Ids are UUID strings or empty.
type NewEvent struct {
	Topic     string
	RunID     string
	ProjectID string
	HostID    string
	Payload   any
}

// Journal appends events inside the transaction. It first takes the
// journal's transaction-scoped advisory lock, so journaling transactions
// commit in seq order: a reader that sees seq N has seen every smaller seq
// that will ever commit. Callers journal as the last step of a transaction
// to keep the serialised section short (its cost is measured by
// BenchmarkJournalAppend).
func (tx *Tx) Journal(ctx context.Context, evs ...NewEvent) error {
	if len(evs) == 0 {
		return nil
	}
	if !tx.Journaled {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", LockJournal); err != nil {
			return fmt.Errorf("journal lock: %w", err)
		}
	}
	for _, ev := range evs {
		payload, err := json.Marshal(ev.Payload)
		if err != nil {
			return fmt.Errorf("journal %s: %w", ev.Topic, err)
		}
		if ev.Payload == nil {
			payload = []byte("{}")
		}
		if _, err := tx.Exec(ctx,
			`INSERT INTO events (topic, run_id, project_id, host_id, payload) VALUES ($1, $2, $3, $4, $5)`,
			ev.Topic, nullUUID(ev.RunID), nullUUID(ev.ProjectID), nullUUID(ev.HostID), payload); err != nil {
			return fmt.Errorf("journal %s: %w", ev.Topic, err)
		}
	}
	tx.Journaled = true
	return nil
}

func nullUUID(s string) any {
	if s == "" {
		return nil
	}
	return s
}

const eventColumns = `seq, topic, run_id::text, project_id::text, host_id::text, payload, created_at`

func scanEvents(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close()
}) ([]wire.Event, error) {
	defer rows.Close()
	out := []wire.Event{}
	for rows.Next() {
		var e wire.Event
		var payload []byte
		if err := rows.Scan(&e.Seq, &e.Topic, &e.RunID, &e.ProjectID, &e.HostID, &payload, &e.CreatedAt); err != nil {
			return nil, err
		}
		e.Payload = payload
		e.CreatedAt = e.CreatedAt.UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// EventsAfter returns up to limit events with seq > after, ascending,
// whose topic matches the pattern (nil = all).
func (s *Store) EventsAfter(ctx context.Context, after int64, pattern *wire.TopicPattern, limit int) ([]wire.Event, error) {
	re := ""
	if pattern.Glob() != "" {
		re = wire.GlobRegexp(pattern.Glob())
	}
	rows, err := s.Pool.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE seq > $1 AND ($2 = '' OR topic ~ $2) ORDER BY seq LIMIT $3`, after, re, limit)
	if err != nil {
		return nil, translate(err)
	}
	evs, err := scanEvents(rows)
	return evs, translate(err)
}

// RunEvents returns every event of one run, ascending.
func (s *Store) RunEvents(ctx context.Context, runID string) ([]wire.Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE run_id = $1 ORDER BY seq`, runID)
	if err != nil {
		return nil, translate(err)
	}
	evs, err := scanEvents(rows)
	return evs, translate(err)
}

// PurgedThrough is the highest seq ever purged (0 if none): a cursor below
// it has lost events and needs a snapshot.
func (s *Store) PurgedThrough(ctx context.Context) (int64, error) {
	var n int64
	err := s.Pool.QueryRow(ctx, `SELECT purged_through_seq FROM server_state`).Scan(&n)
	return n, translate(err)
}

// PurgeEvents deletes events created before cutoff and records the purge
// horizon. It returns how many were deleted.
func (s *Store) PurgeEvents(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	err := s.InTx(ctx, func(tx *Tx) error {
		var maxSeq *int64
		if err := tx.QueryRow(ctx, `WITH d AS (DELETE FROM events WHERE created_at < $1 RETURNING seq)
			SELECT count(*), max(seq) FROM d`, cutoff).Scan(&n, &maxSeq); err != nil {
			return err
		}
		if maxSeq != nil {
			_, err := tx.Exec(ctx, `UPDATE server_state SET purged_through_seq = greatest(purged_through_seq, $1)`, *maxSeq)
			return err
		}
		return nil
	})
	return n, err
}

// LastSeq is the highest committed seq, or the purge horizon when the
// journal has been purged empty.
func (s *Store) LastSeq(ctx context.Context) (int64, error) {
	var n int64
	err := s.Pool.QueryRow(ctx, `SELECT greatest(coalesce((SELECT max(seq) FROM events), 0), purged_through_seq) FROM server_state`).Scan(&n)
	return n, translate(err)
}
