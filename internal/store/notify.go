package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

// Notification channels and their delivery queue (docs/notifications.md).
// The queue lives in the database so that deliveries survive a restart
// and several serves deliver each event to each channel once: the
// enqueuer advances notification_cursor in the transaction that inserts
// the deliveries, and senders claim due rows with FOR UPDATE SKIP LOCKED
// under a lease.

const channelColumns = `id::text, name, kind, url, events, project_id::text, created_at`

func scanChannel(row pgx.Row) (wire.Channel, error) {
	var c wire.Channel
	err := row.Scan(&c.ID, &c.Name, &c.Kind, &c.URL, &c.Events, &c.ProjectID, &c.CreatedAt)
	c.CreatedAt = c.CreatedAt.UTC()
	return c, err
}

// CreateChannel stores a channel with its signing secret. It gets the
// events journaled from now on. The caller has checked in
// (wire.CreateChannel.Validate).
func (s *Store) CreateChannel(ctx context.Context, in wire.CreateChannel, secret string) (wire.Channel, error) {
	if in.ProjectID != nil {
		if _, err := projectByRef(ctx, s.Pool, *in.ProjectID, false); err != nil {
			if e, ok := wire.AsError(err); ok && e.Code == wire.CodeNotFound {
				return wire.Channel{}, wire.Invalid("project_id", "no project %s", *in.ProjectID)
			}
			return wire.Channel{}, fmt.Errorf("create channel %q: %w", in.Name, err)
		}
	}
	c, err := scanChannel(s.Pool.QueryRow(ctx, `INSERT INTO notification_channels (id, name, kind, url, events, project_id, secret, from_seq)
		VALUES ($1, $2, $3, $4, $5, $6, $7, (SELECT coalesce(max(seq), 0) FROM events)) RETURNING `+channelColumns,
		uuid.NewString(), in.Name, in.Kind, in.URL, in.Events, in.ProjectID, secret))
	if IsUniqueViolation(err, "notification_channels_name_key") {
		return wire.Channel{}, wire.Conflict(wire.CodeConflict, "a channel named %q exists", in.Name)
	}
	if err != nil {
		return wire.Channel{}, fmt.Errorf("create channel %q: %w", in.Name, translate(err))
	}
	return c, nil
}

// ListChannels lists every channel by name.
func (s *Store) ListChannels(ctx context.Context) ([]wire.Channel, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+channelColumns+` FROM notification_channels ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list channels: %w", translate(err))
	}
	defer rows.Close()
	out := []wire.Channel{}
	for rows.Next() {
		c, err := scanChannel(rows)
		if err != nil {
			return nil, fmt.Errorf("list channels: %w", translate(err))
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list channels: %w", translate(err))
	}
	return out, nil
}

// GetChannel returns one channel.
func (s *Store) GetChannel(ctx context.Context, id string) (wire.Channel, error) {
	if !wire.ValidUUID(id) {
		return wire.Channel{}, wire.NotFound("channel")
	}
	c, err := scanChannel(s.Pool.QueryRow(ctx, `SELECT `+channelColumns+` FROM notification_channels WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.Channel{}, wire.NotFound("channel")
	}
	if err != nil {
		return wire.Channel{}, fmt.Errorf("read channel %s: %w", id, translate(err))
	}
	return c, nil
}

