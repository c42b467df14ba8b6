package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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

// Journal appends events inside the transaction.
//
// Seqs are taken before commit, so transactions may commit out of seq
// order. Writers do not serialise for it (that would cost group commit);
// readers do the work instead (SafeSeq). Journal makes sure the transaction
// has its xid before it takes a seq, which is what SafeSeq's proof needs.
func (tx *Tx) Journal(ctx context.Context, evs ...NewEvent) error {
	if len(evs) == 0 {
		return nil
	}
	if !tx.Journaled {
		if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
			return fmt.Errorf("journal: %w", err)
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

// EventsAfter returns up to limit events with after < seq <= upTo,
// ascending, whose topic matches the pattern (nil = all). Readers that
// deliver events pass a SafeSeq as upTo.
func (s *Store) EventsAfter(ctx context.Context, after, upTo int64, pattern *wire.TopicPattern, limit int) ([]wire.Event, error) {
	re := ""
	if pattern.Glob() != "" {
		re = wire.GlobRegexp(pattern.Glob())
	}
	rows, err := s.Pool.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE seq > $1 AND seq <= $4 AND ($2 = '' OR topic ~ $2) ORDER BY seq LIMIT $3`, after, re, limit, upTo)
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

// SafeSeq returns a seq H such that every event with seq <= H that will
// ever commit has committed: delivering up to H never lets a smaller seq
// appear later (contract §5). It never returns less than the purge horizon.
//
// Why it holds: take snapshot S and M = the largest seq visible in S. A
// transaction T holding a seq s < M that is not visible in S took s before
// M was taken, M's transaction committed before S, and T had its xid before
// it took s (Journal) — so T was running when S was taken and is in S's
// xip list. Once every xid of that list has completed, as judged by a later
// snapshot, every seq <= M is either visible or aborted. Waiting costs
// nothing when no write is in flight (empty xip) and a few milliseconds
// under load; writers never wait for each other.
func (s *Store) SafeSeq(ctx context.Context) (int64, error) {
	var snap string
	var m int64
	err := s.Pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text,
		greatest(coalesce((SELECT max(seq) FROM events), 0), (SELECT purged_through_seq FROM server_state))`).Scan(&snap, &m)
	if err != nil {
		return 0, translate(err)
	}
	if strings.HasSuffix(snap, ":") { // "xmin:xmax:" — nothing in flight
		return m, nil
	}
	wait := 200 * time.Microsecond
	for {
		var done bool
		err := s.Pool.QueryRow(ctx, `SELECT coalesce(bool_and(pg_visible_in_snapshot(x, pg_current_snapshot())), true)
			FROM pg_snapshot_xip($1::pg_snapshot) x`, snap).Scan(&done)
		if err != nil {
			return 0, translate(err)
		}
		if done {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}
