package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"pam/internal/wire"
)

// ListTokens returns the live named tokens (admin only).
func (c *Client) ListTokens(ctx context.Context) ([]wire.Token, error) {
	var out wire.TokenList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/tokens", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

// CreateToken makes a named token of a role; the answer holds its
// secret, which the server shows this once.
func (c *Client) CreateToken(ctx context.Context, body wire.CreateToken) (*wire.TokenSecret, error) {
	return decode[wire.TokenSecret](c, ctx, http.MethodPost, "/api/v1/tokens", nil, body)
}

// RotateAPIToken gives the token of id a new secret, shown this once.
func (c *Client) RotateAPIToken(ctx context.Context, id string) (*wire.TokenSecret, error) {
	return decode[wire.TokenSecret](c, ctx, http.MethodPost, "/api/v1/tokens/"+url.PathEscape(id)+"/rotate", nil, nil)
}

// RevokeAPIToken revokes the token of id for good.
func (c *Client) RevokeAPIToken(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/tokens/"+url.PathEscape(id), nil, nil, nil)
}

// SelfToken is the token the client authenticates with.
func (c *Client) SelfToken(ctx context.Context) (*wire.Token, error) {
	return decode[wire.Token](c, ctx, http.MethodGet, "/api/v1/tokens/self", nil, nil)
}
