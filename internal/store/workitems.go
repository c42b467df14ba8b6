package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

const itemColumns = `id::text, project_id::text, parent_id::text, kind, title, body, status, path, position, created_at, updated_at`

func scanItem(row pgx.Row) (wire.WorkItem, error) {
	var w wire.WorkItem
	err := row.Scan(&w.ID, &w.ProjectID, &w.ParentID, &w.Kind, &w.Title, &w.Body, &w.Status, &w.Path, &w.Position, &w.CreatedAt, &w.UpdatedAt)
	utc(&w.CreatedAt, &w.UpdatedAt)
	return w, err
}

func itemByID(ctx context.Context, q querier, id string, lock bool) (wire.WorkItem, error) {
	if !wire.ValidUUID(id) {
		return wire.WorkItem{}, wire.NotFound("work item")
	}
	sql := `SELECT ` + itemColumns + ` FROM work_items WHERE id = $1`
	if lock {
		sql += ` FOR NO KEY UPDATE`
	}
	w, err := scanItem(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.WorkItem{}, wire.NotFound("work item")
	}
	if err != nil {
		return wire.WorkItem{}, fmt.Errorf("read work item %s: %w", id, translate(err))
	}
	return w, nil
}

// GetWorkItem returns one work item.
func (s *Store) GetWorkItem(ctx context.Context, id string) (wire.WorkItem, error) {
	return itemByID(ctx, s.Pool, id, false)
}

// parentFor checks that parentID may hold an item of kind in project: it
// exists, is in the same project, and ranks strictly above kind.
func parentFor(ctx context.Context, q querier, projectID, parentID, kind string) (wire.WorkItem, error) {
	parent, err := itemByID(ctx, q, parentID, false)
	if wire.HasCode(err, wire.CodeNotFound) {
		return parent, wire.Invalid("parent_id", "parent work item %s does not exist", parentID)
	}
	if err != nil {
		return parent, err // itemByID names the item
	}
	if parent.ProjectID != projectID {
		return parent, wire.Invalid("parent_id", "parent work item belongs to another project")
	}
	if wire.KindRank(parent.Kind) <= wire.KindRank(kind) {
		return parent, wire.Invalid("parent_id", "a %s cannot hold a %s: a parent must rank strictly above its child (milestone > epic > task > subtask)", parent.Kind, kind)
	}
	return parent, nil
}

// CreateWorkItem inserts an item (checked by wire.CreateWorkItem.Validate) at the end of its siblings,
// journaling work_item.created.
func (s *Store) CreateWorkItem(ctx context.Context, projectRef string, in wire.CreateWorkItem) (wire.WorkItem, error) {
	return s.createWorkItem(ctx, projectRef, in, "")
}

// createWorkItem is CreateWorkItem with the actor its event names.
func (s *Store) createWorkItem(ctx context.Context, projectRef string, in wire.CreateWorkItem, actor string) (wire.WorkItem, error) {
	body, status := "", "todo"
	if in.Body != nil {
		body = *in.Body
	}
	if in.Status != nil {
		status = *in.Status
	}
	var out wire.WorkItem
	err := s.InTx(ctx, func(tx *Tx) error {
		// The project row lock orders item creation and reparenting within a
		// project, so concurrent moves can never build a cycle.
		p, err := projectByRef(ctx, tx, projectRef, true)
		if err != nil {
			return err
		}
		if err := refuseArchived(p); err != nil {
			return err
		}
		id := uuid.NewString()
		path := id
		var parentID *string
		if in.ParentID != nil {
			parent, err := parentFor(ctx, tx, p.ID, *in.ParentID, in.Kind)
			if err != nil {
				return err
			}
			path = parent.Path + "/" + id
			parentID = &parent.ID
		}
		out, err = scanItem(tx.QueryRow(ctx, `INSERT INTO work_items (id, project_id, parent_id, kind, title, body, status, path, position)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
				(SELECT coalesce(max(position) + 1, 0) FROM work_items WHERE project_id = $2 AND parent_id IS NOT DISTINCT FROM $3::uuid))
			RETURNING `+itemColumns, id, p.ID, parentID, in.Kind, in.Title, body, status, path))
		if err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicWorkItemCreated, ProjectID: p.ID, Actor: actor, Payload: out})
	})
	if err != nil {
		return wire.WorkItem{}, fmt.Errorf("create a %s in project %s: %w", in.Kind, projectRef, err)
	}
	return out, nil
}

// ItemFilter narrows a project's item list; empty fields match all.
type ItemFilter struct {
	Status, Kind, ParentID string
}