// DeleteChannel removes a channel and its deliveries.
func (s *Store) DeleteChannel(ctx context.Context, id string) error {
	if !wire.ValidUUID(id) {
		return wire.NotFound("channel")
	}
	tag, err := s.Pool.Exec(ctx, `DELETE FROM notification_channels WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete channel %s: %w", id, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return wire.NotFound("channel")
	}
	return nil
}

// TopicTest is the topic of a channel's test message.
const TopicTest = "notification.test"

// EnqueueTest queues a test message to the channel, due now.
func (s *Store) EnqueueTest(ctx context.Context, id string) error {
	if _, err := s.GetChannel(ctx, id); err != nil {
		return err // GetChannel names the channel
	}
	if _, err := s.Pool.Exec(ctx, `INSERT INTO notification_deliveries (channel_id, event_seq, topic, attempt, status, next_try_at)
		VALUES ($1, NULL, $2, 1, 'pending', $3)`, id, TopicTest, s.now()); err != nil {
		return fmt.Errorf("queue a test message to channel %s: %w", id, translate(err))
	}
	return nil
}

const deliveryColumns = `id, channel_id::text, event_seq, topic, attempt, status, response_code, error, next_try_at, created_at`

// Deliveries lists a channel's last limit attempts, newest first.
func (s *Store) Deliveries(ctx context.Context, id string, limit int) ([]wire.Delivery, error) {
	if _, err := s.GetChannel(ctx, id); err != nil {
		return nil, err // GetChannel names the channel
	}
	rows, err := s.Pool.Query(ctx, `SELECT `+deliveryColumns+` FROM notification_deliveries
		WHERE channel_id = $1 ORDER BY id DESC LIMIT $2`, id, limit)
	if err != nil {
		return nil, fmt.Errorf("list the deliveries of channel %s: %w", id, translate(err))
	}
	defer rows.Close()
	out := []wire.Delivery{}
	for rows.Next() {
		var d wire.Delivery
		if err := rows.Scan(&d.ID, &d.ChannelID, &d.EventSeq, &d.Topic, &d.Attempt, &d.Status, &d.ResponseCode, &d.Error, &d.NextTryAt, &d.CreatedAt); err != nil {
			return nil, fmt.Errorf("list the deliveries of channel %s: %w", id, translate(err))
		}
		d.CreatedAt = d.CreatedAt.UTC()
		if d.NextTryAt != nil {
			t := d.NextTryAt.UTC()
			d.NextTryAt = &t
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the deliveries of channel %s: %w", id, translate(err))
	}
	return out, nil
}

// channelMatch is what the enqueuer needs of a channel.
type channelMatch struct {
	id, project string
	from        int64
	globs       []*wire.TopicPattern
}

func (c channelMatch) wants(ev wire.Event) bool {
	if ev.Seq <= c.from {
		return false
	}
	if c.project != "" && (ev.ProjectID == nil || *ev.ProjectID != c.project) {
		return false
	}
	if ev.Topic == string(wire.TopicNotificationFailed) && strings.Contains(string(ev.Payload), c.id) {
		return false // a channel is not told that it fails
	}
	for _, g := range c.globs {
		if g.Match(ev.Topic) {
			return true
		}
	}
	return false
}

// lockNotify serialises the enqueuers of all serves ("pam" 3).
const lockNotify int64 = 0x70616d_0003

// EnqueueBatch is how many events one enqueue pass reads.
const EnqueueBatch = 1000

// EnqueueEvents turns the events after the cursor up to safe (a SafeSeq,
// taken before) into first attempts, one per event and matching channel,
// and moves the cursor, in one transaction: a lock makes several serves
// take turns, and no event is enqueued twice. It reports
// how many deliveries it queued and whether events remain past the batch.
func (s *Store) EnqueueEvents(ctx context.Context, safe int64) (queued int, more bool, err error) {
	err = s.InTx(ctx, func(tx *Tx) error {
		// Serves take turns here. An advisory lock rather than the cursor
		// row's: a row lock takes a transaction id, and every reader of
		// the journal (SafeSeq) would wait for this transaction; with the
		// advisory lock it has one only for its last two writes.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockNotify); err != nil {
			return err
		}
		var cur int64
		if err := tx.QueryRow(ctx, `SELECT seq FROM notification_cursor`).Scan(&cur); err != nil {
			return err
		}
		if cur >= safe {
			return nil
		}
		var chans []channelMatch
		rows, err := tx.Query(ctx, `SELECT id::text, coalesce(project_id::text, ''), from_seq, events FROM notification_channels`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var c channelMatch
			var globs []string
			if err := rows.Scan(&c.id, &c.project, &c.from, &globs); err != nil {
				rows.Close()
				return err
			}
			for _, g := range globs {
				if p, err := wire.ParseTopicGlob(g); err == nil && g != "" {
					c.globs = append(c.globs, p)
				}
			}
			chans = append(chans, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3`, cur, safe, EnqueueBatch)
		if err != nil {
			return err
		}
		evs, err := scanEvents(rows)
		if err != nil {
			return err
		}
		next := safe
		if len(evs) == EnqueueBatch {
			next, more = evs[len(evs)-1].Seq, true
		}
		var chIDs, topics []string
		var seqs []int64
		for _, ev := range evs {
			for _, c := range chans {
				if c.wants(ev) {
					chIDs, seqs, topics = append(chIDs, c.id), append(seqs, ev.Seq), append(topics, ev.Topic)
				}
			}
		}
		if len(chIDs) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO notification_deliveries (channel_id, event_seq, topic, attempt, status, next_try_at)
				SELECT c, e, t, 1, 'pending', $4::timestamptz FROM unnest($1::uuid[], $2::bigint[], $3::text[]) AS u(c, e, t)
				ON CONFLICT DO NOTHING`, chIDs, seqs, topics, s.now()); err != nil {
				return err
			}
		}
		queued = len(chIDs)
		_, err = tx.Exec(ctx, `UPDATE notification_cursor SET seq = $1`, next)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("enqueue notifications: %w", err)
	}
	return queued, more, nil
}

// DueChannels lists the channels with a delivery due now (pending, or
// sending under a lease that ran out), except those in busy.
func (s *Store) DueChannels(ctx context.Context, busy []string) ([]string, error) {
	if busy == nil {
		busy = []string{}
	}
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT channel_id::text FROM notification_deliveries
		WHERE status IN ('pending', 'sending') AND next_try_at <= $2 AND NOT (channel_id::text = ANY($1))`, busy, s.now())
	if err != nil {
		return nil, fmt.Errorf("find channels with due deliveries: %w", translate(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("find channels with due deliveries: %w", translate(err))
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find channels with due deliveries: %w", translate(err))
	}
	return out, nil
}

// Claimed is a delivery attempt taken by a sender, with its channel.
type Claimed struct {
	ID       int64
	EventSeq *int64
	Topic    string
	Attempt  int
	FirstAt  time.Time
	Channel  wire.Channel
	Secret   string
}

// ClaimDelivery takes the channel's oldest due attempt, marking it
// sending until lease passes (then another sender may take it again:
// a serve that died mid-delivery). nil when none is due.
func (s *Store) ClaimDelivery(ctx context.Context, channelID string, lease time.Duration) (*Claimed, error) {
	var c Claimed
	err := s.Pool.QueryRow(ctx, `WITH d AS (
			SELECT id FROM notification_deliveries
			WHERE channel_id = $1 AND status IN ('pending', 'sending') AND next_try_at <= $3
			ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
		UPDATE notification_deliveries n SET status = 'sending', next_try_at = $3::timestamptz + $2::interval
		FROM d, notification_channels ch WHERE n.id = d.id AND ch.id = n.channel_id
		RETURNING n.id, n.event_seq, n.topic, n.attempt, n.first_at,
			ch.id::text, ch.name, ch.kind, ch.url, ch.events, ch.project_id::text, ch.created_at, ch.secret`,
		channelID, lease.String(), s.now()).Scan(&c.ID, &c.EventSeq, &c.Topic, &c.Attempt, &c.FirstAt,
		&c.Channel.ID, &c.Channel.Name, &c.Channel.Kind, &c.Channel.URL, &c.Channel.Events, &c.Channel.ProjectID, &c.Channel.CreatedAt, &c.Secret)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim a delivery of channel %s: %w", channelID, translate(err))
	}
	return &c, nil
}

