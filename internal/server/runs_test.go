package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pam/internal/clock"
	"pam/internal/dispatch"
	"pam/internal/eventually"
	"pam/internal/fleet"
	"pam/internal/journal"
	"pam/internal/server"
	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// newRunEnvB is newRunEnv for benchmarks.
func newRunEnvB(b *testing.B) *runEnv { return newRunEnv(b, runOpts{}) }

// runEnv is a server with a fleet and a dispatcher on a fresh database;
// workers are simulated by fakeWorker, a real uplink WebSocket client.
type runEnv struct {
	*env
	srv    *server.Server
	fleet  *fleet.Fleet
	disp   *dispatch.Dispatcher
	passes *atomic.Int64 // dispatcher passes so far
	task   wire.WorkItem
	clock  *clock.Manual // runOpts.storeClock
}

type runOpts struct {
	ack, dispatchTimeout, spawn time.Duration
	policy                      store.Policy
	signalLanes                 int
	// clock is the server's Clock.
	clock func() time.Time
	// storeClock, when set, is the store's (and so the dispatcher's)
	// clock: the timers expire when the test moves it (runEnv.advance),
	// and hosts go offline only after an hour of it.
	storeClock *clock.Manual
	// hub gives the server a journal hub (the SSE stream), which also
	// tells it of what other serves of the database did.
	hub bool
}

func newRunEnv(t testing.TB, o runOpts) *runEnv {
	t.Helper()
	st := storetest.New(t)
	if o.policy.RestartInitialDelay == 0 {
		o.policy.RestartInitialDelay = 50 * time.Millisecond
		o.policy.RestartMaxDelay = 200 * time.Millisecond
	}
	st.Policy = o.policy
	var offlineAfter time.Duration
	if o.storeClock != nil {
		st.Clock, offlineAfter = o.storeClock.Now, time.Hour
	}
	fl := fleet.New(1000)
	passes := new(atomic.Int64)
	d := dispatch.New(st, fl, dispatch.Options{AckTimeout: o.ack, DispatchTimeout: o.dispatchTimeout, SpawnTimeout: o.spawn, Tick: 50 * time.Millisecond,
		HostOfflineAfter: offlineAfter, AfterPass: func() { passes.Add(1) }})
	var hub *journal.Hub
	var events server.EventStreamer
	if o.hub {
		hub = journal.NewHub(st, journal.Options{PollInterval: 50 * time.Millisecond})
		st.AfterCommit = hub.Wake
		hctx, hcancel := context.WithCancel(context.Background())
		hdone := make(chan struct{})
		go func() { _ = hub.Run(hctx); close(hdone) }()
		t.Cleanup(func() { hcancel(); <-hdone }) // after the server's own cleanup
		events = hub
	}
	srv := server.New(server.Options{Store: st, Events: events, Token: testToken, Fleet: fl, Dispatcher: d, CaptureInterval: 100 * time.Millisecond, SignalLanes: o.signalLanes, Clock: o.clock, Logger: slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if hub != nil {
		hub.Observe(srv.ObserveEvents)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	ts := serve(t, srv)
	e := &runEnv{env: &env{t: t, url: ts.URL, store: st}, srv: srv, fleet: fl, disp: d, passes: passes, clock: o.storeClock}
	p := e.project("Runs")
	e.task = e.item(p.Slug, "task", "Do the thing", nil)
	return e
}

// advance moves the store's manual clock d forward and waits for a
// dispatcher pass that began after it.
func (e *runEnv) advance(d time.Duration) {
	e.t.Helper()
	e.clock.Advance(d)
	from := e.passes.Load()
	e.disp.Wake()
	eventually.Wait(e.t, eventually.Medium, "a pass after the clock moved", func() bool { return e.passes.Load() >= from+2 })
}

// waitPasses waits until the dispatcher has made n more passes: a check
// that nothing happened means something only after the loop ran.
func (e *runEnv) waitPasses(n int64) {
	e.t.Helper()
	from := e.passes.Load()
	eventually.Wait(e.t, eventually.Medium, "dispatcher passes", func() bool { return e.passes.Load() >= from+n })
}

type fakeWorker struct {
	t      testing.TB
	e      *runEnv
	ws     *websocket.Conn
	token  string
	hostID string
	name   string
	frames chan wiretest.Frame
	gone   chan struct{} // closed when the server ends the current connection
}

// worker provisions a host and connects a simulated worker to it.
func (e *runEnv) worker(name string, maxRuns int, providers ...string) *fakeWorker {
	e.t.Helper()
	var created wire.HostCreated
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": name, "max_runs": maxRuns}, &created)
	w := &fakeWorker{t: e.t, e: e, token: created.WorkerToken, hostID: created.Host.ID, name: name, frames: make(chan wiretest.Frame, 1000)}
	code, body := e.callAs(w.token, "POST", "/api/internal/worker/register", wire.Register{HostName: name, Platform: "linux",
		InstanceID: "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", Providers: providers, Executor: "tmux", MaxRuns: maxRuns, Protocol: 1})
	if code != 200 {
		e.t.Fatalf("register %s: %d %s", name, code, body)
	}
	w.connect()
	return w
}

func (w *fakeWorker) connect() {
	w.t.Helper()
	w.dial()
	now := time.Now()
	w.send(wire.HeartbeatFrame{HostID: w.hostID, InstanceID: "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", Timestamp: &now})
	w.expect(wire.FrameHeartbeatAck)
}

// dial opens the uplink socket and starts reading it, sending nothing.
func (w *fakeWorker) dial() {
	w.t.Helper()
	ws, _, err := websocket.Dial(w.t.Context(), "ws"+strings.TrimPrefix(w.e.url, "http")+"/api/internal/worker/uplink",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + w.token}}})
	if err != nil {
		w.t.Fatalf("dial uplink: %v", err)
	}
	ws.SetReadLimit(wire.MaxFrame)
	w.ws = ws
	w.t.Cleanup(func() { ws.CloseNow() })
	gone := make(chan struct{})
	w.gone = gone
	go func() {
		defer close(gone)
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			f, err := wire.DecodeFrame(b)
			if err == nil {
				err = f.Validate()
			}
			if err != nil {
				w.t.Errorf("server sent a malformed frame: %v: %s", err, b)
				return
			}
			w.frames <- wiretest.Of(f)
		}
	}()
}

