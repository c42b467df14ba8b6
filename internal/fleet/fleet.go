// Package fleet is the central side's live view of its workers: which
// uplinks are connected (and how to push a frame down one), the latest
// pane snapshot of each run, and the log requests waiting for a worker's
// answer. It is in-memory and belongs to the active `pam serve` (docs/architecture.md#central-duties).
package fleet

import (
	"errors"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"pam/internal/wire"
)

// sendQueue bounds the frames waiting for one worker; a worker that falls
// this far behind is disconnected and reconnects.
const sendQueue = 256

// Conn is one connected uplink.
type Conn struct {
	HostID string
	Out    chan wire.Frame // drained by the uplink's writer
	Done   chan struct{}   // closed when the connection must end
	once   sync.Once
}

// Close ends the connection (idempotent).
func (c *Conn) Close() { c.once.Do(func() { close(c.Done) }) }

// Fleet is the registry of connected workers, the pane cache and the log
// relay.
type Fleet struct {
	mu    sync.Mutex
	conns map[string]*Conn

	panes *lru.Cache[string, *Snapshot]
	pmu   sync.Mutex
	subs  map[string]map[*PaneSub]struct{} // pane viewers by run (panesubs.go)
	nsubs int

	attaches map[string]*AttachRoute // relays by attach id (attach.go), under mu

	logs sync.Map // request id → logWait
}

// New returns an empty fleet whose pane cache holds up to maxPanes runs
// (1000 by the contract).
func New(maxPanes int) *Fleet {
	c, _ := lru.New[string, *Snapshot](maxPanes)
	return &Fleet{conns: map[string]*Conn{}, panes: c}
}

// Attach registers the uplink of hostID, replacing (and closing) an older
// connection of the same host: one uplink per worker.
func (f *Fleet) Attach(hostID string) *Conn {
	c := &Conn{HostID: hostID, Out: make(chan wire.Frame, sendQueue), Done: make(chan struct{})}
	f.mu.Lock()
	old := f.conns[hostID]
	f.conns[hostID] = c
	f.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return c
}

// Detach removes c if it is still the host's connection.
func (f *Fleet) Detach(c *Conn) {
	f.mu.Lock()
	if f.conns[c.HostID] == c {
		delete(f.conns, c.HostID)
	}
	f.mu.Unlock()
	c.Close()
	f.dropAttaches(c)
}

// Connected reports whether hostID has an uplink in this process.
func (f *Fleet) Connected(hostID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns[hostID] != nil
}

// ErrNotConnected is returned when a host has no uplink.
var ErrNotConnected = errors.New("host not connected")

// Send queues a frame for hostID without blocking. A full queue closes the
// connection: the worker reconnects and state is re-sent.
func (f *Fleet) Send(hostID string, fr wire.Frame) error {
	f.mu.Lock()
	c := f.conns[hostID]
	f.mu.Unlock()
	if c == nil {
		return ErrNotConnected
	}
	select {
	case c.Out <- fr:
		return nil
	case <-c.Done:
		return ErrNotConnected
	default:
		c.Close()
		return errors.New("uplink send queue full; connection reset")
	}
}

// PutSnapshot stores a run's latest capture. It returns the new seq and
// whether the capture differed from the previous one (seq grows by one per
// distinct snapshot). A change is published to the run's pane viewers.
func (f *Fleet) PutSnapshot(runID, capture string, at time.Time) (int64, bool) {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	p, ok := f.panes.Get(runID)
	if ok && p.Capture == capture {
		return p.Seq, false
	}
	var seq int64 = 1
	if ok {
		seq = p.Seq + 1
	}
	snap := &Snapshot{RunID: runID, Seq: seq, Capture: capture, At: at}
	f.panes.Add(runID, snap)
	f.publish(snap)
	return seq, true
}

// Pane returns the latest snapshot of a run (seq 0 and empty before any).
func (f *Fleet) Pane(runID string) wire.Pane {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	out := wire.Pane{RunID: runID}
	if p, ok := f.panes.Get(runID); ok {
		at := p.At.UTC()
		out.Seq, out.Capture, out.Timestamp = p.Seq, p.Capture, &at
	}
	return out
}

// logWait is a log request waiting for its chunks: only the host it was
// sent to may answer it, and only about the run it asked for.
type logWait struct {
	hostID, runID string
	ch            chan wire.Frame
}

// AwaitLog registers a log request sent to hostID about runID; frames
// answering it are delivered on the returned channel until cancel is
// called.
func (f *Fleet) AwaitLog(requestID, hostID, runID string) (<-chan wire.Frame, func()) {
	ch := make(chan wire.Frame, 64)
	f.logs.Store(requestID, logWait{hostID: hostID, runID: runID, ch: ch})
	return ch, func() { f.logs.Delete(requestID) }
}

// DeliverLog hands a log_chunk from hostID to the request waiting for it;
// it reports false when nobody waits (a late or forged answer, or one from
// another host or about another run), and never blocks.
func (f *Fleet) DeliverLog(hostID string, fr wire.Frame) bool {
	v, ok := f.logs.Load(fr.RequestID)
	if !ok {
		return false
	}
	w := v.(logWait)
	if w.hostID != hostID || w.runID != fr.RunID {
		return false
	}
	select {
	case w.ch <- fr:
		return true
	default:
		return false
	}
}
