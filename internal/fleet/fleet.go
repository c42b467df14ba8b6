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
	// InstanceID is the worker instance admitted on this connection
	// (empty for one made by Attach).
	InstanceID string
	// Out is drained by the uplink's writer. Interface values (two
	// words each): a queue of sendQueue frames of one catch-all struct by
	// value cost 148 KiB per connected worker.
	Out    chan wire.Frame
	Done   chan struct{} // closed when the connection must end
	once   sync.Once
	gen    uint64 // the host's credential generation when admitted
	reason string // why Done was closed; read only after Done
}

// Close ends the connection (idempotent).
func (c *Conn) Close() { c.CloseBecause("connection replaced or too slow") }

// CloseBecause ends the connection saying why (idempotent: the first
// reason stays). The uplink's writer puts the reason in its close frame,
// so a worker's log says whether it was replaced or revoked.
func (c *Conn) CloseBecause(reason string) {
	c.once.Do(func() {
		c.reason = reason
		close(c.Done)
	})
}

// Reason is why the connection was closed; call it only after Done.
func (c *Conn) Reason() string { return c.reason }

// hostCred is what this process knows of a host's right to an uplink
// (docs/architecture.md#security-model): the instance that registered in
// this server's lifetime, and a generation that every revocation (token
// rotated, host disabled or removed) bumps. A connection admitted under
// an older generation is no longer current.
type hostCred struct {
	instance string
	gen      uint64
}

// Fleet is the registry of connected workers, the pane cache and the log
// relay.
type Fleet struct {
	mu    sync.Mutex
	conns map[string]*Conn
	creds map[string]*hostCred // by host id, under mu

	panes *lru.Cache[string, *Snapshot]
	pmu   sync.Mutex
	subs  map[string]map[*PaneSub]struct{} // pane viewers by run (panesubs.go)
	nsubs int

	attaches map[string]*AttachRoute // relays by attach id (attach.go), under mu

	logs sync.Map // request id → logWait

	screens screens // the latest screen reading of each run (screens.go)
}

// New returns an empty fleet whose pane cache holds up to maxPanes runs
// (1000 by the contract).
func New(maxPanes int) *Fleet {
	c, _ := lru.New[string, *Snapshot](maxPanes)
	return &Fleet{conns: map[string]*Conn{}, creds: map[string]*hostCred{}, panes: c, screens: screens{max: maxPanes}}
}

// Errors of Admit.
var (
	// ErrNotRegistered: no register of this instance for this host in
	// this server's lifetime (or one since revoked).
	ErrNotRegistered = errors.New("this worker instance has not registered with this server")
	// ErrRevoked: the host's credential was revoked while the
	// connection was being admitted.
	ErrRevoked = errors.New("the host's credential was revoked")
)

// Pin records that instanceID registered for hostID and is its pinned
// instance (not a suspected clone): only it may open the host's uplink.
// A live connection of another instance is closed: the registry decided
// that instance is gone (a reinstall).
func (f *Fleet) Pin(hostID, instanceID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cr := f.cred(hostID)
	cr.instance = instanceID
	if c := f.conns[hostID]; c != nil && c.InstanceID != instanceID {
		delete(f.conns, hostID)
		c.CloseBecause("another instance of this host registered")
	}
}

// Pinned returns the instance registered for hostID in this server's
// lifetime ("" if none) and the host's credential generation. An uplink
// takes the generation before it checks the credential in the database
// and hands it to Admit, so a revocation in between is never missed.
func (f *Fleet) Pinned(hostID string) (instance string, gen uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cr := f.cred(hostID)
	return cr.instance, cr.gen
}

// Admit registers the uplink of hostID for instanceID if that instance
// is the one pinned by register and no revocation happened since gen was
// read (Pinned). It replaces (and closes) an older connection of the
// same instance: a worker that reconnects before its old socket timed
// out. Another instance's connection is never replaced.
func (f *Fleet) Admit(hostID, instanceID string, gen uint64) (*Conn, error) {
	f.mu.Lock()
	cr := f.cred(hostID)
	switch {
	case cr.gen != gen:
		f.mu.Unlock()
		return nil, ErrRevoked
	case cr.instance == "" || cr.instance != instanceID:
		f.mu.Unlock()
		return nil, ErrNotRegistered
	}
	c := &Conn{HostID: hostID, InstanceID: instanceID, gen: gen, Out: make(chan wire.Frame, sendQueue), Done: make(chan struct{})}
	old := f.conns[hostID]
	f.conns[hostID] = c
	f.mu.Unlock()
	if old != nil {
		old.CloseBecause("connection replaced by a newer one of the same instance")
	}
	return c, nil
}

// Current reports whether c is still its host's admitted connection under
// the host's current credential. It is checked on every heartbeat, in
// memory.
func (f *Fleet) Current(c *Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	cr := f.creds[c.HostID]
	return f.conns[c.HostID] == c && cr != nil && cr.gen == c.gen
}

// Revoke cuts hostID off at once: its uplink is closed, its relays end
// (their sinks get attach_closed), the registered instance is forgotten
// (the worker must register again) and the credential generation moves
// on, so a connection being admitted concurrently is refused. The caller
// has already committed the change (token rotated, host disabled or
// removed), so whatever reconnects is judged by it.
func (f *Fleet) Revoke(hostID, reason string) {
	f.mu.Lock()
	cr := f.cred(hostID)
	cr.gen++
	cr.instance = ""
	c := f.conns[hostID]
	delete(f.conns, hostID)
	f.mu.Unlock()
	if c != nil {
		c.CloseBecause(reason)
	}
	f.dropHostAttaches(hostID, reason)
}

// cred returns hostID's entry, creating it; f.mu is held. An entry is
// kept after its host is removed (a few bytes per removed host) so that
// its generation never goes back.
func (f *Fleet) cred(hostID string) *hostCred {
	cr := f.creds[hostID]
	if cr == nil {
		cr = &hostCred{}
		f.creds[hostID] = cr
	}
	return cr
}

// Attach registers the uplink of hostID, replacing (and closing) an older
// connection of the same host, without the checks of Admit (which the
// uplink uses); it is for tests of the fleet's plumbing.
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
	var requestID, runID string
	switch fr := fr.(type) {
	case wire.LogChunkFrame:
		requestID, runID = fr.RequestID, fr.RunID
	case wire.WorkspaceReplyFrame:
		requestID, runID = fr.RequestID, fr.RunID
	default:
		return false
	}
	v, ok := f.logs.Load(requestID)
	if !ok {
		return false
	}
	w := v.(logWait)
	if w.hostID != hostID || w.runID != runID {
		return false
	}
	select {
	case w.ch <- fr:
		return true
	default:
		return false
	}
}