// Outcome is what came of one attempt.
type Outcome struct {
	Code int    // the response status, 0 when none came
	Err  string // "" when delivered
	// Retry is when to try again; zero gives up.
	Retry time.Time
	// FailAfter is how many failures in a row journal notification.failed.
	FailAfter int
}

// FinishDelivery records an attempt's outcome: delivered resets the
// channel's failure count; failed queues the next attempt at Retry (or
// gives up), counts the failure and journals notification.failed once
// the channel failed FailAfter times in a row (once until it recovers).
func (s *Store) FinishDelivery(ctx context.Context, c *Claimed, o Outcome) error {
	err := s.InTx(ctx, func(tx *Tx) error {
		code := any(nil)
		if o.Code != 0 {
			code = o.Code
		}
		if o.Err == "" {
			if _, err := tx.Exec(ctx, `UPDATE notification_deliveries SET status = 'delivered', response_code = $2, error = NULL, next_try_at = NULL
				WHERE id = $1`, c.ID, code); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE notification_channels SET failures = 0, failed_journaled = false WHERE id = $1 AND failures > 0`, c.Channel.ID)
			return err
		}
		status := wire.DeliveryFailed
		if o.Retry.IsZero() {
			status = wire.DeliveryGaveUp
		}
		msg := o.Err
		if len(msg) > 1000 {
			msg = msg[:1000]
		}
		if _, err := tx.Exec(ctx, `UPDATE notification_deliveries SET status = $2, response_code = $3, error = $4, next_try_at = NULL
			WHERE id = $1`, c.ID, status, code, msg); err != nil {
			return err
		}
		if !o.Retry.IsZero() {
			if _, err := tx.Exec(ctx, `INSERT INTO notification_deliveries (channel_id, event_seq, topic, attempt, status, next_try_at, first_at)
				VALUES ($1, $2, $3, $4, 'pending', $5, $6) ON CONFLICT DO NOTHING`,
				c.Channel.ID, c.EventSeq, c.Topic, c.Attempt+1, o.Retry, c.FirstAt); err != nil {
				return err
			}
		}
		var failures int
		var journaled bool
		if err := tx.QueryRow(ctx, `UPDATE notification_channels SET failures = failures + 1 WHERE id = $1
			RETURNING failures, failed_journaled`, c.Channel.ID).Scan(&failures, &journaled); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // removed meanwhile
			}
			return err
		}
		if journaled || failures < max(o.FailAfter, 1) {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE notification_channels SET failed_journaled = true WHERE id = $1`, c.Channel.ID); err != nil {
			return err
		}
		ev := NewEvent{Topic: wire.TopicNotificationFailed, Payload: map[string]any{
			"channel_id": c.Channel.ID, "name": c.Channel.Name, "kind": c.Channel.Kind,
			"failures": failures, "error": msg, "response_code": code,
		}}
		if c.Channel.ProjectID != nil {
			ev.ProjectID = *c.Channel.ProjectID
		}
		return tx.Journal(ctx, ev)
	})
	if err != nil {
		return fmt.Errorf("record delivery %d: %w", c.ID, err)
	}
	return nil
}

