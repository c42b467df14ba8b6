// Package notify delivers journal events to notification channels
// (webhook, ntfy, Slack) from the delivery queue in the database
// (docs/notifications.md). The journal never waits for it: events are
// turned into queued deliveries after they committed, and each channel
// is sent to by a goroutine of its own, so a slow or dead receiver holds
// up only its own channel.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"pam/internal/store"
	"pam/internal/wire"
)

// Defaults of Options.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 5 * time.Minute
	DefaultRetryFor    = 24 * time.Hour
	DefaultFailAfter   = 5
	DefaultAnswerTTL   = time.Hour
	DefaultPoll        = time.Second
)

// Options configures a Notifier; zero values are the defaults.
type Options struct {
	Store *store.Store
	// PublicURL is PAM_PUBLIC_URL: links and answer URLs start with it.
	// Without it notifications carry no link and no answers.
	PublicURL string
	Logger    *slog.Logger
	// Timeout bounds one request to a receiver (10 s).
	Timeout time.Duration
	// BackoffBase doubles after every failed attempt up to BackoffMax;
	// attempts stop RetryFor after the first.
	BackoffBase, BackoffMax, RetryFor time.Duration
	// FailAfter failed attempts in a row journal notification.failed.
	FailAfter int
	// AnswerTTL is how long an answer URL holds (1 h).
	AnswerTTL time.Duration
	// Poll is how often the queue is looked at without a Wake (1 s).
	Poll time.Duration
	// Lease is how long a claimed attempt is another sender's to leave
	// alone (Timeout + 20 s): a serve that dies mid-request leaves its
	// attempt to be taken again once the lease passes.
	Lease time.Duration
	// KeepFor is how long finished attempts are kept (7 days).
	KeepFor time.Duration
}

// DefaultKeepFor is how long finished attempts are kept.
const DefaultKeepFor = 7 * 24 * time.Hour

// minGap spaces the passes that wakes would run back to back.
const minGap = 10 * time.Millisecond

// purgeEvery is how often old attempts and answer tokens are removed.
const purgeEvery = time.Hour

// Notifier turns journal events into deliveries and sends them.
type Notifier struct {
	o      Options
	log    *slog.Logger
	client *http.Client
	wake   chan struct{}

	mu   sync.Mutex
	busy map[string]bool // channels a goroutine of ours sends to
	wg   sync.WaitGroup

	purged time.Time // when old attempts were last removed
}

// New returns a Notifier; nothing is sent until Run.
func New(o Options) *Notifier {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	if o.RetryFor <= 0 {
		o.RetryFor = DefaultRetryFor
	}
	if o.FailAfter <= 0 {
		o.FailAfter = DefaultFailAfter
	}
	if o.AnswerTTL <= 0 {
		o.AnswerTTL = DefaultAnswerTTL
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Lease <= 0 {
		o.Lease = o.Timeout + 20*time.Second
	}
	if o.KeepFor <= 0 {
		o.KeepFor = DefaultKeepFor
	}
	o.PublicURL = strings.TrimRight(o.PublicURL, "/")
	return &Notifier{
		o: o, log: o.Logger, wake: make(chan struct{}, 1), busy: map[string]bool{},
		client: &http.Client{
			Timeout: o.Timeout,
			// A receiver's redirect is not followed: the URL given is
			// the one trusted with the payload.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// Wake makes Run look at the journal and the queue now (wired to the
// store's AfterCommit beside the journal's tailer; never blocks).
func (n *Notifier) Wake() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Run enqueues and sends until ctx ends, then waits for its senders.
func (n *Notifier) Run(ctx context.Context) error {
	t := time.NewTicker(n.o.Poll)
	defer t.Stop()
	defer n.wg.Wait()
	for {
		n.pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-n.wake:
		case <-t.C:
		}
		// Wakes come with every commit that journals: under load passes
		// are spaced, each taking what came meanwhile.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(minGap):
		}
	}
}

// pass enqueues what the journal has for the channels, then starts a
// sender for every channel with a due delivery that has none here.
func (n *Notifier) pass(ctx context.Context) {
	if time.Since(n.purged) > purgeEvery {
		n.purged = time.Now()
		if err := n.o.Store.PurgeNotifications(ctx, n.o.KeepFor); err != nil && ctx.Err() == nil {
			n.log.Warn("notifications: purge old attempts", "err", err)
		}
	}
	safe, err := n.o.Store.SafeSeq(ctx)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("notifications: read the journal position", "err", err)
		}
		return
	}
	for {
		_, more, err := n.o.Store.EnqueueEvents(ctx, safe)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("notifications: enqueue", "err", err)
			}
			return
		}
		if !more {
			break
		}
	}
	n.mu.Lock()
	busy := make([]string, 0, len(n.busy))
	for id := range n.busy {
		busy = append(busy, id)
	}
	n.mu.Unlock()
	due, err := n.o.Store.DueChannels(ctx, busy)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("notifications: look for due deliveries", "err", err)
		}
		return
	}
	for _, id := range due {
		n.mu.Lock()
		if n.busy[id] {
			n.mu.Unlock()
			continue
		}
		n.busy[id] = true
		n.mu.Unlock()
		n.wg.Add(1)
		go n.drain(ctx, id)
	}
}

