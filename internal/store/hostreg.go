package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"pam/internal/wire"
)

// The host registry: hosts are created by the operator, who gets the
// worker token once; a worker cannot register a host that does not exist
// (docs/api.md, docs/api.md#resources, docs/architecture.md#internal-api).

// hostNameRe is what a host name may be: a machine name, usable in a URL
// path segment as it is.
var hostNameRe = wire.HostNameRe

// DefaultMaxRuns is a new host's max_runs when none is given.
const DefaultMaxRuns = 8

// NewWorkerToken returns a fresh worker token (32 random bytes as 64
// lowercase hex characters) and the hash that is all the database keeps.
func NewWorkerToken() (token string, hash []byte, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("make a worker token: %w", err)
	}
	token = hex.EncodeToString(b)
	return token, HashWorkerToken(token), nil
}

// HashWorkerToken is the SHA-256 of the token as presented (its hex text).
func HashWorkerToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// CreateHost inserts a host (checked by wire.CreateHost.Validate) in status registered, journaling
// host.created. The answer carries the worker token, which is shown this
// once and never stored (only its hash is).
func (s *Store) CreateHost(ctx context.Context, in wire.CreateHost) (wire.HostCreated, error) {
	maxRuns := DefaultMaxRuns
	if in.MaxRuns != nil {
		maxRuns = *in.MaxRuns
	}
	token, hash, err := NewWorkerToken()
	if err != nil {
		return wire.HostCreated{}, fmt.Errorf("create host %q: %w", in.Name, err)
	}
	var h wire.Host
	err = s.InTx(ctx, func(tx *Tx) error {
		var err error
		h, err = scanHost(tx.QueryRow(ctx, `WITH h AS (
				INSERT INTO hosts (id, name, status, max_runs, worker_token_hash)
				VALUES ($1, $2, 'registered', $3, $4) RETURNING *)
			SELECT `+hostColumns+` FROM h`, uuid.NewString(), in.Name, maxRuns, hash))
		if err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicHostCreated, HostID: h.ID, Payload: h})
	})
	if IsUniqueViolation(err, "hosts_name_key") {
		return wire.HostCreated{}, wire.Conflict(wire.CodeConflict, "a host named %q exists", in.Name).With("field", "name")
	}
	if err != nil {
		return wire.HostCreated{}, fmt.Errorf("create host %q: %w", in.Name, err)
	}
	return wire.HostCreated{Host: h, WorkerToken: token}, nil
}

// lookupHost resolves an id or a name; lock takes FOR UPDATE of the host
// row (only the row: the active_runs count is read, not locked).
func lookupHost(ctx context.Context, q querier, ref string, lock bool) (wire.Host, error) {
	where := `h.name = $1`
	if wire.ValidUUID(ref) {
		where = `h.id = $1::uuid`
	} else if !hostNameRe.MatchString(ref) {
		return wire.Host{}, wire.NotFound("host")
	}
	sql := `SELECT ` + hostColumns + ` FROM hosts h WHERE ` + where
	if lock {
		sql += ` FOR UPDATE OF h`
	}
	h, err := scanHost(q.QueryRow(ctx, sql, ref))
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.Host{}, wire.NotFound("host")
	}
	if err != nil {
		return wire.Host{}, fmt.Errorf("read host %s: %w", ref, translate(err))
	}
	return h, nil
}

// HostByRef resolves a host by id or name; anything else is not_found.
func (s *Store) HostByRef(ctx context.Context, ref string) (wire.Host, error) {
	return lookupHost(ctx, s.Pool, ref, false)
}

// GetHost is HostByRef: the Host it returns carries active_runs, which is
// how an operator judges that a disabled host has drained.
func (s *Store) GetHost(ctx context.Context, ref string) (wire.Host, error) {
	return lookupHost(ctx, s.Pool, ref, false)
}

// HostByToken finds the host a worker token belongs to, or not_found.
//
// The token is hashed before the lookup, so the comparison the database
// makes (an index probe, not constant-time) is between hashes: how long it
// takes depends on the SHA-256 of the guess, which an attacker cannot steer
// towards a prefix of the stored hash, so timing reveals nothing about the
// token itself. Only the hash is stored, so a database dump yields no
// usable token either.
func (s *Store) HostByToken(ctx context.Context, token string) (wire.Host, error) {
	if len(token) != 64 {
		return wire.Host{}, wire.NotFound("host")
	}
	h, err := scanHost(s.Pool.QueryRow(ctx, `SELECT `+hostColumns+` FROM hosts h WHERE h.worker_token_hash = $1`,
		HashWorkerToken(token)))
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.Host{}, wire.NotFound("host")
	}
	if err != nil {
		return wire.Host{}, fmt.Errorf("find the host of a worker token: %w", translate(err))
	}
	return h, nil
}

