package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"pam/internal/runwrite"
	"pam/internal/wire"
)

// AdmitRun inserts a run in pending (docs/architecture.md#run-status-machine)
// for a request the caller has checked (wire.CreateRun.Validate, the
// prompt against the provider's catalog), with maxAttempts unless the
// request gives its own. It refuses a task that does not exist or is not
// a task or subtask, an archived project, a host that does not exist and
// a workspace the project cannot have; it never fails for lack of a
// host. The caller journals the admission (Store.Apply) in the same
// transaction, and tries again when the session name is taken
// (IsUniqueViolation runs_session_name_key).
func (tx *Tx) AdmitRun(ctx context.Context, in wire.CreateRun, maxAttempts int) (wire.Run, error) {
	var cwd, prompt string
	if in.Cwd != nil {
		cwd = *in.Cwd
	}
	if in.Prompt != nil {
		prompt = *in.Prompt
	}
	args := in.Args
	if args == nil {
		args = []string{}
	}
	if in.MaxAttempts != nil {
		maxAttempts = *in.MaxAttempts
	}
	var kind, projectID, projectStatus string
	var hasRepo bool
	err := tx.QueryRow(ctx, `SELECT w.kind, w.project_id::text, p.repo IS NOT NULL, p.status FROM work_items w
		JOIN projects p ON p.id = w.project_id WHERE w.id = $1`, in.TaskID).Scan(&kind, &projectID, &hasRepo, &projectStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.Run{}, wire.Invalid("task_id", "task %s does not exist", in.TaskID)
	}
	if err != nil {
		return wire.Run{}, err
	}
	if err := refuseArchived(wire.Project{ID: projectID, Status: projectStatus}); err != nil {
		return wire.Run{}, err
	}
	if kind != "task" && kind != "subtask" {
		return wire.Run{}, wire.Invalid("task_id", "runs are only for work items of kind task or subtask, not %s", kind)
	}
	var target *string
	if in.HostID != nil {
		h, err := lookupHost(ctx, tx, *in.HostID, false)
		if wire.HasCode(err, wire.CodeNotFound) {
			return wire.Run{}, wire.Invalid("host_id", "host %s does not exist", *in.HostID)
		}
		if err != nil {
			return wire.Run{}, err
		}
		target = &h.ID
	}
	mode, err := workspaceMode(in.Workspace, hasRepo, cwd)
	if err != nil {
		return wire.Run{}, err
	}
	id := uuid.NewString()
	return scanRun(tx.QueryRow(ctx, `INSERT INTO runs (id, task_id, project_id, provider, target_host_id, max_attempts,
		session_name, cwd, prompt, args, pending_since, workspace_mode) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $12, $11)
		RETURNING `+runColumns, id, in.TaskID, projectID, in.Provider, target, maxAttempts, "pam-"+id[:8], cwd, prompt, args, mode, tx.Now()))
}

// RunFilter narrows GET /runs. Attention is an attention value, or "any"
// for every run whose attention is not none (what waits for a person).
type RunFilter struct {
	Status, ProjectID, TaskID, HostID, Attention string
	// IDPrefix, when set, keeps the runs whose id starts with it, at most
	// wire.MaxIDPrefixMatches of them.
	IDPrefix *wire.IDPrefix
	Limit    int
	// Before, a run id, starts the page after that run in the list's
	// order (newest first): the next of the page before.
	Before string
}

// AttentionAny is the RunFilter.Attention (and ?attention=) of every run
// that waits for a person.
const AttentionAny = "any"