func (w *fakeWorker) send(f wire.Frame) {
	w.t.Helper()
	b, _ := json.Marshal(f)
	if err := w.ws.Write(w.t.Context(), websocket.MessageText, b); err != nil {
		w.t.Fatalf("send %s: %v", f.Type(), err)
	}
}

// expect returns the next frame of type typ, skipping heartbeat acks.
func (w *fakeWorker) expect(typ string) wiretest.Frame {
	w.t.Helper()
	deadline := time.After(eventually.Medium)
	for {
		select {
		case f := <-w.frames:
			if f.Type == typ {
				return f
			}
			if f.Type != wire.FrameHeartbeatAck {
				w.t.Fatalf("%s: got %s frame %+v while waiting for %s", w.name, f.Type, f, typ)
			}
		case <-deadline:
			w.t.Fatalf("%s: no %s frame within %s", w.name, typ, eventually.Medium)
		}
	}
}

func (w *fakeWorker) ack(f wiretest.Frame, accepted bool) {
	w.send(wire.RunDispatchAckFrame{RunID: f.RunID, Attempt: f.Attempt, Accepted: &accepted, Reason: "test"})
}

// signal posts a signal over HTTP with a bearer token.
func (e *runEnv) signal(token, runID string, body any) (int, wire.SignalResult, []byte) {
	e.t.Helper()
	code, out := e.callAs(token, "POST", "/api/internal/runs/"+runID+"/signals", body)
	var r wire.SignalResult
	_ = json.Unmarshal(out, &r)
	return code, r, out
}

func sig(kind string, attempt int, extra ...any) map[string]any {
	m := map[string]any{"kind": kind, "attempt": attempt, "source": "wrapper"}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

func (e *runEnv) start(body map[string]any) wire.Run {
	e.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["task_id"]; !ok {
		body["task_id"] = e.task.ID
	}
	if _, ok := body["provider"]; !ok {
		body["provider"] = "shell"
	}
	var r wire.Run
	e.must(202, "POST", "/api/v1/runs", body, &r)
	return r
}

func (e *runEnv) run(id string) wire.Run {
	e.t.Helper()
	var r wire.Run
	e.must(200, "GET", "/api/v1/runs/"+id, nil, &r)
	return r
}

func (e *runEnv) waitRun(id, what string, cond func(wire.Run) bool) wire.Run {
	e.t.Helper()
	var r wire.Run
	eventually.Wait(e.t, 15*time.Second, "run "+id+": "+what, func() bool { r = e.run(id); return cond(r) })
	return r
}

func (e *runEnv) topics(runID string) string {
	e.t.Helper()
	var l wire.EventList
	e.must(200, "GET", "/api/v1/runs/"+runID+"/events", nil, &l)
	var ts []string
	for _, ev := range l.Events {
		var p map[string]any
		_ = json.Unmarshal(ev.Payload, &p)
		if p["run_id"] != runID || p["attempt"] == nil {
			e.t.Errorf("%s payload lacks run_id/attempt: %s", ev.Topic, ev.Payload)
		}
		ts = append(ts, ev.Topic)
	}
	return strings.Join(ts, " ")
}

func TestRunLifecycleWithSimulatedWorker(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r := e.start(nil)
	if r.Status != "pending" || r.SessionName != "pam-"+r.ID[:8] || r.Attempt != 1 || r.MaxAttempts != 3 {
		t.Fatalf("created %+v", r)
	}
	d := w.expect(wire.FrameRunDispatch)
	if d.RunID != r.ID || *d.Attempt != 1 || d.SessionName != r.SessionName || d.TaskTitle != "Do the thing" || d.SignalToken == "" {
		t.Fatalf("dispatch frame %+v", d)
	}
	w.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == "spawning" })
	if code, res, body := e.signal(d.SignalToken, r.ID, sig("started", 1)); code != 202 || res.Result != "applied" {
		t.Fatalf("started: %d %s", code, body)
	}
	var item wire.WorkItem
	e.must(200, "GET", "/api/v1/work-items/"+e.task.ID, nil, &item)
	if item.Status != "doing" {
		t.Fatalf("work item after start: %s", item.Status)
	}
	now := time.Now()
	w.send(wire.SnapshotFrame{RunID: r.ID, Attempt: d.Attempt, Capture: "hello\n", Timestamp: &now})
	eventually.Wait(t, eventually.Short, "the pane to show the snapshot", func() bool {
		var p wire.Pane
		e.must(200, "GET", "/api/v1/runs/"+r.ID+"/pane", nil, &p)
		return p.Capture == "hello\n" && p.Seq == 1
	})
	// finished over the uplink this time: both transports are one path.
	w.send(wire.SignalFrame{RunID: r.ID, Kind: "finished", Attempt: wire.IntPtr(1), Source: "wrapper", Payload: json.RawMessage(`{"exit_code":0}`)})
	ack := w.expect(wire.FrameSignalAck)
	if ack.Result != "applied" || ack.Kind != "finished" {
		t.Fatalf("signal_ack %+v", ack)
	}
	got := e.run(r.ID)
	if got.Status != "exited" || got.ExitCode == nil || *got.ExitCode != 0 || got.FinishedAt == nil || got.StartedAt == nil {
		t.Fatalf("after finished: %+v", got)
	}
	if ts := e.topics(r.ID); ts != "run.created run.dispatched run.spawning run.started run.finished run.exited" {
		t.Fatalf("events: %s", ts)
	}
}

