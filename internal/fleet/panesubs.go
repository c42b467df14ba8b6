package fleet

import (
	"encoding/json"
	"errors"
	"sync"
	"time"

	"pam/internal/wire"
)

// MaxPaneViewers bounds the pane subscriptions of one server, so that a
// client opening sockets in a loop runs into a refusal rather than into
// the server's memory. Each subscription holds at most one snapshot.
const MaxPaneViewers = 10000

// ErrTooManyViewers is returned by SubscribePane past MaxPaneViewers.
var ErrTooManyViewers = errors.New("too many pane viewers")

// Snapshot is one pane snapshot of the central cache. It is never
// modified once stored, so the cache and every viewer share it.
type Snapshot struct {
	RunID   string
	Seq     int64
	Capture string
	At      time.Time

	once  sync.Once
	frame []byte
}

// Frame is the snapshot as a pane_snapshot frame of /pane/ws, encoded
// once however many viewers send it.
func (s *Snapshot) Frame() []byte {
	s.once.Do(func() {
		at := s.At.UTC()
		s.frame, _ = json.Marshal(wire.PaneSnapshot{Type: wire.WSPaneSnapshot, Seq: s.Seq, RunID: s.RunID, Capture: s.Capture, Timestamp: &at})
	})
	return s.frame
}

// PaneSub is one viewer's subscription to a run's pane. Delivery is
// latest-wins with one slot: publishing replaces the pending snapshot and
// never waits, so a slow viewer skips to the newest snapshot, holds at
// most one, and delays nobody.
type PaneSub struct {
	f     *Fleet
	runID string
	ready chan struct{} // one token: "latest is set"

	mu     sync.Mutex
	latest *Snapshot
}

// SubscribePane subscribes to a run's pane changes. The current snapshot,
// if there is one, is pending at once (the viewer's first frame).
func (f *Fleet) SubscribePane(runID string) (*PaneSub, error) {
	s := &PaneSub{f: f, runID: runID, ready: make(chan struct{}, 1)}
	f.pmu.Lock()
	defer f.pmu.Unlock()
	if f.nsubs >= MaxPaneViewers {
		return nil, ErrTooManyViewers
	}
	if f.subs == nil {
		f.subs = map[string]map[*PaneSub]struct{}{}
	}
	m := f.subs[runID]
	if m == nil {
		m = map[*PaneSub]struct{}{}
		f.subs[runID] = m
	}
	m[s] = struct{}{}
	f.nsubs++
	if p, ok := f.panes.Peek(runID); ok {
		s.offer(p)
	}
	return s, nil
}

// publish hands a new snapshot to the run's viewers; pmu is held.
func (f *Fleet) publish(p *Snapshot) {
	for s := range f.subs[p.RunID] {
		s.offer(p)
	}
}

// offer replaces the pending snapshot and signals without blocking.
func (s *PaneSub) offer(p *Snapshot) {
	s.mu.Lock()
	s.latest = p
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default: // already signalled: the viewer will take the newest
	}
}

// Ready is signalled when a snapshot is pending.
func (s *PaneSub) Ready() <-chan struct{} { return s.ready }

// Next takes the pending snapshot (nil if none).
func (s *PaneSub) Next() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.latest
	s.latest = nil
	return p
}

// Close ends the subscription (idempotent).
func (s *PaneSub) Close() {
	f := s.f
	f.pmu.Lock()
	defer f.pmu.Unlock()
	m := f.subs[s.runID]
	if _, ok := m[s]; !ok {
		return
	}
	delete(m, s)
	f.nsubs--
	if len(m) == 0 {
		delete(f.subs, s.runID)
	}
}

// PanePending is the number of snapshots published to a viewer and not
// yet taken by it (a metric: viewers that are behind). Each viewer's slot
// holds at most one, so this never exceeds PaneViewers: what a stalled
// viewer costs is one shared snapshot, however long it stalls.
func (f *Fleet) PanePending() int {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	n := 0
	for _, m := range f.subs {
		for s := range m {
			s.mu.Lock()
			if s.latest != nil {
				n++
			}
			s.mu.Unlock()
		}
	}
	return n
}

// PaneViewers is the number of pane subscriptions (a metric).
func (f *Fleet) PaneViewers() int {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	return f.nsubs
}
