package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

// Register applies POST /api/internal/worker/register for the host whose
// token authenticated the call (docs/architecture.md#internal-api): the
// instance_id rules of the seed decide between a normal start, a
// reinstall and a suspected clone. The server has checked that the name
// matches, that the protocol is spoken, and the request
// (wire.Register.Validate).
func (s *Store) Register(ctx context.Context, host wire.Host, in wire.Register, offlineAfter time.Duration) (wire.Registered, error) {
	var out wire.Registered
	err := s.InTx(ctx, func(tx *Tx) error {
		var pinned *string
		var lastSeen *time.Time
		var suspect bool
		if err := tx.QueryRow(ctx, `SELECT instance_id::text, last_seen_at, instance_suspect FROM hosts WHERE id = $1 FOR NO KEY UPDATE`, host.ID).
			Scan(&pinned, &lastSeen, &suspect); err != nil {
			return err
		}
		var maxRuns *int
		if in.MaxRuns > 0 {
			maxRuns = &in.MaxRuns
		}
		providers := in.Providers
		if providers == nil {
			providers = []string{}
		}
		// resumable and continue_messages stay NULL for a worker that
		// does not report them.
		if _, err := tx.Exec(ctx, `UPDATE hosts SET platform = $2, providers = $3, executor = $4, reported_max_runs = $5, resumable = $6,
				continue_messages = $7, updated_at = now()
			WHERE id = $1`, host.ID, in.Platform, providers, in.Executor, maxRuns, in.Resumable, in.ContinueMessages); err != nil {
			return err
		}
		var events []NewEvent
		switch {
		case pinned == nil:
			if _, err := tx.Exec(ctx, `UPDATE hosts SET instance_id = $2 WHERE id = $1`, host.ID, in.InstanceID); err != nil {
				return err
			}
			out.Pinned = true
		case *pinned == in.InstanceID:
			out.Pinned = true
		case lastSeen == nil || s.now().Sub(*lastSeen) > offlineAfter:
			// The pinned instance has been silent: a reinstall.
			if _, err := tx.Exec(ctx, `UPDATE hosts SET instance_id = $2, instance_suspect = false, reported_instance_id = NULL WHERE id = $1`, host.ID, in.InstanceID); err != nil {
				return err
			}
			events = append(events, NewEvent{Topic: wire.TopicWorkerInstanceReinstalled, HostID: host.ID,
				Payload: map[string]any{"host_id": host.ID, "old_instance_id": *pinned, "instance_id": in.InstanceID}})
			out.Pinned = true
		default:
			// The pinned instance is live: a clone. Keep the pinned id.
			if _, err := tx.Exec(ctx, `UPDATE hosts SET instance_suspect = true, reported_instance_id = $2 WHERE id = $1`, host.ID, in.InstanceID); err != nil {
				return err
			}
			if !suspect {
				events = append(events, NewEvent{Topic: wire.TopicWorkerInstanceSuspect, HostID: host.ID,
					Payload: map[string]any{"host_id": host.ID, "pinned_instance_id": *pinned, "instance_id": in.InstanceID}})
			}
		}
		if err := tx.QueryRow(ctx, `SELECT status FROM hosts WHERE id = $1`, host.ID).Scan(&out.Status); err != nil {
			return err
		}
		out.HostID, out.Protocol = host.ID, wire.UplinkProtocol
		return tx.Journal(ctx, events...)
	})
	if err != nil {
		return wire.Registered{}, fmt.Errorf("register host %s: %w", host.ID, err)
	}
	return out, nil
}

// Heartbeat records that a host's worker is alive. A host that was not
// online becomes online (journal worker.registered); a disabled host only
// gets its last_seen_at (disabled is sticky). It reports whether the host
// just came online, which may free work for the dispatcher. It trusts the
// caller; an uplink uses UplinkHeartbeat, which checks the credential.
func (s *Store) Heartbeat(ctx context.Context, hostID string) (bool, error) {
	return s.heartbeat(ctx, hostID, nil)
}

// Credential is what an uplink connection was admitted with: the hash of
// the worker token it presented and the instance id it reported.
type Credential struct {
	TokenHash  []byte
	InstanceID string
}

// ErrRevoked answers a heartbeat whose credential no longer holds: the
// host was removed, its token rotated, or another instance pinned.
var ErrRevoked = wire.Errorf(wire.CodeUnauthorized, "this uplink's credential was revoked: register again")

