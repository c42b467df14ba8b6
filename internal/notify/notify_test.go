package notify_test

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/eventually"
	"pam/internal/notify"
	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestMain fails the package when a goroutine outlives its tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

// received is one request a test receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is an httptest server that records what it receives and
// answers with status(n) for the n-th request (from 1).
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []received
	hits atomic.Int64
}

func newReceiver(t testing.TB, status func(n int64) int) *receiver {
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := rc.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		code := status(n)
		if code/100 == 2 {
			rc.mu.Lock()
			rc.got = append(rc.got, received{r.Header.Clone(), body})
			rc.mu.Unlock()
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) delivered() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// run starts a notifier until the test ends.
func run(t testing.TB, st *store.Store, o notify.Options) *notify.Notifier {
	t.Helper()
	o.Store = st
	if o.Poll == 0 {
		o.Poll = 20 * time.Millisecond
	}
	n := notify.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

func channel(t testing.TB, st *store.Store, kind, url string, events ...string) (wire.Channel, string) {
	t.Helper()
	secret := "s3cret-" + kind
	c, err := st.CreateChannel(context.Background(), wire.CreateChannel{Name: kind + "-" + url, Kind: kind, URL: url, Events: events}, secret)
	if err != nil {
		t.Fatal(err)
	}
	return c, secret
}

// journal writes n events of topic straight into the journal.
func journal(t testing.TB, st *store.Store, topic string, n int) {
	t.Helper()
	if _, err := st.Pool.Exec(context.Background(), `INSERT INTO events (topic, payload)
		SELECT $1, jsonb_build_object('i', g) FROM generate_series(1, $2) AS g`, topic, n); err != nil {
		t.Fatal(err)
	}
}

func deliveries(t *testing.T, st *store.Store, id string) []wire.Delivery {
	t.Helper()
	ds, err := st.Deliveries(context.Background(), id, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// A webhook receiver that fails first and then recovers gets the event
// exactly once successfully, signed with the channel's secret; every
// attempt is recorded, the failed one with its status code.
func TestWebhookRetriedUntilDeliveredOnceSigned(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	rc := newReceiver(t, func(n int64) int {
		if n <= 2 {
			return 503
		}
		return 200
	})
	c, secret := channel(t, st, wire.ChannelWebhook, rc.URL, "project.*")
	run(t, st, notify.Options{PublicURL: "https://pam.example/", BackoffBase: 50 * time.Millisecond})
	journal(t, st, "project.created", 1)
	journal(t, st, "work_item.created", 1) // not a topic of the channel

	eventually.Wait(t, 20*time.Second, "the delivery after two failures", func() bool { return len(rc.delivered()) == 1 })
	ds := deliveries(t, st, c.ID)
	eventually.Wait(t, eventually.Medium, "three attempts recorded", func() bool {
		ds = deliveries(t, st, c.ID)
		return len(ds) == 3 && ds[0].Status == wire.DeliveryDelivered
	})
	for i, want := range []struct {
		status string
		code   int
	}{{wire.DeliveryDelivered, 200}, {wire.DeliveryFailed, 503}, {wire.DeliveryFailed, 503}} {
		if d := ds[i]; d.Status != want.status || d.ResponseCode == nil || *d.ResponseCode != want.code || d.Attempt != 3-i || d.Topic != "project.created" {
			t.Fatalf("attempt %d: %+v", i, d)
		}
	}
	got := rc.delivered()[0]
	if sig := got.header.Get("Pam-Signature"); !hmac.Equal([]byte(sig), []byte(notify.Sign(secret, got.body))) || !strings.HasPrefix(sig, "sha256=") {
		t.Fatalf("signature %q does not sign the body", sig)
	}
	var p wire.WebhookPayload
	if err := json.Unmarshal(got.body, &p); err != nil || p.Event.Topic != "project.created" || p.Text == "" || p.Link == nil || *p.Link != "https://pam.example/" {
		t.Fatalf("payload %s (%v)", got.body, err)
	}
	// Nothing more comes: exactly once.
	journal(t, st, "project.updated", 1)
	eventually.Wait(t, eventually.Medium, "the next event", func() bool { return len(rc.delivered()) == 2 })
	if n := rc.hits.Load(); n != 4 {
		t.Fatalf("%d requests, want 4 (two failures, two deliveries)", n)
	}
}

// A channel that keeps failing journals notification.failed once; a
// channel is never sent its own failure.
func TestChannelThatKeepsFailingIsJournaled(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	rc := newReceiver(t, func(int64) int { return 500 })
	c, _ := channel(t, st, wire.ChannelWebhook, rc.URL, "project.created", "notification.failed")
	run(t, st, notify.Options{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, FailAfter: 3})
	journal(t, st, "project.created", 1)
	var failed []wire.Event
	eventually.Wait(t, 20*time.Second, "notification.failed", func() bool {
		evs, err := st.EventsAfter(context.Background(), 0, 1<<62, nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		failed = failed[:0]
		for _, ev := range evs {
			if ev.Topic == string(wire.TopicNotificationFailed) {
				failed = append(failed, ev)
			}
		}
		return len(failed) > 0 && len(deliveries(t, st, c.ID)) >= 6
	})
	if len(failed) != 1 || !strings.Contains(string(failed[0].Payload), c.ID) {
		t.Fatalf("notification.failed events: %+v", failed)
	}
	for _, d := range deliveries(t, st, c.ID) {
		if d.Topic != "project.created" {
			t.Fatalf("the channel was sent %s", d.Topic)
		}
	}
}

// A receiver that never answers holds up only its own channel: with
// 1,000 events queued for it, another channel gets every one of them
// promptly, and journaling is not slowed.
func TestDeadReceiverDoesNotSlowOthers(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	hang := make(chan struct{})
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); dead.Close() })
	live := newReceiver(t, func(int64) int { return 204 })
	deadCh, _ := channel(t, st, wire.ChannelWebhook, dead.URL, "run.*")
	channel(t, st, wire.ChannelSlack, live.URL, "run.*")
	run(t, st, notify.Options{Timeout: 5 * time.Second})

	const events = 1000
	start := time.Now()
	for i := 0; i < events; i += 100 {
		journal(t, st, "run.progress", 100)
	}
	journaled := time.Since(start)
	eventually.Wait(t, 60*time.Second, "every event at the live channel", func() bool { return len(live.delivered()) == events })
	took := time.Since(start)
	t.Logf("1,000 events journaled in %s; all delivered to the live channel in %s while the other hangs", journaled, took)
	if took > 30*time.Second {
		t.Fatalf("the live channel took %s for %d events", took, events)
	}
	// The dead channel has its 1,000 queued and one under way.
	ds := deliveries(t, st, deadCh.ID)
	if len(ds) != events {
		t.Fatalf("%d deliveries queued for the dead channel, want %d", len(ds), events)
	}
	var body struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(live.delivered()[0].body, &body); err != nil || body.Text == "" {
		t.Fatalf("slack body %s", live.delivered()[0].body)
	}
}

// ntfy gets the text as the body with Title and Click headers.
func TestNtfyHeaders(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	rc := newReceiver(t, func(int64) int { return 200 })
	c, _ := channel(t, st, wire.ChannelNtfy, rc.URL+"/pam-topic", "notification.test")
	run(t, st, notify.Options{PublicURL: "https://pam.example"})
	if err := st.EnqueueTest(context.Background(), c.ID); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Medium, "the test message", func() bool { return len(rc.delivered()) == 1 })
	got := rc.delivered()[0]
	if got.header.Get("Title") != "pam: test" || got.header.Get("Click") != "https://pam.example/" || !strings.Contains(string(got.body), c.Name) {
		t.Fatalf("ntfy request: %v %q", got.header, got.body)
	}
}

// A redirect is not followed: it is a failed attempt.
func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	target := newReceiver(t, func(int64) int { return 200 })
	redir := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	t.Cleanup(redir.Close)
	c, _ := channel(t, st, wire.ChannelSlack, redir.URL, "notification.test")
	run(t, st, notify.Options{BackoffBase: time.Hour})
	if err := st.EnqueueTest(context.Background(), c.ID); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Medium, "the failed attempt", func() bool {
		ds := deliveries(t, st, c.ID)
		return len(ds) == 2 && ds[1].Status == wire.DeliveryFailed
	})
	if ds := deliveries(t, st, c.ID); ds[1].ResponseCode == nil || *ds[1].ResponseCode != 307 || target.hits.Load() != 0 {
		t.Fatalf("redirect: %+v, target hit %d times", ds[1], target.hits.Load())
	}
}

