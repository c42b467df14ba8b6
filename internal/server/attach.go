package server

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"pam/internal/fleet"
	"pam/internal/store"
	"pam/internal/wire"
)

// WS /api/v1/runs/{id}/attach/ws (docs/api.md#websockets, docs/api.md): an interactive terminal
// relayed through the run's worker. The first socket takes the lease and
// gets lease_acquired, a resize with the relay's size, then data frames.
// A socket that finds the lease held gets lease_held (with the holder)
// and stays open without output: each frame it sends takes the lease if
// it has come free, or is answered with lease_held again. Every socket of
// a run ends with run_ended when the run leaves running.

const (
	// floodInterval spaces data frames while output keeps coming
	// (framePacer, docs/api.md#attach-and-the-lease): a flood is
	// coalesced into at most one frame per interval, the contract's 10
	// frames a second, and output after a quiet spell goes at once.
	floodInterval = 100 * time.Millisecond
	// maxDataChunk is the raw size of one data frame; base64 keeps it
	// under the 1 MiB frame bound.
	maxDataChunk = 512 << 10
	// maxPendingOutput is how far a client may fall behind its relay
	// before it is closed as too slow.
	maxPendingOutput = 4 << 20
	// maxPendingInput is the input held for the relay; past it the socket
	// is not read (TCP pushes back on the client).
	maxPendingInput = 256 << 10
	// inputChunk bounds one attach_input frame; inputRate paces a relay's
	// input, so a flood is a trickle on the uplink every run of the host
	// shares (a paste of a few KiB still goes at once).
	inputChunk = 32 << 10
	inputRate  = 256 << 10
	// uplinkSoftBacklog: input waits while this many frames are queued
	// for the host.
	uplinkSoftBacklog = 32
	// ctrlQueue bounds the control frames (errors, lease notices) waiting
	// for the writer; beyond it they are dropped.
	ctrlQueue = 16
	// Default relay size when the handshake gives none (?rows=&cols=).
	defaultRows, defaultCols = 24, 80
	// codeStopping is an internal end code: the server is shutting down.
	codeStopping = "server_stopping"
)

// attachClient is one attach socket.
type attachClient struct {
	t       *terminal
	runID   string
	hostID  string
	session string
	who     wire.LeaseHolder // AttachedAt is set when it takes the lease
	ws      *websocket.Conn
	last    atomic.Int64 // unix nanos of the last frame, ping or pong
	// attempt is the run's attempt at the handshake; cleared is when
	// input last cleared the run's attention (unix nanos), so that a
	// typing client costs one write a second at most.
	attempt int
	cleared atomic.Int64

	ctrl     chan []byte
	done     chan struct{}
	endOnce  sync.Once
	endCode  string
	final    []byte // the error frame written before the close
	outReady chan struct{}
	inReady  chan struct{}
	drained  chan struct{}
	// pace spaces the data frames; only the writer goroutine touches it.
	pace framePacer

	// Lease state: changed by the reader goroutine only, read by the
	// relay's sink and the input pump under mu.
	mu         sync.Mutex
	le         *lease
	route      *fleet.AttachRoute
	attachID   string
	rows, cols int
	out        []byte
	in         []byte
	pumpStop   chan struct{}
	pumpDone   chan struct{}
	// The input's pace (a token bucket of inputRate bytes a second, per
	// lease) and whether the pump holds a chunk it has not sent yet.
	tokens   float64
	refilled time.Time
	pumping  bool
}

