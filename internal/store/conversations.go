package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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

// ContinuationOf is the run that continues runID (the newest, though a
// run is continued once), or "".
func (tx *Tx) ContinuationOf(ctx context.Context, runID string) (string, error) {
	return continuationOf(ctx, tx, runID)
}

// Conversation is where a run's agent conversation is: the run's
// workspace mode, the host of its worktree, and the host it last ran on
// (its host_id, cleared by a requeue that never placed it again: then its
// last started attempt's host).
type Conversation struct {
	Mode          string
	WorkspaceHost *string
	LastHost      *string
}

// ConversationOf reads where run r's conversation is.
func (tx *Tx) ConversationOf(ctx context.Context, r wire.Run) (Conversation, error) {
	var c Conversation
	if err := tx.QueryRow(ctx, `SELECT r.workspace_mode, r.workspace_host_id::text,
		coalesce(r.host_id::text, (SELECT a.host_id::text FROM run_attempts a WHERE a.run_id = r.id AND a.started_at IS NOT NULL
			ORDER BY a.attempt DESC LIMIT 1))
		FROM runs r WHERE r.id = $1`, r.ID).Scan(&c.Mode, &c.WorkspaceHost, &c.LastHost); err != nil {
		return c, fmt.Errorf("read where the conversation of run %s is: %w", r.ID, err)
	}
	return c, nil
}

// ResumableOn reads which providers the host's worker reported as able
// to resume a conversation; said is false for a worker that did not say
// (or a host that is gone: then reported is empty and said true, nowhere
// to resume).
func (tx *Tx) ResumableOn(ctx context.Context, hostID string) (reported []string, said bool, err error) {
	err = tx.QueryRow(ctx, `SELECT resumable, resumable IS NOT NULL FROM hosts WHERE id = $1`, hostID).Scan(&reported, &said)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, true, nil // the host is gone: nowhere to resume
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the resumable providers of host %s: %w", hostID, err)
	}
	return reported, said, nil
}

// NewContinuation is the run that continues Old: the same task, pinned
// to Host, with Old's cwd, args, workspace and agent session.
type NewContinuation struct {
	ID          string
	Old         wire.Run
	Provider    string
	Host        string
	MaxAttempts int
	Text        string
	Where       Conversation
}

// InsertContinuation inserts the continuation c in pending. The caller
// tries again with a new id when the session name is taken.
func (tx *Tx) InsertContinuation(ctx context.Context, c NewContinuation) (wire.Run, error) {
	old := c.Old
	return scanRun(tx.QueryRow(ctx, `INSERT INTO runs (id, task_id, project_id, provider, target_host_id, max_attempts,
		session_name, cwd, prompt, args, pending_since, workspace_mode, workspace, workspace_host_id, agent_session_id, continues_run_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $16, $11, $12, $13, $14, $15)
		RETURNING `+runColumns, c.ID, old.TaskID, old.ProjectID, c.Provider, c.Host, c.MaxAttempts, "pam-"+c.ID[:8],
		old.Cwd, c.Text, old.Args, c.Where.Mode, old.Workspace, c.Where.WorkspaceHost, old.AgentSessionID, old.ID, tx.Now()))
}

// HandOverWorkspace makes old name no worktree any more: it is its
// continuation's now, so no removal of the old run reaches it.
func (tx *Tx) HandOverWorkspace(ctx context.Context, old wire.Run) (wire.Run, error) {
	if old.Workspace == nil {
		return old, nil
	}
	return scanRun(tx.QueryRow(ctx, `UPDATE runs SET workspace = NULL, workspace_host_id = NULL, updated_at = now()
		WHERE id = $1 RETURNING `+runColumns, old.ID))
}

// dispatchResume asks the offered attempt to resume the run's
// conversation (run_dispatch agent_session_id) when one is known and it
// lives on the offered host: in the run's worktree there, or, for a run
// without one, where the run last started (a continuation not started
// yet: the host it is pinned to, where the run it continues ran). The
// message of the resume (text) is a continuation's text until an attempt
// of it has started; after that, and for any other run, the provider's
// continue_message (text empty).
func (s *Store) dispatchResume(ctx context.Context, f *wire.RunDispatchFrame, o Offer) error {
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