// ListRuns returns runs newest first (by created_at, then id), at most
// f.Limit, and next: the Before of the following page, or nil when this
// page is the last. Paging by a run's (created_at, id), not an offset,
// keeps pages from shifting as runs are created. The caller has checked
// the filter (server.checkRunFilter); a Limit of 0 is 100.
func (s *Store) ListRuns(ctx context.Context, f RunFilter) ([]wire.Run, *string, error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	var first, last *string
	if f.IDPrefix != nil {
		first, last = &f.IDPrefix.First, &f.IDPrefix.Last
		f.Limit = min(f.Limit, wire.MaxIDPrefixMatches)
	}
	var before *string
	if f.Before != "" {
		var found bool
		if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1)`, f.Before).Scan(&found); err != nil {
			return nil, nil, fmt.Errorf("list runs: find run %s to page from: %w", f.Before, translate(err))
		}
		if !found {
			return nil, nil, wire.Invalid("before", "no run %s to page from", f.Before)
		}
		before = &f.Before
	}
	// One more than the page tells whether another page follows.
	rows, err := s.Pool.Query(ctx, `SELECT `+runColumns+` FROM runs WHERE
		($1 = '' OR status = $1) AND ($2 = '' OR project_id::text = $2) AND ($3 = '' OR task_id::text = $3) AND ($4 = '' OR host_id::text = $4)
		AND ($6::uuid IS NULL OR id BETWEEN $6::uuid AND $7::uuid)
		AND ($8 = '' OR ($8 = 'any' AND attention <> 'none') OR attention = $8)
		AND ($9::uuid IS NULL OR (created_at, id) < (SELECT created_at, id FROM runs WHERE id = $9::uuid))
		ORDER BY created_at DESC, id DESC LIMIT $5`, f.Status, f.ProjectID, f.TaskID, f.HostID, f.Limit+1, first, last, f.Attention, before)
	if err != nil {
		return nil, nil, fmt.Errorf("list runs: %w", translate(err))
	}
	runs, err := collectRuns(rows)
	if err != nil {
		return nil, nil, fmt.Errorf("list runs: %w", err)
	}
	if len(runs) <= f.Limit {
		return runs, nil, nil
	}
	runs = runs[:f.Limit]
	next := runs[len(runs)-1].ID
	return runs, &next, nil
}

func runByID(ctx context.Context, q querier, id string, lock bool) (wire.Run, error) {
	if !wire.ValidUUID(id) {
		return wire.Run{}, wire.NotFound("run")
	}
	sql := `SELECT ` + runColumns + ` FROM runs WHERE id = $1`
	if lock {
		sql += ` FOR NO KEY UPDATE`
	}
	r, err := scanRun(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.Run{}, wire.NotFound("run")
	}
	if err != nil {
		return wire.Run{}, fmt.Errorf("read run %s: %w", id, translate(err))
	}
	return r, nil
}

// GetRun returns one run.
func (s *Store) GetRun(ctx context.Context, id string) (wire.Run, error) {
	return runByID(ctx, s.Pool, id, false)
}

// Active reports whether a status is not terminal.
func Active(status string) bool { return runwrite.Active(status) }

// complete records a completion (manual or a hook's) and, when the
// project's auto_done is set, moves the work item to done.
func (s *Store) complete(ctx context.Context, tx *Tx, r wire.Run, source string) (wire.Run, error) {
	// completed_at is the latest turn's (docs/architecture.md#working-waiting-hung).
	out, err := scanRun(tx.QueryRow(ctx, `UPDATE runs SET completed_at = $3,
		completion_source = $2, updated_at = now() WHERE id = $1 RETURNING `+runColumns, r.ID, source, tx.Now()))
	if err != nil {
		return out, fmt.Errorf("mark run %s completed: %w", r.ID, err)
	}
	if err := tx.Journal(ctx, runEvent(wire.TopicRunCompleted, out, map[string]any{"source": source})); err != nil {
		return out, err
	}
	var autoDone bool
	if err := tx.QueryRow(ctx, `SELECT auto_done FROM projects WHERE id = $1`, r.ProjectID).Scan(&autoDone); err != nil {
		return out, fmt.Errorf("read auto_done of project %s: %w", r.ProjectID, err)
	}
	if autoDone {
		return out, moveItem(ctx, tx, r.TaskID, "done", "")
	}
	return out, nil
}

// moveItem sets a work item's status (only from `from` when given),
// journaling work_item.status_changed when it changed.
func moveItem(ctx context.Context, tx *Tx, itemID, to, from string) error {
	var old string
	err := tx.QueryRow(ctx, `SELECT status FROM work_items WHERE id = $1 FOR NO KEY UPDATE`, itemID).Scan(&old)
	if err != nil {
		return fmt.Errorf("read the status of work item %s: %w", itemID, err)
	}
	if old == to || (from != "" && old != from) {
		return nil
	}
	w, err := scanItem(tx.QueryRow(ctx, `UPDATE work_items SET status = $2, updated_at = now() WHERE id = $1 RETURNING `+itemColumns, itemID, to))
	if err != nil {
		return fmt.Errorf("move work item %s to %s: %w", itemID, to, err)
	}
	return tx.Journal(ctx, NewEvent{Topic: wire.TopicWorkItemStatusChanged, ProjectID: w.ProjectID,
		Payload: map[string]any{"work_item_id": w.ID, "from": old, "to": to, "work_item": w}})
}