// ListWorkItems returns a project's items in tree order: depth-first,
// siblings by position then created_at. The caller has checked the
// filter (wire.ValidateItemFilter).
func (s *Store) ListWorkItems(ctx context.Context, projectRef string, f ItemFilter) ([]wire.WorkItem, error) {
	p, err := s.GetProject(ctx, projectRef)
	if err != nil {
		return nil, fmt.Errorf("list work items: %w", err)
	}
	rows, err := s.Pool.Query(ctx, `SELECT `+itemColumns+` FROM work_items WHERE project_id = $1`, p.ID)
	if err != nil {
		return nil, fmt.Errorf("list work items of %s: %w", p.ID, translate(err))
	}
	all, err := pgx.CollectRows(rows, rowTo(scanItem))
	if err != nil {
		return nil, fmt.Errorf("list work items of %s: %w", p.ID, translate(err))
	}
	out := []wire.WorkItem{}
	for _, w := range TreeOrder(all) {
		if (f.Status == "" || w.Status == f.Status) && (f.Kind == "" || w.Kind == f.Kind) &&
			(f.ParentID == "" || (w.ParentID != nil && *w.ParentID == f.ParentID)) {
			out = append(out, w)
		}
	}
	return out, nil
}

// TreeOrder sorts items depth-first, siblings by position then created_at
// (then id, so the order is total).
func TreeOrder(items []wire.WorkItem) []wire.WorkItem {
	children := map[string][]wire.WorkItem{}
	ids := map[string]bool{}
	for _, w := range items {
		ids[w.ID] = true
	}
	for _, w := range items {
		key := ""
		if w.ParentID != nil && ids[*w.ParentID] {
			key = *w.ParentID
		}
		children[key] = append(children[key], w)
	}
	for _, c := range children {
		sort.Slice(c, func(i, j int) bool {
			if c[i].Position != c[j].Position {
				return c[i].Position < c[j].Position
			}
			if !c[i].CreatedAt.Equal(c[j].CreatedAt) {
				return c[i].CreatedAt.Before(c[j].CreatedAt)
			}
			return c[i].ID < c[j].ID
		})
	}
	out := make([]wire.WorkItem, 0, len(items))
	var walk func(string)
	walk = func(parent string) {
		for _, c := range children[parent] {
			out = append(out, c)
			walk(c.ID)
		}
	}
	walk("")
	return out
}

// UpdateWorkItem applies a PATCH: fields, status, position and parent, each
// change journaled (work_item.updated, work_item.status_changed,
// work_item.reparented — the last once, for the moved item only, while the
// paths of all its descendants are rewritten in the same transaction).
// The caller has checked in (wire.UpdateWorkItem.Validate).
func (s *Store) UpdateWorkItem(ctx context.Context, id string, in wire.UpdateWorkItem) (wire.WorkItem, error) {
	return s.updateWorkItem(ctx, id, in, "")
}

// updateWorkItem is UpdateWorkItem with the actor its events name.
func (s *Store) updateWorkItem(ctx context.Context, id string, in wire.UpdateWorkItem, actor string) (wire.WorkItem, error) {
	var out wire.WorkItem
	err := s.InTx(ctx, func(tx *Tx) error {
		cur, err := lockItem(ctx, tx, id, in.ParentID.Set)
		if err != nil {
			return err
		}
		changed := map[string]any{}
		if in.Title != nil && *in.Title != cur.Title {
			changed["title"] = *in.Title
		}
		if in.Body != nil && *in.Body != cur.Body {
			changed["body"] = *in.Body
		}
		if in.Position != nil && *in.Position != cur.Position {
			changed["position"] = *in.Position
		}
		newPath := cur.Path
		reparent := in.ParentID.Set && !sameParent(cur.ParentID, in.ParentID.Value)
		if reparent {
			if newPath, err = movedPath(ctx, tx, cur, in.ParentID.Value); err != nil {
				return err
			}
		}
		statusChanged := in.Status != nil && *in.Status != cur.Status
		if len(changed) == 0 && !reparent && !statusChanged {
			out = cur
			return nil
		}
		var parentArg any = cur.ParentID
		if reparent {
			parentArg = in.ParentID.Value
		}
		status := cur.Status
		if statusChanged {
			status = *in.Status
		}
		out, err = scanItem(tx.QueryRow(ctx, `UPDATE work_items SET
			title = coalesce($2, title), body = coalesce($3, body), position = coalesce($4, position),
			status = $5, parent_id = $6, path = $7, updated_at = now()
			WHERE id = $1 RETURNING `+itemColumns, cur.ID, in.Title, in.Body, in.Position, status, parentArg, newPath))
		if err != nil {
			return err
		}
		if reparent {
			if _, err := tx.Exec(ctx, `UPDATE work_items SET path = $2 || substr(path, length($1) + 1), updated_at = now()
				WHERE project_id = $3 AND path LIKE $4`, cur.Path, newPath, cur.ProjectID, likePrefix(cur.Path)+"/%"); err != nil {
				return err
			}
		}
		return tx.Journal(ctx, itemEvents(cur, out, changed, statusChanged, reparent, actor)...)
	})
	if err != nil {
		return wire.WorkItem{}, fmt.Errorf("update work item %s: %w", id, err)
	}
	return out, nil
}