func TestRestartPolicyRequeuesThenFailsForGood(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-r", 4, "shell")
	r := e.start(map[string]any{"max_attempts": 2})
	for attempt := 1; attempt <= 2; attempt++ {
		d := w.expect(wire.FrameRunDispatch)
		if *d.Attempt != attempt {
			t.Fatalf("dispatch attempt %d, want %d", *d.Attempt, attempt)
		}
		w.ack(d, true)
		// The ack travels on the uplink, the signals over HTTP: let the ack
		// land first, or a late ack of attempt 1 draws a run_stop.
		e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == "spawning" && r.Attempt == attempt })
		e.signal(d.SignalToken, r.ID, sig("started", attempt))
		if code, res, body := e.signal(d.SignalToken, r.ID, sig("finished", attempt, "payload", map[string]any{"exit_code": 3})); code != 202 || res.Result != "applied" {
			t.Fatalf("finished: %d %s", code, body)
		}
		got := e.run(r.ID)
		if attempt == 1 {
			// host_id is cleared by the requeue, but the dispatcher may
			// already have offered attempt 2 to the host again (the next
			// expect sees that offer).
			if got.Status != "pending" || got.Attempt != 2 || got.NextAttemptAt == nil || got.FailureReason != nil {
				t.Fatalf("after the first failure: %+v", got)
			}
		} else if got.Status != "failed" || got.FailureReason == nil || *got.FailureReason != "exit_nonzero" || *got.ExitCode != 3 {
			t.Fatalf("after the last failure: %+v", got)
		}
	}
	want := "run.created run.dispatched run.spawning run.started run.finished run.failed run.requeued " +
		"run.dispatched run.spawning run.started run.finished run.failed"
	if ts := e.topics(r.ID); ts != want {
		t.Fatalf("events:\n%s\nwant\n%s", ts, want)
	}
	// Retry from failed raises max_attempts and requeues.
	var retried wire.Run
	e.must(202, "POST", "/api/v1/runs/"+r.ID+"/retry", nil, &retried)
	if retried.Status != "pending" || retried.Attempt != 3 || retried.MaxAttempts != 3 {
		t.Fatalf("retry: %+v", retried)
	}
	code, body := e.call("POST", "/api/v1/runs/"+r.ID+"/retry", nil)
	if code != 409 || errorOf(t, body).Code != "illegal_transition" {
		t.Fatalf("retry of a pending run: %d %s", code, body)
	}
}

