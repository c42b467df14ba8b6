package wire

import "time"

// Notification channels and answer URLs (docs/notifications.md).

// Channel kinds.
const (
	ChannelWebhook = "webhook"
	ChannelNtfy    = "ntfy"
	ChannelSlack   = "slack"
)

// TopicNotificationFailed journals a channel that keeps failing; its
// payload names the channel (channel_id, name), how many attempts in a
// row failed and the last error.
const TopicNotificationFailed Topic = "notification.failed"

// CodeAnswerExpired (410) refuses an answer URL that was used, whose
// question left the screen, whose run moved to another attempt, or that
// is older than an hour.
const CodeAnswerExpired = "answer_expired"

// Channel is a notification channel as the API shows it (never its secret).
type Channel struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	ProjectID *string   `json:"project_id"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateChannel is the body of POST /notifications.
type CreateChannel struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"`
	URL       string   `json:"url"`
	Events    []string `json:"events"`
	ProjectID *string  `json:"project_id"`
}

// ChannelCreated answers POST /notifications: the only time the
// channel's signing secret is shown.
type ChannelCreated struct {
	Channel Channel `json:"channel"`
	Secret  string  `json:"secret"`
}

// ChannelList answers GET /notifications.
type ChannelList struct {
	Channels []Channel `json:"channels"`
}

// Delivery statuses: an attempt waits (pending), is under way (sending),
// or ended delivered or failed; gave_up is a failed attempt after which
// no more are made (24 h passed, or the event is gone).
const (
	DeliveryPending   = "pending"
	DeliverySending   = "sending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
	DeliveryGaveUp    = "gave_up"
)

// Delivery is one attempt to deliver one event (or a test, event_seq
// null) to one channel.
type Delivery struct {
	ID           int64      `json:"id"`
	ChannelID    string     `json:"channel_id"`
	EventSeq     *int64     `json:"event_seq"`
	Topic        string     `json:"topic"`
	Attempt      int        `json:"attempt"`
	Status       string     `json:"status"`
	ResponseCode *int       `json:"response_code"`
	Error        *string    `json:"error"`
	NextTryAt    *time.Time `json:"next_try_at"`
	CreatedAt    time.Time  `json:"created_at"`
}

// DeliveryList answers GET /notifications/{id}/deliveries.
type DeliveryList struct {
	Deliveries []Delivery `json:"deliveries"`
}

// AnswerChoice is one choice of a question as a webhook carries it: the
// key it presses and the single-use URL that presses it.
type AnswerChoice struct {
	Key       string `json:"key"`
	Label     string `json:"label"`
	AnswerURL string `json:"answer_url"`
}

// WebhookPayload is the JSON body a webhook channel receives.
type WebhookPayload struct {
	Event   Event          `json:"event"`
	Run     *Run           `json:"run"`
	Link    *string        `json:"link"`
	Text    string         `json:"text"`
	Answers []AnswerChoice `json:"answers,omitempty"`
}
