package store

import (
	"context"
	"fmt"
	"time"

	"pam/internal/runwrite"
	"pam/internal/wire"
)

// pam's tools for the agent (docs/architecture.md#pams-tools-for-the-agent):
// what one live run may read and change of its project's plan, through
// the same validation and journaling as the operator's routes, every
// change naming the run as its actor.

// AgentScope is what a live run's signal token reaches: the run's
// project, and the run's own work item, whose kind and parent are the
// defaults of the items the agent creates.
type AgentScope struct {
	RunID string
	// Attempt and HostID are the incarnation the token was made for.
	Attempt   int
	HostID    string
	ProjectID string
	// Item is the run's task (or subtask).
	Item wire.WorkItem
}

// Actor is the actor of the events the run's tool calls journal.
func (sc AgentScope) Actor() string { return wire.AgentActor(sc.RunID) }

// AgentScope returns the scope of runID for a signal token made for
// attempt on hostID. The token speaks for the run only while that
// incarnation is live: another attempt or another host (the offer was
// withdrawn) is 401 unauthorized, as for signals; a run no longer (or not
// yet) spawning or running is 409 illegal_transition naming its status.
func (s *Store) AgentScope(ctx context.Context, runID, hostID string, attempt int) (AgentScope, error) {
	r, err := runByID(ctx, s.Pool, runID, false)
	if err != nil {
		return AgentScope{}, err // runByID names the run
	}
	if err := agentLive(r, hostID, attempt); err != nil {
		return AgentScope{}, err // the refusal the agent reads, as is
	}
	item, err := s.GetWorkItem(ctx, r.TaskID)
	if err != nil {
		return AgentScope{}, fmt.Errorf("read the work item of run %s: %w", runID, err)
	}
	return AgentScope{RunID: r.ID, Attempt: r.Attempt, HostID: hostID, ProjectID: r.ProjectID, Item: item}, nil
}

// agentLive checks that r is live at attempt on hostID.
func agentLive(r wire.Run, hostID string, attempt int) error {
	if r.Attempt != attempt {
		return wire.Errorf(wire.CodeUnauthorized, "this signal token is for attempt %d; the run is at attempt %d", attempt, r.Attempt)
	}
	if r.HostID == nil || *r.HostID != hostID {
		return wire.Errorf(wire.CodeUnauthorized, "this signal token is for a host the run no longer belongs to")
	}
	if r.Status != wire.RunSpawning && r.Status != wire.RunRunning {
		return wire.Conflict(wire.CodeIllegalTransition, "run %s is %s: pam's tools work only while the run is live", r.ID, r.Status).
			With("status", r.Status)
	}
	return nil
}

// AgentWorkItems lists the run's project in tree order, only the items of
// one status when status is not empty.
func (s *Store) AgentWorkItems(ctx context.Context, sc AgentScope, status string) ([]wire.WorkItem, error) {
	return s.ListWorkItems(ctx, sc.ProjectID, ItemFilter{Status: status})
}

// AgentWorkItem returns one item of the run's project; an item of
// another project is not_found, as if it did not exist.
func (s *Store) AgentWorkItem(ctx context.Context, sc AgentScope, id string) (wire.WorkItem, error) {
	item, err := s.GetWorkItem(ctx, id)
	if err != nil {
		return wire.WorkItem{}, err // GetWorkItem names the item
	}
	if item.ProjectID != sc.ProjectID {
		return wire.WorkItem{}, wire.NotFound("work item")
	}
	return item, nil
}

