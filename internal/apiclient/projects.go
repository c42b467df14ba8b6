package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"pam/internal/wire"
)

// ListProjects returns the projects, archived ones too when asked.
func (c *Client) ListProjects(ctx context.Context, includeArchived bool) ([]wire.Project, error) {
	q := url.Values{}
	if includeArchived {
		q.Set("include_archived", "true")
	}
	var out wire.ProjectList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/projects", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Projects, nil
}

// CreateProject creates a project; the server derives the slug from the
// name when none is given.
func (c *Client) CreateProject(ctx context.Context, body wire.CreateProject) (*wire.Project, error) {
	return decode[wire.Project](c, ctx, http.MethodPost, "/api/v1/projects", nil, body)
}

// GetProject fetches a project by id or slug.
func (c *Client) GetProject(ctx context.Context, ref string) (*wire.Project, error) {
	return decode[wire.Project](c, ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(ref), nil, nil)
}

// UpdateProject changes the fields set in body.
func (c *Client) UpdateProject(ctx context.Context, ref string, body wire.UpdateProject) (*wire.Project, error) {
	return decode[wire.Project](c, ctx, http.MethodPatch, "/api/v1/projects/"+url.PathEscape(ref), nil, body)
}

// ArchiveProject soft-deletes a project and returns it archived.
func (c *Client) ArchiveProject(ctx context.Context, ref string) (*wire.Project, error) {
	return decode[wire.Project](c, ctx, http.MethodDelete, "/api/v1/projects/"+url.PathEscape(ref), nil, nil)
}

// UnarchiveProject makes an archived project active again.
func (c *Client) UnarchiveProject(ctx context.Context, ref string) (*wire.Project, error) {
	return decode[wire.Project](c, ctx, http.MethodPost, "/api/v1/projects/"+url.PathEscape(ref)+"/unarchive", nil, nil)
}

// WorkItemFilter narrows GET /projects/{ref}/work-items; empty fields are
// not sent.
type WorkItemFilter struct {
	Status   string
	Kind     string
	ParentID string
}

// ListWorkItems returns a project's work items in tree order (depth-first,
// siblings by position then creation).
func (c *Client) ListWorkItems(ctx context.Context, projectRef string, f WorkItemFilter) ([]wire.WorkItem, error) {
	q := url.Values{}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	if f.Kind != "" {
		q.Set("kind", f.Kind)
	}
	if f.ParentID != "" {
		q.Set("parent_id", f.ParentID)
	}
	var out wire.WorkItemList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(projectRef)+"/work-items", q, nil, &out); err != nil {
		return nil, err
	}
	return out.WorkItems, nil
}

// CreateWorkItem adds a work item to a project.
func (c *Client) CreateWorkItem(ctx context.Context, projectRef string, body wire.CreateWorkItem) (*wire.WorkItem, error) {
	return decode[wire.WorkItem](c, ctx, http.MethodPost, "/api/v1/projects/"+url.PathEscape(projectRef)+"/work-items", nil, body)
}

// GetWorkItem fetches one work item.
func (c *Client) GetWorkItem(ctx context.Context, id string) (*wire.WorkItem, error) {
	return decode[wire.WorkItem](c, ctx, http.MethodGet, "/api/v1/work-items/"+url.PathEscape(id), nil, nil)
}

// UpdateWorkItem changes the fields set in body; a set ParentID with a nil
// Value moves the item to the project root.
func (c *Client) UpdateWorkItem(ctx context.Context, id string, body wire.UpdateWorkItem) (*wire.WorkItem, error) {
	return decode[wire.WorkItem](c, ctx, http.MethodPatch, "/api/v1/work-items/"+url.PathEscape(id), nil, body)
}

// DeleteWorkItem deletes a work item without children or runs.
func (c *Client) DeleteWorkItem(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/work-items/"+url.PathEscape(id), nil, nil, nil)
}
