package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

// JournalLease journals a lease change of a run with the run's common
// payload (run_id, attempt, task_id) plus extra: who held the lease and,
// on release, for how long and why. The lease itself lives in the active
// server's memory (docs/architecture.md#central-duties); only its history is durable.
func (s *Store) JournalLease(ctx context.Context, topic wire.Topic, runID string, extra map[string]any) error {
	return s.JournalRun(ctx, topic, runID, extra)
}

// RunStatuses returns the status of each of the given runs that exists,
// in one query: the attach sockets' watcher asks it for all their runs
// at once.
func (s *Store) RunStatuses(ctx context.Context, ids []string) (map[string]string, error) {
	out := make(map[string]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.Pool.Query(ctx, `SELECT id::text, status FROM runs WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("read run statuses: %w", translate(err))
	}
	var id, st string
	_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error { out[id] = st; return nil })
	if err != nil {
		return nil, fmt.Errorf("read run statuses: %w", translate(err))
	}
	return out, nil
}