// TestSignalIngestTable walks every row of the signal table of docs/architecture.md#signal-ingest on both transports.
func TestSignalIngestTable(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"http", "uplink"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			e := newRunEnv(t, runOpts{})
			w := e.worker("host-"+transport, 4, "shell")
			other := e.worker("other-"+transport, 4, "shell")
			r := e.start(map[string]any{"host_id": w.hostID})
			d := w.expect(wire.FrameRunDispatch)
			w.ack(d, true)
			e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == "spawning" })

			send := func(body map[string]any) (int, string, string) {
				t.Helper()
				if transport == "http" {
					code, res, out := e.signal(w.token, r.ID, body)
					if code >= 400 {
						var env struct{ Error wire.Error }
						_ = json.Unmarshal(out, &env)
						return code, "", env.Error.Code
					}
					return code, res.Result, ""
				}
				f := wire.SignalFrame{RunID: r.ID, Source: "wrapper"}
				b, _ := json.Marshal(body)
				var s wire.Signal
				_ = json.Unmarshal(b, &s)
				f.Kind, f.Attempt, f.Seq, f.Payload = s.Kind, s.Attempt, s.Seq, s.Payload
				if src, ok := body["source"].(string); ok {
					f.Source = src
				}
				w.send(f)
				ack := w.expect(wire.FrameSignalAck)
				return 0, ack.Result, ack.Code
			}
			rows := []struct {
				name       string
				body       map[string]any
				code       int // http only
				result     string
				errCode    string
				wantStatus string
			}{
				{"started applied", sig("started", 1), 202, "applied", "", "running"},
				{"started duplicate", sig("started", 1), 200, "duplicate", "", "running"},
				{"progress applied", sig("progress", 1, "seq", 5), 202, "applied", "", "running"},
				{"progress out of order", sig("progress", 1, "seq", 5), 200, "out_of_order", "", "running"},
				{"progress older", sig("progress", 1, "seq", 2), 200, "out_of_order", "", "running"},
				{"progress without seq", sig("progress", 1), 400, "", "missing_seq", "running"},
				{"no attempt", map[string]any{"kind": "started", "source": "wrapper"}, 400, "", "missing_attempt", "running"},
				{"attempt too high", sig("finished", 7, "payload", map[string]any{"exit_code": 0}), 409, "", "invalid_attempt", "running"},
				{"manual source refused", sig("completed", 1, "source", "manual"), 400, "", "validation_failed", "running"},
				{"bad kind", sig("exploded", 1), 400, "", "validation_failed", "running"},
				{"finished without exit code", sig("finished", 1), 400, "", "validation_failed", "running"},
				{"completed applied", sig("completed", 1, "source", "provider-hook"), 202, "applied", "", "running"},
				{"completed duplicate", sig("completed", 1, "source", "provider-hook"), 200, "duplicate", "", "running"},
				{"finished applied", sig("finished", 1, "payload", map[string]any{"exit_code": 0}), 202, "applied", "", "exited"},
				{"failed ignored after terminal", sig("failed", 1), 200, "ignored", "", "exited"},
				{"finished duplicate", sig("finished", 1, "payload", map[string]any{"exit_code": 0}), 200, "duplicate", "", "exited"},
			}
			for _, row := range rows {
				code, result, errCode := send(row.body)
				if transport == "http" && code != row.code {
					t.Errorf("%s: HTTP %d, want %d", row.name, code, row.code)
				}
				if result != row.result || errCode != row.errCode {
					t.Errorf("%s: result %q code %q, want %q %q", row.name, result, errCode, row.result, row.errCode)
				}
				if st := e.run(r.ID).Status; st != row.wantStatus {
					t.Fatalf("%s: status %s, want %s", row.name, st, row.wantStatus)
				}
			}
			got := e.run(r.ID)
			if got.CompletedAt == nil || got.CompletionSource == nil || *got.CompletionSource != "provider-hook" {
				t.Errorf("completed did not record completion: %+v", got)
			}
			var item wire.WorkItem
			e.must(200, "GET", "/api/v1/work-items/"+e.task.ID, nil, &item)
			if item.Status != "done" {
				t.Errorf("auto_done: work item %s", item.Status)
			}
			// A host that was never offered the run: 404, nothing written.
			if transport == "http" {
				code, _, body := e.signal(other.token, r.ID, sig("started", 1))
				if code != 404 {
					t.Errorf("signal from a foreign host: %d %s", code, body)
				}
				code, _, _ = e.signal(testToken, r.ID, sig("started", 1))
				if code != 401 {
					t.Errorf("operator token on /api/internal: %d", code)
				}
				code, _, _ = e.signal(d.SignalToken, r.ID, sig("started", 2))
				if code != 401 {
					t.Errorf("signal token for attempt 1 used for attempt 2: %d", code)
				}
				// One hex digit changed (never to itself: "00" would be the
				// token again once in 256 runs).
				forged := d.SignalToken[:len(d.SignalToken)-1] + map[bool]string{true: "1", false: "0"}[strings.HasSuffix(d.SignalToken, "0")]
				code, _, _ = e.signal(forged, r.ID, sig("started", 1))
				if code != 401 {
					t.Errorf("forged signal token: %d", code)
				}
				if code, _ := e.callAs(w.token, "GET", "/api/v1/projects", nil); code != 401 {
					t.Errorf("worker token on /api/v1: %d", code)
				}
			} else {
				other.send(wire.SignalFrame{RunID: r.ID, Kind: "started", Attempt: wire.IntPtr(1), Source: "wrapper"})
				if ack := other.expect(wire.FrameSignalAck); ack.Code != "not_found" {
					t.Errorf("uplink signal from a foreign host: %+v", ack)
				}
				w.ws.Write(t.Context(), websocket.MessageText, []byte(`{"type":"signal","bogus":1}`))
				if f := w.expect(wire.FrameError); f.Code != "malformed_frame" {
					t.Errorf("malformed frame answered with %+v", f)
				}
				// ... and the connection stays usable.
				now := time.Now()
				w.send(wire.HeartbeatFrame{HostID: w.hostID, InstanceID: instanceA, Timestamp: &now})
				w.expect(wire.FrameHeartbeatAck)
			}
		})
	}
}

// TestInvalidUplinkFrames: a frame that decodes but fails Validate is
// answered (malformed_frame, or a signal_ack with the error's code for a
// signal) and dropped without a write; the uplink stays.
func TestInvalidUplinkFrames(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-inv", 4, "shell")
	r := e.start(nil)
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == "spawning" })
	before := e.topics(r.ID)
	one := wire.IntPtr(1)
	for _, c := range []struct {
		what  string
		f     wire.Frame
		field string
	}{
		{"unknown run_state", wire.RunStateFrame{RunID: r.ID, Attempt: one, State: "exploded"}, "state"},
		{"run_state detail too long", wire.RunStateFrame{RunID: r.ID, Attempt: one, State: wire.StateSessionLost, Detail: strings.Repeat("é", wire.MaxText+1)}, "detail"},
		{"run_state detail with NUL", wire.RunStateFrame{RunID: r.ID, Attempt: one, State: wire.StateSpawnFailed, Detail: "a\x00b"}, "detail"},
		{"run_state without attempt", wire.RunStateFrame{RunID: r.ID, State: wire.StateTmuxCrash}, "attempt"},
		{"ack without accepted", wire.RunDispatchAckFrame{RunID: r.ID, Attempt: one}, "accepted"},
		{"ack of attempt 0", wire.RunDispatchAckFrame{RunID: r.ID, Attempt: wire.IntPtr(0), Accepted: new(bool)}, "attempt"},
		{"snapshot of an uppercase run id", wire.SnapshotFrame{RunID: strings.ToUpper(r.ID), Attempt: one, Capture: "x"}, "run_id"},
		{"heartbeat with a bad host id", wire.HeartbeatFrame{HostID: "host-1"}, "host_id"},
		{"attach_output with a bad attach id", wire.AttachOutputFrame{AttachID: "a1", Bytes: []byte("x")}, "attach_id"},
		{"log_chunk without a request id", wire.LogChunkFrame{RunID: r.ID, Text: "x"}, "request_id"},
	} {
		w.send(c.f)
		got := w.expect(wire.FrameError)
		if got.Code != wire.CodeMalformedFrame || !strings.Contains(got.Message, c.field) || len([]rune(got.Message)) > wire.MaxText {
			t.Errorf("%s: answered %+v, want malformed_frame naming %s", c.what, got, c.field)
		}
	}
	for _, c := range []struct {
		what string
		f    wire.Frame
		code string
	}{
		{"negative seq", wire.SignalFrame{RunID: r.ID, Attempt: one, Kind: "progress", Seq: new(int64(-1)), Source: "wrapper"}, "validation_failed"},
		{"payload with NUL", wire.SignalFrame{RunID: r.ID, Attempt: one, Kind: "progress", Seq: new(int64(3)), Source: "wrapper", Payload: json.RawMessage(`{"x":"\u0000"}`)}, "validation_failed"},
		{"attempt 0", wire.SignalFrame{RunID: r.ID, Attempt: wire.IntPtr(0), Kind: "started", Source: "wrapper"}, "validation_failed"},
		{"huge kind", wire.SignalFrame{RunID: r.ID, Attempt: one, Kind: strings.Repeat("k", 5000), Source: "wrapper"}, "validation_failed"},
	} {
		w.send(c.f)
		got := w.expect(wire.FrameSignalAck)
		if got.Code != c.code || got.Result != "" {
			t.Errorf("%s: answered %+v, want code %s", c.what, got, c.code)
		}
	}
	if got := e.run(r.ID); got.Status != "spawning" {
		t.Errorf("invalid frames changed the run: %+v", got)
	}
	if ts := e.topics(r.ID); ts != before {
		t.Errorf("invalid frames journaled: %s, before %s", ts, before)
	}
	// The uplink stays: the next valid frame is taken.
	w.send(wire.SignalFrame{RunID: r.ID, Attempt: one, Kind: "started", Source: "wrapper"})
	if ack := w.expect(wire.FrameSignalAck); ack.Result != wire.ResultApplied {
		t.Fatalf("started after the invalid frames: %+v", ack)
	}
}

