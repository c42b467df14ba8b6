package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

// The central fleet duties of docs/architecture.md#central-duties that need more than a heartbeat: the
// host-lost bound (T_dead), the pane timers (a hung CLI, an agent idle
// after its turn ended) and the journal entry of a session no run owns.
// The dispatcher calls them on every pass.
//
// The timers count from the latest of the last sign of life (output or
// input for the pane timers, heartbeat for T_dead), the start of this
// serve and the host's last transition to online: a long outage of serve
// itself, or of the network before a host came back, never counts against
// a run.

// Hang is a run failed cli_hang whose host must stop its session.
type Hang struct {
	RunID   string
	Attempt int // the attempt that hung
	HostID  string
}

// LostHosts returns (at most 100) hosts that are not online, have been
// silent for lostAfter — counted from the latest of their last_seen_at,
// their last online transition and serveStart — and still hold
// non-terminal runs.
func (s *Store) LostHosts(ctx context.Context, lostAfter time.Duration, serveStart time.Time) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT h.id::text FROM hosts h
		WHERE h.status <> 'online' AND greatest(h.last_seen_at, h.last_online_at, $2::timestamptz) < $3::timestamptz - $1::interval
		AND EXISTS (SELECT 1 FROM runs r WHERE r.host_id = h.id AND r.status IN ('pending', 'spawning', 'running'))
		LIMIT 100`, lostAfter, serveStart, s.now())
	if err != nil {
		return nil, fmt.Errorf("find lost hosts: %w", translate(err))
	}
	hosts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find lost hosts: %w", translate(err))
	}
	return hosts, nil
}

// LockLostHost locks the host row and reads whether it is still lost
// (LostHosts' rule) and when it was last seen: a heartbeat racing the
// host's loss either comes first (and the host is not lost) or after
// (and finds the runs already failed).
func (tx *Tx) LockLostHost(ctx context.Context, hostID string, lostAfter time.Duration, serveStart time.Time) (lost bool, seen *time.Time, err error) {
	err = tx.QueryRow(ctx, `SELECT status <> 'online' AND greatest(last_seen_at, last_online_at, $2::timestamptz) < $4::timestamptz - $3::interval, last_seen_at
		FROM hosts WHERE id = $1 FOR NO KEY UPDATE`, hostID, serveStart, lostAfter, tx.Now()).Scan(&lost, &seen)
	return lost, seen, err
}

// LiveRunsOn lists the non-terminal runs placed on a host, oldest first.
func (tx *Tx) LiveRunsOn(ctx context.Context, hostID string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT id::text FROM runs WHERE host_id = $1 AND status IN ('pending', 'spawning', 'running') ORDER BY created_at`, hostID)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list runs of lost host %s: %w", hostID, err)
	}
	return ids, nil
}

// IdleStop is a run stopped completed_idle whose host must stop its
// session.
type IdleStop struct {
	RunID   string
	Attempt int // the attempt that was stopped
	HostID  string
}

// onlineHost is the pane timers' condition on a run's host h: online, or
// disabled and still heartbeating within offlineAfter ($2) of now ($4).
const onlineHost = `(h.status = 'online' OR (h.disabled AND h.last_seen_at > $4::timestamptz - $2::interval))`

