package store

import (
	"context"
	"fmt"

	"pam/internal/runwrite"
	"pam/internal/wire"
)

// Workspaces (docs/architecture.md#workspaces): what POST /runs asked
// for, what a dispatch carries, and what workers report.

// workspaceMode decides a new run's workspace: "worktree" when asked, or
// by default when the project has a repo and no cwd is given; a worktree
// needs a repo, and is the run's cwd, so it excludes one.
func workspaceMode(asked *string, hasRepo bool, cwd string) (string, error) {
	if asked == nil {
		if hasRepo && cwd == "" {
			return wire.WorkspaceWorktree, nil
		}
		return wire.WorkspaceNone, nil
	}
	if *asked == wire.WorkspaceWorktree {
		if !hasRepo {
			return "", wire.Invalid("workspace", "workspace worktree needs a project with a repo (pam project update --repo URL)")
		}
		if cwd != "" {
			return "", wire.Invalid("cwd", "a run with a worktree runs in it: give no cwd, or workspace none")
		}
	}
	return *asked, nil
}

// BranchName is a run's branch: pam/<task-slug>-<first 8 of the run id>.
func BranchName(taskTitle, runID string) string {
	return "pam/" + Slugify(taskTitle, 40) + "-" + runID[:8]
}

// dispatchWorkspace adds what a worker needs to make the run's worktree
// to its run_dispatch: the project's repo and id, the branch, and the
// base commit and path of a worktree an earlier attempt made — or that
// the run took over from the run it continues, whose folder on its host
// the path names (docs/architecture.md#resume-and-continue).
func (s *Store) dispatchWorkspace(ctx context.Context, f *wire.RunDispatchFrame, o Offer) error {
	var mode string
	var repo *wire.Repo
	var ws *wire.Workspace
	err := s.Pool.QueryRow(ctx, `SELECT r.workspace_mode, p.repo, r.workspace FROM runs r JOIN projects p ON p.id = r.project_id
		WHERE r.id = $1`, o.Run.ID).Scan(&mode, &repo, &ws)
	if err != nil {
		return fmt.Errorf("read the workspace of run %s: %w", o.Run.ID, translate(err))
	}
	if mode != wire.WorkspaceWorktree {
		return nil
	}
	plan := &wire.Workspace{Branch: BranchName(o.TaskTitle, o.Run.ID)}
	if ws != nil {
		plan.Branch, plan.BaseCommit, plan.Path = ws.Branch, ws.BaseCommit, ws.Path
	}
	f.Workspace = plan
	if repo != nil {
		f.Repo, f.ProjectID = repo, o.Run.ProjectID
	}
	return nil
}

// workspaceRun locks a run a worker reports about and checks that the
// worker's host was offered it (a worker speaks only for its own runs).
func workspaceRun(ctx context.Context, tx *Tx, hostID, runID string) (wire.Run, error) {
	r, err := runByID(ctx, tx, runID, true)
	if err != nil {
		return wire.Run{}, err
	}
	offered, err := offeredTo(ctx, tx, hostID, r.ID)
	if err != nil {
		return wire.Run{}, err
	}
	if !offered {
		return wire.Run{}, wire.NotFound("run")
	}
	return r, nil
}

func workspaceEvent(topic wire.Topic, r wire.Run, hostID string, payload map[string]any) NewEvent {
	payload["run_id"], payload["attempt"], payload["task_id"] = r.ID, r.Attempt, r.TaskID
	return NewEvent{Topic: topic, RunID: r.ID, ProjectID: r.ProjectID, HostID: hostID, Payload: payload}
}