// TestStaleAttemptAndStaleOffer: an old incarnation is stale_attempt; a
// host whose offer was withdrawn and re-made elsewhere is stale_offer and
// told to stop.
func TestStaleAttemptAndStaleOffer(t *testing.T) {
	t.Parallel()
	const ack = time.Minute
	e := newRunEnv(t, runOpts{ack: ack, storeClock: clock.NewManual(time.Now())})
	a := e.worker("slow-a", 4, "shell")
	r := e.start(map[string]any{"max_attempts": 3})
	d1 := a.expect(wire.FrameRunDispatch) // a does not ack in time
	// Drain a (disable is drain-only) so the re-offer must go to b.
	// Disabling cuts a's uplink once; like a worker, a reconnects.
	e.must(200, "POST", "/api/v1/hosts/slow-a/disable", nil, nil)
	a.reconnect()
	b := e.worker("fast-b", 4, "shell")
	e.advance(ack + time.Second)
	d2 := b.expect(wire.FrameRunDispatch)
	if d2.RunID != r.ID || *d2.Attempt != 1 {
		t.Fatalf("re-offer %+v", d2)
	}
	b.ack(d2, true)
	if ts := e.topics(r.ID); !strings.Contains(ts, "run.dispatch_withdrawn") {
		t.Fatalf("no dispatch_withdrawn before the re-offer: %s", ts)
	}
	// a acks late: it is told to stop, and its signals are stale_offer.
	a.ack(d1, true)
	if stop := a.expect(wire.FrameRunStop); stop.RunID != r.ID || !stop.Force {
		t.Fatalf("late ack answered with %+v", stop)
	}
	code, res, body := e.signal(d1.SignalToken, r.ID, sig("started", 1))
	if code != 200 || res.Result != "stale_offer" {
		t.Fatalf("signal of the withdrawn offer: %d %s", code, body)
	}
	if stop := a.expect(wire.FrameRunStop); !stop.Force {
		t.Fatalf("stale_offer did not stop the sender: %+v", stop)
	}
	if code, res, _ := e.signal(d2.SignalToken, r.ID, sig("started", 1)); code != 202 || res.Result != "applied" {
		t.Fatalf("started from the new host: %d %v", code, res)
	}
	// Fail attempt 1; attempt 2 is offered; attempt 1's signals are stale.
	e.signal(d2.SignalToken, r.ID, sig("finished", 1, "payload", map[string]any{"exit_code": 1}))
	if code, res, _ := e.signal(d2.SignalToken, r.ID, sig("progress", 1, "seq", 9)); code != 200 || res.Result != "stale_attempt" {
		t.Fatalf("old attempt progress: %d %v", code, res)
	}
	if ts := e.topics(r.ID); !strings.Contains(ts, "run.stale_signal") || !strings.Contains(ts, "run.dispatch_withdrawn") {
		t.Fatalf("events lack stale_signal/dispatch_withdrawn: %s", ts)
	}
	if got := e.run(r.ID); got.Status != "pending" || got.Attempt != 2 {
		t.Fatalf("after the stale signals: %+v", got)
	}
}

