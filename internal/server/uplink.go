package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"pam/internal/fleet"
	"pam/internal/store"
	"pam/internal/wire"
)

// admitTimeout bounds the wait for the first frame of an uplink, the
// heartbeat that admits it (a worker sends it at once).
const admitTimeout = 30 * time.Second

// uplinkHandleQueue bounds the frames read from an uplink and not yet
// handled; past it the reader waits, and TCP pushes back on the worker.
const uplinkHandleQueue = 32

// uplink serves WS /api/internal/worker/uplink: one resident connection per
// worker carrying heartbeats, dispatch, snapshots, signals and logs (docs/architecture.md#internal-api).
// A connection is admitted by its first frame, a heartbeat of the instance
// that registered for this host in this server's lifetime
// (docs/architecture.md#security-model); anything else is refused and
// closed, and nothing is dispatched to it.
func (s *Server) uplink(w http.ResponseWriter, r *http.Request) {
	host := hostOf(r)
	cred := store.Credential{TokenHash: store.HashWorkerToken(bearer(r))}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept wrote the error
	}
	ws.SetReadLimit(wire.MaxFrame)
	ctx, cancel := contextWithCancelOn(r.Context(), s.streamCtx)
	defer cancel()
	conn, err := s.admitUplink(ctx, ws, host, &cred)
	if err != nil {
		s.refuseUplink(ctx, ws, host, err)
		return
	}
	defer s.opts.Fleet.Detach(conn)
	s.log.Info("uplink connected", "host", host.Name, "host_id", host.ID, "instance_id", conn.InstanceID)
	s.metrics.uplinks.Inc()
	defer s.metrics.uplinks.Dec()

	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		s.uplinkWriter(ctx, ws, conn)
	}()
	u := &uplinkSession{s: s, host: host, conn: conn, cred: cred, known: map[string]bool{}, window: make(chan struct{}, uplinkSignalWindow)}
	now := time.Now().UTC()
	u.send(wire.HeartbeatAckFrame{Timestamp: &now})
	s.opts.Dispatcher.Wake()
	u.readFrames(ctx, ws)
	u.signals.Wait() // their acks go nowhere now, but they are applied before the handler ends
	conn.Close()
	cancel()
	<-writerDone
	_ = ws.CloseNow()
	s.log.Info("uplink disconnected", "host", host.Name, "host_id", host.ID)
}

// admitUplink reads the first frame of a fresh uplink and admits the
// connection into the fleet if it is a heartbeat of the instance pinned by
// a register in this server's lifetime, under the host's current
// credential. The fleet's credential generation is read before the
// database check and handed to Admit, so a revocation that commits while
// this runs is never missed. A heartbeat of another instance while the
// pinned one is live marks the host suspect.
func (s *Server) admitUplink(ctx context.Context, ws *websocket.Conn, host wire.Host, cred *store.Credential) (*fleet.Conn, error) {
	rctx, cancel := context.WithTimeout(ctx, admitTimeout)
	_, data, err := ws.Read(rctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("read the first frame: %w", err)
	}
	fr, err := wire.DecodeFrame(data)
	if err == nil {
		err = fr.Validate()
	}
	f, ok := fr.(wire.HeartbeatFrame)
	if err != nil || !ok {
		return nil, wire.Errorf(wire.CodeUnauthorized, "the first frame of an uplink must be a heartbeat")
	}
	pinned, gen := s.opts.Fleet.Pinned(host.ID)
	switch {
	case pinned == "":
		return nil, wire.Errorf(wire.CodeUnauthorized, "register this worker instance before opening the uplink")
	case f.InstanceID != pinned:
		live := s.opts.Fleet.Connected(host.ID)
		suspect, err := s.store.ForeignInstance(ctx, host.ID, f.InstanceID, live, s.hostOfflineAfter())
		if err != nil {
			s.log.Error("record a foreign instance", "host", host.Name, "err", err)
		}
		if suspect {
			return nil, wire.Errorf(wire.CodeUnauthorized, "instance %s is not this host's pinned instance, which is live: the host is marked suspect", echo(f.InstanceID))
		}
		return nil, wire.Errorf(wire.CodeUnauthorized, "register this worker instance before opening the uplink")
	}
	cred.InstanceID = f.InstanceID
	if _, err := s.store.UplinkHeartbeat(ctx, host.ID, *cred); err != nil {
		return nil, err
	}
	conn, err := s.opts.Fleet.Admit(host.ID, f.InstanceID, gen)
	if err != nil {
		return nil, wire.Errorf(wire.CodeUnauthorized, "%s", err.Error())
	}
	return conn, nil
}

