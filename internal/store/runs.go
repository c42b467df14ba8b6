package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

const runColumns = `id::text, task_id::text, project_id::text, provider, host_id::text, target_host_id::text,
	status, attempt, max_attempts, failure_reason, exit_code, session_name, cwd, prompt, args,
	pending_since, next_attempt_at, started_at, finished_at, completed_at, completion_source, created_at, updated_at, status_source,
	attention, attention_since, workspace, attention_detail, agent_session_id, continues_run_id::text, last_input_at`

func scanRun(row pgx.Row) (wire.Run, error) {
	var r wire.Run
	err := row.Scan(&r.ID, &r.TaskID, &r.ProjectID, &r.Provider, &r.HostID, &r.TargetHostID,
		&r.Status, &r.Attempt, &r.MaxAttempts, &r.FailureReason, &r.ExitCode, &r.SessionName, &r.Cwd, &r.Prompt, &r.Args,
		&r.PendingSince, &r.NextAttemptAt, &r.StartedAt, &r.FinishedAt, &r.CompletedAt, &r.CompletionSource, &r.CreatedAt, &r.UpdatedAt, &r.StatusSource,
		&r.Attention, &r.AttentionSince, &r.Workspace, &r.AttentionDetail, &r.AgentSessionID, &r.ContinuesRunID, &r.LastInputAt)
	if r.Args == nil {
		r.Args = []string{}
	}
	utc(&r.CreatedAt, &r.UpdatedAt)
	utcp(r.PendingSince, r.NextAttemptAt, r.StartedAt, r.FinishedAt, r.CompletedAt, r.AttentionSince, r.LastInputAt)
	return r, err
}

// ActiveRuns lists the runs that are not terminal: pending, spawning,
// running (the state a client rebuilds from a cursor_purged snapshot).
func (s *Store) ActiveRuns(ctx context.Context) ([]wire.Run, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+runColumns+` FROM runs
		WHERE status IN ('pending', 'spawning', 'running') ORDER BY created_at DESC`)
	if err != nil {
		return nil, fmt.Errorf("list active runs: %w", translate(err))
	}
	runs, err := collectRuns(rows)
	if err != nil {
		return nil, fmt.Errorf("list active runs: %w", err)
	}
	return runs, nil
}

// collectRuns scans every row of a runColumns query.
func collectRuns(rows pgx.Rows) ([]wire.Run, error) {
	out, err := pgx.CollectRows(rows, rowTo(scanRun))
	if err != nil {
		return nil, fmt.Errorf("scan runs: %w", translate(err))
	}
	return nonNil(out), nil
}

// rowTo adapts a scanner of one row (scanRun, scanHost, …) to
// pgx.CollectRows.
func rowTo[T any](scan func(pgx.Row) (T, error)) pgx.RowToFunc[T] {
	return func(row pgx.CollectableRow) (T, error) { return scan(row) }
}

// nonNil makes an empty result an empty list: the API's lists are [] and
// never null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
