package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"pam/internal/runwrite"
	"pam/internal/wire"
)

// What a run or a worker sends cannot grow the journal without bound
// (docs/architecture.md#bounded-journal): progress is journaled at most
// once a second per run, a worker's repeated reports once an hour, and a
// push result only for a push the server asked for.

// flushProgressBatch bounds the runs one FlushProgress journals.
const flushProgressBatch = 500

// FlushProgress journals the progress held back on every run whose
// progress window has passed (runwrite.ProgressEvery since its last
// run.progress), so that a run's last progress is never lost when no
// later one comes to carry it. Each event carries the count of the other
// signals it stands for. It reports how many it journaled.
func (s *Store) FlushProgress(ctx context.Context) (int, error) {
	// Most passes find nothing held: one read (on the partial index), no
	// transaction.
	cutoff := s.now().Add(-runwrite.ProgressEvery)
	var due bool
	if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE progress_held IS NOT NULL AND progress_journaled_at <= $1)`,
		cutoff).Scan(&due); err != nil || !due {
		if err != nil {
			return 0, fmt.Errorf("look for held progress: %w", translate(err))
		}
		return 0, nil
	}
	n := 0
	err := s.InTx(ctx, func(tx *Tx) error {
		var err error
		n, err = journalHeld(ctx, tx, s.now(), `SELECT id, progress_held, progress_coalesced FROM runs
			WHERE progress_held IS NOT NULL AND progress_journaled_at <= $1
			ORDER BY progress_journaled_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
			cutoff, flushProgressBatch)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("flush held progress: %w", translate(err))
	}
	return n, nil
}

// flushRunProgress journals the progress held back on one run, whose
// row the caller has locked, before a change of its status is
// journaled: the journal tells the run's progress before its end.
func (s *Store) flushRunProgress(ctx context.Context, tx *Tx, runID string) error {
	_, err := journalHeld(ctx, tx, s.now(), `SELECT id, progress_held, progress_coalesced FROM runs
		WHERE id = $1 AND progress_held IS NOT NULL`, runID)
	return err
}

// journalHeld journals as run.progress the progress held on the runs
// that query (id, progress_held, progress_coalesced; rows locked)
// selects, and starts their progress windows again at now. Each event
// carries the count of the other signals it stands for.
func journalHeld(ctx context.Context, tx *Tx, now time.Time, query string, args ...any) (int, error) {
	args = append(args, now)
	rows, err := tx.Query(ctx, `UPDATE runs SET progress_held = NULL, progress_coalesced = 0, progress_journaled_at = $`+strconv.Itoa(len(args))+`
		FROM (`+query+`) AS o
		WHERE runs.id = o.id
		RETURNING runs.id::text, runs.project_id::text, coalesce(runs.host_id::text, ''), o.progress_held, o.progress_coalesced`, args...)
	if err != nil {
		return 0, fmt.Errorf("take held progress: %w", err)
	}
	var evs []NewEvent
	for rows.Next() {
		var ev NewEvent
		var held []byte
		var coalesced int
		if err := rows.Scan(&ev.RunID, &ev.ProjectID, &ev.HostID, &held, &coalesced); err != nil {
			rows.Close()
			return 0, fmt.Errorf("take held progress: %w", err)
		}
		var p map[string]any
		dec := json.NewDecoder(bytes.NewReader(held))
		dec.UseNumber() // seqs and counts stay exact
		if err := dec.Decode(&p); err != nil {
			rows.Close()
			return 0, fmt.Errorf("held progress of run %s: %w", ev.RunID, err)
		}
		// The held signal is one of those counted: the event stands for
		// the others.
		p[wire.PayloadCoalesced] = max(coalesced-1, 0)
		if a, ok := p[heldActor].(string); ok {
			ev.Actor = a
		}
		delete(p, heldActor)
		ev.Topic, ev.Payload = wire.TopicRunProgress, p
		evs = append(evs, ev)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("take held progress: %w", err)
	}
	return len(evs), tx.Journal(ctx, evs...)
}

