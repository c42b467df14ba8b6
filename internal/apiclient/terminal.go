package apiclient

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"pam/internal/wire"
)

// CreateWSTicket asks for a WebSocket ticket for a run and purpose.
func (c *Client) CreateWSTicket(ctx context.Context, runID, purpose string) (*wire.WSTicket, error) {
	var out wire.WSTicket
	if err := c.Do(ctx, http.MethodPost, "/api/v1/ws-tickets", nil, wire.CreateWSTicket{RunID: runID, Purpose: purpose}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RevokeLease takes the attach lease of a run away from its holder.
func (c *Client) RevokeLease(ctx context.Context, runID string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/runs/"+url.PathEscape(runID)+"/lease", nil, nil, nil)
}

// TerminalURL is the ws:// or wss:// URL of a run's terminal socket
// (kind "pane" or "attach"), with q as its query.
func (c *Client) TerminalURL(runID, kind string, q url.Values) string {
	u := c.BaseURL + "/api/v1/runs/" + url.PathEscape(runID) + "/" + kind + "/ws"
	switch {
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}