// Two notifiers on one database (two serves) deliver each event to a
// channel once.
func TestTwoServesDeliverEachEventOnce(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	other, err := st.WithOwnPool(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	rc := newReceiver(t, func(int64) int { return 200 })
	channel(t, st, wire.ChannelWebhook, rc.URL, "run.*")
	run(t, st, notify.Options{})
	run(t, other, notify.Options{})
	const events = 300
	for range 3 {
		journal(t, st, "run.progress", events/3)
	}
	eventually.Wait(t, 60*time.Second, "every event delivered", func() bool { return len(rc.delivered()) >= events })
	seen := map[int64]int{}
	for _, r := range rc.delivered() {
		var p wire.WebhookPayload
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatal(err)
		}
		seen[p.Event.Seq]++
	}
	if len(seen) != events {
		t.Fatalf("%d distinct events delivered, want %d", len(seen), events)
	}
	for seq, n := range seen {
		if n != 1 {
			t.Fatalf("event %d delivered %d times", seq, n)
		}
	}
}

// The queue is in the database: events journaled while no serve runs are
// delivered once one starts, and an attempt a serve left mid-request is
// taken again by the next once its lease passes, and delivered once.
func TestQueueSurvivesRestart(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	var n atomic.Int64
	var mu sync.Mutex
	var ok []string
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if n.Add(1) == 1 { // the first request hangs until its serve goes
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		mu.Lock()
		ok = append(ok, string(body))
		mu.Unlock()
	}))
	t.Cleanup(func() { close(release); rc.Close() })
	c, _ := channel(t, st, wire.ChannelWebhook, rc.URL, "run.*")
	journal(t, st, "run.failed", 1) // no serve runs yet

	first := notify.New(notify.Options{Store: st, Poll: 20 * time.Millisecond, Lease: 500 * time.Millisecond})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = first.Run(ctx); close(done) }()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first serve never sent")
	}
	stop() // the serve goes away mid-request
	<-done
	if ds := deliveries(t, st, c.ID); len(ds) != 1 || ds[0].Status != wire.DeliverySending {
		t.Fatalf("after the first serve: %+v", ds)
	}
	run(t, st, notify.Options{Lease: 500 * time.Millisecond})
	eventually.Wait(t, 20*time.Second, "the delivery by the next serve", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ok) == 1
	})
	eventually.Wait(t, eventually.Medium, "the attempt recorded", func() bool {
		ds := deliveries(t, st, c.ID)
		return len(ds) == 1 && ds[0].Status == wire.DeliveryDelivered && ds[0].Attempt == 1
	})
}