// DisableHost withholds new dispatch from a host (drain-only: its running
// sessions continue). disabled is sticky: heartbeats keep updating
// last_seen_at but status stays disabled until EnableHost (the
// hosts_disabled_sticky trigger enforces it for every writer). Disabling a
// disabled host changes nothing and journals nothing.
func (s *Store) DisableHost(ctx context.Context, ref string) (wire.Host, error) {
	var out wire.Host
	err := s.InTx(ctx, func(tx *Tx) error {
		h, err := lookupHost(ctx, tx, ref, true)
		if err != nil {
			return err
		}
		if h.Disabled {
			out = h
			return nil
		}
		out, err = updateHost(ctx, tx, h.ID, `disabled = true, status = 'disabled'`)
		if err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicHostDisabled, HostID: h.ID, Payload: out})
	})
	if err != nil {
		return wire.Host{}, fmt.Errorf("disable host %s: %w", ref, err)
	}
	return out, nil
}

// EnableHost clears disabled and derives the status from last_seen_at:
// online when it falls within offlineAfter of now, offline when it is
// older, registered when no worker was ever seen (a host that was seen
// never returns to registered). Enabling an enabled host changes nothing.
func (s *Store) EnableHost(ctx context.Context, ref string, offlineAfter time.Duration) (wire.Host, error) {
	var out wire.Host
	err := s.InTx(ctx, func(tx *Tx) error {
		h, err := lookupHost(ctx, tx, ref, true)
		if err != nil {
			return err
		}
		if !h.Disabled {
			out = h
			return nil
		}
		out, err = updateHost(ctx, tx, h.ID, `disabled = false, status = CASE
				WHEN last_seen_at IS NULL THEN 'registered'
				WHEN last_seen_at > $3::timestamptz - $2::bigint * interval '1 microsecond' THEN 'online'
				ELSE 'offline' END`, offlineAfter.Microseconds(), s.now())
		if err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicHostEnabled, HostID: h.ID, Payload: out})
	})
	if err != nil {
		return wire.Host{}, fmt.Errorf("enable host %s: %w", ref, err)
	}
	return out, nil
}

// ClearSuspect accepts the instance id a suspect host last reported as its
// pinned instance_id and clears instance_suspect, journaling host.updated.
// A host that is not suspect is returned unchanged.
func (s *Store) ClearSuspect(ctx context.Context, ref string) (wire.Host, error) {
	var out wire.Host
	err := s.InTx(ctx, func(tx *Tx) error {
		h, err := lookupHost(ctx, tx, ref, true)
		if err != nil {
			return err
		}
		if !h.InstanceSuspect {
			out = h
			return nil
		}
		out, err = updateHost(ctx, tx, h.ID, `instance_suspect = false,
			instance_id = coalesce(reported_instance_id, instance_id), reported_instance_id = NULL`)
		if err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicHostUpdated, HostID: h.ID, Payload: map[string]any{
			"host_id":  h.ID,
			"host":     out,
			"changed":  map[string]any{"instance_suspect": false, "instance_id": out.InstanceID},
			"previous": map[string]any{"instance_id": h.InstanceID},
		}})
	})
	if err != nil {
		return wire.Host{}, fmt.Errorf("clear the suspect instance of host %s: %w", ref, err)
	}
	return out, nil
}

// SetMaxRuns sets how many runs a host may hold at once (1 to 1000; a body
// without max_runs is refused), journaling host.updated in the same
// transaction. It is how an operator, or `pam up` from PAM_MAX_RUNS, changes
// the limit a host was created with. Setting the value it already has
// changes nothing and journals nothing. The caller has checked in
// (wire.UpdateHost.Validate).
func (s *Store) SetMaxRuns(ctx context.Context, ref string, in wire.UpdateHost) (wire.Host, error) {
	n := *in.MaxRuns
	var out wire.Host
	err := s.InTx(ctx, func(tx *Tx) error {
		h, err := lookupHost(ctx, tx, ref, true)
		if err != nil {
			return err
		}
		if h.MaxRuns == n {
			out = h
			return nil
		}
		out, err = updateHost(ctx, tx, h.ID, `max_runs = $2`, n)
		if err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicHostUpdated, HostID: h.ID, Payload: map[string]any{
			"host_id":  h.ID,
			"host":     out,
			"changed":  map[string]any{"max_runs": n},
			"previous": map[string]any{"max_runs": h.MaxRuns},
		}})
	})
	if err != nil {
		return wire.Host{}, fmt.Errorf("set max_runs of host %s: %w", ref, err)
	}
	return out, nil
}