// drain sends the channel's due deliveries one after the other, oldest
// first, until none is due.
func (n *Notifier) drain(ctx context.Context, channelID string) {
	defer n.wg.Done()
	defer func() {
		n.mu.Lock()
		delete(n.busy, channelID)
		n.mu.Unlock()
		n.Wake()
	}()
	for ctx.Err() == nil {
		c, err := n.o.Store.ClaimDelivery(ctx, channelID, n.o.Lease)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("notifications: claim a delivery", "channel_id", channelID, "err", err)
			}
			return
		}
		if c == nil {
			return
		}
		n.deliver(ctx, c)
	}
}

// deliver makes one attempt and records it.
func (n *Notifier) deliver(ctx context.Context, c *store.Claimed) {
	msg, err := n.message(ctx, c)
	var o store.Outcome
	if err != nil {
		o.Err = err.Error() // the event is gone: nothing to retry
	} else {
		o.Code, err = n.send(ctx, c, msg)
		if err != nil {
			if ctx.Err() != nil {
				return // shutting down: the lease runs out and another try comes
			}
			o.Err = err.Error()
			if next := time.Now().Add(n.backoff(c.Attempt)); next.Sub(c.FirstAt) < n.o.RetryFor {
				o.Retry = next
			}
		}
	}
	o.FailAfter = n.o.FailAfter
	if o.Err != "" {
		n.log.Info("notification attempt failed", "channel", c.Channel.Name, "topic", c.Topic, "attempt", c.Attempt, "code", o.Code, "err", o.Err)
	}
	if err := n.o.Store.FinishDelivery(ctx, c, o); err != nil && ctx.Err() == nil {
		n.log.Warn("notifications: record an attempt", "channel", c.Channel.Name, "err", err)
	}
}

// backoff is the wait after the attempt-th failure: the base doubling,
// capped.
func (n *Notifier) backoff(attempt int) time.Duration {
	d := n.o.BackoffBase
	for i := 1; i < attempt && d < n.o.BackoffMax; i++ {
		d *= 2
	}
	return min(d, n.o.BackoffMax)
}

// message is what a delivery says, built when it is sent (answer URLs
// are made fresh for each attempt and only their hashes are kept).
type message struct {
	event   wire.Event
	run     *wire.Run
	link    *string
	title   string
	text    string
	answers []wire.AnswerChoice
}

func (n *Notifier) message(ctx context.Context, c *store.Claimed) (message, error) {
	if c.EventSeq == nil {
		payload, _ := json.Marshal(map[string]any{"channel_id": c.Channel.ID, "name": c.Channel.Name})
		m := message{event: wire.Event{Topic: store.TopicTest, Payload: payload, CreatedAt: time.Now().UTC()},
			title: "pam: test", text: fmt.Sprintf("pam: a test of the channel %s", c.Channel.Name)}
		if n.o.PublicURL != "" {
			l := n.o.PublicURL + "/"
			m.link = &l
		}
		return m, nil
	}
	ev, err := n.o.Store.EventBySeq(ctx, *c.EventSeq)
	if err != nil {
		return message{}, fmt.Errorf("event %d: %w", *c.EventSeq, err)
	}
	m := message{event: ev}
	if ev.RunID != nil {
		if r, err := n.o.Store.GetRun(ctx, *ev.RunID); err == nil {
			m.run = &r
		}
	}
	if n.o.PublicURL != "" {
		l := n.o.PublicURL + "/"
		if m.run != nil {
			l = n.o.PublicURL + "/runs/" + m.run.ID
		}
		m.link = &l
	}
	m.title, m.text = describe(ev, m.run)
	if c.Channel.Kind != wire.ChannelSlack {
		m.answers = n.grant(ctx, c, ev, m.run)
	}
	return m, nil
}

// grant makes the answer URLs of a question with choices that the run
// still asks: a single-use token per choice, stored hashed.
func (n *Notifier) grant(ctx context.Context, c *store.Claimed, ev wire.Event, r *wire.Run) []wire.AnswerChoice {
	if ev.Topic != string(wire.TopicRunAttention) || r == nil || n.o.PublicURL == "" {
		return nil
	}
	var p struct {
		Attention string `json:"attention"`
		Attempt   int    `json:"attempt"`
	}
	if json.Unmarshal(ev.Payload, &p) != nil || p.Attention != wire.AttentionNeedsInput {
		return nil
	}
	d := r.AttentionDetail
	if r.Attention != wire.AttentionNeedsInput || d == nil || len(d.Choices) == 0 || (p.Attempt != 0 && p.Attempt != r.Attempt) {
		return nil
	}
	var grants []store.AnswerGrant
	var out []wire.AnswerChoice
	for _, ch := range d.Choices {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil
		}
		tok := hex.EncodeToString(b[:])
		grants = append(grants, store.AnswerGrant{Hash: store.AnswerTokenHash(tok), Key: ch.Key})
		out = append(out, wire.AnswerChoice{Key: ch.Key, Label: ch.Label, AnswerURL: n.o.PublicURL + "/api/v1/answers/" + tok})
	}
	if err := n.o.Store.GrantAnswers(ctx, r.ID, r.Attempt, d.Text, c.Channel.Name, time.Now().Add(n.o.AnswerTTL), grants); err != nil {
		n.log.Warn("notifications: store answer links", "run_id", r.ID, "err", err)
		return nil
	}
	return out
}

