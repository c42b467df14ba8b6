package fleet

import (
	"errors"
	"sync"

	"pam/internal/wire"
)

// MaxAttaches bounds the relays open at once on one server (there is at
// most one per running run: the attach lease is single-writer).
const MaxAttaches = 1000

// ErrUplinkBusy is returned when a relay frame finds its uplink's queue
// full. Relay frames never reset the uplink the way Send does: the queue
// is shared with the dispatch and signals of every run on the host.
var ErrUplinkBusy = errors.New("uplink send queue full")

// AttachRoute is one interactive relay (docs/architecture.md#internal-api attach_* frames): an attach
// id opened on one uplink connection of one host. It is bound to that
// connection: when it ends, the worker has torn its relays down, so the
// route ends too rather than following the host to a new connection.
type AttachRoute struct {
	ID     string
	HostID string
	RunID  string

	f    *Fleet
	conn *Conn
	sink func(wire.Frame)
	once sync.Once
}

// OpenAttach registers a relay and queues its attach_open on the host's
// uplink. sink receives the worker's attach_output and attach_closed
// frames for it, on the uplink's reader: it must not block. A route ends
// with exactly one attach_closed handed to sink, or with Close.
func (f *Fleet) OpenAttach(hostID string, open wire.AttachOpenFrame, sink func(wire.Frame)) (*AttachRoute, error) {
	f.mu.Lock()
	c := f.conns[hostID]
	if c == nil {
		f.mu.Unlock()
		return nil, ErrNotConnected
	}
	if len(f.attaches) >= MaxAttaches {
		f.mu.Unlock()
		return nil, errors.New("too many relays open")
	}
	if f.attaches == nil {
		f.attaches = map[string]*AttachRoute{}
	}
	r := &AttachRoute{ID: open.AttachID, HostID: hostID, RunID: open.RunID, f: f, conn: c, sink: sink}
	f.attaches[r.ID] = r
	f.mu.Unlock()
	if err := trySend(c, open); err != nil {
		f.forget(r)
		return nil, err
	}
	return r, nil
}

// Input and Resize queue a frame of this relay on its connection, never
// waiting and never resetting the uplink.
func (r *AttachRoute) Input(b []byte) error {
	return trySend(r.conn, wire.AttachInputFrame{AttachID: r.ID, Bytes: b})
}

func (r *AttachRoute) Resize(rows, cols int) error {
	return trySend(r.conn, wire.AttachResizeFrame{AttachID: r.ID, Rows: rows, Cols: cols})
}

// Backlog is how many frames wait on the relay's uplink. Input is held
// back while it is high, so that a typist (or a flood) can never fill
// the queue whose overflow would reset the uplink of every run on the
// host.
func (r *AttachRoute) Backlog() int { return len(r.conn.Out) }

// Close unregisters the relay and asks the worker to tear it down. It is
// idempotent and sends no attach_closed to the sink.
func (r *AttachRoute) Close() {
	r.once.Do(func() {
		if r.f.forget(r) {
			_ = trySend(r.conn, wire.AttachCloseFrame{AttachID: r.ID})
		}
	})
}

// forget removes r from the registry; it reports whether r was there.
func (f *Fleet) forget(r *AttachRoute) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attaches[r.ID] != r {
		return false
	}
	delete(f.attaches, r.ID)
	return true
}

// DeliverAttach hands a worker's attach_output or attach_closed frame to
// its relay. A frame for an attach id this host did not open is not
// delivered (false): a worker speaks only for its own relays.
func (f *Fleet) DeliverAttach(hostID string, fr wire.Frame) bool {
	var id string
	closed := false
	switch fr := fr.(type) {
	case wire.AttachOutputFrame:
		id = fr.AttachID
	case wire.AttachClosedFrame:
		id, closed = fr.AttachID, true
	default:
		return false
	}
	f.mu.Lock()
	r := f.attaches[id]
	if r == nil || r.HostID != hostID {
		f.mu.Unlock()
		return false
	}
	if closed {
		delete(f.attaches, r.ID)
	}
	f.mu.Unlock()
	r.sink(fr)
	return true
}

// dropAttaches ends the relays opened on c, which has gone: each sink
// gets an attach_closed.
func (f *Fleet) dropAttaches(c *Conn) {
	f.dropAttachesWhere(func(r *AttachRoute) bool { return r.conn == c }, "the worker's uplink went away")
}

// dropHostAttaches ends every relay of hostID, whichever connection
// opened it: the host was revoked.
func (f *Fleet) dropHostAttaches(hostID, reason string) {
	f.dropAttachesWhere(func(r *AttachRoute) bool { return r.HostID == hostID }, reason)
}

// dropAttachesWhere ends the relays match picks, telling each sink why.
func (f *Fleet) dropAttachesWhere(match func(*AttachRoute) bool, reason string) {
	var gone []*AttachRoute
	f.mu.Lock()
	for id, r := range f.attaches {
		if match(r) {
			gone = append(gone, r)
			delete(f.attaches, id)
		}
	}
	f.mu.Unlock()
	for _, r := range gone {
		r.sink(wire.AttachClosedFrame{AttachID: r.ID, Reason: reason})
	}
}

// Attaches is the number of open relays (a metric).
func (f *Fleet) Attaches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.attaches)
}

func trySend(c *Conn, fr wire.Frame) error {
	select {
	case <-c.Done:
		return ErrNotConnected
	default:
	}
	select {
	case c.Out <- fr:
		return nil
	case <-c.Done:
		return ErrNotConnected
	default:
		return ErrUplinkBusy
	}
}
