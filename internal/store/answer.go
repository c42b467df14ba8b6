package store

import (
	"context"
	"fmt"

	"pam/internal/lifecycle"
	"pam/internal/runwrite"
	"pam/internal/wire"
)

// ClearAnswered clears a run's attention, journaled with source, when it
// is still from asking question: the attention a person answered (keys,
// attach input) once the answer was seen to land
// (docs/architecture.md#attention). Anything set since — another
// attention, another question of the same attention, or none — is left
// as it is, so an answer never clears the next question. The decision is
// lifecycle.Attention's, under the run's row lock, as SetAttention's.
func (s *Store) ClearAnswered(ctx context.Context, runID string, attempt int, from, question, source string) (wire.Run, bool, error) {
	return s.ClearAnsweredBy(ctx, runID, attempt, from, question, source, "")
}

// ClearAnsweredBy is ClearAnswered journaled with actor (wire.Event's
// actor): an answer URL's use names the channel it came through.
func (s *Store) ClearAnsweredBy(ctx context.Context, runID string, attempt int, from, question, source, actor string) (wire.Run, bool, error) {
	out, changed, err := s.changeAttentionBy(ctx, runID, actor, func(r lifecycle.Run) runwrite.Decision {
		asked := ""
		if r.AttentionDetail != nil {
			asked = r.AttentionDetail.Text
		}
		if r.Attention != from || asked != question {
			return runwrite.Decision{}
		}
		return lifecycle.Attention(r, attempt, wire.AttentionNone, source)
	})
	if err != nil {
		return out, false, fmt.Errorf("clear the answered %s of run %s: %w", from, runID, err)
	}
	return out, changed, nil
}
