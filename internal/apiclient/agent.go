package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"pam/internal/wire"
)

// The calls of pam's tools for the agent (docs/api.md#pams-tools-for-the-agent),
// what `pam mcp` makes for the run in whose environment it runs: the
// client's Token is that run's signal token.

// agentPath is the path of a tool route of run runID.
func agentPath(runID, rest string) string {
	return "/api/internal/runs/" + url.PathEscape(runID) + rest
}

// AgentWorkItems lists the run's project's items in tree order, only
// those of one status when status is not empty.
func (c *Client) AgentWorkItems(ctx context.Context, runID, status string) ([]wire.WorkItem, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	var out wire.WorkItemList
	if err := c.Do(ctx, http.MethodGet, agentPath(runID, "/work-items"), q, nil, &out); err != nil {
		return nil, err
	}
	return out.WorkItems, nil
}

// AgentWorkItem fetches one item of the run's project.
func (c *Client) AgentWorkItem(ctx context.Context, runID, id string) (*wire.WorkItem, error) {
	return decode[wire.WorkItem](c, ctx, http.MethodGet, agentPath(runID, "/work-items/"+url.PathEscape(id)), nil, nil)
}

// AgentCreateWorkItem adds an item to the run's project.
func (c *Client) AgentCreateWorkItem(ctx context.Context, runID string, body wire.AgentCreateWorkItem) (*wire.WorkItem, error) {
	return decode[wire.WorkItem](c, ctx, http.MethodPost, agentPath(runID, "/work-items"), nil, body)
}

// AgentUpdateWorkItem changes the title, body or status of an item of the
// run's project.
func (c *Client) AgentUpdateWorkItem(ctx context.Context, runID, id string, body wire.AgentUpdateWorkItem) (*wire.WorkItem, error) {
	return decode[wire.WorkItem](c, ctx, http.MethodPatch, agentPath(runID, "/work-items/"+url.PathEscape(id)), nil, body)
}

// AgentProgress reports what the agent is doing (journaled as
// run.progress).
func (c *Client) AgentProgress(ctx context.Context, runID, text string) error {
	return c.Do(ctx, http.MethodPost, agentPath(runID, "/progress"), nil, wire.AgentProgress{Text: text}, nil)
}
