package server

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"pam/internal/fleet"
	"pam/internal/wire"
)

const (
	// wsPingInterval is how often the server pings a terminal socket
	// (docs/api.md#websockets): a peer that stopped answering is noticed, and an attach
	// holder's pong refreshes its lease.
	wsPingInterval = 30 * time.Second
	// wsWriteTimeout bounds one frame write. A viewer that takes nothing
	// for this long is gone, not slow, and is closed.
	wsWriteTimeout = 30 * time.Second
)

// paneWS serves WS /api/v1/runs/{id}/pane/ws (docs/api.md#websockets): the latest snapshot at
// once, then one pane_snapshot per change, from the central cache.
// Delivery is latest-wins through a one-slot subscription, so a slow
// viewer skips to the newest snapshot and holds at most one; the uplink
// that publishes never waits for any viewer.
func (s *Server) paneWS(w http.ResponseWriter, r *http.Request, run wire.Run, _ string) {
	sub, err := s.opts.Fleet.SubscribePane(run.ID)
	if errors.Is(err, fleet.ErrTooManyViewers) {
		s.fail(w, r, wire.Errorf(wire.CodeUnavailable, "too many pane viewers on this server"))
		return
	}
	defer sub.Close()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept wrote the error
	}
	defer ws.CloseNow()
	ctx, cancel := contextWithCancelOn(context.Background(), s.streamCtx)
	defer cancel()
	// The request's context ends when its token is revoked (asToken).
	revoked := r.Context()
	defer context.AfterFunc(revoked, cancel)()
	// Read-only: the viewer may send nothing but control frames; a data
	// frame closes the socket. The context ends when the peer goes.
	ctx = ws.CloseRead(ctx)
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		pinger(ctx, ws)
	}()
	defer func() {
		cancel()
		<-pingDone
	}()
	// The run's worker refreshes a watched pane faster than its capture
	// interval; it is told so now and again while this socket is open.
	s.watchPane(ctx, run.ID)
	watch := time.NewTicker(wire.PaneWatchRefresh)
	defer watch.Stop()
	for {
		select {
		case <-ctx.Done():
			switch {
			case s.streamCtx.Err() != nil:
				_ = ws.Close(websocket.StatusGoingAway, "server shutting down")
			case revoked.Err() != nil:
				_ = ws.Close(websocket.StatusPolicyViolation, "token revoked")
			}
			return
		case <-watch.C:
			s.watchPane(ctx, run.ID)
			continue
		case <-sub.Ready():
		}
		snap := sub.Next()
		if snap == nil {
			continue
		}
		if err := writeFrame(ctx, ws, snap.Frame()); err != nil {
			return
		}
	}
}

// paneWatches remembers when each run's worker was last sent pane_watch,
// so that many viewers of one run send it once per refresh, not once
// each.
type paneWatches struct {
	mu   sync.Mutex
	sent map[string]time.Time
}

// watchPane sends pane_watch to the host of a running run
// (docs/architecture.md#capture-by-control-mode), unless it went there
// within half a refresh. A run without a connected host is skipped: the
// next refresh tries again.
func (s *Server) watchPane(ctx context.Context, runID string) {
	// The send is reserved before it is made, so that two viewers opening
	// at once send one pane_watch, not two; a send that does not happen
	// gives the reservation back.
	now := time.Now()
	s.paneWatch.mu.Lock()
	if s.paneWatch.sent == nil {
		s.paneWatch.sent = map[string]time.Time{}
	}
	last, ok := s.paneWatch.sent[runID]
	if ok && now.Sub(last) < wire.PaneWatchRefresh/2 {
		s.paneWatch.mu.Unlock()
		return
	}
	for id, at := range s.paneWatch.sent {
		if now.Sub(at) > wire.PaneWatchTTL {
			delete(s.paneWatch.sent, id)
		}
	}
	s.paneWatch.sent[runID] = now
	s.paneWatch.mu.Unlock()
	release := func() {
		s.paneWatch.mu.Lock()
		defer s.paneWatch.mu.Unlock()
		if s.paneWatch.sent[runID] != now {
			return // a later send took it
		}
		if ok {
			s.paneWatch.sent[runID] = last
		} else {
			delete(s.paneWatch.sent, runID)
		}
	}
	run, err := s.store.GetRun(ctx, runID)
	if err != nil || run.Status != wire.RunRunning || run.HostID == nil {
		release()
		return
	}
	if err := s.opts.Fleet.Send(*run.HostID, wire.PaneWatchFrame{RunID: run.ID, Attempt: wire.IntPtr(run.Attempt)}); err != nil {
		s.log.Debug("pane_watch not sent", "run_id", run.ID, "err", err)
		release()
	}
}

// writeFrame writes one text frame within wsWriteTimeout.
func writeFrame(ctx context.Context, ws *websocket.Conn, b []byte) error {
	ctx, cancel := context.WithTimeout(ctx, wsWriteTimeout)
	defer cancel()
	return ws.Write(ctx, websocket.MessageText, b)
}

// pinger pings every wsPingInterval until ctx ends; an unanswered ping
// closes the socket.
func pinger(ctx context.Context, ws *websocket.Conn) {
	t := time.NewTicker(wsPingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, wsPingInterval)
		err := ws.Ping(pctx)
		cancel()
		if err != nil {
			_ = ws.CloseNow()
			return
		}
	}
}