// EventBySeq returns one event; not_found once purged.
func (s *Store) EventBySeq(ctx context.Context, seq int64) (wire.Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE seq = $1`, seq)
	if err != nil {
		return wire.Event{}, fmt.Errorf("read event %d: %w", seq, translate(err))
	}
	evs, err := scanEvents(rows)
	if err != nil {
		return wire.Event{}, fmt.Errorf("read event %d: %w", seq, translate(err))
	}
	if len(evs) == 0 {
		return wire.Event{}, wire.NotFound("event")
	}
	return evs[0], nil
}

// AnswerTokenHash is how an answer token is kept: its SHA-256.
func AnswerTokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// AnswerGrant is one answer URL to store: the token's hash and the key.
type AnswerGrant struct {
	Hash []byte
	Key  string
}

// GrantAnswers stores answer tokens (hashed) for a run's question at
// attempt, usable until expires, journaled as channel when used.
func (s *Store) GrantAnswers(ctx context.Context, runID string, attempt int, question, channel string, expires time.Time, grants []AnswerGrant) error {
	var hashes [][]byte
	var keys []string
	for _, g := range grants {
		hashes, keys = append(hashes, g.Hash), append(keys, g.Key)
	}
	_, err := s.Pool.Exec(ctx, `INSERT INTO answer_tokens (token_hash, run_id, attempt, question, key, channel_name, expires_at)
		SELECT h, $3, $4, $5, k, $6, $7 FROM unnest($1::bytea[], $2::text[]) AS u(h, k)`,
		hashes, keys, runID, attempt, question, channel, expires)
	if err != nil {
		return fmt.Errorf("store the answer links of run %s: %w", runID, translate(err))
	}
	return nil
}

// Answer is a used answer token: the run and key it presses and the
// channel it came through.
type Answer struct {
	Run     wire.Run
	Key     string
	Channel string
	// question the token answers, for Unuse.
	question string
}

// expired is the refusal of every answer URL that no longer holds.
func expired(why string) error {
	return wire.Errorf(wire.CodeAnswerExpired, "this answer link no longer holds: %s", why)
}

// UseAnswer takes an answer token once: refused (answer_expired) when it
// was used, passed its hour, or its run moved on — another attempt, or
// the question it answers is no longer asked. An unknown token is
// answer_expired too, so a guess learns nothing. Old tokens are purged on
// the way.
func (s *Store) UseAnswer(ctx context.Context, token string) (Answer, error) {
	var out Answer
	err := s.InTx(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM answer_tokens WHERE expires_at < $1::timestamptz - interval '1 day'`, s.now()); err != nil {
			return err
		}
		var runID, question string
		var attempt int
		var used *time.Time
		var stale bool
		err := tx.QueryRow(ctx, `SELECT run_id::text, attempt, question, key, channel_name, used_at, expires_at <= $2
			FROM answer_tokens WHERE token_hash = $1 FOR UPDATE`, AnswerTokenHash(token), s.now()).
			Scan(&runID, &attempt, &question, &out.Key, &out.Channel, &used, &stale)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return expired("unknown")
		case err != nil:
			return err
		case used != nil:
			return expired("it was used")
		case stale:
			return expired("it is older than an hour")
		}
		r, err := runByID(ctx, tx, runID, false)
		if err != nil {
			return err
		}
		switch {
		case r.Attempt != attempt:
			return expired("the run moved to another attempt")
		case r.Status != wire.RunRunning || r.Attention != wire.AttentionNeedsInput || r.AttentionDetail == nil || r.AttentionDetail.Text != question:
			return expired("the question is no longer asked")
		}
		// One answer per question: every link of it is void once one is used.
		if _, err := tx.Exec(ctx, `UPDATE answer_tokens SET used_at = now()
			WHERE run_id = $1 AND attempt = $2 AND question = $3 AND used_at IS NULL`, runID, attempt, question); err != nil {
			return err
		}
		out.Run, out.question = r, question
		return nil
	})
	if err != nil {
		return Answer{}, fmt.Errorf("use an answer link: %w", err)
	}
	return out, nil
}

