package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

// Offer is a run just offered to a host: what the dispatcher pushes down
// that host's uplink as run_dispatch after the claim commits.
type Offer struct {
	Run       wire.Run
	HostID    string
	TaskTitle string
}

// DispatchFrame builds the run_dispatch frame of an offer, but for its
// signal token, which the caller mints (package signaltoken).
func (s *Store) DispatchFrame(ctx context.Context, o Offer) (wire.RunDispatchFrame, error) {
	f := wire.RunDispatchFrame{RunID: o.Run.ID, TaskID: o.Run.TaskID, Provider: o.Run.Provider,
		SessionName: o.Run.SessionName, Attempt: wire.IntPtr(o.Run.Attempt), Cwd: o.Run.Cwd, Prompt: o.Run.Prompt,
		Args: o.Run.Args, TaskTitle: o.TaskTitle}
	if err := s.dispatchWorkspace(ctx, &f, o); err != nil {
		return wire.RunDispatchFrame{}, fmt.Errorf("dispatch run %s: %w", o.Run.ID, err)
	}
	if err := s.dispatchResume(ctx, &f, o); err != nil {
		return wire.RunDispatchFrame{}, fmt.Errorf("dispatch run %s: %w", o.Run.ID, err)
	}
	return f, nil
}

// ClaimDueRuns claims up to limit due pending runs for a dispatch pass
// (docs/architecture.md#central-duties), oldest first, with FOR UPDATE
// SKIP LOCKED so that several dispatchers never take the same run.
func (tx *Tx) ClaimDueRuns(ctx context.Context, limit int) ([]wire.Run, error) {
	rows, err := tx.Query(ctx, `SELECT `+runColumns+` FROM runs
		WHERE status = 'pending' AND host_id IS NULL AND (next_attempt_at IS NULL OR next_attempt_at <= $2)
		ORDER BY pending_since, id LIMIT $1 FOR UPDATE SKIP LOCKED`, limit, tx.Now())
	if err != nil {
		return nil, fmt.Errorf("claim due runs: %w", err)
	}
	due, err := pgx.CollectRows(rows, rowTo(scanRun))
	if err != nil {
		return nil, fmt.Errorf("claim due runs: %w", err)
	}
	return due, nil
}

// HostLoad is a candidate host of a dispatch pass and its load.
type HostLoad struct {
	ID        string
	Providers []string
	Capacity  int // least(max_runs, reported max_runs)
	Active    int // its pending, spawning and running runs
}