// lockItem reads item id under its row lock for an update. A move
// changes the project's tree, so a request that names a parent (a move,
// unless the item is already there once locked) takes the project's
// lock, as creates do, then the item's: two moves can never make a
// cycle. Any other change is the item's alone and locks only it, so
// edits of different cards of one project run side by side (20 editors
// of one project were one at a time: ≈270 PATCHes/s under pam-bench
// load, docs/bench.md). Nothing locks an item and then its project: no
// deadlock. An item of an archived project is refused.
func lockItem(ctx context.Context, tx *Tx, id string, move bool) (wire.WorkItem, error) {
	if move {
		unlocked, err := itemByID(ctx, tx, id, false)
		if err != nil {
			return unlocked, err
		}
		if _, err := projectByRef(ctx, tx, unlocked.ProjectID, true); err != nil {
			return unlocked, err
		}
	}
	cur, err := itemByID(ctx, tx, id, true)
	if err != nil {
		return cur, err
	}
	return cur, refuseArchivedID(ctx, tx, cur.ProjectID)
}

// movedPath is the path of cur moved under parent (nil: the project's
// top level); a parent inside cur's own subtree, or one that may not hold
// cur's kind, is refused.
func movedPath(ctx context.Context, tx *Tx, cur wire.WorkItem, parent *string) (string, error) {
	if parent == nil {
		return cur.ID, nil
	}
	target, err := itemByID(ctx, tx, *parent, false)
	if err != nil && !wire.HasCode(err, wire.CodeNotFound) {
		return "", fmt.Errorf("read new parent %s: %w", *parent, err)
	}
	if *parent == cur.ID || (err == nil && strings.HasPrefix(target.Path, cur.Path+"/")) {
		return "", wire.Invalid("parent_id", "a work item cannot move inside its own subtree")
	}
	p, err := parentFor(ctx, tx, cur.ProjectID, *parent, cur.Kind)
	if err != nil {
		return "", err
	}
	return p.Path + "/" + cur.ID, nil
}

// itemEvents journals an update of cur into out: work_item.updated for
// the fields in changed, work_item.status_changed, work_item.reparented.
func itemEvents(cur, out wire.WorkItem, changed map[string]any, statusChanged, reparent bool, actor string) []NewEvent {
	var events []NewEvent
	if len(changed) > 0 {
		events = append(events, NewEvent{Topic: wire.TopicWorkItemUpdated, ProjectID: cur.ProjectID, Actor: actor,
			Payload: map[string]any{"work_item_id": cur.ID, "changed": changed, "work_item": out}})
	}
	if statusChanged {
		events = append(events, NewEvent{Topic: wire.TopicWorkItemStatusChanged, ProjectID: cur.ProjectID, Actor: actor,
			Payload: map[string]any{"work_item_id": cur.ID, "from": cur.Status, "to": out.Status, "work_item": out}})
	}
	if reparent {
		events = append(events, NewEvent{Topic: wire.TopicWorkItemReparented, ProjectID: cur.ProjectID, Actor: actor,
			Payload: map[string]any{"work_item_id": cur.ID, "from_parent_id": cur.ParentID, "to_parent_id": out.ParentID,
				"old_path": cur.Path, "path": out.Path, "work_item": out}})
	}
	return events
}

func sameParent(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// likePrefix escapes LIKE metacharacters (paths hold only uuids and "/",
// but the escape keeps the query honest).
func likePrefix(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// DeleteWorkItem deletes a leaf item without runs, journaling
// work_item.deleted; 409 has_children / has_runs otherwise.
func (s *Store) DeleteWorkItem(ctx context.Context, id string) error {
	err := s.InTx(ctx, func(tx *Tx) error {
		cur, err := itemByID(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if err := refuseArchivedID(ctx, tx, cur.ProjectID); err != nil {
			return err
		}
		var children, runs int
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM work_items WHERE parent_id = $1),
			(SELECT count(*) FROM runs WHERE task_id = $1)`, id).Scan(&children, &runs); err != nil {
			return err
		}
		if children > 0 {
			return wire.Conflict(wire.CodeHasChildren, "work item has %d children; delete or move them first", children).With("children", children)
		}
		if runs > 0 {
			return wire.Conflict(wire.CodeHasRuns, "work item has %d runs; it can be cancelled instead", runs).With("runs", runs)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM work_items WHERE id = $1`, id); err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicWorkItemDeleted, ProjectID: cur.ProjectID, Payload: map[string]any{"work_item_id": cur.ID, "work_item": cur}})
	})
	if err != nil {
		return fmt.Errorf("delete work item %s: %w", id, err)
	}
	return nil
}