// UplinkHeartbeat is Heartbeat for a connection that must still hold the
// host's current credential (docs/architecture.md#security-model): the
// host exists, its token hash is the one the connection presented, and
// its pinned instance is the one the connection reported. Otherwise it
// writes nothing and returns ErrRevoked. The check is part of the row
// read the heartbeat makes anyway: no extra round trip.
func (s *Store) UplinkHeartbeat(ctx context.Context, hostID string, cred Credential) (bool, error) {
	return s.heartbeat(ctx, hostID, &cred)
}

func (s *Store) heartbeat(ctx context.Context, hostID string, cred *Credential) (bool, error) {
	cameOnline := false
	var hash []byte
	if cred != nil {
		hash = cred.TokenHash
	}
	err := s.InTx(ctx, func(tx *Tx) error {
		var status string
		var disabled, tokenOK bool
		var pinned *string
		err := tx.QueryRow(ctx, `SELECT status, disabled, coalesce(worker_token_hash = $2, false), instance_id::text
			FROM hosts WHERE id = $1 FOR NO KEY UPDATE`, hostID, hash).Scan(&status, &disabled, &tokenOK, &pinned)
		if errors.Is(err, pgx.ErrNoRows) && cred != nil {
			return ErrRevoked
		}
		if err != nil {
			return err
		}
		if cred != nil && (!tokenOK || pinned == nil || !sameUUID(*pinned, cred.InstanceID)) {
			return ErrRevoked
		}
		if disabled || status == "online" {
			_, err := tx.Exec(ctx, `UPDATE hosts SET last_seen_at = $2 WHERE id = $1`, hostID, tx.Now())
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE hosts SET status = 'online', last_seen_at = $2, last_online_at = $2, updated_at = now() WHERE id = $1`, hostID, tx.Now()); err != nil {
			return err
		}
		cameOnline = true
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicWorkerRegistered, HostID: hostID, Payload: map[string]any{"host_id": hostID, "from": status}})
	})
	if err != nil && !errors.Is(err, ErrRevoked) {
		return false, fmt.Errorf("heartbeat of host %s: %w", hostID, err)
	}
	return cameOnline, err
}

// sameUUID compares two UUIDs whatever their spelling; a string that is
// not a UUID matches nothing.
func sameUUID(a, b string) bool {
	ua, err := uuid.Parse(a)
	if err != nil {
		return false
	}
	ub, err := uuid.Parse(b)
	return err == nil && ua == ub
}

// ForeignInstance records that an uplink of hostID reported instanceID,
// which is not the pinned instance, while the pinned one is live (live:
// the caller holds its connection, or it heartbeated within
// offlineAfter): the host is marked suspect, keeping the pinned id, and
// worker.instance_suspect is journaled once, as a register would
// (docs/architecture.md#internal-api). It reports whether the host is
// now suspect.
func (s *Store) ForeignInstance(ctx context.Context, hostID, instanceID string, live bool, offlineAfter time.Duration) (bool, error) {
	suspect := false
	err := s.InTx(ctx, func(tx *Tx) error {
		var pinned *string
		var lastSeen *time.Time
		var was bool
		if err := tx.QueryRow(ctx, `SELECT instance_id::text, last_seen_at, instance_suspect FROM hosts WHERE id = $1 FOR NO KEY UPDATE`, hostID).
			Scan(&pinned, &lastSeen, &was); err != nil {
			return err
		}
		if pinned == nil || *pinned == instanceID {
			return nil
		}
		if !live && (lastSeen == nil || s.now().Sub(*lastSeen) > offlineAfter) {
			return nil
		}
		suspect = true
		if was {
			return nil
		}
		// Only a UUID is kept as the reported id (the one clear-suspect
		// would accept); anything else is not an instance a worker makes.
		var reported *string
		if id, err := uuid.Parse(instanceID); err == nil {
			v := id.String()
			reported = &v
		}
		if _, err := tx.Exec(ctx, `UPDATE hosts SET instance_suspect = true, reported_instance_id = $2, updated_at = now() WHERE id = $1`, hostID, reported); err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicWorkerInstanceSuspect, HostID: hostID,
			Payload: map[string]any{"host_id": hostID, "pinned_instance_id": *pinned, "instance_id": reported, "source": "uplink"}})
	})
	if err != nil {
		return false, fmt.Errorf("record a foreign instance of host %s: %w", hostID, translate(err))
	}
	return suspect, nil
}

// MarkOffline turns online hosts silent for offlineAfter into offline
// (journal worker.offline). It is not called until offlineAfter has passed
// since serve started (restart grace, docs/architecture.md#central-duties).
func (s *Store) MarkOffline(ctx context.Context, offlineAfter time.Duration) (int, error) {
	n := 0
	err := s.InTx(ctx, func(tx *Tx) error {
		rows, err := tx.Query(ctx, `UPDATE hosts SET status = 'offline', updated_at = now()
			WHERE status = 'online' AND NOT disabled AND last_seen_at < $2::timestamptz - $1::interval RETURNING id::text, last_seen_at`, offlineAfter, s.now())
		if err != nil {
			return err
		}
		events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (NewEvent, error) {
			var id string
			var seen time.Time
			err := row.Scan(&id, &seen)
			return NewEvent{Topic: wire.TopicWorkerOffline, HostID: id, Payload: map[string]any{"host_id": id, "last_seen_at": seen.UTC()}}, err
		})
		if err != nil {
			return err
		}
		n = len(events)
		return tx.Journal(ctx, events...)
	})
	if err != nil {
		return 0, fmt.Errorf("mark hosts offline: %w", err)
	}
	return n, nil
}

// WorkerRuns lists the host's runs in spawning or running (GET
// /api/internal/worker/runs).
func (s *Store) WorkerRuns(ctx context.Context, hostID string) ([]wire.WorkerRun, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id::text, attempt, status, session_name, task_id::text, provider, cwd, failure_reason, host_id::text, finished_at
		FROM runs WHERE host_id = $1 AND status IN ('spawning', 'running') ORDER BY created_at`, hostID)
	if err != nil {
		return nil, fmt.Errorf("list runs of host %s: %w", hostID, translate(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (wire.WorkerRun, error) {
		var w wire.WorkerRun
		err := row.Scan(&w.RunID, &w.Attempt, &w.Status, &w.SessionName, &w.TaskID, &w.Provider, &w.Cwd, &w.FailureReason, &w.HostID, &w.FinishedAt)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("list runs of host %s: %w", hostID, translate(err))
	}
	return nonNil(out), nil
}

// WorkerRun returns one run ever offered to hostID, with its attempts
// (GET /api/internal/worker/runs/{id}); other runs are not_found.
func (s *Store) WorkerRun(ctx context.Context, hostID, runID string) (wire.WorkerRun, error) {
	r, err := s.GetRun(ctx, runID)
	if err != nil {
		return wire.WorkerRun{}, err // GetRun names the run
	}
	var known bool
	if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_offers WHERE run_id = $1 AND host_id = $2)`, runID, hostID).Scan(&known); err != nil {
		return wire.WorkerRun{}, fmt.Errorf("read the offers of run %s to host %s: %w", runID, hostID, translate(err))
	}
	if !known {
		return wire.WorkerRun{}, wire.NotFound("run")
	}
	w := wire.WorkerRun{RunID: r.ID, Attempt: r.Attempt, Status: r.Status, SessionName: r.SessionName, TaskID: r.TaskID,
		Provider: r.Provider, Cwd: r.Cwd, FailureReason: r.FailureReason, HostID: r.HostID, FinishedAt: r.FinishedAt, Attempts: []wire.RunAttempt{}}
	// A live continuation takes this run's worktree over: the worker's
	// clean-up keeps it (docs/architecture.md#resume-and-continue).
	err = s.Pool.QueryRow(ctx, `SELECT id::text FROM runs WHERE continues_run_id = $1 AND status IN ('pending', 'spawning', 'running')
		ORDER BY created_at DESC LIMIT 1`, runID).Scan(&w.ContinuedBy)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return w, fmt.Errorf("read the continuation of run %s: %w", runID, translate(err))
	}
	rows, err := s.Pool.Query(ctx, `SELECT attempt, host_id::text, outcome, failure_reason FROM run_attempts WHERE run_id = $1 ORDER BY attempt`, runID)
	if err != nil {
		return w, fmt.Errorf("list attempts of run %s: %w", runID, translate(err))
	}
	attempts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (wire.RunAttempt, error) {
		var a wire.RunAttempt
		err := row.Scan(&a.Attempt, &a.HostID, &a.Outcome, &a.FailureReason)
		return a, err
	})
	if err != nil {
		return w, fmt.Errorf("list attempts of run %s: %w", runID, translate(err))
	}
	w.Attempts = nonNil(attempts)
	return w, nil
}

// LastHost is the host of the run's latest offered attempt (for a run
// that has since been requeued or withdrawn), or nil.
func (s *Store) LastHost(ctx context.Context, runID string) (*string, error) {
	var h *string
	err := s.Pool.QueryRow(ctx, `SELECT host_id::text FROM run_offers WHERE run_id = $1 ORDER BY attempt DESC, offered_at DESC LIMIT 1`, runID).Scan(&h)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read last host of run %s: %w", runID, translate(err))
	}
	return h, nil
}