// TestStaleSignalJournalBounded: a token whose offer was withdrawn, or
// whose attempt is over, may send without end; each signal is answered as
// the ingest table says, but the journal gets at most one event per (run,
// attempt, kind), whatever the seqs and whichever host sends them.
func TestStaleSignalJournalBounded(t *testing.T) {
	t.Parallel()
	const ack = time.Minute
	e := newRunEnv(t, runOpts{ack: ack, storeClock: clock.NewManual(time.Now())})
	a := e.worker("old-a", 4, "shell")
	r := e.start(map[string]any{"max_attempts": 3})
	d1 := a.expect(wire.FrameRunDispatch) // a never acks: the offer is withdrawn
	e.must(200, "POST", "/api/v1/hosts/old-a/disable", nil, nil)
	a.reconnect()
	b := e.worker("new-b", 4, "shell")
	e.advance(ack + time.Second)
	d2 := b.expect(wire.FrameRunDispatch)
	if d2.RunID != r.ID || *d2.Attempt != 1 {
		t.Fatalf("re-offer %+v", d2)
	}
	b.ack(d2, true)
	const n = 50
	for i := range n {
		for _, kind := range []string{"started", "progress"} {
			if code, res, body := e.signal(d1.SignalToken, r.ID, sig(kind, 1, "seq", i+1)); code != 200 || res.Result != "stale_offer" {
				t.Fatalf("signal %d of the withdrawn offer: %d %s", i, code, body)
			}
		}
	}
	if code, res, _ := e.signal(d2.SignalToken, r.ID, sig("started", 1)); code != 202 || res.Result != "applied" {
		t.Fatalf("started: %d %v", code, res)
	}
	e.signal(d2.SignalToken, r.ID, sig("finished", 1, "payload", map[string]any{"exit_code": 1}))
	e.waitRun(r.ID, "requeued", func(r wire.Run) bool { return r.Attempt == 2 })
	// Attempt 1 is over: both of its tokens are stale_attempt now.
	for i := range n {
		for _, tok := range []string{d1.SignalToken, d2.SignalToken} {
			for _, body := range []map[string]any{sig("progress", 1, "seq", 100+i), sig("finished", 1, "payload", map[string]any{"exit_code": 0})} {
				if code, res, out := e.signal(tok, r.ID, body); code != 200 || res.Result != "stale_attempt" {
					t.Fatalf("old attempt's %s %d: %d %s", body["kind"], i, code, out)
				}
			}
		}
	}

	var l wire.EventList
	e.must(200, "GET", "/api/v1/runs/"+r.ID+"/events", nil, &l)
	per := map[string]int{}
	for _, ev := range l.Events {
		var p struct {
			Kind          string `json:"kind"`
			Result        string `json:"result"`
			SignalAttempt *int   `json:"signal_attempt"`
			Attempt       int    `json:"attempt"`
		}
		_ = json.Unmarshal(ev.Payload, &p)
		switch ev.Topic {
		case string(wire.TopicRunStaleSignal):
			per[fmt.Sprintf("%s attempt %d %s", ev.Topic, *p.SignalAttempt, p.Kind)]++
		case string(wire.TopicRunSignalReceived):
			per[fmt.Sprintf("%s attempt %d %s %s", ev.Topic, p.Attempt, p.Kind, p.Result)]++
		}
	}
	want := map[string]int{
		"run.signal_received attempt 1 started stale_offer":  1,
		"run.signal_received attempt 1 progress stale_offer": 1,
		"run.stale_signal attempt 1 progress":                1,
		"run.stale_signal attempt 1 finished":                1,
	}
	if fmt.Sprint(per) != fmt.Sprint(want) {
		t.Errorf("refused signals journaled %v, want %v", per, want)
	}
	if got := e.run(r.ID); got.Status != "pending" || got.Attempt != 2 {
		t.Fatalf("after the stale signals: %+v", got)
	}
	// Attempts start at 1: a made-up attempt is a bad body, not one more
	// stale attempt to journal.
	for _, att := range []int{0, -1} {
		code, _, body := e.signal(b.token, r.ID, sig("progress", att, "seq", 1))
		if code != 400 || !strings.Contains(string(body), "validation_failed") {
			t.Errorf("attempt %d: %d %s", att, code, body)
		}
	}
}

// Signals that overtake each other still give one live incarnation.
func TestOvertakingSignals(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-o", 4, "shell")

	// started overtakes the ack: pending → running, spawning journaled too.
	r := e.start(nil)
	d := w.expect(wire.FrameRunDispatch)
	if code, res, body := e.signal(d.SignalToken, r.ID, sig("started", 1)); code != 202 || res.Result != "applied" {
		t.Fatalf("started before ack: %d %s", code, body)
	}
	w.ack(d, true) // the late ack changes nothing
	e.signal(d.SignalToken, r.ID, sig("finished", 1, "payload", map[string]any{"exit_code": 0}))
	if ts := e.topics(r.ID); ts != "run.created run.dispatched run.spawning run.started run.finished run.exited" {
		t.Fatalf("started overtaking the ack: %s", ts)
	}

	// finished overtakes started: spawning → exited; the late started is ignored.
	r2 := e.start(nil)
	d2 := w.expect(wire.FrameRunDispatch)
	w.ack(d2, true)
	e.waitRun(r2.ID, "spawning", func(r wire.Run) bool { return r.Status == "spawning" })
	e.signal(d2.SignalToken, r2.ID, sig("finished", 1, "payload", map[string]any{"exit_code": 0}))
	if code, res, _ := e.signal(d2.SignalToken, r2.ID, sig("started", 1)); code != 200 || res.Result != "ignored" {
		t.Fatalf("started after finished: %d %v", code, res)
	}
	if got := e.run(r2.ID); got.Status != "exited" {
		t.Fatalf("finished overtaking started: %+v", got)
	}
}