// WorkspaceReady records the worktree a worker made for the run's
// current attempt (runs.workspace) and journals run.workspace_ready. A
// report about another attempt, or from a host the run is not on now, is
// dropped: the run's current incarnation is elsewhere.
func (s *Store) WorkspaceReady(ctx context.Context, hostID string, f wire.WorkspaceReadyFrame) (bool, error) {
	changed := false
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := workspaceRun(ctx, tx, hostID, f.RunID)
		if err != nil {
			return err
		}
		if f.Attempt == nil || *f.Attempt != r.Attempt || r.HostID == nil || *r.HostID != hostID || !runwrite.Active(r.Status) {
			return nil
		}
		if r.Workspace != nil && *r.Workspace == *f.Workspace {
			return nil // an attempt that reused the worktree
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET workspace = $2, workspace_host_id = $3, updated_at = now() WHERE id = $1`, r.ID, f.Workspace, hostID); err != nil {
			return err
		}
		changed = true
		return tx.Journal(ctx, workspaceEvent(wire.TopicRunWorkspaceReady, r, hostID, map[string]any{
			"path": f.Workspace.Path, "branch": f.Workspace.Branch, "base_commit": f.Workspace.BaseCommit}))
	})
	if err != nil {
		return false, fmt.Errorf("record the worktree of run %s: %w", f.RunID, err)
	}
	return changed, nil
}

// WorkspaceRemoved records that a worker removed a worktree (asked to,
// or by clean-up): every run that names that worktree on that host — the
// reported run, or a continuation that was to take it over
// (docs/architecture.md#resume-and-continue) — gets its runs.workspace
// back to null, and run.workspace_removed is journaled for each.
func (s *Store) WorkspaceRemoved(ctx context.Context, hostID string, f wire.WorkspaceRemovedFrame) error {
	err := s.InTx(ctx, func(tx *Tx) error {
		if _, err := workspaceRun(ctx, tx, hostID, f.RunID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE runs SET workspace = NULL, workspace_host_id = NULL, updated_at = now()
			WHERE workspace_host_id = $1 AND workspace->>'path' = $2 RETURNING `+runColumns, hostID, f.Workspace.Path)
		if err != nil {
			return err
		}
		cleared, err := collectRuns(rows)
		if err != nil {
			return err
		}
		for _, r := range cleared {
			if err := tx.Journal(ctx, workspaceEvent(wire.TopicRunWorkspaceRemoved, r, hostID, map[string]any{
				"path": f.Workspace.Path, "branch": f.Workspace.Branch, "reason": f.Reason})); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the removal of the worktree of run %s: %w", f.RunID, err)
	}
	return nil
}

// WorkspacePushed journals the outcome of a push of a run's branch.
func (s *Store) WorkspacePushed(ctx context.Context, hostID string, f wire.WorkspacePushedFrame) error {
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := workspaceRun(ctx, tx, hostID, f.RunID)
		if err != nil {
			return err
		}
		// Only the answer to a push the server asked for is journaled; one
		// nobody asked for is ignored (docs/architecture.md#bounded-journal).
		asked, err := takePushRequest(ctx, tx, r.ID, hostID)
		if err != nil || !asked {
			return err
		}
		return tx.Journal(ctx, workspaceEvent(wire.TopicRunWorkspacePushed, r, hostID, map[string]any{
			"branch": f.Workspace.Branch, "ok": *f.OK, "detail": f.Detail}))
	})
	if err != nil {
		return fmt.Errorf("record the push of the branch of run %s: %w", f.RunID, err)
	}
	return nil
}

// WorkspaceHost returns a run with a worktree and the host that holds
// it. 404 no_workspace when the run has none.
func (s *Store) WorkspaceHost(ctx context.Context, runID string) (wire.Run, string, error) {
	r, err := s.GetRun(ctx, runID)
	if err != nil {
		return wire.Run{}, "", err // GetRun names the run
	}
	var host *string
	if err := s.Pool.QueryRow(ctx, `SELECT workspace_host_id::text FROM runs WHERE id = $1`, r.ID).Scan(&host); err != nil {
		return r, "", fmt.Errorf("read the worktree host of run %s: %w", r.ID, translate(err))
	}
	if r.Workspace == nil || host == nil {
		return r, "", wire.Errorf(wire.CodeNoWorkspace, "run %s has no worktree", r.ID)
	}
	return r, *host, nil
}
