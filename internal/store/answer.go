package store

import (
	"context"
	"fmt"

	"pam/internal/lifecycle"
	"pam/internal/wire"
)

// ClearAnswered clears a run's attention, journaled with source, when it
// is still from: the attention a person answered (keys, attach input)
// once the answer was seen to land (docs/architecture.md#attention).
// Anything set since — another attention, or none — is left as it is, so
// an answer never clears the next question. The decision is
// lifecycle.Attention's, under the run's row lock, as SetAttention's.
func (s *Store) ClearAnswered(ctx context.Context, runID string, attempt int, from, source string) (wire.Run, bool, error) {
	var out wire.Run
	changed := false
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := runByID(ctx, tx, runID, true)
		if err != nil {
			return err
		}
		out = r
		if r.Attention != from {
			return nil
		}
		d := lifecycle.Attention(lifecycle.FromWire(r), attempt, wire.AttentionNone, source)
		if len(d.Steps) == 0 {
			return nil
		}
		if out, err = s.apply(ctx, tx, r, d); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return out, false, fmt.Errorf("clear the answered %s of run %s: %w", from, runID, err)
	}
	return out, changed, nil
}