// AgentCreateWorkItem adds an item to the run's project: of the kind of
// the run's item unless in.Kind says otherwise, under the parent of the
// run's item unless in.ParentID says otherwise (null: the top level). The
// nesting rules are CreateWorkItem's; work_item.created names the run.
// The caller has checked in (wire.AgentCreateWorkItem.Validate).
func (s *Store) AgentCreateWorkItem(ctx context.Context, sc AgentScope, in wire.AgentCreateWorkItem) (wire.WorkItem, error) {
	c := wire.CreateWorkItem{Title: in.Title, Body: in.Body, Kind: sc.Item.Kind}
	if in.Kind != nil {
		c.Kind = *in.Kind
	}
	switch {
	case !in.ParentID.Set:
		c.ParentID = sc.Item.ParentID
	case in.ParentID.Value != nil:
		id := *in.ParentID.Value
		if _, err := s.AgentWorkItem(ctx, sc, id); wire.HasCode(err, wire.CodeNotFound) {
			return wire.WorkItem{}, wire.Invalid("parent_id", "no work item %s in this run's project", id)
		} else if err != nil {
			return wire.WorkItem{}, fmt.Errorf("read the parent %s of a new work item: %w", id, err)
		}
		c.ParentID = &id
	}
	out, err := s.createWorkItem(ctx, sc.ProjectID, c, sc.Actor())
	if e, ok := wire.AsError(err); ok && !in.ParentID.Set && e.Code == wire.CodeValidationFailed && e.Details["field"] == "parent_id" {
		return out, wire.Invalid("parent_id", "%s (the default parent is the parent of this run's %s %s; give parent_id, or null for the project's top level)",
			e.Message, sc.Item.Kind, sc.Item.ID)
	}
	return out, err
}

// AgentUpdateWorkItem changes the title, body or status of an item of the
// run's project (another project's is not_found), journaled as
// UpdateWorkItem does, naming the run.
func (s *Store) AgentUpdateWorkItem(ctx context.Context, sc AgentScope, id string, in wire.AgentUpdateWorkItem) (wire.WorkItem, error) {
	if _, err := s.AgentWorkItem(ctx, sc, id); err != nil {
		return wire.WorkItem{}, err // AgentWorkItem names the item
	}
	return s.updateWorkItem(ctx, id, wire.UpdateWorkItem{Title: in.Title, Body: in.Body, Status: in.Status}, sc.Actor())
}

// AgentProgress journals run.progress with the agent's text (source
// "mcp"), naming the run, while the run is still the live incarnation of
// the scope. The caller has checked the text (wire.AgentProgress.Validate).
func (s *Store) AgentProgress(ctx context.Context, sc AgentScope, text string) error {
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := runByID(ctx, tx, sc.RunID, false)
		if err != nil {
			return err
		}
		if err := agentLive(r, sc.HostID, sc.Attempt); err != nil {
			return err
		}
		// The same window as a signal's progress: at most one run.progress
		// a second per run, the others held (the newest kept, with its
		// actor) and counted for the next one or the trailing flush.
		var last *time.Time
		var coalesced int
		if err := tx.QueryRow(ctx, `SELECT progress_journaled_at, progress_coalesced FROM runs WHERE id = $1 FOR NO KEY UPDATE`,
			r.ID).Scan(&last, &coalesced); err != nil {
			return fmt.Errorf("progress window of run %s: %w", r.ID, translate(err))
		}
		now := s.now()
		extra := map[string]any{"source": "mcp", "text": text}
		if last != nil && now.Sub(*last) < runwrite.ProgressEvery {
			held, err := heldProgress(r, map[string]any{"source": "mcp", "text": text, heldActor: sc.Actor()})
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE runs SET progress_coalesced = progress_coalesced + 1, progress_held = $2::jsonb WHERE id = $1`, r.ID, held)
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET progress_journaled_at = $2, progress_coalesced = 0, progress_held = NULL WHERE id = $1`,
			r.ID, now); err != nil {
			return err
		}
		extra[wire.PayloadCoalesced] = coalesced
		ev := runEvent(wire.TopicRunProgress, r, extra)
		ev.Actor = sc.Actor()
		return tx.Journal(ctx, ev)
	})
	if err != nil {
		return fmt.Errorf("record the progress of run %s: %w", sc.RunID, err)
	}
	return nil
}