// Retries stop RetryFor after the first attempt: the last is gave_up.
func TestRetriesStopAfterRetryFor(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	rc := newReceiver(t, func(int64) int { return 500 })
	c, _ := channel(t, st, wire.ChannelSlack, rc.URL, "run.failed")
	run(t, st, notify.Options{BackoffBase: 20 * time.Millisecond, RetryFor: 300 * time.Millisecond})
	journal(t, st, "run.failed", 1)
	var ds []wire.Delivery
	eventually.Wait(t, 20*time.Second, "the delivery given up", func() bool {
		ds = deliveries(t, st, c.ID)
		return len(ds) > 0 && ds[0].Status == wire.DeliveryGaveUp
	})
	if len(ds) < 3 {
		t.Fatalf("gave up after %d attempts", len(ds))
	}
	for i, d := range ds[1:] {
		if d.Status != wire.DeliveryFailed || d.ResponseCode == nil || *d.ResponseCode != 500 || d.Attempt != len(ds)-1-i {
			t.Fatalf("attempt %+v", d)
		}
	}
}

// A channel of one project gets only that project's events.
func TestChannelOfOneProject(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	a, err := st.CreateProject(ctx, wire.CreateProject{Name: "Alpha"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.CreateProject(ctx, wire.CreateProject{Name: "Beta"})
	if err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, func(int64) int { return 200 })
	ch, err := st.CreateChannel(ctx, wire.CreateChannel{Name: "alpha-only", Kind: wire.ChannelWebhook, URL: rc.URL, Events: []string{"project.*"}, ProjectID: &a.ID}, "s")
	if err != nil {
		t.Fatal(err)
	}
	run(t, st, notify.Options{})
	for _, p := range []wire.Project{b, a} {
		if _, err := st.Pool.Exec(ctx, `INSERT INTO events (topic, project_id, payload) VALUES ('project.updated', $1, '{}')`, p.ID); err != nil {
			t.Fatal(err)
		}
	}
	journal(t, st, "project.updated", 1) // no project
	eventually.Wait(t, eventually.Medium, "alpha's event", func() bool { return len(rc.delivered()) >= 1 })
	// Everything is enqueued by now: the last event (no project) is
	// after alpha's, and enqueueing is in seq order.
	eventually.Wait(t, eventually.Medium, "the cursor past every event", func() bool {
		var cur, top int64
		_ = st.Pool.QueryRow(ctx, `SELECT (SELECT seq FROM notification_cursor), (SELECT max(seq) FROM events)`).Scan(&cur, &top)
		return cur == top
	})
	if ds := deliveries(t, st, ch.ID); len(ds) != 1 {
		t.Fatalf("%d deliveries queued, want alpha's only", len(ds))
	}
	got := rc.delivered()
	var p wire.WebhookPayload
	if err := json.Unmarshal(got[0].body, &p); err != nil || p.Event.ProjectID == nil || *p.Event.ProjectID != a.ID {
		t.Fatalf("delivered %s", got[0].body)
	}
}
