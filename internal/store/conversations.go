package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"pam/internal/lifecycle"
	"pam/internal/wire"
)

// Conversations (docs/architecture.md#resume-and-continue): a run's
// agent session, what a dispatch carries to resume it, and the runs that
// continue one another.

// continuationOf is the run that continues runID (the newest, though a
// run is continued once), or "".
func continuationOf(ctx context.Context, q querier, runID string) (string, error) {
	var id string
	err := q.QueryRow(ctx, `SELECT id::text FROM runs WHERE continues_run_id = $1 ORDER BY created_at DESC LIMIT 1`, runID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the continuation of run %s: %w", runID, translate(err))
	}
	return id, nil
}

// ContinueRun is POST /runs/{id}/continue: a new run in pending that
// continues the ended run id — the same task, pinned to the host the old
// run ran on, in its worktree (or cwd), resuming its conversation with
// the provider's resume_args and in.Text as the message. The worktree
// becomes the new run's (the old run's workspace is null from now on, so
// its clean-up never touches it); the old run journals run.continued.
//
// The caller has checked the request (wire.ContinueRun.Validate) and the
// text against the provider's catalog, and says whether the built-in
// catalog resumes the provider (for a host that did not report its own).
func (s *Store) ContinueRun(ctx context.Context, id string, in wire.ContinueRun, builtinResumable bool) (wire.Run, error) {
	text := ""
	if in.Text != nil {
		text = *in.Text
	}
	pol := s.Policy.WithDefaults()
	var out wire.Run
	for try := 0; ; try++ {
		err := s.InTx(ctx, func(tx *Tx) error {
			old, err := runByID(ctx, tx, id, true)
			if err != nil {
				return err
			}
			if err := refuseArchivedID(ctx, tx, old.ProjectID); err != nil {
				return err
			}
			prov := old.Provider
			if in.Provider != nil {
				prov = *in.Provider
			}
			var f lifecycle.ContinueFacts
			if f.ContinuedBy, err = continuationOf(ctx, tx, old.ID); err != nil {
				return err
			}
			// The conversation is where the run's worktree is, or where it
			// last ran (its host_id, cleared by a requeue that never placed
			// it again: then its last started attempt's host).
			var mode string
			var wsHost, lastHost *string
			if err := tx.QueryRow(ctx, `SELECT r.workspace_mode, r.workspace_host_id::text,
				coalesce(r.host_id::text, (SELECT a.host_id::text FROM run_attempts a WHERE a.run_id = r.id AND a.started_at IS NOT NULL
					ORDER BY a.attempt DESC LIMIT 1))
				FROM runs r WHERE r.id = $1`, old.ID).Scan(&mode, &wsHost, &lastHost); err != nil {
				return fmt.Errorf("read where the conversation of run %s is: %w", old.ID, err)
			}
			f.WorktreeGone = mode == wire.WorkspaceWorktree && old.Workspace == nil
			switch {
			case wsHost != nil:
				f.Host = *wsHost
			case lastHost != nil:
				f.Host = *lastHost
			}
			if f.Host != "" {
				if f.Resumable, err = resumableOn(ctx, tx, f.Host, prov, builtinResumable); err != nil {
					return err
				}
			}
			newID := uuid.NewString()
			d, err := lifecycle.Continue(lifecycle.FromWire(old), f, newID)
			if err != nil {
				return err
			}
			out, err = scanRun(tx.QueryRow(ctx, `INSERT INTO runs (id, task_id, project_id, provider, target_host_id, max_attempts,
				session_name, cwd, prompt, args, pending_since, workspace_mode, workspace, workspace_host_id, agent_session_id, continues_run_id)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now(), $11, $12, $13, $14, $15)
				RETURNING `+runColumns, newID, old.TaskID, old.ProjectID, prov, f.Host, pol.MaxAttempts, "pam-"+newID[:8],
				old.Cwd, text, old.Args, mode, old.Workspace, wsHost, old.AgentSessionID, old.ID))
			if err != nil {
				return err
			}
			if out, err = s.apply(ctx, tx, out, lifecycle.ContinuationCreated(prov, out.SessionName, f.Host, old.ID)); err != nil {
				return err
			}
			// The worktree is the new run's now: the old run no longer
			// names it, so no removal of the old run reaches it.
			if old.Workspace != nil {
				if old, err = scanRun(tx.QueryRow(ctx, `UPDATE runs SET workspace = NULL, workspace_host_id = NULL, updated_at = now()
					WHERE id = $1 RETURNING `+runColumns, old.ID)); err != nil {
					return err
				}
			}
			_, err = s.apply(ctx, tx, old, d)
			return err
		})
		if IsUniqueViolation(err, "runs_session_name_key") && try < 10 {
			continue // the 8-hex prefix is taken: a new id
		}
		if err != nil {
			return wire.Run{}, fmt.Errorf("continue run %s: %w", id, err)
		}
		return out, nil
	}
}

// resumableOn reports whether the provider resumes conversations on the
// host: as its worker reported its catalog, or, for a worker that did
// not say, builtin (whether the built-in entry does).
func resumableOn(ctx context.Context, q querier, hostID, name string, builtin bool) (bool, error) {
	var reported []string
	var said bool
	err := q.QueryRow(ctx, `SELECT resumable, resumable IS NOT NULL FROM hosts WHERE id = $1`, hostID).Scan(&reported, &said)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // the host is gone: nowhere to resume
	}
	if err != nil {
		return false, fmt.Errorf("read the resumable providers of host %s: %w", hostID, err)
	}
	if !said {
		return builtin, nil
	}
	return slices.Contains(reported, name), nil
}

// dispatchResume asks the offered attempt to resume the run's
// conversation (run_dispatch agent_session_id) when one is known and it
// lives on the offered host: in the run's worktree there, or, for a run
// without one, where the run last started (a continuation not started
// yet: the host it is pinned to, where the run it continues ran). The
// message of the resume (text) is a continuation's text until an attempt
// of it has started; after that, and for any other run, the provider's
// continue_message (text empty).
func (s *Store) dispatchResume(ctx context.Context, f *wire.Frame, o Offer) error {
	if o.Run.AgentSessionID == nil || wire.ValidAgentSessionID(*o.Run.AgentSessionID) != nil {
		return nil
	}
	var mode string
	var wsHost, lastHost *string
	err := s.Pool.QueryRow(ctx, `SELECT r.workspace_mode, r.workspace_host_id::text,
		(SELECT a.host_id::text FROM run_attempts a WHERE a.run_id = r.id AND a.attempt < r.attempt AND a.started_at IS NOT NULL
			ORDER BY a.attempt DESC LIMIT 1)
		FROM runs r WHERE r.id = $1`, o.Run.ID).Scan(&mode, &wsHost, &lastHost)
	if err != nil {
		return fmt.Errorf("read where the conversation of run %s lives: %w", o.Run.ID, translate(err))
	}
	here := func(h *string) bool { return h != nil && *h == o.HostID }
	switch {
	case mode == wire.WorkspaceWorktree:
		if o.Run.Workspace == nil || !here(wsHost) {
			return nil
		}
	case lastHost != nil:
		if !here(lastHost) {
			return nil
		}
	case o.Run.ContinuesRunID == nil || !here(o.Run.TargetHostID):
		return nil
	}
	f.AgentSessionID = *o.Run.AgentSessionID
	if o.Run.ContinuesRunID != nil && lastHost == nil && wire.CheckContinueText(o.Run.Prompt) == nil {
		f.Text = o.Run.Prompt
	}
	return nil
}
