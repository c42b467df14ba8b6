package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"pam/internal/wire"
)

// ListChannels lists the notification channels.
func (c *Client) ListChannels(ctx context.Context) ([]wire.Channel, error) {
	var out wire.ChannelList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/notifications", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Channels, nil
}

// CreateChannel adds a notification channel; the answer holds its
// signing secret, which the server shows this once.
func (c *Client) CreateChannel(ctx context.Context, body wire.CreateChannel) (*wire.ChannelCreated, error) {
	return decode[wire.ChannelCreated](c, ctx, http.MethodPost, "/api/v1/notifications", nil, body)
}

// TestChannel queues a test message to a channel.
func (c *Client) TestChannel(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodPost, "/api/v1/notifications/"+url.PathEscape(id)+"/test", nil, nil, nil)
}

// ChannelDeliveries lists a channel's last 100 delivery attempts.
func (c *Client) ChannelDeliveries(ctx context.Context, id string) ([]wire.Delivery, error) {
	var out wire.DeliveryList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/notifications/"+url.PathEscape(id)+"/deliveries", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Deliveries, nil
}

// DeleteChannel removes a notification channel.
func (c *Client) DeleteChannel(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/notifications/"+url.PathEscape(id), nil, nil, nil)
}
