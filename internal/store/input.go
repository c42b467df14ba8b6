package store

import (
	"context"
	"fmt"
)

// TouchInput records input into attempt of a running run: keys, a
// message, input through attach (its start is recorded by the status
// write). last_input_at tells a working agent from one whose turn ended
// (docs/architecture.md#working-waiting-hung): a completion before it is
// an earlier turn's, and the hang timer counts from it. Input into a run
// that is no longer running at that attempt records nothing.
func (s *Store) TouchInput(ctx context.Context, runID string, attempt int) error {
	if _, err := s.Pool.Exec(ctx, `UPDATE runs SET last_input_at = $3
		WHERE id = $1 AND attempt = $2 AND status = 'running'`, runID, attempt, s.now()); err != nil {
		return fmt.Errorf("record input into run %s: %w", runID, translate(err))
	}
	return nil
}