// Unuse makes the links of an answer's question usable again: the key
// never reached the run (its host was not connected).
func (s *Store) Unuse(ctx context.Context, a Answer) error {
	_, err := s.Pool.Exec(ctx, `UPDATE answer_tokens SET used_at = NULL
		WHERE run_id = $1 AND attempt = $2 AND question = $3 AND expires_at > $4`, a.Run.ID, a.Run.Attempt, a.question, s.now())
	if err != nil {
		return fmt.Errorf("make the answer links of run %s usable again: %w", a.Run.ID, translate(err))
	}
	return nil
}

// PurgeNotifications removes finished attempts older than keep and the
// answer tokens that expired a day ago.
func (s *Store) PurgeNotifications(ctx context.Context, keep time.Duration) error {
	if _, err := s.Pool.Exec(ctx, `DELETE FROM notification_deliveries
		WHERE created_at < $2::timestamptz - $1::interval AND status NOT IN ('pending', 'sending')`, keep.String(), s.now()); err != nil {
		return fmt.Errorf("purge finished deliveries: %w", translate(err))
	}
	if _, err := s.Pool.Exec(ctx, `DELETE FROM answer_tokens WHERE expires_at < $1::timestamptz - interval '1 day'`, s.now()); err != nil {
		return fmt.Errorf("purge expired answer links: %w", translate(err))
	}
	return nil
}