// MaybeHung finds (at most 500) working running runs
// (docs/architecture.md#working-waiting-hung: not waiting for a person,
// its limit or its next input) whose pane and input have been quiet for
// hangTimeout while their host is online (an online host, or a disabled
// one whose heartbeat is within offlineAfter), counted from the latest of
// the run's last output, its last input (its start at the earliest), its
// host's last online transition and serveStart: a prefilter of
// lifecycle.Quiet's rule, which decides under the row lock.
func (s *Store) MaybeHung(ctx context.Context, hangTimeout, offlineAfter time.Duration, serveStart time.Time) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT r.id::text FROM runs r JOIN hosts h ON h.id = r.host_id
		WHERE r.status = 'running' AND `+onlineHost+`
		AND r.attention NOT IN ('needs_input', 'rate_limited')
		AND NOT coalesce(r.completed_at >= coalesce(coalesce(r.last_input_at, r.started_at), '-infinity'), false)
		AND greatest(r.last_output_at, r.last_input_at, r.started_at, h.last_online_at, $3::timestamptz) < $4::timestamptz - $1::interval
		LIMIT 500`, hangTimeout, offlineAfter, serveStart, s.now())
	if err != nil {
		return nil, fmt.Errorf("find hung runs: %w", translate(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find hung runs: %w", translate(err))
	}
	return ids, nil
}

// MaybeIdleCompleted finds (at most 500) running runs whose agent
// completed its turn after the last input into it and that have since
// had no input and no pane change for stopAfter while their host is
// online, counted from the latest of the completion, the last input, the
// last output, the host's last online transition and serveStart; a
// rate-limited run waits for its limit instead
// (docs/architecture.md#working-waiting-hung). A prefilter of
// lifecycle.Quiet's rule, which decides under the row lock.
func (s *Store) MaybeIdleCompleted(ctx context.Context, stopAfter, offlineAfter time.Duration, serveStart time.Time) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT r.id::text FROM runs r JOIN hosts h ON h.id = r.host_id
		WHERE r.status = 'running' AND `+onlineHost+`
		AND r.attention <> 'rate_limited'
		AND r.completed_at >= coalesce(coalesce(r.last_input_at, r.started_at), '-infinity')
		AND greatest(r.completed_at, r.last_output_at, r.last_input_at, h.last_online_at, $3::timestamptz) < $4::timestamptz - $1::interval
		LIMIT 500`, stopAfter, offlineAfter, serveStart, s.now())
	if err != nil {
		return nil, fmt.Errorf("find idle completed runs: %w", translate(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find idle completed runs: %w", translate(err))
	}
	return ids, nil
}

// PaneFacts is what the pane timers read of a run's pane and host, with
// the time they are judged at: the store's clock, as the transaction read
// it (docs/architecture.md#time).
type PaneFacts struct {
	HostOnline bool
	LastOutput time.Time // zero when the pane never changed
	Floor      time.Time // the latest of the host's last online transition and serveStart
	Now        time.Time
}

// PaneOf reads the pane facts of run r (placed on a host).
func (tx *Tx) PaneOf(ctx context.Context, r wire.Run, offlineAfter time.Duration, serveStart time.Time) (PaneFacts, error) {
	var p PaneFacts
	var out *time.Time
	if err := tx.QueryRow(ctx, `SELECT `+onlineHost+`, r.last_output_at, greatest(h.last_online_at, $3::timestamptz), $4::timestamptz
		FROM runs r JOIN hosts h ON h.id = r.host_id WHERE r.id = $1`, r.ID, offlineAfter, serveStart, tx.Now()).Scan(&p.HostOnline, &out, &p.Floor, &p.Now); err != nil {
		return p, err
	}
	if out != nil {
		p.LastOutput = *out
	}
	return p, nil
}

// journalOrphan records a session on a host's tmux socket that maps to no
// run the host was ever given (run.orphan_detected, journaled for the
// host). The run id and attempt the session carried, if any, are in the
// payload, so that an operator can tell which run the session claimed to
// be; the event's run_id column stays empty: the run may not exist, and a
// run of another host must not get events from this one in its journal.
func (s *Store) journalOrphan(ctx context.Context, hostID, runID string, attempt *int, detail string) error {
	if len(detail) > 1000 {
		detail = detail[:1000]
	}
	payload := map[string]any{"host_id": hostID, "detail": detail}
	if runID != "" {
		payload["run_id"] = runID
		payload["attempt"] = attempt
	}
	err := s.InTx(ctx, func(tx *Tx) error {
		// Once per (host, run, kind) an hour, counted in between
		// (docs/architecture.md#bounded-journal).
		due, repeats, err := reportDue(ctx, tx, hostID, runID, wire.StateOrphanDetected)
		if err != nil || !due {
			return err
		}
		payload[PayloadRepeats] = repeats
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicRunOrphanDetected, HostID: hostID, Payload: payload})
	})
	if err != nil {
		return fmt.Errorf("journal an orphan session on host %s: %w", hostID, err)
	}
	return nil
}
