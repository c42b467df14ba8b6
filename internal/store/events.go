package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"pam/internal/wire"
)

// NewEvent is an event to journal. Ids are UUID strings or empty.
type NewEvent struct {
	Topic     wire.Topic
	RunID     string
	ProjectID string
	HostID    string
	// Actor names who caused the event (wire.Event's actor), or "".
	Actor   string
	Payload any
}

// Journal appends events inside the transaction. An event that names no
// actor takes the one of ctx (WithActor): the token whose request caused
// it.
//
// Seqs are taken before commit, so transactions may commit out of seq
// order. Writers do not serialise for it (that would cost group commit);
// readers do the work instead (SafeSeq). Journal makes sure the transaction
// has its xid before it takes a seq, which is what SafeSeq's proof needs.
// In a transaction that pipelines, the events wait for its next
// statement and are inserted by one, in the order they were journaled
// (pipeline.go).
func (tx *Tx) Journal(ctx context.Context, evs ...NewEvent) error {
	if len(evs) == 0 {
		return nil
	}
	if !tx.Journaled {
		if err := tx.execLater(ctx, "SELECT pg_current_xact_id()"); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	for _, ev := range evs {
		if ev.Actor == "" {
			ev.Actor = ActorOf(ctx) // the token of the request, if any
		}
		payload, err := json.Marshal(ev.Payload)
		if err != nil {
			return fmt.Errorf("journal %s: %w", ev.Topic, err)
		}
		if ev.Payload == nil {
			payload = []byte("{}")
		}
		if tx.later != nil {
			tx.events.add(ev, payload)
			continue
		}
		if _, err := tx.Tx.Exec(ctx,
			`INSERT INTO events (topic, run_id, project_id, host_id, actor, payload) VALUES ($1, $2, $3, $4, $5, $6)`,
			ev.Topic, nullUUID(ev.RunID), nullUUID(ev.ProjectID), nullUUID(ev.HostID), nullText(ev.Actor), payload); err != nil {
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

// nullText is s, or SQL NULL when s is empty.
func nullText(s string) any { return nullUUID(s) }

const eventColumns = `seq, topic, run_id::text, project_id::text, host_id::text, actor, payload, created_at`

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
		if err := rows.Scan(&e.Seq, &e.Topic, &e.RunID, &e.ProjectID, &e.HostID, &e.Actor, &payload, &e.CreatedAt); err != nil {
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
		return nil, fmt.Errorf("read events after %d: %w", after, translate(err))
	}
	evs, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("read events after %d: %w", after, translate(err))
	}
	return evs, nil
}

// RunEvents returns every event of one run up to upTo, ascending.
func (s *Store) RunEvents(ctx context.Context, runID string, upTo int64) ([]wire.Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE run_id = $1 AND seq <= $2 ORDER BY seq`, runID, upTo)
	if err != nil {
		return nil, fmt.Errorf("read the events of run %s: %w", runID, translate(err))
	}
	evs, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("read the events of run %s: %w", runID, translate(err))
	}
	return evs, nil
}

// PurgedThrough is the highest seq ever purged (0 if none): a cursor below
// it has lost events and needs a snapshot.
func (s *Store) PurgedThrough(ctx context.Context) (int64, error) {
	var n int64
	err := s.Pool.QueryRow(ctx, `SELECT purged_through_seq FROM server_state`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the purge horizon: %w", translate(err))
	}
	return n, nil
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
	if err != nil {
		return 0, fmt.Errorf("purge events before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return n, nil
}

// SafeSeq returns a seq H such that every event with seq <= H that will
// ever commit has committed: delivering up to H never lets a smaller seq
// appear later (docs/architecture.md#data-model). It never returns less than the purge horizon.
//
// Why it holds: one statement takes snapshot S, reads M = the largest seq
// visible in S, and then lists the xids of this database's transactions
// in flight (pg_stat_activity.backend_xid, read after S). A transaction T
// holding a seq s < M that is not visible in S took s before M was taken,
// M's transaction committed before S, and T had its xid before it took s
// (Journal) — so T was running at S: either it is in that list, or it
// ended between S and the list (and any later snapshot sees it). Once no
// listed xid is running any more, every seq <= M is visible or aborted.
// (The snapshot's own xip list is not enough: a running xid at or above
// the snapshot's xmax is not listed there.) Writers never wait for each
// other; a reader waits only for the transactions in flight, which costs
// nothing when none is.
func (s *Store) SafeSeq(ctx context.Context) (int64, error) {
	var m int64
	var xmax uint64
	var inflight []uint32
	err := s.Pool.QueryRow(ctx, `SELECT
		greatest(coalesce((SELECT max(seq) FROM events), 0), (SELECT purged_through_seq FROM server_state)),
		pg_snapshot_xmax(pg_current_snapshot())::text::numeric,
		ARRAY(SELECT backend_xid::text::bigint FROM pg_stat_activity
			WHERE backend_xid IS NOT NULL AND datname = current_database())`).Scan(&m, &xmax, &inflight)
	if err != nil {
		return 0, fmt.Errorf("read the safe seq: %w", translate(err))
	}
	if len(inflight) == 0 {
		return m, nil
	}
	full := make([]string, len(inflight))
	for i, x := range inflight {
		full[i] = strconv.FormatUint(fullXid(xmax, x), 10)
	}
	// Waiting is a poll, short and cheap: pg_xact_status reads the
	// transaction's state where pg_stat_activity builds a row per
	// backend. Under pam-bench load a wait lasts about one transaction
	// (20–30 ms); polls at most 2 ms apart end it within 2 ms of the
	// last commit, where polls up to 20 ms apart overshot by ≈10 ms.
	wait := 200 * time.Microsecond
	for {
		var running int
		err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[]::xid8[]) AS x
			WHERE pg_xact_status(x) = 'in progress'`, full).Scan(&running)
		if err != nil {
			return 0, fmt.Errorf("wait for the transactions in flight below seq %d: %w", m, translate(err))
		}
		if running == 0 {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Millisecond)
	}
}

// fullXid is the 64-bit xid of x, a 32-bit xid of pg_stat_activity, given
// near, the 64-bit xmax of a snapshot taken with it: pg_xact_status takes
// full xids. A running xid is within 2^31 of near (above it when assigned
// since the last commit), so its epoch is near's or a neighbour's.
func fullXid(near uint64, x uint32) uint64 {
	return uint64(int64(near) - int64(int32(uint32(near)-x)))
}