// writeNow writes one frame on a socket that has no writer goroutine
// (a refused uplink), bounded in time.
func (s *Server) writeNow(ctx context.Context, ws *websocket.Conn, f wire.Frame) {
	b, err := json.Marshal(f)
	if err != nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = ws.Write(wctx, websocket.MessageText, b)
}

// uplinkWriter is the only writer of the socket: it drains the host's
// queue until the connection or the server ends.
func (s *Server) uplinkWriter(ctx context.Context, ws *websocket.Conn, conn *fleet.Conn) {
	defer ws.CloseNow()
	for {
		select {
		case <-ctx.Done():
			_ = ws.Close(websocket.StatusGoingAway, "server shutting down")
			return
		case <-conn.Done:
			_ = ws.Close(websocket.StatusPolicyViolation, conn.Reason())
			return
		case f := <-conn.Out:
			b, err := json.Marshal(f)
			if err != nil {
				continue
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = ws.Write(wctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				return
			}
		}
	}
}

// refuseUplink logs why a connection was not admitted, tells the worker
// when it is something the worker can act on (an API error), and closes.
func (s *Server) refuseUplink(ctx context.Context, ws *websocket.Conn, host wire.Host, err error) {
	s.log.Warn("uplink refused", "host", host.Name, "host_id", host.ID, "err", err)
	var we *wire.Error
	if errors.As(err, &we) {
		s.writeNow(ctx, ws, wire.ErrorFrame{Code: we.Code, Message: wire.BoundText(we.Message)})
	}
	_ = ws.Close(websocket.StatusPolicyViolation, "uplink refused")
}

// readFrames reads the worker's frames until the connection ends, and
// returns once every frame read is handled.
func (u *uplinkSession) readFrames(ctx context.Context, ws *websocket.Conn) {
	s := u.s
	// Attach output goes to its socket from the reader itself, so that a
	// keystroke's echo never waits behind a frame whose handling writes to
	// the database (a snapshot, a signal, a heartbeat). Every other frame,
	// and every answer to a bad one, is handled in arrival order by one
	// goroutine, which takes no frame once the connection has ended.
	jobs := make(chan func(), uplinkHandleQueue)
	handlerDone := make(chan struct{})
	go func() {
		defer close(handlerDone)
		for job := range jobs {
			if !u.ended() {
				job()
			}
		}
	}()
	for {
		_, data, err := ws.Read(ctx)
		if err != nil || u.ended() {
			break
		}
		// err, with a frame, is a field of another frame type: answered
		// as a frame Validate refuses.
		f, err := wire.DecodeFrame(data)
		switch {
		case f == nil:
			jobs <- func() {
				u.send(wire.ErrorFrame{Code: wire.CodeMalformedFrame, Message: wire.BoundText(err.Error())})
			}
		case err == nil && (f.Type() == wire.FrameAttachOutput || f.Type() == wire.FrameAttachClosed):
			if err := f.Validate(); err != nil {
				jobs <- func() { u.refuseInvalid(f, err) }
				continue
			}
			// To the attach socket whose relay this host opened; anything
			// else (a relay already let go, or another host's) is dropped.
			s.opts.Fleet.DeliverAttach(u.host.ID, f)
		default:
			jobs <- func() {
				if err == nil {
					err = f.Validate()
				}
				if err != nil {
					u.refuseInvalid(f, err)
					return
				}
				u.handle(ctx, f)
			}
		}
	}
	close(jobs)
	<-handlerDone
}

// uplinkSignalWindow bounds the signals of one uplink waiting for their
// commit: beyond it the connection is not read until one is acked (the
// worker's writes wait in TCP).
const uplinkSignalWindow = 64

// uplinkSession handles the frames of one connection.
type uplinkSession struct {
	s     *Server
	host  wire.Host
	conn  *fleet.Conn
	cred  store.Credential // what the connection was admitted with
	known map[string]bool  // runs this host may speak for (checked once)
	// Signals are handed to the group commit and acked when it commits,
	// while the next frames are read (docs/architecture.md#group-commit):
	// window holds a slot per signal waiting, signals counts them.
	window  chan struct{}
	signals sync.WaitGroup
}

func (u *uplinkSession) send(f wire.Frame) {
	select {
	case u.conn.Out <- f:
	case <-u.conn.Done:
	default:
		u.conn.Close() // hopelessly behind: reconnect and resync
	}
}

// uplinkHandlers are the frames a worker sends, each with its handler:
// one place to see what the uplink understands. Anything else is answered
// with an unexpected_frame error.
var uplinkHandlers = wire.NewHandlers(
	wire.On((*uplinkSession).heartbeat),
	wire.On((*uplinkSession).dispatchAck),
	wire.On((*uplinkSession).snapshot),
	wire.On((*uplinkSession).signal),
	wire.On(func(u *uplinkSession, _ context.Context, f wire.LogChunkFrame) { u.deliver(f) }),
	wire.On(func(u *uplinkSession, _ context.Context, f wire.WorkspaceReplyFrame) { u.deliver(f) }),
	wire.On((*uplinkSession).workspaceReady),
	wire.On((*uplinkSession).workspaceRemoved),
	wire.On((*uplinkSession).workspacePushed),
	wire.On((*uplinkSession).screen),
	wire.On((*uplinkSession).runState),
)

// unorderedFrames need not wait for the signals sent before them to
// commit. Anything else about a run takes effect after those signals (a
// finished before a session_lost, a needs_input before the snapshot that
// clears it).
var unorderedFrames = map[string]bool{
	wire.FrameSignal: true, wire.FrameHeartbeat: true, wire.FrameLogChunk: true,
	wire.FrameWorkspaceReply: true, wire.FrameAttachOutput: true, wire.FrameAttachClosed: true,
}

// handle takes one frame of the worker, in order, to its handler once
// the host may speak of its run.
func (u *uplinkSession) handle(ctx context.Context, f wire.Frame) {
	if !unorderedFrames[f.Type()] {
		u.signals.Wait()
	}
	if !u.inScope(ctx, f) {
		return
	}
	if !uplinkHandlers.Handle(u, ctx, f) {
		u.send(wire.ErrorFrame{Code: "unexpected_frame", Message: "a worker does not send " + f.Type()})
	}
}

// heartbeat keeps the host online. Every heartbeat is checked against
// the host's current credential: in memory (the connection is still
// current), then in the row the heartbeat writes anyway (token hash,
// pinned instance).
func (u *uplinkSession) heartbeat(ctx context.Context, f wire.HeartbeatFrame) {
	s := u.s
	if f.InstanceID != u.conn.InstanceID || !s.opts.Fleet.Current(u.conn) {
		u.revoked(wire.Errorf(wire.CodeUnauthorized, "this heartbeat is not from the admitted instance or the credential was revoked"))
		return
	}
	online, err := s.store.UplinkHeartbeat(ctx, u.host.ID, u.cred)
	if wire.HasCode(err, wire.CodeUnauthorized) {
		u.revoked(err)
		return
	}
	if err != nil {
		s.log.Warn("heartbeat", "host", u.host.Name, "err", err)
		return
	}
	if online {
		s.opts.Dispatcher.Wake()
	}
	now := time.Now().UTC()
	u.send(wire.HeartbeatAckFrame{Timestamp: &now})
}

// dispatchAck is the worker taking (or declining) a run offered to it;
// a sender the run has left meanwhile is told to stop it.
func (u *uplinkSession) dispatchAck(ctx context.Context, f wire.RunDispatchAckFrame) {
	res, err := u.s.runs.AckOffer(ctx, u.host.ID, f)
	if err != nil {
		u.refuse(f, err)
		return
	}
	if res.StopSender {
		u.send(wire.RunStopFrame{RunID: f.RunID, Attempt: f.Attempt, Force: true})
	}
	if res.Changed {
		u.s.opts.Dispatcher.Wake()
	}
}

// snapshot caches the run's pane. Only the run's current host and
// attempt are heard: a host whose offer was withdrawn, or an older
// attempt's session, must neither overwrite the screen nor reset the hang
// timer. A capture the cache holds already changes nothing and costs no
// lookup.
func (u *uplinkSession) snapshot(ctx context.Context, f wire.SnapshotFrame) {
	s := u.s
	at := time.Now()
	if f.Timestamp != nil {
		at = *f.Timestamp
	}
	if s.opts.Fleet.Pane(f.RunID).Capture == f.Capture && f.Capture != "" {
		return
	}
	current, err := s.store.PlacedOn(ctx, u.host.ID, f.RunID, *f.Attempt)
	if err != nil {
		u.refuse(f, err)
		return
	}
	if !current {
		s.log.Debug("snapshot of a host or attempt the run has left dropped", "run_id", f.RunID, "host", u.host.Name, "attempt", *f.Attempt)
		return
	}
	if seq, changed := s.opts.Fleet.PutSnapshot(f.RunID, f.Capture, at); changed {
		// A snapshot that replaces an earlier one is a pane change and
		// clears the run's attention. The first one this server caches
		// (a new run, or the resend after a restart of serve) is not
		// evidence of change: it only moves the hang timer. Written
		// by the coalescer, not before the next frame is read.
		s.outputs.note(f.RunID, u.host.ID, *f.Attempt, seq > 1)
	}
}

// signal hands a signal to the group commit and acks it once committed,
// while the next frames are read; beyond the window of signals waiting,
// it waits for a slot.
func (u *uplinkSession) signal(ctx context.Context, f wire.SignalFrame) {
	sig := wire.Signal{Kind: f.Kind, Attempt: f.Attempt, Seq: f.Seq, Source: f.Source, Payload: f.Payload, Timestamp: f.Timestamp}
	select {
	case u.window <- struct{}{}:
	case <-ctx.Done():
		return
	}
	u.signals.Add(1)
	u.s.ingestAsync(f.RunID, u.host.ID, sig, false, func(o store.SignalOut) {
		defer u.signals.Done()
		<-u.window
		if o.Err != nil {
			u.send(u.signalAck(f, o.Err))
			return
		}
		u.send(wire.SignalAckFrame{RunID: f.RunID, Attempt: f.Attempt, Kind: f.Kind, Seq: f.Seq, Result: o.Result})
	})
}

// deliver hands a log chunk, or a workspace reply, to the request that
// waits for it: answers travel like log chunks, from the host it asked
// about the run it named (workspaces.go).
func (u *uplinkSession) deliver(f wire.Frame) {
	u.s.opts.Fleet.DeliverLog(u.host.ID, f)
}

// workspaceReady, workspaceRemoved and workspacePushed record what the
// worker did to a run's workspace; a refusal goes back to it.
func (u *uplinkSession) workspaceReady(ctx context.Context, f wire.WorkspaceReadyFrame) {
	if _, err := u.s.store.WorkspaceReady(ctx, u.host.ID, f); err != nil {
		u.refuse(f, err)
	}
}

func (u *uplinkSession) workspaceRemoved(ctx context.Context, f wire.WorkspaceRemovedFrame) {
	if err := u.s.store.WorkspaceRemoved(ctx, u.host.ID, f); err != nil {
		u.refuse(f, err)
	}
}

func (u *uplinkSession) workspacePushed(ctx context.Context, f wire.WorkspacePushedFrame) {
	if err := u.s.store.WorkspacePushed(ctx, u.host.ID, f); err != nil {
		u.refuse(f, err)
	}
}

// runState records the state the worker reports for a run; a pane change
// reported before this (idle) is written first.
func (u *uplinkSession) runState(ctx context.Context, f wire.RunStateFrame) {
	u.s.outputs.flushRun(ctx, f.RunID)
	_, changed, err := u.s.runs.RunStateReport(ctx, u.host.ID, f)
	if err != nil {
		u.refuse(f, err)
		return
	}
	if changed {
		u.s.opts.Dispatcher.Wake()
	}
}

// ended reports whether the connection was closed (revoked or
// replaced): not one more frame is taken from it.
func (u *uplinkSession) ended() bool {
	select {
	case <-u.conn.Done:
		return true
	default:
		return false
	}
}

// revoked ends a connection whose credential no longer holds, telling
// the worker why.
func (u *uplinkSession) revoked(err error) {
	u.s.log.Warn("uplink credential revoked", "host", u.host.Name, "host_id", u.host.ID, "err", err)
	msg := err.Error()
	var we *wire.Error
	if errors.As(err, &we) {
		msg = we.Message
	}
	u.send(wire.ErrorFrame{Code: wire.CodeUnauthorized, Message: wire.BoundText(msg)})
	u.conn.CloseBecause("credential revoked")
}

// inScope checks that a frame naming a run speaks for a run offered to
// this host (docs/architecture.md#security-model): any other is answered
// not_found — a signal by its signal_ack, anything else by an error frame
// — and dropped before anything is stored or journaled. Frames naming no
// run (heartbeat, attach_* which are scoped by the relay this host
// opened) pass, and so does orphan_detected: it reports a session of this
// host that no run of this host owns, so the run it names is by
// definition not this host's; the store journals it for the host, with the
// run id and attempt in the payload and never against that run.
func (u *uplinkSession) inScope(ctx context.Context, f wire.Frame) bool {
	runID := wire.RunOf(f)
	if rs, orphan := f.(wire.RunStateFrame); runID == "" || (orphan && rs.State == wire.StateOrphanDetected) {
		return true
	}
	ok, err := u.maySpeakFor(ctx, runID)
	if ok {
		return true
	}
	if err == nil {
		err = wire.NotFound("run")
	}
	if sig, ok := f.(wire.SignalFrame); ok {
		u.send(u.signalAck(sig, err))
		return false
	}
	u.refuse(f, err)
	return false
}

// maySpeakFor checks that the run was offered to this host (a worker
// speaks only for its own runs). A yes is remembered for the connection
// (an offer is never taken back from run_offers); a no is asked again, as
// the run may be offered to this host later.
func (u *uplinkSession) maySpeakFor(ctx context.Context, runID string) (bool, error) {
	if u.known[runID] {
		return true, nil
	}
	ok, err := u.s.store.OfferedTo(ctx, u.host.ID, runID)
	if ok {
		u.known[runID] = true
	}
	return ok, err
}

// signalAck is the signal_ack refusing signal f with err's code.
func (u *uplinkSession) signalAck(f wire.SignalFrame, err error) wire.SignalAckFrame {
	var we *wire.Error
	if !errors.As(err, &we) {
		we = &wire.Error{Code: wire.CodeInternal, Message: "internal error"}
		u.s.log.Error("uplink signal", "run_id", f.RunID, "err", err)
	}
	return wire.SignalAckFrame{RunID: f.RunID, Attempt: f.Attempt, Kind: f.Kind, Seq: f.Seq, Code: we.Code, Message: we.Message}
}

// refuse answers a frame the server could not take with an error frame.
func (u *uplinkSession) refuse(f wire.Frame, err error) {
	var we *wire.Error
	if !errors.As(err, &we) {
		u.s.log.Error("uplink frame", "type", f.Type(), "run_id", wire.RunOf(f), "err", err)
		we = &wire.Error{Code: wire.CodeInternal, Message: "internal error"}
	}
	u.send(wire.ErrorFrame{Code: we.Code, Message: wire.BoundText(f.Type() + ": " + we.Message), RunID: validOrEmpty(wire.RunOf(f))})
}

// refuseInvalid answers a frame that Validate refused and drops it (docs/architecture.md#internal-api):
// a signal with the signal_ack its HTTP twin would get, carrying the
// error's code; any other frame with malformed_frame. Echoed fields are
// cut short, so the answer itself is a valid frame.
func (u *uplinkSession) refuseInvalid(f wire.Frame, err error) {
	var we *wire.Error
	if !errors.As(err, &we) {
		we = &wire.Error{Code: wire.CodeValidationFailed, Message: err.Error()}
	}
	u.s.log.Warn("invalid uplink frame dropped", "host", u.host.Name, "type", f.Type(), "err", we.Message)
	if sig, ok := f.(wire.SignalFrame); ok {
		u.send(wire.SignalAckFrame{RunID: echo(sig.RunID), Attempt: sig.Attempt, Kind: echo(sig.Kind), Seq: sig.Seq,
			Code: we.Code, Message: wire.BoundText(we.Message)})
		return
	}
	u.send(wire.ErrorFrame{Code: wire.CodeMalformedFrame, Message: wire.BoundText(we.Message), RunID: validOrEmpty(wire.RunOf(f))})
}

// validOrEmpty is a run id to name in an answer: only a valid one.
func validOrEmpty(id string) string {
	if wire.ValidUUID(id) {
		return id
	}
	return ""
}

// echo cuts a refused field short for the answer that names it.
func echo(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
