package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"pam/internal/wire"
)

// ListHosts returns every host, by name.
func (c *Client) ListHosts(ctx context.Context) ([]wire.Host, error) {
	var out wire.HostList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/hosts", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Hosts, nil
}

// CreateHost registers a host; the answer holds its worker token, which
// the server shows this once.
func (c *Client) CreateHost(ctx context.Context, body wire.CreateHost) (*wire.HostCreated, error) {
	return decode[wire.HostCreated](c, ctx, http.MethodPost, "/api/v1/hosts", nil, body)
}

// GetHost fetches a host by id or name, with its active_runs.
func (c *Client) GetHost(ctx context.Context, ref string) (*wire.Host, error) {
	return c.hostCall(ctx, http.MethodGet, ref, "")
}

// DisableHost withholds new dispatch from a host (drain-only).
func (c *Client) DisableHost(ctx context.Context, ref string) (*wire.Host, error) {
	return c.hostCall(ctx, http.MethodPost, ref, "/disable")
}

// EnableHost lifts a disable; the status is derived from last_seen_at.
func (c *Client) EnableHost(ctx context.Context, ref string) (*wire.Host, error) {
	return c.hostCall(ctx, http.MethodPost, ref, "/enable")
}

// ClearSuspect accepts the host's latest instance id as pinned.
func (c *Client) ClearSuspect(ctx context.Context, ref string) (*wire.Host, error) {
	return c.hostCall(ctx, http.MethodPost, ref, "/clear-suspect")
}

// SetHostMaxRuns changes how many runs a host may hold at once (1 to 1000)
// and returns the host as it now reads.
func (c *Client) SetHostMaxRuns(ctx context.Context, ref string, maxRuns int) (*wire.Host, error) {
	return decode[wire.Host](c, ctx, http.MethodPatch, "/api/v1/hosts/"+url.PathEscape(ref), nil, wire.UpdateHost{MaxRuns: &maxRuns})
}

func (c *Client) hostCall(ctx context.Context, method, ref, action string) (*wire.Host, error) {
	return decode[wire.Host](c, ctx, method, "/api/v1/hosts/"+url.PathEscape(ref)+action, nil, nil)
}

// RotateToken gives a host a new worker token (the old one stops working
// at once) and returns it.
func (c *Client) RotateToken(ctx context.Context, ref string) (string, error) {
	var out wire.WorkerToken
	if err := c.Do(ctx, http.MethodPost, "/api/v1/hosts/"+url.PathEscape(ref)+"/rotate-token", nil, nil, &out); err != nil {
		return "", err
	}
	return out.WorkerToken, nil
}

// DeleteHost removes a host without active runs.
func (c *Client) DeleteHost(ctx context.Context, ref string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/hosts/"+url.PathEscape(ref), nil, nil, nil)
}

// ListProviders returns each provider some host offers, with those hosts.
func (c *Client) ListProviders(ctx context.Context) ([]wire.ProviderHosts, error) {
	var out wire.ProviderList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/providers", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Providers, nil
}