func TestConcurrentDuplicateFinished(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-d", 4, "shell")
	r := e.start(nil)
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.signal(d.SignalToken, r.ID, sig("started", 1))
	var mu sync.Mutex
	results := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Go(func() {
			_, res, _ := e.signal(d.SignalToken, r.ID, sig("finished", 1, "payload", map[string]any{"exit_code": 0}))
			mu.Lock()
			results[res.Result]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if results["applied"] != 1 || results["duplicate"] != 49 {
		t.Fatalf("50 identical finished: %v", results)
	}
	if n := strings.Count(e.topics(r.ID), "run.finished"); n != 1 {
		t.Fatalf("%d run.finished events", n)
	}
}

// A sweeper (spawn timeout) racing signals never overwrites a terminal state.
func TestSweeperNeverOverwritesTerminal(t *testing.T) {
	t.Parallel()
	const spawn = time.Minute
	e := newRunEnv(t, runOpts{spawn: spawn, policy: store.Policy{MaxAttempts: 1}, storeClock: clock.NewManual(time.Now())})
	w := e.worker("host-s", 20, "shell")
	for i := 0; i < 10; i++ {
		r := e.start(nil)
		d := w.expect(wire.FrameRunDispatch)
		w.ack(d, true)
		e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })
		if i%2 == 1 {
			// Past the spawn timeout: the sweeper's next pass races the
			// finished signal below.
			e.clock.Advance(spawn + time.Second)
		}
		_, res, _ := e.signal(d.SignalToken, r.ID, sig("finished", 1, "payload", map[string]any{"exit_code": 0}))
		e.clock.Advance(spawn + time.Second) // a run the signal left spawning fails now
		got := e.waitRun(r.ID, "terminal", func(r wire.Run) bool { return !store.Active(r.Status) })
		switch {
		case res.Result == "applied" && got.Status != "exited":
			t.Fatalf("finished applied but the run is %s (%v)", got.Status, got.FailureReason)
		case res.Result == "ignored" && (got.Status != "failed" || *got.FailureReason != "spawn_failed"):
			t.Fatalf("finished ignored but the run is %+v", got)
		}
		e.waitPasses(2) // the sweeper has looked at it again
		if again := e.run(r.ID); again.Status != got.Status {
			t.Fatalf("terminal status changed from %s to %s", got.Status, again.Status)
		}
	}
}

func TestStopRuns(t *testing.T) {
	t.Parallel()
	// A restart backoff of an hour: the requeued run below stays pending
	// in its backoff however slow the machine.
	e := newRunEnv(t, runOpts{policy: store.Policy{RestartInitialDelay: time.Hour, RestartMaxDelay: time.Hour}})
	w := e.worker("host-x", 4, "shell")
	r := e.start(nil)
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.signal(d.SignalToken, r.ID, sig("started", 1))
	var stopped wire.Run
	e.must(202, "POST", "/api/v1/runs/"+r.ID+"/stop", map[string]any{"force": true}, &stopped)
	if stopped.Status != "stopped" {
		t.Fatalf("stop: %+v", stopped)
	}
	if f := w.expect(wire.FrameRunStop); f.RunID != r.ID || !f.Force || *f.Attempt != 1 {
		t.Fatalf("run_stop frame %+v", f)
	}
	// A manual stop wins over anything after it.
	if _, res, _ := e.signal(d.SignalToken, r.ID, sig("finished", 1, "payload", map[string]any{"exit_code": 0})); res.Result != "ignored" {
		t.Fatalf("finished after stop: %v", res)
	}
	code, body := e.call("POST", "/api/v1/runs/"+r.ID+"/stop", nil)
	if code != 409 || errorOf(t, body).Code != "illegal_transition" {
		t.Fatalf("stop of a stopped run: %d %s", code, body)
	}
	// A pending run during its restart backoff stops as an ordinary pending.
	r2 := e.start(map[string]any{"max_attempts": 2})
	d2 := w.expect(wire.FrameRunDispatch)
	w.ack(d2, true)
	e.signal(d2.SignalToken, r2.ID, sig("finished", 1, "payload", map[string]any{"exit_code": 1}))
	if got := e.run(r2.ID); got.Status != "pending" || got.NextAttemptAt == nil || !got.NextAttemptAt.After(time.Now()) {
		t.Fatalf("not in backoff: %+v", got)
	}
	e.must(202, "POST", "/api/v1/runs/"+r2.ID+"/stop", nil, &stopped)
	if stopped.Status != "stopped" {
		t.Fatalf("stop during backoff: %+v", stopped)
	}
}