func (c *attachClient) touch()                { c.last.Store(time.Now().UnixNano()) }
func (c *attachClient) lastActive() time.Time { return time.Unix(0, c.last.Load()) }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// attachWS serves the attach socket.
func (s *Server) attachWS(w http.ResponseWriter, r *http.Request, run wire.Run, auth string) {
	rows, cols, err := termSize(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ua := r.UserAgent()
	if len(ua) > 256 {
		ua = ua[:256]
	}
	c := &attachClient{
		t: s.term, runID: run.ID, attempt: run.Attempt, session: run.SessionName, rows: rows, cols: cols,
		who:  wire.LeaseHolder{Token: tokenOf(r.Context()).Name, RemoteAddr: r.RemoteAddr, UserAgent: ua, Auth: auth},
		ctrl: make(chan []byte, ctrlQueue), done: make(chan struct{}),
		outReady: make(chan struct{}, 1), inReady: make(chan struct{}, 1), drained: make(chan struct{}, 1),
	}
	if run.HostID != nil {
		c.hostID = *run.HostID
	}
	c.touch()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		OnPongReceived: func(context.Context, []byte) { c.touch() },
		OnPingReceived: func(context.Context, []byte) bool { c.touch(); return true },
	})
	if err != nil {
		return
	}
	c.ws = ws
	ws.SetReadLimit(wire.MaxFrame)
	defer ws.CloseNow()

	var wg sync.WaitGroup
	wg.Go(c.writer)
	defer wg.Wait()
	switch {
	case run.Status != wire.RunRunning && !activeStatus(run.Status):
		c.end(wire.CodeRunEnded, "the run is "+run.Status)
		return
	case run.Status != wire.RunRunning:
		c.end(wire.CodeRunNotRunning, "the run is "+run.Status+"; attach once it runs")
		return
	case !s.term.join(c):
		c.end(wire.CodeLeaseHeld, "too many clients are waiting for this run's lease")
		return
	}
	defer s.term.leave(c)
	stop := context.AfterFunc(s.streamCtx, func() { c.end(codeStopping, "server shutting down") })
	defer stop()
	// The request's context ends when its token is revoked (asToken).
	stopRevoked := context.AfterFunc(r.Context(), func() { c.end(wire.CodeTokenRevoked, "the token of this socket was revoked") })
	defer stopRevoked()
	// The pinger ends with the socket; wg waits for it after cancelPing.
	pingCtx, cancelPing := context.WithCancel(context.Background())
	defer cancelPing()
	wg.Go(func() {
		select {
		case <-c.done:
			cancelPing()
		case <-pingCtx.Done():
		}
	})
	wg.Go(func() { pinger(pingCtx, ws) })

	c.tryAcquire()
	c.readLoop()
	c.dropLease(c.releaseReason())
	c.end("", "")
}

func activeStatus(st string) bool {
	return st == wire.RunPending || st == wire.RunSpawning || st == wire.RunRunning
}

// termSize reads the optional ?rows=&cols= of the handshake: the size the
// relay opens at, so the first screen is drawn right.
func termSize(r *http.Request) (int, int, error) {
	q := r.URL.Query()
	rows, cols := defaultRows, defaultCols
	for _, p := range []struct {
		name string
		v    *int
	}{{"rows", &rows}, {"cols", &cols}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < wire.MinTermSize || n > wire.MaxTermSize {
			return 0, 0, wire.Invalid(p.name, "%s must be a number from %d to %d", p.name, wire.MinTermSize, wire.MaxTermSize)
		}
		*p.v = n
	}
	return rows, cols, nil
}

// readLoop handles the client's frames until the socket or the client
// ends. A malformed frame is answered and dropped; the socket stays.
func (c *attachClient) readLoop() {
	for {
		typ, data, err := c.ws.Read(context.Background())
		if err != nil {
			return
		}
		select {
		case <-c.done:
			return
		default:
		}
		c.touch()
		if typ != websocket.MessageText {
			c.send(wire.TermFrame{Type: wire.WSError, Code: wire.CodeMalformedFrame, Message: "frames are JSON text"})
			continue
		}
		f, err := wire.DecodeTermFrame(data)
		if err != nil {
			c.send(wire.TermFrame{Type: wire.WSError, Code: wire.CodeMalformedFrame, Message: err.Error()})
			continue
		}
		if c.le == nil {
			if f.Type == wire.WSReleaseLease || !c.tryAcquire() {
				continue
			}
		}
		switch f.Type {
		case wire.WSInput:
			if !c.queueInput(f.Bytes) {
				return
			}
			c.inputSeen()
		case wire.WSResize:
			c.resize(f.Rows, f.Cols)
		case wire.WSReleaseLease:
			c.dropLease(releaseReleased)
		}
	}
}

// attentionClearEvery bounds how often one attach client's input clears
// its run's attention.
const attentionClearEvery = time.Second

// inputSeen records input into the run (a new turn) and clears its
// attention (source attach) as an answer (Server.answered): idle whatever
// follows, needs_input and rate_limited only when the pane changed within
// two capture intervals after the input. The check runs beside the input
// path, at most once per attentionClearEvery per client, so typing never
// waits for it.
func (c *attachClient) inputSeen() {
	now := time.Now().UnixNano()
	last := c.cleared.Load()
	if now-last < int64(attentionClearEvery) || !c.cleared.CompareAndSwap(last, now) {
		return
	}
	s := c.t.s
	done := s.answers.begin(c.runID)
	before := s.opts.Fleet.Pane(c.runID).Seq
	if !s.bg.goFunc(func() {
		defer done()
		// The person typing is the lease's token: its name is the actor.
		ctx, cancel := context.WithTimeout(store.WithActor(s.streamCtx, c.who.Token), 10*time.Second)
		defer cancel()
		if err := s.store.TouchInput(ctx, c.runID, c.attempt); err != nil && ctx.Err() == nil {
			s.log.Warn("record attach input", "run_id", c.runID, "err", err)
		}
		run, err := s.store.GetRun(ctx, c.runID)
		if err != nil || run.Attempt != c.attempt || run.Attention == wire.AttentionNone {
			return
		}
		observed := run.Attention == wire.AttentionIdle || s.paneChangedSince(ctx, c.runID, before)
		s.answered(ctx, run, observed, wire.AttentionSourceAttach)
	}) {
		done()
	}
}