// CandidateHosts returns the hosts a run may be offered to: online,
// enabled, not suspect and connected to this process, locked for the
// pass so that capacity is counted once across dispatchers.
func (tx *Tx) CandidateHosts(ctx context.Context, connected func(hostID string) bool) ([]HostLoad, error) {
	rows, err := tx.Query(ctx, `SELECT h.id::text, h.providers, least(h.max_runs, coalesce(h.reported_max_runs, h.max_runs)),
		(SELECT count(*) FROM runs r WHERE r.host_id = h.id AND r.status IN ('pending', 'spawning', 'running'))
		FROM hosts h WHERE h.status = 'online' AND NOT h.disabled AND NOT h.instance_suspect
		ORDER BY h.id FOR NO KEY UPDATE OF h`)
	if err != nil {
		return nil, fmt.Errorf("read candidate hosts: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (HostLoad, error) {
		var h HostLoad
		err := row.Scan(&h.ID, &h.Providers, &h.Capacity, &h.Active)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("read candidate hosts: %w", err)
	}
	var hosts []HostLoad
	for _, h := range all {
		if connected(h.ID) {
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}

// RecentRefusals returns the (run, host) pairs, keyed "run/host", whose
// host refused the run's current attempt within hold before the
// transaction's now.
func (tx *Tx) RecentRefusals(ctx context.Context, due []wire.Run, hold time.Duration) (map[string]bool, error) {
	ids := make([]string, len(due))
	for i, r := range due {
		ids[i] = r.ID
	}
	rows, err := tx.Query(ctx, `SELECT o.run_id::text || '/' || o.host_id::text FROM run_offers o
		JOIN runs r ON r.id = o.run_id AND r.attempt = o.attempt
		WHERE o.run_id = ANY($1::uuid[]) AND o.refused_at > $3::timestamptz - $2::interval`, ids, hold, tx.Now())
	if err != nil {
		return nil, fmt.Errorf("read refused offers: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read refused offers: %w", err)
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = true
	}
	return out, nil
}

// TaskTitle is the title of a run's work item.
func (tx *Tx) TaskTitle(ctx context.Context, taskID string) (string, error) {
	var title string
	if err := tx.QueryRow(ctx, `SELECT title FROM work_items WHERE id = $1`, taskID).Scan(&title); err != nil {
		return "", fmt.Errorf("read title of task %s: %w", taskID, err)
	}
	return title, nil
}

// MarkMatched records that the runs found an eligible host (but for
// capacity) at least once: their dispatch timeout is dispatch_timeout,
// not no_eligible_host.
func (tx *Tx) MarkMatched(ctx context.Context, runIDs []string) error {
	if len(runIDs) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE runs SET ever_matched = true WHERE id = ANY($1::uuid[]) AND NOT ever_matched`, runIDs); err != nil {
		return fmt.Errorf("mark runs matched: %w", err)
	}
	return nil
}

// EverMatched reads whether a run ever found an eligible host.
func (tx *Tx) EverMatched(ctx context.Context, runID string) (bool, error) {
	var ever bool
	if err := tx.QueryRow(ctx, `SELECT ever_matched FROM runs WHERE id = $1`, runID).Scan(&ever); err != nil {
		return false, fmt.Errorf("read ever_matched of run %s: %w", runID, err)
	}
	return ever, nil
}

// OfferedAttempt reports whether the run's attempt was offered to host.
func (tx *Tx) OfferedAttempt(ctx context.Context, runID string, attempt int, hostID string) (bool, error) {
	var offered bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_offers WHERE run_id = $1 AND attempt = $2 AND host_id = $3)`,
		runID, attempt, hostID).Scan(&offered); err != nil {
		return false, fmt.Errorf("read offers of run %s: %w", runID, err)
	}
	return offered, nil
}

// RecordRefusal records that host refused the run's attempt now, so that
// a dispatch pass does not offer it that attempt again for a while.
func (tx *Tx) RecordRefusal(ctx context.Context, runID string, attempt int, hostID string) error {
	if _, err := tx.Exec(ctx, `UPDATE run_offers SET refused_at = $4 WHERE run_id = $1 AND attempt = $2 AND host_id = $3`,
		runID, attempt, hostID, tx.Now()); err != nil {
		return fmt.Errorf("record the refusal of run %s by host %s: %w", runID, hostID, err)
	}
	return nil
}

// DueTimer says which central timer a run is past.
type DueTimer int

// The central timers (docs/architecture.md#central-duties).
const (
	AckTimerDue      DueTimer = iota // offered, not acked within the ack timeout
	DispatchTimerDue                 // pending past the dispatch timeout
	SpawnTimerDue                    // spawning past the spawn timeout
)

// DueRun is a run past one of the central timers.
type DueRun struct {
	ID    string
	Timer DueTimer
}

// TimedOut finds (at most 500) runs past a central timer: offers not
// acked within ackTimeout, pending runs past dispatchTimeout from
// pending_since, spawning runs past spawnTimeout.
func (s *Store) TimedOut(ctx context.Context, ackTimeout, dispatchTimeout, spawnTimeout time.Duration) ([]DueRun, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT id::text, $4::int FROM runs WHERE status = 'pending' AND host_id IS NOT NULL AND offered_at < $7::timestamptz - $1::interval
		UNION ALL
		SELECT id::text, $5::int FROM runs WHERE status = 'pending' AND pending_since < $7::timestamptz - $2::interval
		UNION ALL
		SELECT id::text, $6::int FROM runs WHERE status = 'spawning' AND spawning_at < $7::timestamptz - $3::interval
		LIMIT 500`, ackTimeout, dispatchTimeout, spawnTimeout, AckTimerDue, DispatchTimerDue, SpawnTimerDue, s.now())
	if err != nil {
		return nil, fmt.Errorf("find due runs: %w", translate(err))
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DueRun])
	if err != nil {
		return nil, fmt.Errorf("scan due runs: %w", translate(err))
	}
	return list, nil
}

// OfferedTo reports whether runID was ever offered to hostID (at any
// attempt): the scope of every frame and request a worker sends about a
// run (docs/architecture.md#security-model).
func (s *Store) OfferedTo(ctx context.Context, hostID, runID string) (bool, error) {
	ok, err := offeredTo(ctx, s.Pool, hostID, runID)
	return ok, translate(err) // offeredTo names the run
}

// PlacedOn reports whether runID's current attempt is attempt and is
// placed on (or offered to) hostID: the only incarnation whose pane the
// server takes (docs/architecture.md#bounded-journal). A host whose
// offer was withdrawn, or an older attempt, is not.
func (s *Store) PlacedOn(ctx context.Context, hostID, runID string, attempt int) (bool, error) {
	var ok bool
	err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1 AND host_id = $2 AND attempt = $3)`, runID, hostID, attempt).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read the placement of run %s: %w", runID, translate(err))
	}
	return ok, nil
}

func offeredTo(ctx context.Context, q querier, hostID, runID string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_offers WHERE run_id = $1 AND host_id = $2)`, runID, hostID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read offers of run %s: %w", runID, err)
	}
	return ok, nil
}

// NextDue is when the earliest backed-off pending run becomes due (zero
// when none is waiting).
func (s *Store) NextDue(ctx context.Context) (time.Time, error) {
	var t *time.Time
	err := s.Pool.QueryRow(ctx, `SELECT min(next_attempt_at) FROM runs WHERE status = 'pending' AND host_id IS NULL AND next_attempt_at > $1`, s.now()).Scan(&t)
	if err != nil {
		return time.Time{}, fmt.Errorf("read when the next run is due: %w", translate(err))
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

// SignalSecret returns the server's signal-token secret (the key of
// package signaltoken), read once.
func (s *Store) SignalSecret(ctx context.Context) ([]byte, error) {
	s.secretMu.Lock()
	defer s.secretMu.Unlock()
	if s.signalSecret != nil {
		return s.signalSecret, nil
	}
	var b []byte
	if err := s.Pool.QueryRow(ctx, `SELECT signal_secret FROM server_state`).Scan(&b); err != nil {
		return nil, fmt.Errorf("read the signal secret: %w", translate(err))
	}
	s.signalSecret = b
	return b, nil
}
