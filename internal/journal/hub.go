// Package journal fans the event journal out to live subscribers. One
// tailer reads newly committed events from the database in seq order and
// hands each Server-Sent Events subscriber its own bounded queue of
// pre-encoded frames, so a client that cannot keep up is disconnected
// instead of slowing down the tailer or anyone else.
package journal

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"pam/internal/store"
	"pam/internal/wire"
)

// pageSize bounds every read of the events table, by the tailer and by a
// subscriber's backfill alike.
const pageSize = 1000

// purgeEvery is how often Run purges events older than the retention.
const purgeEvery = 24 * time.Hour

// Options configures a Hub. Zero values mean the defaults.
type Options struct {
	Logger *slog.Logger // nil = discard
	// PollInterval is how often the tailer reads the events table when no
	// Wake arrives, e.g. for events written by another process; default 1s.
	PollInterval time.Duration
	// MaxPending bounds the encoded bytes waiting for one subscriber; a
	// subscriber whose queue would pass it is disconnected. Default 1 MiB.
	MaxPending int
	// Retention is PAM_EVENT_RETENTION: events older than this are purged
	// at start and then daily. 0 keeps events forever.
	Retention time.Duration
	// Observe, when set, sees every event the tailer publishes, in order,
	// once each, after the subscribers got it (serve logs a run's start,
	// end and questions with it). It must be quick: it runs on the tailer.
	Observe func(wire.Event)
}

// Hub owns the tailer and the set of live subscribers.
type Hub struct {
	store      *store.Store
	log        *slog.Logger
	poll       time.Duration
	maxPending int
	retention  time.Duration
	observe    func(wire.Event)

	wake    chan struct{} // capacity 1: a pending Wake is never lost
	ready   chan struct{} // closed once Run knows the journal's head
	stopped chan struct{} // closed when Run returns

	mu        sync.Mutex
	published int64 // seq of the last event handed to subscribers
	subs      map[*subscriber]struct{}
	closed    bool // Run has returned: no new subscribers

	dropped atomic.Uint64

	// afterRegister, when set (tests), runs in ServeSSE right after the
	// subscriber registered: what commits then is after the connection.
	afterRegister func()
}

// NewHub returns a Hub reading from s. Nothing happens until Run; wire
// Wake as s.AfterCommit (before Run and before any transaction) so new
// events go out as soon as they commit.
func NewHub(s *store.Store, o Options) *Hub {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 1 << 20
	}
	return &Hub{
		store:      s,
		log:        o.Logger,
		poll:       o.PollInterval,
		maxPending: o.MaxPending,
		retention:  o.Retention,
		observe:    o.Observe,
		wake:       make(chan struct{}, 1),
		ready:      make(chan struct{}),
		stopped:    make(chan struct{}),
		subs:       map[*subscriber]struct{}{},
	}
}

// Wake tells the tailer that events were committed. It never blocks.
func (h *Hub) Wake() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Subscribers is the number of connected SSE subscribers.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Dropped counts the subscribers disconnected because their pending queue
// passed MaxPending (for metrics).
func (h *Hub) Dropped() uint64 { return h.dropped.Load() }

// Run tails the journal and purges old events until ctx ends. It must be
// called once. When it returns, its goroutines have stopped and every
// subscriber has been disconnected (clients resume with Last-Event-ID).
// Database failures are logged and retried, so Run returns nil.
func (h *Hub) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer h.stop()
	defer wg.Wait()
	if h.retention > 0 {
		wg.Go(func() { h.purgeLoop(ctx) })
	}

	last, ok := h.head(ctx)
	if !ok {
		return nil
	}
	h.mu.Lock()
	h.published = last
	h.mu.Unlock()
	close(h.ready)

	tick := time.NewTicker(h.poll)
	defer tick.Stop()
	failing := false
	for {
		err := h.drain(ctx, &last)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			h.log.Warn("journal: read events", "err", err)
			failing = true
		case err == nil && failing:
			h.log.Info("journal: reading events again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-h.wake:
		case <-tick.C:
		}
	}
}

// head reads the journal's current last seq, retrying until the database
// answers: subscribers cannot be served before the tailer knows where the
// live stream starts.
func (h *Hub) head(ctx context.Context) (int64, bool) {
	for logged := false; ; {
		last, err := h.store.SafeSeq(ctx)
		if err == nil {
			return last, true
		}
		if ctx.Err() != nil {
			return 0, false
		}
		if !logged {
			h.log.Warn("journal: read last seq", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(h.poll):
		}
	}
}

// drain publishes every event after *last up to the journal's safe seq
// (store.SafeSeq): no transaction still running can commit a seq below it,
// so publishing in seq order up to there never skips an event.
func (h *Hub) drain(ctx context.Context, last *int64) error {
	safe, err := h.store.SafeSeq(ctx)
	if err != nil {
		return err
	}
	for *last < safe {
		evs, err := h.store.EventsAfter(ctx, *last, safe, nil, pageSize)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			// Nothing left below safe (aborted seqs, or a purge).
			*last = safe
			h.mu.Lock()
			h.published = safe
			h.mu.Unlock()
			return nil
		}
		h.publish(evs)
		*last = evs[len(evs)-1].Seq
	}
	return nil
}

// publish queues evs, in order, for every subscriber whose pattern matches.
// It never blocks on a client: a subscriber whose queue would pass
// MaxPending is removed here and disconnected once the lock is released.
func (h *Hub) publish(evs []wire.Event) {
	frames := make([]frame, 0, len(evs))
	for _, ev := range evs {
		f, err := encodeEvent(ev)
		if err != nil {
			h.log.Error("journal: encode event", "seq", ev.Seq, "err", err)
			continue
		}
		frames = append(frames, f)
	}
	var slow []*subscriber
	h.mu.Lock()
	for s := range h.subs {
		if !s.push(frames, h.maxPending) {
			delete(h.subs, s)
			slow = append(slow, s)
		}
	}
	h.published = evs[len(evs)-1].Seq
	h.mu.Unlock()
	for _, s := range slow {
		s.end()
		h.dropped.Add(1)
		h.log.Info("journal: disconnected slow subscriber", "remote", s.remote, "max_pending", h.maxPending)
	}
	if h.observe != nil {
		for _, ev := range evs {
			h.observe(ev)
		}
	}
}

// register adds s and returns the seq of the last event published before
// it: s will receive through its queue every matching event after that
// seq, and must read the earlier ones from the database.
func (h *Hub) register(s *subscriber) (published int64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, false
	}
	h.subs[s] = struct{}{}
	return h.published, true
}

// unregister removes s when its handler returns.
func (h *Hub) unregister(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.exit()
}

// stop disconnects every subscriber and refuses new ones.
func (h *Hub) stop() {
	h.mu.Lock()
	h.closed = true
	subs := h.subs
	h.subs = map[*subscriber]struct{}{}
	h.mu.Unlock()
	for s := range subs {
		s.end()
	}
	close(h.stopped)
}

// purgeLoop deletes events older than the retention at start and then
// every purgeEvery. Failures are logged; the next round tries again.
func (h *Hub) purgeLoop(ctx context.Context) {
	tick := time.NewTicker(purgeEvery)
	defer tick.Stop()
	for {
		n, err := h.store.PurgeEvents(ctx, time.Now().Add(-h.retention))
		switch {
		case err != nil && ctx.Err() == nil:
			h.log.Warn("journal: purge events", "err", err)
		case n > 0:
			h.log.Info("journal: purged events", "count", n, "retention", h.retention)
		}
		if err := h.store.PurgeBounds(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("journal: purge report counts and push requests", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
