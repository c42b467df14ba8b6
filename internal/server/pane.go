package server

import (
	"context"
	"errors"
	"net/http"
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
	for {
		select {
		case <-ctx.Done():
			if s.streamCtx.Err() != nil {
				_ = ws.Close(websocket.StatusGoingAway, "server shutting down")
			}
			return
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