func TestRunValidation(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	epic := e.item(e.project("Other").Slug, "epic", "an epic", nil)
	cases := []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"bad task", map[string]any{"task_id": "x", "provider": "shell"}, "task_id"},
		{"missing task", map[string]any{"task_id": "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", "provider": "shell"}, "task_id"},
		{"epic is not runnable", map[string]any{"task_id": epic.ID, "provider": "shell"}, "task_id"},
		{"bad provider", map[string]any{"task_id": e.task.ID, "provider": "Shell!"}, "provider"},
		{"max attempts 0", map[string]any{"task_id": e.task.ID, "provider": "shell", "max_attempts": 0}, "max_attempts"},
		{"max attempts 21", map[string]any{"task_id": e.task.ID, "provider": "shell", "max_attempts": 21}, "max_attempts"},
		{"relative cwd", map[string]any{"task_id": e.task.ID, "provider": "shell", "cwd": "src"}, "cwd"},
		{"huge prompt", map[string]any{"task_id": e.task.ID, "provider": "shell", "prompt": strings.Repeat("p", 64<<10+1)}, "prompt"},
		{"unknown host", map[string]any{"task_id": e.task.ID, "provider": "shell", "host_id": "nope"}, "host_id"},
		{"unknown field", map[string]any{"task_id": e.task.ID, "provider": "shell", "priority": 1}, "priority"},
	}
	for _, c := range cases {
		code, body := e.call("POST", "/api/v1/runs", c.body)
		if code != 400 || errorOf(t, body).Details["field"] != c.field {
			t.Errorf("%s: %d %s, want 400 naming %s", c.name, code, body, c.field)
		}
	}
	for _, p := range []string{"/api/v1/runs/nope", "/api/v1/runs/6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", "/api/v1/runs/nope/pane", "/api/v1/runs/nope/events"} {
		if code, _ := e.call("GET", p, nil); code != 404 {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
	if code, body := e.call("GET", "/api/v1/runs?status=bogus", nil); code != 400 {
		t.Errorf("bad status filter: %d %s", code, body)
	}
	// keys: allowlist and status checks.
	r := e.start(nil)
	code, body := e.call("POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]any{{"text": "rm -rf / ; echo"}}})
	if code != 400 || errorOf(t, body).Code != "key_not_allowed" {
		t.Errorf("keys with ';': %d %s", code, body)
	}
	// An unknown key: the entry named, the keys there are listed.
	code, body = e.call("POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]any{{"key": "1"}, {"key": "F1"}}})
	if we := errorOf(t, body); code != 400 || we.Code != "key_not_allowed" || we.Details["index"] != 1.0 ||
		!strings.Contains(we.Message, `key "F1" is not allowed; the keys are Enter, Escape, Tab`) {
		t.Errorf("keys with F1: %d %s", code, body)
	}
	for _, bad := range []map[string]any{{"text": "a\x1bb"}, {"paste": "ok\x1b[201~"}, {"text": "x", "paste": "y"}, {"paste": ""}} {
		code, body = e.call("POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]any{bad}})
		if we := errorOf(t, body); code != 400 || we.Code != "key_not_allowed" || we.Details["index"] != 0.0 {
			t.Errorf("keys %q: %d %s", bad, code, body)
		}
	}
	code, body = e.call("POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]any{{"key": "Enter"}}})
	if code != 409 {
		t.Errorf("keys to a pending run: %d %s", code, body)
	}
}

// TestDispatcherCapacityAcrossDispatchers: 200 runs, 3 simulated hosts
// with max_runs 5, two dispatchers on one database: never over capacity,
// never two offers of one attempt.
func TestDispatcherCapacityAcrossDispatchers(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{ack: time.Minute})
	// A second dispatcher on the same database, sharing the fleet view.
	d2 := dispatch.New(e.store, e.fleet, dispatch.Options{AckTimeout: time.Minute, Tick: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { d2.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	hosts := []*fakeWorker{e.worker("cap-1", 5, "shell"), e.worker("cap-2", 5, "shell"), e.worker("cap-3", 5, "shell")}
	runs := map[string]bool{}
	for i := 0; i < 200; i++ {
		runs[e.start(nil).ID] = true
	}
	var mu sync.Mutex
	offers := map[string]int{}
	active := map[string]int{}
	maxActive := 0
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, h := range hosts {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case f := <-h.frames:
					if f.Type != wire.FrameRunDispatch {
						continue
					}
					mu.Lock()
					offers[f.RunID]++
					active[h.name]++
					if active[h.name] > maxActive {
						maxActive = active[h.name]
					}
					mu.Unlock()
					h.ack(f, true)
					c1, _, b1 := e.signal(f.SignalToken, f.RunID, sig("started", 1))
					c2, _, b2 := e.signal(f.SignalToken, f.RunID, sig("finished", 1, "payload", map[string]any{"exit_code": 0}))
					if c1 != 202 || c2 != 202 {
						t.Errorf("signals of %s: %d %s / %d %s", f.RunID, c1, b1, c2, b2)
					}
					mu.Lock()
					active[h.name]--
					mu.Unlock()
				}
			}
		})
	}
	eventually.Wait(t, 60*time.Second, "all 200 runs to exit", func() bool {
		var l wire.RunList
		e.must(200, "GET", "/api/v1/runs?status=exited&limit=1000", nil, &l)
		return len(l.Runs) == 200
	})
	close(stop)
	wg.Wait()
	if maxActive > 5 {
		t.Fatalf("a host held %d runs at once, capacity 5", maxActive)
	}
	for id, n := range offers {
		if n != 1 {
			t.Fatalf("run %s offered %d times", id, n)
		}
	}
	if len(offers) != 200 {
		t.Fatalf("%d runs offered", len(offers))
	}
}

func TestDispatchTimeoutReasons(t *testing.T) {
	t.Parallel()
	const dispatchTimeout = time.Minute
	e := newRunEnv(t, runOpts{dispatchTimeout: dispatchTimeout, spawn: time.Hour, policy: store.Policy{MaxAttempts: 1}, storeClock: clock.NewManual(time.Now())})
	// Nobody offers "codex": no_eligible_host.
	none := e.start(map[string]any{"provider": "codex"})
	// A full host offers shell: eligible but for capacity → dispatch_timeout.
	w := e.worker("full", 1, "shell")
	busy := e.start(nil)
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	starved := e.start(nil)
	// Pinned to a host that is busy too: honoured, never placed elsewhere.
	other := e.worker("idle", 5, "shell")
	pinned := e.start(map[string]any{"host_id": "full"})
	e.waitPasses(2)
	for _, id := range []string{none.ID, pinned.ID} {
		if got := e.run(id); got.Status != "pending" {
			t.Fatalf("run %s is %s within the dispatch timeout", id, got.Status)
		}
	}
	e.advance(dispatchTimeout + time.Second)
	got := e.waitRun(none.ID, "failed", func(r wire.Run) bool { return r.Status == "failed" })
	if *got.FailureReason != "no_eligible_host" {
		t.Fatalf("codex run: %v", *got.FailureReason)
	}
	// starved may go to "idle" now that it is online: only check pinned.
	got = e.waitRun(pinned.ID, "failed", func(r wire.Run) bool { return r.Status == "failed" })
	if *got.FailureReason != "dispatch_timeout" {
		t.Fatalf("pinned run on a full host: %v", *got.FailureReason)
	}
	for {
		select {
		case f := <-other.frames:
			if f.Type == wire.FrameRunDispatch && f.RunID == pinned.ID {
				t.Fatal("a pinned run was offered to another host")
			}
			continue
		default:
		}
		break
	}
	_ = busy
	_ = starved
	_ = fmt.Sprint
}

// testLogWriter sends the server's warnings and errors to the test log.
type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
