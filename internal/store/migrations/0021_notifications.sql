-- Notification channels, their delivery queue and the answer URLs they
-- carry (docs/notifications.md).

CREATE TABLE notification_channels (
	id uuid PRIMARY KEY,
	name text NOT NULL UNIQUE,
	kind text NOT NULL CHECK (kind IN ('webhook', 'ntfy', 'slack')),
	url text NOT NULL,
	events text[] NOT NULL,
	project_id uuid NULL REFERENCES projects (id) ON DELETE CASCADE,
	-- The HMAC key of the webhook signature; shown once, at creation.
	secret text NOT NULL,
	-- The channel gets the events after this seq (those after its
	-- creation), never the history before it.
	from_seq bigint NOT NULL,
	-- Failed attempts in a row, and whether notification.failed was
	-- journaled for them (once, until a delivery succeeds again).
	failures int NOT NULL DEFAULT 0,
	failed_journaled bool NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL DEFAULT now()
);

-- One row per attempt. The queue is the rows pending (or sending whose
-- lease ran out); a delivery of an event to a channel is made once:
-- (channel_id, event_seq, attempt) is unique and the enqueuer advances
-- notification_cursor in the transaction that inserts the first attempts.
CREATE TABLE notification_deliveries (
	id bigserial PRIMARY KEY,
	channel_id uuid NOT NULL REFERENCES notification_channels (id) ON DELETE CASCADE,
	event_seq bigint NULL, -- NULL: a test message
	topic text NOT NULL,
	attempt int NOT NULL,
	status text NOT NULL CHECK (status IN ('pending', 'sending', 'delivered', 'failed', 'gave_up')),
	response_code int NULL,
	error text NULL,
	next_try_at timestamptz NULL,
	-- When the first attempt was enqueued: retries stop 24 h after it.
	first_at timestamptz NOT NULL DEFAULT now(),
	created_at timestamptz NOT NULL DEFAULT now(),
	UNIQUE (channel_id, event_seq, attempt)
);
CREATE INDEX notification_deliveries_due ON notification_deliveries (channel_id, next_try_at, id)
	WHERE status IN ('pending', 'sending');
CREATE INDEX notification_deliveries_recent ON notification_deliveries (channel_id, id DESC);

-- How far the journal was turned into deliveries.
CREATE TABLE notification_cursor (
	one bool PRIMARY KEY DEFAULT true CHECK (one),
	seq bigint NOT NULL
);
INSERT INTO notification_cursor (seq)
	SELECT greatest(coalesce((SELECT max(seq) FROM events), 0), (SELECT coalesce(max(purged_through_seq), 0) FROM server_state));

-- Answer URLs: the SHA-256 of each token, never the token; bound to the
-- run, its attempt, the question and the key.
CREATE TABLE answer_tokens (
	token_hash bytea PRIMARY KEY,
	run_id uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	attempt int NOT NULL,
	question text NOT NULL,
	key text NOT NULL,
	channel_name text NOT NULL,
	expires_at timestamptz NOT NULL,
	used_at timestamptz NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX answer_tokens_expires ON answer_tokens (expires_at);
