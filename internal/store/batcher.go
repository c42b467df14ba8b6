package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the signal batcher (docs/architecture.md#group-commit).
const (
	// DefaultSignalBatch bounds the signals of one transaction.
	DefaultSignalBatch = 128
	// DefaultSignalBatchTimeout bounds one batch's transaction: a batch
	// serves many senders, so no one sender's context may cancel it.
	DefaultSignalBatchTimeout = 30 * time.Second
)

// BatcherOptions configures a SignalBatcher; zero values are the defaults.
type BatcherOptions struct {
	// Decide decides each signal (runs.Service.DecideSignal); required.
	Decide SignalRule
	// Lanes is how many batches may commit at once (0: one per two cores,
	// at least one). Each lane holds a database connection while it
	// commits. More lanes make smaller batches: the work per signal grows,
	// which pays only when cores would otherwise idle (on two cores, one
	// lane ingests the most: docs/architecture.md#group-commit).
	Lanes    int
	MaxBatch int
	Timeout  time.Duration
	// OnBatch, if set, is told the size of every batch just before its
	// signals are answered, and whether they were committed together (false: the
	// batch failed and its signals were applied one by one).
	OnBatch func(size int, together bool)
}

// SignalBatcher is the group commit of signal ingest: signals that arrive
// while a batch commits are collected and committed together in the next
// one (IngestSignals), each answered only once its own transaction has
// committed. Nothing waits when the system is idle: a signal that finds
// its lane free starts a batch at once. Signals of one run always go to
// the same lane, whose batches commit one after another, each applying
// its signals in the order they were submitted: the signals of one run
// are applied in the order they were submitted.
type SignalBatcher struct {
	store   *Store
	o       BatcherOptions
	lanes   []*lane
	waiting atomic.Int64
}

// lane is one sequence of batches: at most one commits at a time.
type lane struct {
	mu    sync.Mutex
	queue []pendingSignal
	// done is closed when the lane's running drain ends; nil when idle.
	done chan struct{}
}

type pendingSignal struct {
	in   SignalIn
	done func(SignalOut)
}

// NewSignalBatcher returns a batcher that ingests through s.
func (s *Store) NewSignalBatcher(o BatcherOptions) *SignalBatcher {
	if o.Lanes <= 0 {
		o.Lanes = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultSignalBatch
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultSignalBatchTimeout
	}
	b := &SignalBatcher{store: s, o: o, lanes: make([]*lane, o.Lanes)}
	for i := range b.lanes {
		b.lanes[i] = &lane{}
	}
	return b
}

// Submit queues a signal; done is called with its outcome once the
// transaction that applied it has committed (or failed), from the lane's
// goroutine: it must not block. Submissions from one goroutine for one
// run are applied in the order of the calls.
func (b *SignalBatcher) Submit(in SignalIn, done func(SignalOut)) {
	h := fnv.New32a()
	h.Write([]byte(in.RunID))
	l := b.lanes[h.Sum32()%uint32(len(b.lanes))]
	b.waiting.Add(1)
	l.mu.Lock()
	l.queue = append(l.queue, pendingSignal{in: in, done: done})
	start := l.done == nil
	if start {
		l.done = make(chan struct{})
	}
	l.mu.Unlock()
	if start {
		go b.drain(l)
	}
}

// Waiting is how many signals are queued or being committed.
func (b *SignalBatcher) Waiting() int { return int(b.waiting.Load()) }

// Wait returns once no batch is committing, or when ctx ends.
func (b *SignalBatcher) Wait(ctx context.Context) error {
	for {
		idle := true
		for _, l := range b.lanes {
			l.mu.Lock()
			done := l.done
			l.mu.Unlock()
			if done == nil {
				continue
			}
			idle = false
			select {
			case <-done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if idle {
			return nil
		}
	}
}

// drain commits the lane's queue, batch after batch, until it is empty.
func (b *SignalBatcher) drain(l *lane) {
	for {
		l.mu.Lock()
		n := min(len(l.queue), b.o.MaxBatch)
		if n == 0 {
			close(l.done)
			l.done = nil
			l.queue = nil
			l.mu.Unlock()
			return
		}
		batch := make([]pendingSignal, n)
		copy(batch, l.queue)
		l.queue = l.queue[n:]
		l.mu.Unlock()

		in := make([]SignalIn, n)
		for i, p := range batch {
			in[i] = p.in
		}
		out, together := b.commit(in)
		if b.o.OnBatch != nil {
			b.o.OnBatch(n, together) // before the answers, so whoever got one sees the batch counted
		}
		for i, p := range batch {
			b.waiting.Add(-1)
			p.done(out[i])
		}
	}
}

// commit ingests one batch. A panic fails the batch's signals, as it
// would fail their requests, instead of stopping the lane for good.
func (b *SignalBatcher) commit(in []SignalIn) (out []SignalOut, together bool) {
	ctx, cancel := context.WithTimeout(context.Background(), b.o.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("signal batch: panic: %v\n%s", p, debug.Stack())
			out = make([]SignalOut, len(in))
			for i := range out {
				out[i].Err = err
			}
			together = true
		}
	}()
	return b.store.IngestSignals(ctx, b.o.Decide, in)
}
