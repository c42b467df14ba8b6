package runs

import (
	"context"
	"fmt"

	"pam/internal/lifecycle"
	"pam/internal/store"
	"pam/internal/wire"
)

// SetAttention changes a run's attention to `to` as reported by source
// about attempt (docs/architecture.md#attention). lifecycle.Attention
// decides under the run's row lock — only a running run at that attempt
// changes, and idle never replaces needs_input — and the guarded write
// and its run.attention event commit together. It returns the run as it
// is afterwards and whether its attention changed.
func (s *Service) SetAttention(ctx context.Context, runID string, attempt int, to, source string) (wire.Run, bool, error) {
	out, changed, err := s.ChangeAttention(ctx, runID, func(r lifecycle.Run) lifecycle.Decision {
		return lifecycle.Attention(r, attempt, to, source)
	})
	if err != nil {
		return out, false, fmt.Errorf("set attention of run %s to %s: %w", runID, to, err)
	}
	return out, changed, nil
}

// ChangeAttention applies an attention decision (lifecycle.ChangeAttention,
// lifecycle.Screen) made by decide under the run's row lock: the guarded
// write and its run.attention event, if any, commit together. It returns
// the run as it is afterwards and whether the decision wrote anything
// (the attention or its detail).
func (s *Service) ChangeAttention(ctx context.Context, runID string, decide func(lifecycle.Run) lifecycle.Decision) (wire.Run, bool, error) {
	return s.changeAttentionBy(ctx, runID, "", decide)
}

// changeAttentionBy is ChangeAttention whose events name actor ("" for none).
func (s *Service) changeAttentionBy(ctx context.Context, runID, actor string, decide func(lifecycle.Run) lifecycle.Decision) (wire.Run, bool, error) {
	var out wire.Run
	changed := false
	if actor != "" {
		ctx = store.WithActor(ctx, actor)
	}
	err := s.st.InTx(ctx, func(tx *store.Tx) error {
		r, err := tx.LockRun(ctx, runID)
		if err != nil {
			return err
		}
		out = r
		d := decide(lifecycle.FromWire(r))
		if len(d.Steps) == 0 {
			return nil
		}
		if out, err = s.st.Apply(ctx, tx, r, d); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return out, false, fmt.Errorf("change the attention of run %s: %w", runID, err)
	}
	return out, changed, nil
}

// ClearAnswered clears a run's attention, journaled with source, when it
// is still from asking question: the attention a person answered (keys,
// attach input) once the answer was seen to land
// (docs/architecture.md#attention). Anything set since — another
// attention, another question of the same attention, or none — is left
// as it is, so an answer never clears the next question. The decision is
// lifecycle.Attention's, under the run's row lock, as SetAttention's.
func (s *Service) ClearAnswered(ctx context.Context, runID string, attempt int, from, question, source string) (wire.Run, bool, error) {
	return s.ClearAnsweredBy(ctx, runID, attempt, from, question, source, "")
}

// ClearAnsweredBy is ClearAnswered journaled with actor (wire.Event's
// actor): an answer URL's use names the channel it came through.
func (s *Service) ClearAnsweredBy(ctx context.Context, runID string, attempt int, from, question, source, actor string) (wire.Run, bool, error) {
	out, changed, err := s.changeAttentionBy(ctx, runID, actor, func(r lifecycle.Run) lifecycle.Decision {
		asked := ""
		if r.AttentionDetail != nil {
			asked = r.AttentionDetail.Text
		}
		if r.Attention != from || asked != question {
			return lifecycle.Decision{}
		}
		return lifecycle.Attention(r, attempt, wire.AttentionNone, source)
	})
	if err != nil {
		return out, false, fmt.Errorf("clear the answered %s of run %s: %w", from, runID, err)
	}
	return out, changed, nil
}