// RotateToken gives a host a new worker token and returns it; the old one
// stops working at once (workers authenticate by hash, looked up per
// request). The event says what was rotated, never the token.
func (s *Store) RotateToken(ctx context.Context, ref string) (wire.WorkerToken, error) {
	token, hash, err := NewWorkerToken()
	if err != nil {
		return wire.WorkerToken{}, fmt.Errorf("rotate the worker token of host %s: %w", ref, err)
	}
	err = s.InTx(ctx, func(tx *Tx) error {
		h, err := lookupHost(ctx, tx, ref, true)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE hosts SET worker_token_hash = $2, updated_at = now() WHERE id = $1`, h.ID, hash); err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicHostUpdated, HostID: h.ID, Payload: map[string]any{
			"host_id": h.ID, "rotated": "worker_token",
		}})
	})
	if err != nil {
		return wire.WorkerToken{}, fmt.Errorf("rotate the worker token of host %s: %w", ref, err)
	}
	return wire.WorkerToken{WorkerToken: token}, nil
}

// activeOnHost is the predicate of a host's active_runs (hosts.go), plus
// pending runs pinned to the host: work that still needs it.
const activeOnHost = `(r.host_id = $1 AND r.status IN ('pending', 'spawning', 'running'))
	OR (r.target_host_id = $1 AND r.status = 'pending')`

// DeleteHost removes a host that has no active run (409 has_active_runs
// otherwise), journaling host.removed. Its history stays
// (docs/architecture.md#host-status): the runs, attempts and offers that ran on
// it keep its id, and removed_hosts keeps its id and name; only a pending
// run's wish for it (target_host_id) is dropped. The host row is locked
// before its active runs are counted, and placement locks the rows of
// the hosts it offers to, so no run lands on it meanwhile.
func (s *Store) DeleteHost(ctx context.Context, ref string) error {
	err := s.InTx(ctx, func(tx *Tx) error {
		h, err := lookupHost(ctx, tx, ref, true)
		if err != nil {
			return err
		}
		var active int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM runs r WHERE `+activeOnHost, h.ID).Scan(&active); err != nil {
			return err
		}
		if active > 0 {
			return hasActiveRuns(h, active)
		}
		for _, q := range []string{
			`UPDATE runs SET target_host_id = NULL WHERE target_host_id = $1`,
			`INSERT INTO removed_hosts (id, name) SELECT id, name FROM hosts WHERE id = $1`,
		} {
			if _, err := tx.Exec(ctx, q, h.ID); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM hosts WHERE id = $1`, h.ID); err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicHostRemoved, HostID: h.ID, Payload: h})
	})
	// A run made for the host (target_host_id) between the count and the
	// delete trips the foreign key: that is the same refusal.
	if fkViolationFrom(err, "runs") {
		return wire.Conflict(wire.CodeHasActiveRuns, "host has active runs")
	}
	if err != nil {
		return fmt.Errorf("delete host %s: %w", ref, err)
	}
	return nil
}

func hasActiveRuns(h wire.Host, n int) error {
	return wire.Conflict(wire.CodeHasActiveRuns,
		"host %s has %d active run(s): stop them or wait for them to end (disable the host to drain it)", h.Name, n).
		With("active_runs", n)
}

// fkViolationFrom reports a foreign-key failure raised by a row of table.
func fkViolationFrom(err error, table string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503" && pgErr.TableName == table
}

// updateHost applies set (an SQL SET list; $1 is the host id, further
// placeholders take args) and returns the host as it now reads.
func updateHost(ctx context.Context, tx *Tx, id, set string, args ...any) (wire.Host, error) {
	return scanHost(tx.QueryRow(ctx, `WITH h AS (
			UPDATE hosts SET `+set+`, updated_at = now() WHERE id = $1 RETURNING *)
		SELECT `+hostColumns+` FROM h`, append([]any{id}, args...)...))
}

// Providers lists the providers some host reports, by name, each with the
// names of the hosts that offer it (sorted). Every host counts, whatever
// its status: the list says where a provider is installed; the host list
// says which hosts can take work now.
func (s *Store) Providers(ctx context.Context) ([]wire.ProviderHosts, error) {
	rows, err := s.Pool.Query(ctx, `SELECT p, array_agg(DISTINCT h.name)
		FROM hosts h, unnest(h.providers) AS p GROUP BY p ORDER BY p`)
	if err != nil {
		return nil, fmt.Errorf("list providers: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (wire.ProviderHosts, error) {
		var ph wire.ProviderHosts
		err := row.Scan(&ph.Name, &ph.Hosts)
		sort.Strings(ph.Hosts) // byte order, whatever the database collation
		return ph, err
	})
	if err != nil {
		return nil, fmt.Errorf("list providers: %w", translate(err))
	}
	out = nonNil(out)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
