package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"pam/internal/lifecycle"
	"pam/internal/wire"
)

// SetAttention changes a run's attention to `to` as reported by source
// about attempt (docs/architecture.md#attention). lifecycle.Attention
// decides under the run's row lock — only a running run at that attempt
// changes, and idle never replaces needs_input — and the guarded write
// and its run.attention event commit together. It returns the run as it
// is afterwards and whether its attention changed.
func (s *Store) SetAttention(ctx context.Context, runID string, attempt int, to, source string) (wire.Run, bool, error) {
	var out wire.Run
	changed := false
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := runByID(ctx, tx, runID, true)
		if err != nil {
			return err
		}
		out = r
		d := lifecycle.Attention(lifecycle.FromWire(r), attempt, to, source)
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
		return out, false, fmt.Errorf("set attention of run %s to %s: %w", runID, to, err)
	}
	return out, changed, nil
}

// PaneChanged records that the pane of a run's attempt changed since the
// snapshot before it: last_output_at moves (the hang timer, as
// TouchOutput), and a run that waited for a person no longer does — the
// screen moved, so whatever it waited for was answered or has moved on
// (source pane). The common case, a run whose attention is none, costs
// the one UPDATE that TouchOutput makes.
func (s *Store) PaneChanged(ctx context.Context, runID string, attempt int) error {
	var attention string
	var current int
	err := s.Pool.QueryRow(ctx, `UPDATE runs SET last_output_at = now() WHERE id = $1 RETURNING attention, attempt`, runID).Scan(&attention, &current)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record output of run %s: %w", runID, translate(err))
	}
	if attention == wire.AttentionNone || current != attempt {
		return nil
	}
	_, _, err = s.SetAttention(ctx, runID, attempt, wire.AttentionNone, wire.AttentionSourcePane)
	return err
}
