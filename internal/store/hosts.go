package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

const hostColumns = `h.id::text, h.name, h.platform, h.status, h.disabled, h.instance_id::text, h.instance_suspect,
	h.last_seen_at, h.providers, h.max_runs, h.executor,
	(SELECT count(*) FROM runs r WHERE r.host_id = h.id AND r.status IN ('pending', 'spawning', 'running')),
	h.created_at, h.updated_at`

func scanHost(row pgx.Row) (wire.Host, error) {
	var h wire.Host
	err := row.Scan(&h.ID, &h.Name, &h.Platform, &h.Status, &h.Disabled, &h.InstanceID, &h.InstanceSuspect,
		&h.LastSeenAt, &h.Providers, &h.MaxRuns, &h.Executor, &h.ActiveRuns, &h.CreatedAt, &h.UpdatedAt)
	if h.Providers == nil {
		h.Providers = []string{}
	}
	utc(&h.CreatedAt, &h.UpdatedAt)
	utcp(h.LastSeenAt)
	return h, err
}

// ListHosts returns every host, by name.
func (s *Store) ListHosts(ctx context.Context) ([]wire.Host, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+hostColumns+` FROM hosts h ORDER BY h.name`)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, rowTo(scanHost))
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", translate(err))
	}
	return nonNil(out), nil
}

// Snapshot is the state sent to an SSE subscriber whose cursor was purged.
func (s *Store) Snapshot(ctx context.Context) (wire.Snapshot, error) {
	runs, err := s.ActiveRuns(ctx)
	if err != nil {
		return wire.Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	hosts, err := s.ListHosts(ctx)
	if err != nil {
		return wire.Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	return wire.Snapshot{Reason: "cursor_purged", Runs: runs, Hosts: hosts}, nil
}

func utc(ts ...*time.Time) {
	for _, t := range ts {
		*t = t.UTC()
	}
}

func utcp(ts ...*time.Time) {
	for _, t := range ts {
		if t != nil {
			*t = t.UTC()
		}
	}
}
