package store

import (
	"context"

	"pam/internal/wire"
)

// JournalRun journals topic about a run with the run's common payload
// (run_id, attempt, task_id) plus extra, for what happens to a run without
// changing its row: a lease taken or released, a message delivered.
func (s *Store) JournalRun(ctx context.Context, topic wire.Topic, runID string, extra map[string]any) error {
	return s.InTx(ctx, func(tx *Tx) error {
		r, err := runByID(ctx, tx, runID, false)
		if err != nil {
			return err
		}
		return tx.Journal(ctx, runEvent(topic, r, extra))
	})
}