// describe is a notification's title and one-line text.
func describe(ev wire.Event, r *wire.Run) (title, text string) {
	var p map[string]any
	_ = json.Unmarshal(ev.Payload, &p)
	str := func(k string) string { s, _ := p[k].(string); return s }
	who := "pam"
	if r != nil {
		who = fmt.Sprintf("run %s (%s)", r.SessionName, r.Provider)
	}
	switch wire.Topic(ev.Topic) {
	case wire.TopicRunAttention:
		switch str("attention") {
		case wire.AttentionNeedsInput:
			q := ""
			if r != nil && r.AttentionDetail != nil {
				q = r.AttentionDetail.Text
			}
			if q == "" {
				return "pam: needs input", who + " needs input"
			}
			return "pam: needs input", who + " needs input: " + q
		case wire.AttentionRateLimited:
			return "pam: usage limit", who + " stopped at a usage limit"
		case wire.AttentionIdle:
			return "pam: idle", who + " is idle"
		default:
			return "pam: answered", who + " no longer waits"
		}
	case wire.TopicRunFailed:
		return "pam: run failed", who + " failed: " + str("failure_reason")
	case wire.TopicRunCompleted:
		return "pam: run completed", who + " completed"
	case wire.TopicRunExited:
		return "pam: run exited", who + " exited"
	case wire.TopicNotificationFailed:
		return "pam: a channel fails", fmt.Sprintf("notification channel %s keeps failing: %s", str("name"), str("error"))
	}
	return "pam: " + ev.Topic, who + ": " + ev.Topic
}

// send makes one request to the channel; the status code and nil when a
// 2xx came back.
func (n *Notifier) send(ctx context.Context, c *store.Claimed, m message) (int, error) {
	var body []byte
	h := http.Header{}
	switch c.Channel.Kind {
	case wire.ChannelWebhook:
		body, _ = json.Marshal(wire.WebhookPayload{Event: m.event, Run: m.run, Link: m.link, Text: m.text, Answers: m.answers})
		h.Set("Content-Type", "application/json")
		h.Set("Pam-Signature", Sign(c.Secret, body))
	case wire.ChannelSlack:
		text := m.text
		if m.link != nil {
			text += " " + *m.link
		}
		body, _ = json.Marshal(map[string]string{"text": text})
		h.Set("Content-Type", "application/json")
	case wire.ChannelNtfy:
		body = []byte(m.text)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Title", headerSafe(m.title))
		if m.link != nil {
			h.Set("Click", *m.link)
		}
		if a := ntfyActions(m.answers); a != "" {
			h.Set("Actions", a)
		}
	default:
		return 0, fmt.Errorf("unknown channel kind %q", c.Channel.Kind)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Channel.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = h
	req.Header.Set("User-Agent", "pam-notify")
	resp, err := n.client.Do(req)
	if err != nil {
		var ue interface{ Timeout() bool }
		if errors.As(err, &ue) && ue.Timeout() {
			return 0, fmt.Errorf("no answer within %s", n.o.Timeout)
		}
		return 0, errors.New(strings.ReplaceAll(err.Error(), c.Channel.URL, "<url>"))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}

// Sign is the Pam-Signature of a webhook body: sha256=<hex HMAC-SHA256
// of the body keyed with the channel's secret>.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// ntfyMaxActions is how many action buttons ntfy shows.
const ntfyMaxActions = 3

// ntfyActions is ntfy's Actions header: one http action per choice that
// POSTs its answer URL and clears the notification.
func ntfyActions(answers []wire.AnswerChoice) string {
	var parts []string
	for i, a := range answers {
		if i == ntfyMaxActions {
			break
		}
		label := a.Label
		if label == "" {
			label = a.Key
		}
		parts = append(parts, fmt.Sprintf("http, %s, %s, method=POST, clear=true", ntfyLabel(label), a.AnswerURL))
	}
	return strings.Join(parts, "; ")
}

// ntfyLabel keeps a label out of the header's syntax (commas and
// semicolons separate fields and actions) and short.
func ntfyLabel(s string) string {
	s = strings.Map(func(r rune) rune {
		switch r {
		case ',', ';', '"', '\'', '=', '\r', '\n':
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > 40 {
		s = string(r[:40])
	}
	return headerSafe(s)
}

// headerSafe drops what a header value cannot hold.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
