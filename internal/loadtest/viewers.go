package loadtest

import (
	"context"
	"encoding/json"
	"time"

	"github.com/coder/websocket"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// viewer is one read-only pane WebSocket (/runs/{id}/pane/ws), as the
// dashboard opens: it counts the snapshots it gets and how old each is
// (from the worker's capture to here).
type viewer struct {
	api   *apiclient.Client
	runID string

	frames     int64
	lat        []int32 // µs from the capture's timestamp
	backwards  int     // a snapshot whose seq did not grow
	reconnects int
	err        error
}

// run watches until ctx ends; a dropped socket is opened again.
func (v *viewer) run(ctx context.Context) {
	for ctx.Err() == nil {
		err := v.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if v.frames == 0 && v.reconnects >= 10 {
			v.err = err
			return
		}
		v.reconnects++
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (v *viewer) watch(ctx context.Context) error {
	c, _, err := websocket.Dial(ctx, v.api.TerminalURL(v.runID, "pane", nil),
		&websocket.DialOptions{HTTPClient: v.api.HTTP, HTTPHeader: v.api.AuthHeader()})
	if err != nil {
		return err
	}
	defer c.CloseNow()
	c.SetReadLimit(wire.MaxFrame)
	last := int64(-1)
	first := true // the snapshot a viewer gets on connect may be old
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		var f wire.PaneSnapshot
		if err := json.Unmarshal(b, &f); err != nil || f.Type != wire.WSPaneSnapshot {
			continue
		}
		v.frames++
		if f.Seq <= last {
			v.backwards++
		}
		last = f.Seq
		if f.Timestamp != nil && !first {
			v.lat = append(v.lat, int32(min(max(now.Sub(*f.Timestamp).Microseconds(), 0), 1<<31-1)))
		}
		first = false
	}
}
