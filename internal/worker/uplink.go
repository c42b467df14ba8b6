package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"pam/internal/wire"
)

const (
	registerPath = "/api/internal/worker/register"
	uplinkPath   = "/api/internal/worker/uplink"
	// writeTimeout bounds one frame write; a write that times out closes
	// the uplink, which then reconnects.
	writeTimeout = 10 * time.Second
	// maxPending bounds the run_state frames kept for the next uplink.
	maxPending = 256
)

var errNotConnected = errors.New("uplink not connected")

// uplinkLoop keeps the uplink up: register, dial, serve until it breaks,
// then again after an exponential backoff from BackoffMin to BackoffMax
// with jitter. It returns only when ctx ends.
func (w *agent) uplinkLoop(ctx context.Context) {
	backoff := w.o.BackoffMin
	for {
		connected, err := w.connect(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = w.o.BackoffMin
		}
		d := jitter(backoff, w.o.BackoffMin, w.o.BackoffMax)
		level := slog.LevelWarn
		var we *wire.Error
		if errors.As(err, &we) && (we.Status == http.StatusUnauthorized || we.Code == wire.CodeProtocolMismatch) {
			level = slog.LevelError // needs the operator, but keep trying
		}
		w.log.Log(ctx, level, "uplink down; reconnecting", "err", err, "retry_in", d.Round(time.Millisecond))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, w.o.BackoffMax)
	}
}

// jitter spreads a backoff of d over [d, 1.25d], and one at the cap over
// [0.8 hi, hi], always within [lo, hi]: a fleet that lost its orchestrator
// at once does not come back in step.
func jitter(d, lo, hi time.Duration) time.Duration {
	v := d + rand.N(d/4+1)
	if v > hi {
		v = hi - rand.N(hi/5+1)
	}
	return max(v, lo)
}

// connect registers, replays the spool, dials the uplink and serves it
// until it breaks. connected reports whether the WebSocket was
// established.
func (w *agent) connect(ctx context.Context) (connected bool, err error) {
	reg, err := w.register(ctx)
	if err != nil {
		return false, err
	}
	// The orchestrator is back: the signals it missed go first, before the
	// uplink's first heartbeat (docs/architecture.md#worker-duties).
	w.replayBeforeUplink(ctx)
	conn, err := w.dial(ctx)
	if err != nil {
		return false, err
	}
	conn.SetReadLimit(wire.MaxFrame)
	w.log.Info("uplink connected", "host_id", reg.HostID, "host_status", reg.Status)

	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		w.mu.Lock()
		if w.conn == conn {
			w.conn = nil
		}
		w.mu.Unlock()
		// The orchestrator dropped its end of every relay with the uplink.
		w.closeRelays("the uplink went away")
	}()
	// Closing is what ends the read below, whoever asks for it.
	wg.Go(func() {
		<-cctx.Done()
		status, reason := websocket.StatusGoingAway, "worker stopping"
		if ctx.Err() == nil {
			status, reason = websocket.StatusInternalError, "uplink broken"
		}
		_ = conn.Close(status, reason)
	})
	if err := w.greet(conn, reg.HostID); err != nil {
		return true, fmt.Errorf("greet: %w", err)
	}
	wg.Go(func() { w.heartbeats(cctx, conn, cancel) })
	for {
		_, data, err := conn.Read(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return true, ctx.Err()
			}
			return true, fmt.Errorf("read: %w", err)
		}
		// Work started by a frame belongs to the worker, not to this
		// connection: a spawn or a stop goes on if the uplink drops.
		w.handle(ctx, conn, data)
	}
}

// register posts the registration and returns the host's answer.
func (w *agent) register(ctx context.Context) (*wire.Registered, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body := wire.Register{
		HostName:   w.o.HostName,
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		InstanceID: w.instanceID,
		Providers:  w.providerNames(),
		Resumable:  w.resumable(), // [] says "none": null is an older worker's silence
		// Each provider's continue_message, as this host's catalog has it.
		ContinueMessages: w.continueMessages(),
		Executor:         w.o.Executor,
		MaxRuns:          w.o.MaxRuns,
		Version:          w.o.Version,
		Protocol:         w.protocol(),
	}
	var out wire.Registered
	if err := w.client.Do(ctx, http.MethodPost, registerPath, nil, body, &out); err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	if out.Protocol != 0 && out.Protocol != w.protocol() {
		// The orchestrator took the registration but speaks another
		// version: no uplink is opened, and registration is tried again
		// with backoff, logged as an error, until one of them is upgraded.
		return nil, fmt.Errorf("register: %w", wire.Errorf(wire.CodeProtocolMismatch,
			"the orchestrator speaks uplink protocol %d, this worker %d", out.Protocol, w.protocol()))
	}
	// A new host is "registered" until its first heartbeat, and one seen
	// long ago is "offline" until then: both are normal on a start. Only a
	// disabled host is worth saying, and it is not a failure.
	if out.Status == "disabled" {
		w.log.Info("this host is disabled: it keeps its runs but gets no new ones", "host", w.o.HostName)
	}
	return &out, nil
}

// protocol is the uplink protocol version this worker claims.
func (w *agent) protocol() int {
	if w.o.Protocol != 0 {
		return w.o.Protocol
	}
	return wire.UplinkProtocol
}

// dial opens the uplink WebSocket with the worker token.
func (w *agent) dial(ctx context.Context) (*websocket.Conn, error) {
	u, err := url.Parse(strings.TrimRight(w.o.URL, "/") + uplinkPath)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient: w.client.HTTP,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + w.o.Token}},
	})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("dial uplink: %s: %w", resp.Status, err)
		}
		return nil, fmt.Errorf("dial uplink: %w", err)
	}
	return conn, nil
}

// greet sends what a fresh uplink needs, before the connection is made
// the current one: a heartbeat, the latest snapshot of every live
// session and its screen reading (so the orchestrator's cache is
// complete after its own restart), and the run_state frames that found
// no uplink.
func (w *agent) greet(conn *websocket.Conn, hostID string) error {
	w.mu.Lock()
	w.hostID = hostID
	w.mu.Unlock()
	if err := w.sendOn(conn, w.heartbeat()); err != nil {
		return err
	}
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	w.mu.Lock()
	var live []*run
	for _, r := range w.runs {
		if r.state == stateLive {
			live = append(live, r)
		}
	}
	pending := w.pending
	w.pending = nil
	w.mu.Unlock()
	for _, r := range live {
		s, ok := w.snaps.Get(r.id)
		if !ok || s.attempt != r.attempt {
			continue
		}
		if err := w.sendOn(conn, s.frame(r.id)); err != nil {
			w.requeue(pending)
			return err
		}
		if f, ok := s.resendScreen(r.id); ok {
			if err := w.sendOn(conn, f); err != nil {
				w.requeue(pending)
				return err
			}
			s.unsent = false
			w.snaps.Add(r.id, s)
		}
	}
	for i, f := range pending {
		if err := w.sendOn(conn, f); err != nil {
			w.requeue(pending[i:])
			return err
		}
	}
	// From here on, the capture loop and the handlers send on it.
	w.mu.Lock()
	w.conn = conn
	w.mu.Unlock()
	w.afterConnect()
	return nil
}

func (w *agent) requeue(frames []wire.Frame) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = append(frames, w.pending...)
	if n := len(w.pending); n > maxPending {
		w.pending = w.pending[n-maxPending:]
	}
}

func (w *agent) heartbeat() wire.HeartbeatFrame {
	now := time.Now().UTC()
	w.mu.Lock()
	defer w.mu.Unlock()
	return wire.HeartbeatFrame{HostID: w.hostID, InstanceID: w.instanceID, Timestamp: &now}
}

// heartbeats sends a heartbeat every HeartbeatInterval and pings the
// orchestrator, so that a connection that died silently (no RST) is
// noticed within a beat and redialled; broken calls end the uplink.
func (w *agent) heartbeats(ctx context.Context, conn *websocket.Conn, broken context.CancelFunc) {
	t := time.NewTicker(w.o.HeartbeatInterval)
	defer t.Stop()
	pingTimeout := min(max(w.o.HeartbeatInterval, 10*time.Second), 30*time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.sendOn(conn, w.heartbeat()); err != nil {
			w.log.Warn("heartbeat", "err", err)
			broken()
			return
		}
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := conn.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			w.log.Warn("uplink ping unanswered", "err", err)
			broken()
			return
		}
	}
}

// sendOn writes one frame on conn.
func (w *agent) sendOn(conn *websocket.Conn, f wire.Frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if len(b) > wire.MaxFrame {
		return fmt.Errorf("%s frame of %d bytes exceeds %d", f.Type(), len(b), wire.MaxFrame)
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return conn.Write(ctx, websocket.MessageText, b)
}

// send writes one frame on the current uplink, if there is one.
func (w *agent) send(f wire.Frame) error {
	w.mu.Lock()
	conn := w.conn
	w.mu.Unlock()
	if conn == nil {
		return errNotConnected
	}
	return w.sendOn(conn, f)
}

// sendState reports a run_state; without an uplink it waits for the next.
func (w *agent) sendState(runID string, attempt int, state, detail string) {
	f := wire.RunStateFrame{RunID: runID, Attempt: wire.IntPtr(attempt), State: state, Detail: wire.BoundText(detail)}
	if err := w.send(f); err != nil {
		w.requeue([]wire.Frame{f})
	}
}