// tryAcquire takes the lease if it is free and opens the relay; if it is
// held, the client is told by whom.
func (c *attachClient) tryAcquire() bool {
	now := time.Now().UTC()
	info := c.who
	info.AttachedAt = now
	attachID := uuid.NewString()
	le, held := c.t.acquire(c, info, attachID)
	if le == nil {
		h := held.info
		c.send(wire.TermFrame{Type: wire.WSError, Code: wire.CodeLeaseHeld,
			Message: "the run is attached by another client since " + h.AttachedAt.Format(time.RFC3339), Holder: &h})
		return false
	}
	c.t.journal(wire.TopicRunLeaseAcquired, c.runID, info.Token, map[string]any{"holder": info, "attach_id": attachID})
	c.mu.Lock()
	c.le, c.attachID, c.out, c.in = le, attachID, nil, nil
	rows, cols := c.rows, c.cols
	c.mu.Unlock()
	c.send(wire.TermFrame{Type: wire.WSLeaseAcquired, RunID: c.runID, AttachedAt: &now})
	c.send(wire.TermFrame{Type: wire.WSResize, Rows: rows, Cols: cols})
	route, err := c.t.s.opts.Fleet.OpenAttach(c.hostID, wire.AttachOpenFrame{AttachID: attachID,
		RunID: c.runID, SessionName: c.session, Rows: rows, Cols: cols}, c.sink(attachID))
	if err != nil {
		c.t.release(le, releaseRelay, map[string]any{"error": err.Error()})
		c.end(wire.CodeRelayClosed, "the run's host cannot relay right now: "+err.Error())
		return false
	}
	stop, done := make(chan struct{}), make(chan struct{})
	c.mu.Lock()
	c.route, c.pumpStop, c.pumpDone = route, stop, done
	c.tokens, c.refilled, c.pumping = inputRate, time.Now(), false
	c.mu.Unlock()
	go c.pump(route, stop, done)
	return true
}

// dropLease closes the relay and frees the lease, if this client holds
// one (reader goroutine only).
func (c *attachClient) dropLease(reason string) {
	c.mu.Lock()
	le, route, stop, done := c.le, c.route, c.pumpStop, c.pumpDone
	c.le, c.route, c.attachID, c.pumpStop, c.pumpDone, c.out, c.in = nil, nil, "", nil, nil, nil, nil
	c.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	if route != nil {
		route.Close()
	}
	if le != nil {
		c.t.release(le, reason, nil)
	}
}

// releaseReason is the journaled reason for a lease still held when the
// socket ends (revoke, expiry and run end release it themselves first).
func (c *attachClient) releaseReason() string {
	select {
	case <-c.done: // endCode is set before done closes
	default:
		return releaseClosed // no end yet: the peer went away
	}
	switch c.endCode {
	case wire.CodeRelayClosed:
		return releaseRelay
	case codeStopping:
		return releaseStopping
	case wire.CodeRunEnded:
		return releaseRunEnded
	case wire.CodeTokenRevoked:
		return releaseTokenRevoked
	}
	return releaseClosed
}

// resize applies a client's window size to the relay.
func (c *attachClient) resize(rows, cols int) {
	c.mu.Lock()
	c.rows, c.cols = rows, cols
	route := c.route
	c.mu.Unlock()
	if route != nil {
		_ = route.Resize(rows, cols)
	}
}

// relayEnded ends the socket when its relay has: run_ended if the run no
// longer runs (its session went with it), else relay_closed with the
// worker's reason.
func (c *attachClient) relayEnded(reason string) {
	if c.t.s.streamCtx.Err() != nil {
		// The relay went with the uplinks of a server that stops: the
		// socket ends, and its lease is released, because the server stops.
		c.end(codeStopping, "server shutting down")
		return
	}
	ctx, cancel := context.WithTimeout(c.t.s.streamCtx, 5*time.Second)
	defer cancel()
	if run, err := c.t.s.store.GetRun(ctx, c.runID); err == nil && run.Status != wire.RunRunning {
		c.t.endRun(c.runID, run.Status)
		return
	}
	if reason == "" {
		reason = "the relay ended"
	}
	c.end(wire.CodeRelayClosed, reason)
}
