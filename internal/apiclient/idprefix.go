package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"pam/internal/wire"
)

// The lookups by id prefix (docs/api.md#finding-an-object-by-id-prefix):
// each answers at most wire.MaxIDPrefixMatches objects whose id starts
// with prefix, which the server validates.

// FindProjects returns the projects, archived ones too, whose id starts
// with prefix.
func (c *Client) FindProjects(ctx context.Context, prefix string) ([]wire.Project, error) {
	var out wire.ProjectList
	q := url.Values{"id_prefix": {prefix}, "include_archived": {"true"}}
	if err := c.Do(ctx, http.MethodGet, "/api/v1/projects", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Projects, nil
}

// FindHosts returns the hosts whose id starts with prefix.
func (c *Client) FindHosts(ctx context.Context, prefix string) ([]wire.Host, error) {
	var out wire.HostList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/hosts", url.Values{"id_prefix": {prefix}}, nil, &out); err != nil {
		return nil, err
	}
	return out.Hosts, nil
}

// FindRuns returns the runs whose id starts with prefix, newest first.
func (c *Client) FindRuns(ctx context.Context, prefix string) ([]wire.Run, error) {
	var out wire.RunList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/runs", url.Values{"id_prefix": {prefix}}, nil, &out); err != nil {
		return nil, err
	}
	return out.Runs, nil
}

// FindWorkItems returns the work items of any project whose id starts
// with prefix, oldest first.
func (c *Client) FindWorkItems(ctx context.Context, prefix string) ([]wire.WorkItem, error) {
	var out wire.WorkItemList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/work-items", url.Values{"id_prefix": {prefix}}, nil, &out); err != nil {
		return nil, err
	}
	return out.WorkItems, nil
}
