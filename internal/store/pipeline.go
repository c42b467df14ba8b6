package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A transaction that pipelines (the batched signal ingest's) does not
// wait for the writes whose results nobody reads — the record of a
// processed signal, a progress seq, journal events: they are queued, and
// the next statement of the transaction, whatever it is, first sends the
// queue in one round trip, the events last and by one insert, in the
// order they were journaled. Only the waiting between the statements is
// gone: what the transaction has written when it reads or commits is the
// same. A queued write that fails fails the statement that flushed it, so
// the transaction fails as it would have. Other transactions write at
// once (execLater is Exec).

// pipeline makes tx queue its blind writes from now on.
func (tx *Tx) pipeline() {
	if tx.later == nil {
		tx.later = &pgx.Batch{}
	}
}

// execLater runs a write whose result is not read: queued when the
// transaction pipelines, at once otherwise.
func (tx *Tx) execLater(ctx context.Context, sql string, args ...any) error {
	if tx.later == nil {
		_, err := tx.Tx.Exec(ctx, sql, args...)
		return err
	}
	tx.later.Queue(sql, args...)
	return nil
}

// flush sends the queued writes, in order, in one round trip.
func (tx *Tx) flush(ctx context.Context) error {
	if tx.later == nil || (tx.later.Len() == 0 && len(tx.events.topics) == 0) {
		return nil
	}
	b := tx.later
	if len(tx.events.topics) > 0 {
		e := &tx.events
		b.Queue(`INSERT INTO events (topic, run_id, project_id, host_id, actor, payload)
			SELECT * FROM unnest($1::text[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::jsonb[])`,
			e.topics, e.runs, e.projects, e.hosts, e.actors, e.payloads)
		tx.events = laterEvents{}
	}
	tx.later = &pgx.Batch{}
	if err := tx.Tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("pipelined writes: %w", err)
	}
	return nil
}

// Exec runs sql after the queued writes.
func (tx *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := tx.flush(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return tx.Tx.Exec(ctx, sql, args...)
}

// Query runs sql after the queued writes.
func (tx *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := tx.flush(ctx); err != nil {
		return nil, err
	}
	return tx.Tx.Query(ctx, sql, args...)
}

// QueryRow runs sql after the queued writes.
func (tx *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := tx.flush(ctx); err != nil {
		return errRow{err}
	}
	return tx.Tx.QueryRow(ctx, sql, args...)
}

// SendBatch sends b after the queued writes.
func (tx *Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := tx.flush(ctx); err != nil {
		return errBatch{err}
	}
	return tx.Tx.SendBatch(ctx, b)
}

// Commit commits after the queued writes.
func (tx *Tx) Commit(ctx context.Context) error {
	if err := tx.flush(ctx); err != nil {
		return err
	}
	return tx.Tx.Commit(ctx)
}

// laterEvents are the events a pipelining transaction journaled and has
// not inserted yet, column by column.
type laterEvents struct {
	topics                        []string
	runs, projects, hosts, actors []*string
	payloads                      [][]byte
}

func (e *laterEvents) add(ev NewEvent, payload []byte) {
	id := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	e.topics = append(e.topics, string(ev.Topic))
	e.runs = append(e.runs, id(ev.RunID))
	e.projects = append(e.projects, id(ev.ProjectID))
	e.hosts = append(e.hosts, id(ev.HostID))
	e.actors = append(e.actors, id(ev.Actor))
	e.payloads = append(e.payloads, payload)
}

// errRow is a row whose statement could not be sent.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// errBatch is a batch that could not be sent.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }
