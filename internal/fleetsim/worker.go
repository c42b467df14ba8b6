package fleetsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"pam/internal/apiclient"
	"pam/internal/wire"
	"pam/internal/worker"
)

const (
	registerPath   = "/api/internal/worker/register"
	uplinkPath     = "/api/internal/worker/uplink"
	workerRunsPath = "/api/internal/worker/runs"
	// callTimeout bounds one HTTP call or WebSocket dial of a simulated
	// worker, as the real worker bounds its own.
	callTimeout = 30 * time.Second
	// writeTimeout bounds one frame write.
	writeTimeout = 10 * time.Second
	// signalRetryFor is how long a fake wrapper retries a signal that
	// found no serve before it counts it lost (the real one spools it).
	signalRetryFor = 90 * time.Second
)

// simWorker is one simulated `pam worker`: a host of its own, the real
// register call, the real uplink WebSocket with the real frame sequence
// (admitting heartbeat, greeting snapshots, heartbeats and pings at the
// interval, run_dispatch_ack), reconciliation calls, and fake sessions in
// place of tmux whose wrapper posts started and finished as
// `pam exec run` does.
type simWorker struct {
	sim        *sim
	name       string
	hostID     string
	token      string
	instanceID string
	http       *http.Client
	api        *apiclient.Client
	signals    chan signalJob

	mu       sync.Mutex
	conn     *websocket.Conn
	runs     map[string]*simRun
	hbSent   []time.Time // heartbeats of the current uplink not acked yet
	admitted time.Time   // when the current uplink was admitted; zero when down
}

// simRun is one fake session.
type simRun struct {
	id       string
	attempt  int
	token    string // the run's signal token, from run_dispatch
	finished bool
	ticks    int // snapshots sent
}

// signalJob is one signal a fake wrapper posts.
type signalJob struct {
	run  *simRun
	kind string
	code int // finished's exit code
}

func newSimWorker(s *sim, name, hostID, token string) *simWorker {
	tr := &http.Transport{
		Proxy:               nil, // loopback only, whatever the environment says
		DialContext:         (&net.Dialer{Timeout: callTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
	hc := &http.Client{Transport: tr}
	return &simWorker{
		sim: s, name: name, hostID: hostID, token: token, instanceID: uuid.NewString(),
		http: hc, api: &apiclient.Client{BaseURL: s.base, Token: token, HTTP: hc},
		signals: make(chan signalJob, 4*s.o.RunsPerWorker+16),
		runs:    map[string]*simRun{},
	}
}

// run keeps the uplink up as the real worker's uplinkLoop does: connect,
// serve until it breaks, then again after the worker's own jittered
// exponential backoff. It returns when ctx ends.
func (w *simWorker) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer w.http.CloseIdleConnections() // their goroutines end with the worker
	defer wg.Wait()
	wg.Go(func() { w.wrappers(ctx) })
	lo, hi := worker.DefaultBackoffMin, worker.DefaultBackoffMax
	backoff := lo
	for {
		connected, err := w.connect(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = lo
		}
		w.sim.noteDown(err)
		t := time.NewTimer(worker.ReconnectDelay(backoff, lo, hi))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, hi)
	}
}

// connect registers, dials, greets and serves one uplink until it breaks.
func (w *simWorker) connect(ctx context.Context) (connected bool, err error) {
	if err := w.register(ctx); err != nil {
		return false, err
	}
	conn, err := w.dial(ctx)
	if err != nil {
		return false, err
	}
	conn.SetReadLimit(wire.MaxFrame)
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		_ = conn.CloseNow()
		wg.Wait()
		w.mu.Lock()
		w.conn, w.hbSent, w.admitted = nil, nil, time.Time{}
		w.mu.Unlock()
	}()
	w.mu.Lock()
	w.conn, w.hbSent = conn, nil
	w.mu.Unlock()
	// The first frame admits the connection; the greeting's snapshots
	// follow it at once, as the real worker's greet sends them.
	if err := w.heartbeat(conn); err != nil {
		return true, fmt.Errorf("greet: %w", err)
	}
	if err := w.greetSnapshots(conn); err != nil {
		return true, fmt.Errorf("greet: %w", err)
	}
	wg.Go(func() { w.heartbeats(cctx, conn, cancel) })
	wg.Go(func() { w.reconciles(cctx) })
	if w.sim.o.SnapshotInterval > 0 {
		wg.Go(func() { w.snapshots(cctx, conn) })
	}
	for {
		_, data, err := conn.Read(cctx)
		if err != nil {
			if ctx.Err() != nil {
				return true, ctx.Err()
			}
			return true, fmt.Errorf("read: %w", err)
		}
		w.handle(conn, data)
	}
}

func (w *simWorker) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	body := wire.Register{HostName: w.name, Platform: "linux/amd64", InstanceID: w.instanceID, Providers: []string{Provider},
		Executor: "tmux", MaxRuns: w.sim.o.RunsPerWorker, Version: "pam-bench-fleet", Protocol: wire.UplinkProtocol}
	var out wire.Registered
	if err := w.api.Do(ctx, http.MethodPost, registerPath, nil, body, &out); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if out.Protocol != 0 && out.Protocol != wire.UplinkProtocol {
		return fmt.Errorf("register: serve speaks uplink protocol %d", out.Protocol)
	}
	return nil
}

func (w *simWorker) dial(ctx context.Context) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	u := "ws" + strings.TrimPrefix(w.sim.base, "http") + uplinkPath
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient: w.http,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + w.token}},
	})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("dial uplink: %s: %w", resp.Status, err)
		}
		return nil, fmt.Errorf("dial uplink: %w", err)
	}
	return conn, nil
}

// heartbeat sends one heartbeat and remembers when, to time its ack.
func (w *simWorker) heartbeat(conn *websocket.Conn) error {
	now := time.Now()
	utc := now.UTC()
	w.mu.Lock()
	w.hbSent = append(w.hbSent, now)
	w.mu.Unlock()
	return w.send(conn, wire.HeartbeatFrame{HostID: w.hostID, InstanceID: w.instanceID, Timestamp: &utc})
}

// heartbeats beats every HeartbeatInterval from the connection's start
// and pings after each beat, as the real worker does; a failure ends the
// uplink.
func (w *simWorker) heartbeats(ctx context.Context, conn *websocket.Conn, broken context.CancelFunc) {
	t := time.NewTicker(w.sim.o.HeartbeatInterval)
	defer t.Stop()
	pingTimeout := min(max(w.sim.o.HeartbeatInterval, 10*time.Second), 30*time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.heartbeat(conn); err != nil {
			broken()
			return
		}
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := conn.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			broken()
			return
		}
	}
}

// uplinkDownGrace is how long a failed reconcile call waits for the
// uplink to go down (serve stopping) before it is counted as an error.
const uplinkDownGrace = 5 * time.Second

// reconciles asks for the host's runs after each connect and every
// ReconcileInterval, the call the real worker's reconciliation makes.
func (w *simWorker) reconciles(ctx context.Context) {
	t := time.NewTicker(w.sim.o.ReconcileInterval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		var list wire.WorkerRunList
		err := w.api.Do(cctx, http.MethodGet, workerRunsPath, nil, nil, &list)
		cancel()
		if err != nil && ctx.Err() == nil {
			// A stopping serve refuses new connections before it closes
			// the uplinks, so a call in between fails on the uplink's way
			// down: it counts only if the uplink outlives it.
			select {
			case <-ctx.Done():
				return
			case <-time.After(uplinkDownGrace):
				w.sim.reconcileErrors.Add(1)
				w.sim.noteErr("reconcile", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// snapshots sends, every SnapshotInterval (from a random phase), a
// changed screen of each live fake session: what the real capture loop
// sends for panes that changed.
func (w *simWorker) snapshots(ctx context.Context, conn *websocket.Conn) {
	d := w.sim.o.SnapshotInterval
	first := time.NewTimer(rand.N(d) + 1)
	select {
	case <-ctx.Done():
		first.Stop()
		return
	case <-first.C:
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		for _, f := range w.liveSnapshots(true) {
			if err := w.send(conn, f); err != nil {
				return
			}
			w.sim.snapshotsSent.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// greetSnapshots sends the latest screen of every live session, as the
// real worker's greeting does so that a restarted serve's pane cache is
// whole again.
func (w *simWorker) greetSnapshots(conn *websocket.Conn) error {
	for _, f := range w.liveSnapshots(false) {
		if err := w.send(conn, f); err != nil {
			return err
		}
		w.sim.snapshotsSent.Add(1)
	}
	return nil
}

// liveSnapshots builds a snapshot frame of each live session; tick moves
// each screen on (a pane that changed).
func (w *simWorker) liveSnapshots(tick bool) []wire.Frame {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []wire.Frame
	now := time.Now().UTC()
	for _, r := range w.runs {
		if r.finished {
			continue
		}
		if tick {
			r.ticks++
		}
		capture := fmt.Sprintf("simulated session of run %s\r\nattempt %d, screen %d\r\n$ ", r.id, r.attempt, r.ticks)
		out = append(out, wire.SnapshotFrame{RunID: r.id, Attempt: wire.IntPtr(r.attempt), Capture: capture, Timestamp: &now})
	}
	return out
}

// send writes one frame, checked as the real worker's are.
func (w *simWorker) send(conn *websocket.Conn, f wire.Frame) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("simulated worker built an invalid %s frame: %w", f.Type(), err)
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return conn.Write(ctx, websocket.MessageText, b)
}

// handle acts on one frame from serve.
func (w *simWorker) handle(conn *websocket.Conn, data []byte) {
	f, err := wire.DecodeFrame(data)
	if err == nil {
		err = f.Validate()
	}
	if err != nil {
		w.sim.protocolErrors.Add(1)
		w.sim.noteErr("frame from serve", err)
		return
	}
	switch f := f.(type) {
	case wire.HeartbeatAckFrame:
		w.heartbeatAcked()
	case wire.RunDispatchFrame:
		w.dispatch(conn, f)
	case wire.RunStopFrame:
		w.stop(f)
	case wire.SignalAckFrame:
		w.sim.signalResult(f.Kind, f.Result, f.Code)
	case wire.ErrorFrame:
		w.sim.errorFrames.Add(1)
		w.sim.noteErr("error frame", fmt.Errorf("%s: %s", f.Code, f.Message))
	case wire.AttachOpenFrame:
		// Nobody attaches to a simulated session.
		_ = w.send(conn, wire.AttachClosedFrame{AttachID: f.AttachID, Reason: "simulated session"})
	default:
		// send_keys, log_request and workspace requests: nothing here
		// asks for them.
	}
}

// heartbeatAcked times the oldest heartbeat not acked yet; the first ack
// of an uplink admits it.
func (w *simWorker) heartbeatAcked() {
	now := time.Now()
	w.mu.Lock()
	var sent time.Time
	if len(w.hbSent) > 0 {
		sent, w.hbSent = w.hbSent[0], w.hbSent[1:]
	}
	first := w.admitted.IsZero()
	if first {
		w.admitted = now
	}
	w.mu.Unlock()
	if first {
		w.sim.noteAdmitted(w, now)
	}
	if !sent.IsZero() {
		w.sim.heartbeatAcked(now.Sub(sent))
	}
}

// dispatch answers run_dispatch as the real worker does: ack at once
// (again if the run is already here), refuse past max_runs, then start
// the fake session, whose wrapper posts started.
func (w *simWorker) dispatch(conn *websocket.Conn, f wire.RunDispatchFrame) {
	attempt := *f.Attempt
	w.sim.noteDispatch(f.RunID, w.hostID, attempt)
	ack := func(ok bool, reason string) {
		if err := w.send(conn, wire.RunDispatchAckFrame{RunID: f.RunID, Attempt: wire.IntPtr(attempt), Accepted: &ok, Reason: reason}); err != nil {
			w.sim.noteErr("ack", err)
		}
	}
	w.mu.Lock()
	r := w.runs[f.RunID]
	switch {
	case r != nil && r.attempt == attempt:
		w.mu.Unlock()
		ack(true, "")
		return
	case r != nil && r.attempt > attempt:
		w.mu.Unlock()
		ack(false, fmt.Sprintf("attempt %d of this run is live here", r.attempt))
		return
	case r != nil:
		r.attempt, r.token, r.finished, r.ticks = attempt, f.SignalToken, false, 0
	default:
		if n := w.activeLocked(); n >= w.sim.o.RunsPerWorker {
			w.mu.Unlock()
			w.sim.refusals.Add(1)
			ack(false, fmt.Sprintf("at capacity: %d of %d runs", n, w.sim.o.RunsPerWorker))
			return
		}
		r = &simRun{id: f.RunID, attempt: attempt, token: f.SignalToken}
		w.runs[f.RunID] = r
	}
	w.mu.Unlock()
	ack(true, "")
	w.queue(signalJob{run: r, kind: wire.SignalStarted})
}

// stop ends a fake session as SIGTERM ends a CLI: its wrapper posts
// finished with 143.
func (w *simWorker) stop(f wire.RunStopFrame) {
	w.mu.Lock()
	r := w.runs[f.RunID]
	ok := r != nil && r.attempt == *f.Attempt && !r.finished
	if ok {
		r.finished = true
	}
	w.mu.Unlock()
	if ok {
		w.queue(signalJob{run: r, kind: wire.SignalFinished, code: 143})
	}
}

// finishAll ends every live fake session with exit code 0.
func (w *simWorker) finishAll() {
	w.mu.Lock()
	var jobs []signalJob
	for _, r := range w.runs {
		if !r.finished {
			r.finished = true
			jobs = append(jobs, signalJob{run: r, kind: wire.SignalFinished})
		}
	}
	w.mu.Unlock()
	for _, j := range jobs {
		w.queue(j)
	}
}

// queue hands a signal to the fake wrappers without ever blocking the
// uplink's reader; a full queue (not reached: it holds several signals
// per run) is counted.
func (w *simWorker) queue(j signalJob) {
	select {
	case w.signals <- j:
	default:
		w.sim.signalResult(j.kind, "", "queue_full")
	}
}

func (w *simWorker) activeLocked() int {
	n := 0
	for _, r := range w.runs {
		if !r.finished {
			n++
		}
	}
	return n
}

// live is how many fake sessions run here.
func (w *simWorker) live() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.activeLocked()
}

// wrappers posts the fake wrappers' signals, in order, until ctx ends:
// over HTTP with the run's signal token as `pam exec run` does, or on the
// uplink (Options.UplinkSignals), the path of a replayed spool.
func (w *simWorker) wrappers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-w.signals:
			w.postSignal(ctx, j)
		}
	}
}

func (w *simWorker) postSignal(ctx context.Context, j signalJob) {
	w.mu.Lock()
	id, attempt, token := j.run.id, j.run.attempt, j.run.token
	w.mu.Unlock()
	now := time.Now().UTC()
	sig := wire.Signal{Kind: j.kind, Attempt: &attempt, Source: wire.SourceWrapper, Timestamp: &now}
	if j.kind == wire.SignalFinished {
		sig.Payload = json.RawMessage(fmt.Sprintf(`{"exit_code":%d}`, j.code))
	}
	if w.sim.o.UplinkSignals {
		f := wire.SignalFrame{RunID: id, Kind: sig.Kind, Attempt: sig.Attempt, Source: sig.Source, Payload: sig.Payload, Timestamp: sig.Timestamp}
		w.mu.Lock()
		conn := w.conn
		w.mu.Unlock()
		if conn == nil || w.send(conn, f) != nil {
			w.sim.signalResult(j.kind, "", "not_sent")
		}
		return // the result comes with signal_ack
	}
	c := &apiclient.Client{BaseURL: w.sim.base, Token: token, HTTP: w.http}
	deadline := time.Now().Add(signalRetryFor)
	delay := 100 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		res, err := c.PostSignal(cctx, id, sig)
		cancel()
		var we *wire.Error
		switch {
		case err == nil:
			w.sim.signalResult(j.kind, res, "")
			return
		case errors.As(err, &we) && we.Status != http.StatusServiceUnavailable:
			w.sim.signalResult(j.kind, "", we.Code)
			w.sim.noteErr("signal "+j.kind, err)
			return
		case ctx.Err() != nil || time.Now().After(deadline):
			w.sim.signalResult(j.kind, "", "undelivered")
			w.sim.noteErr("signal "+j.kind, err)
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		delay = min(delay*2, 2*time.Second)
	}
}
