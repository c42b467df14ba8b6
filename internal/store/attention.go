package store

import (
	"context"
	"fmt"

	"pam/internal/wire"
)

// Output is a pane change of a run's incarnation: its host and attempt.
type Output struct {
	RunID, HostID string
	Attempt       int
}

// TouchOutputs records that the panes of runs changed: last_output_at
// moves (the hang timer), in one statement for all of them. It returns
// the runs among them that are idle, with their current attempt: a pane
// change of that attempt ends the quiet spell (the caller's decision,
// source pane). A question or a usage limit is not cleared by a pane
// change — a TUI redraws while it asks — but by the screen, an answer
// or the end of running (docs/architecture.md#attention).
//
// Each pane change is of one incarnation (Output): it moves the hang
// timer only while that host and attempt are still the run's current
// ones, so a host whose offer was withdrawn cannot keep a run alive.
func (s *Store) TouchOutputs(ctx context.Context, outs []Output) (map[string]int, error) {
	runIDs := make([]string, len(outs))
	hosts := make([]string, len(outs))
	attempts := make([]int32, len(outs))
	for i, o := range outs {
		runIDs[i], hosts[i], attempts[i] = o.RunID, o.HostID, int32(o.Attempt)
	}
	rows, err := s.Pool.Query(ctx, `UPDATE runs SET last_output_at = $4
		FROM unnest($1::uuid[], $2::uuid[], $3::int[]) AS o(id, host, attempt)
		WHERE runs.id = o.id AND runs.host_id = o.host AND runs.attempt = o.attempt
		RETURNING runs.id::text, runs.attention, runs.attempt`, runIDs, hosts, attempts, s.now())
	if err != nil {
		return nil, fmt.Errorf("record output of %d runs: %w", len(runIDs), translate(err))
	}
	defer rows.Close()
	waiting := map[string]int{}
	for rows.Next() {
		var id, attention string
		var attempt int
		if err := rows.Scan(&id, &attention, &attempt); err != nil {
			return nil, fmt.Errorf("record output: %w", translate(err))
		}
		if attention == wire.AttentionIdle {
			waiting[id] = attempt
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("record output of %d runs: %w", len(runIDs), translate(err))
	}
	return waiting, nil
}
