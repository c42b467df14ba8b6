package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/lifecycle"
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

// MarkHostsLost fails, with failure_reason host_lost and through the
// restart policy, the non-terminal runs of every host that is not online
// and has been silent for lostAfter, counted from the latest of its
// last_seen_at, its last online transition and serveStart. It journals
// worker.lost once per host it acted on and returns how many runs failed.
func (s *Store) MarkHostsLost(ctx context.Context, lostAfter time.Duration, serveStart time.Time) (int, error) {
	rows, err := s.Pool.Query(ctx, `SELECT h.id::text FROM hosts h
		WHERE h.status <> 'online' AND greatest(h.last_seen_at, h.last_online_at, $2::timestamptz) < $3::timestamptz - $1::interval
		AND EXISTS (SELECT 1 FROM runs r WHERE r.host_id = h.id AND r.status IN ('pending', 'spawning', 'running'))
		LIMIT 100`, lostAfter, serveStart, s.now())
	if err != nil {
		return 0, fmt.Errorf("find lost hosts: %w", translate(err))
	}
	hosts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("find lost hosts: %w", translate(err))
	}
	failed := 0
	for _, host := range hosts {
		n, err := s.loseHost(ctx, host, lostAfter, serveStart)
		if err != nil {
			return failed, err // loseHost names the host
		}
		failed += n
	}
	return failed, nil
}

// loseHost is MarkHostsLost for one host, in one transaction with the
// host row locked, so that a heartbeat racing it either comes first (and
// the host is not lost) or after (and finds the runs already failed).
func (s *Store) loseHost(ctx context.Context, hostID string, lostAfter time.Duration, serveStart time.Time) (int, error) {
	failed := 0
	err := s.InTx(ctx, func(tx *Tx) error {
		failed = 0
		var lost bool
		var seen *time.Time
		if err := tx.QueryRow(ctx, `SELECT status <> 'online' AND greatest(last_seen_at, last_online_at, $2::timestamptz) < $4::timestamptz - $3::interval, last_seen_at
			FROM hosts WHERE id = $1 FOR NO KEY UPDATE`, hostID, serveStart, lostAfter, s.now()).Scan(&lost, &seen); err != nil {
			return err
		}
		if !lost {
			return nil
		}
		rows, err := tx.Query(ctx, `SELECT id::text FROM runs WHERE host_id = $1 AND status IN ('pending', 'spawning', 'running') ORDER BY created_at`, hostID)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("list runs of lost host %s: %w", hostID, err)
		}
		var runs []string
		for _, id := range ids {
			r, err := runByID(ctx, tx, id, true)
			if err != nil {
				return err
			}
			d := lifecycle.Expired(lifecycle.FromWire(r), lifecycle.HostLost, false, hostID, s.Policy, s.now())
			if !d.Changed() {
				continue
			}
			if _, err := s.apply(ctx, tx, r, d); err != nil {
				return err
			}
			runs = append(runs, r.ID)
		}
		failed = len(runs)
		if failed == 0 {
			return nil
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicWorkerLost, HostID: hostID,
			Payload: map[string]any{"host_id": hostID, "last_seen_at": seen, "lost_after": lostAfter.String(), "run_ids": runs}})
	})
	if err != nil {
		return failed, fmt.Errorf("fail the runs of lost host %s: %w", hostID, err)
	}
	return failed, nil
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

// FailHungRuns fails, with failure_reason cli_hang and through the restart
// policy, every working running run (docs/architecture.md#working-waiting-hung:
// not waiting for a person, its limit or its next input) whose pane and
// input have been quiet for hangTimeout while its host is online (an
// online host, or a disabled one whose heartbeat is within offlineAfter).
// The timer counts from the latest of the run's last output, its last
// input (its start at the earliest), its host's last online transition
// and serveStart. It returns the runs whose sessions must be stopped.
func (s *Store) FailHungRuns(ctx context.Context, hangTimeout, offlineAfter time.Duration, serveStart time.Time) ([]Hang, error) {
	// A prefilter of lifecycle.Quiet's rule; the rule decides under the
	// row lock.
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
	return s.quietRuns(ctx, ids, lifecycle.PaneTimers{Hang: hangTimeout}, offlineAfter, serveStart)
}

// StopCompletedRuns stops (run.stopped, source completed_idle; no requeue,
// the work item keeps its status) every running run whose agent completed
// its turn after the last input into it and that has since had no input
// and no pane change for stopAfter while its host is online, counted from
// the latest of the completion, the last input, the last output, its
// host's last online transition and serveStart; a rate-limited run waits
// for its limit instead (docs/architecture.md#working-waiting-hung).
// stopAfter 0 (or less) stops nothing. It returns the runs whose sessions
// must be stopped.
func (s *Store) StopCompletedRuns(ctx context.Context, stopAfter, offlineAfter time.Duration, serveStart time.Time) ([]IdleStop, error) {
	if stopAfter <= 0 {
		return nil, nil
	}
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
	ended, err := s.quietRuns(ctx, ids, lifecycle.PaneTimers{CompletedStop: stopAfter}, offlineAfter, serveStart)
	stops := make([]IdleStop, 0, len(ended))
	for _, h := range ended {
		stops = append(stops, IdleStop(h))
	}
	return stops, err // quietRuns names the run
}

// quietRuns decides each of the running runs a pane timer's scan found
// with lifecycle.Quiet, in a transaction of its own with the run row
// locked: output, input, a completion or a signal may have come since the
// scan. The time they are judged at is the store's clock. It returns the runs it ended.
func (s *Store) quietRuns(ctx context.Context, ids []string, t lifecycle.PaneTimers, offlineAfter time.Duration, serveStart time.Time) ([]Hang, error) {
	var ended []Hang
	for _, id := range ids {
		var h *Hang
		err := s.InTx(ctx, func(tx *Tx) error {
			h = nil
			r, err := runByID(ctx, tx, id, true)
			if err != nil || r.HostID == nil {
				return err
			}
			var pane lifecycle.Pane
			var out *time.Time
			var now time.Time
			if err := tx.QueryRow(ctx, `SELECT `+onlineHost+`, r.last_output_at, greatest(h.last_online_at, $3::timestamptz), $4::timestamptz
				FROM runs r JOIN hosts h ON h.id = r.host_id WHERE r.id = $1`, r.ID, offlineAfter, serveStart, s.now()).Scan(&pane.HostOnline, &out, &pane.Floor, &now); err != nil {
				return err
			}
			if out != nil {
				pane.LastOutput = *out
			}
			d := lifecycle.Quiet(lifecycle.FromWire(r), pane, t, s.Policy, now)
			if !d.Changed() {
				return nil
			}
			if _, err := s.apply(ctx, tx, r, d); err != nil {
				return err
			}
			h = &Hang{RunID: r.ID, Attempt: r.Attempt, HostID: *r.HostID}
			return nil
		})
		if errors.Is(err, errGuardLost) || wire.HasCode(err, wire.CodeNotFound) {
			continue
		}
		if err != nil {
			return ended, fmt.Errorf("check the pane timers of run %s: %w", id, err)
		}
		if h != nil {
			ended = append(ended, *h)
		}
	}
	return ended, nil
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