// heldActor is the key under which held progress keeps the event's
// actor (an agent's tool call names its run) until it is journaled; it
// never reaches the event's payload.
const heldActor = "_actor"

// reportEvery is how often one kind of worker report about one run is
// journaled per host; the repeats in between are counted.
const reportEvery = time.Hour

// PayloadRepeats is the field of a rate-limited report's event that
// counts the same reports (host, run, kind) not journaled since the
// previous one.
const PayloadRepeats = "repeats"

// reportDue counts one worker report of kind about runKey ("" for none)
// from host, and says whether it is journaled now (the first in
// reportEvery) and how many were counted without being journaled since
// the last one that was.
func reportDue(ctx context.Context, tx *Tx, hostID, runKey, kind string) (bool, int, error) {
	var due bool
	var repeats int
	err := tx.QueryRow(ctx, `INSERT INTO report_limits AS l (host_id, run_key, kind, journaled_at) VALUES ($1, $2, $3, $5)
		ON CONFLICT (host_id, run_key, kind) DO UPDATE SET
			last_repeats = CASE WHEN l.journaled_at <= $5::timestamptz - $4::float8 * interval '1 second' THEN l.repeats ELSE l.last_repeats END,
			repeats = CASE WHEN l.journaled_at <= $5::timestamptz - $4::float8 * interval '1 second' THEN 0 ELSE l.repeats + 1 END,
			journaled_at = CASE WHEN l.journaled_at <= $5::timestamptz - $4::float8 * interval '1 second' THEN $5::timestamptz ELSE l.journaled_at END
		RETURNING journaled_at = $5::timestamptz, CASE WHEN repeats = 0 THEN last_repeats ELSE 0 END`,
		hostID, runKey, kind, reportEvery.Seconds(), tx.Now()).Scan(&due, &repeats)
	if err != nil {
		return false, 0, fmt.Errorf("count a %s report: %w", kind, err)
	}
	return due, repeats, nil
}

// RequestPush records that the server asked host to push run's branch:
// the run.workspace_pushed that answers it is journaled, one nobody
// asked for is not.
func (s *Store) RequestPush(ctx context.Context, runID, hostID string) error {
	if _, err := s.Pool.Exec(ctx, `INSERT INTO push_requests (run_id, host_id, requested_at) VALUES ($1, $2, $3)`, runID, hostID, s.now()); err != nil {
		return fmt.Errorf("record a push request of run %s: %w", runID, translate(err))
	}
	return nil
}

// pushRequestTTL is how long a push request waits for its result: far
// longer than any push is waited for, so a slow push is still journaled.
const pushRequestTTL = time.Hour

// takePushRequest takes the oldest pending push request of run to host,
// reporting whether there was one.
func takePushRequest(ctx context.Context, tx *Tx, runID, hostID string) (bool, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM push_requests WHERE id = (SELECT id FROM push_requests
		WHERE run_id = $1 AND host_id = $2 AND requested_at > $4::timestamptz - $3::float8 * interval '1 second' ORDER BY requested_at LIMIT 1 FOR UPDATE SKIP LOCKED)`,
		runID, hostID, pushRequestTTL.Seconds(), tx.Now())
	if err != nil {
		return false, fmt.Errorf("take the push request of run %s: %w", runID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// PurgeBounds deletes what the journal's bounds no longer need: report
// counts and push requests past their windows. It runs with the
// journal's retention purge.
func (s *Store) PurgeBounds(ctx context.Context) error {
	if _, err := s.Pool.Exec(ctx, `DELETE FROM report_limits WHERE journaled_at < $2::timestamptz - 24 * $1::float8 * interval '1 second'`, reportEvery.Seconds(), s.now()); err != nil {
		return fmt.Errorf("purge report counts: %w", translate(err))
	}
	if _, err := s.Pool.Exec(ctx, `DELETE FROM push_requests WHERE requested_at < $2::timestamptz - $1::float8 * interval '1 second'`, pushRequestTTL.Seconds(), s.now()); err != nil {
		return fmt.Errorf("purge push requests: %w", translate(err))
	}
	return nil
}
