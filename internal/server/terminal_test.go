package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"go.uber.org/goleak"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/server"
	"pam/internal/store/storetest"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// runningRun starts a run pinned to a simulated worker and brings it to
// running.
func (e *runEnv) runningRun(w *fakeWorker) wire.Run {
	e.t.Helper()
	r := e.start(map[string]any{"host_id": w.hostID})
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == "spawning" })
	if code, _, body := e.signal(d.SignalToken, r.ID, sig("started", 1)); code != 202 {
		e.t.Fatalf("started: %d %s", code, body)
	}
	return e.run(r.ID)
}

func (e *runEnv) dialAttach(runID string) *websocket.Conn {
	e.t.Helper()
	c, _, err := websocket.Dial(e.t.Context(), "ws"+strings.TrimPrefix(e.url, "http")+"/api/v1/runs/"+runID+"/attach/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + testToken}}})
	if err != nil {
		e.t.Fatal(err)
	}
	c.SetReadLimit(4 << 20)
	e.t.Cleanup(func() { c.CloseNow() })
	return c
}

// attached opens an attach socket on a run of w's and returns it once it
// holds the lease (lease_acquired, then the first resize) and w has the
// relay's attach_open.
func (e *runEnv) attached(w *fakeWorker, runID string) (*websocket.Conn, wiretest.Frame) {
	e.t.Helper()
	c := e.dialAttach(runID)
	for _, typ := range []string{wire.WSLeaseAcquired, wire.WSResize} {
		if f, err := readTerm(e.t, c, eventually.Short); err != nil || f.Type != typ {
			e.t.Fatalf("want %s, got %+v %v", typ, f, err)
		}
	}
	return c, w.expect(wire.FrameAttachOpen)
}

func readTerm(t testing.TB, c *websocket.Conn, d time.Duration) (wire.TermFrame, error) {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		return wire.TermFrame{}, err
	}
	var f wire.TermFrame
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("frame %s: %v", b, err)
	}
	return f, nil
}

// The attach relay through a simulated worker: attach_open names the
// run's session; a flood of output is coalesced to at most 10 data frames
// a second and arrives whole and in order; input is paced into bounded
// attach_input frames; another host cannot forge output; a relay the
// worker ends closes the socket with relay_closed and is journaled.
func TestAttachRelayThroughUplink(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-term", 4, "shell")
	other := e.worker("host-other", 4, "shell")
	r := e.runningRun(w)
	c := e.dialAttach(r.ID)
	if f, err := readTerm(t, c, eventually.Short); err != nil || f.Type != wire.WSLeaseAcquired {
		t.Fatalf("first frame %+v %v", f, err)
	}
	if f, _ := readTerm(t, c, eventually.Short); f.Type != wire.WSResize || f.Rows != 24 || f.Cols != 80 {
		t.Fatalf("second frame %+v", f)
	}
	open := w.expect(wire.FrameAttachOpen)
	if _, err := uuid.Parse(open.AttachID); err != nil || open.RunID != r.ID || open.SessionName != r.SessionName || open.Rows != 24 || open.Cols != 80 {
		t.Fatalf("attach_open %+v", open)
	}

	// 200 output frames over a second: the client gets them all, in
	// order, in at most 10 data frames a second.
	var want bytes.Buffer
	firstSent := time.Now()
	go func() {
		for i := range 200 {
			chunk := []byte(strings.Repeat(string(rune('a'+i%26)), 100))
			w.send(wire.AttachOutputFrame{AttachID: open.AttachID, Bytes: chunk})
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for i := range 200 {
		want.WriteString(strings.Repeat(string(rune('a'+i%26)), 100))
	}
	other.send(wire.AttachOutputFrame{AttachID: open.AttachID, Bytes: []byte("FORGED")})
	var got bytes.Buffer
	var times []time.Time
	for got.Len() < want.Len() {
		f, err := readTerm(t, c, eventually.Short)
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", got.Len(), want.Len(), err)
		}
		if f.Type != wire.WSData {
			t.Fatalf("unexpected %+v", f)
		}
		got.Write(f.Bytes)
		times = append(times, time.Now())
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("output differs (forged bytes: %v)", bytes.Contains(got.Bytes(), []byte("FORGED")))
	}
	// The server sends at most FramesPerSecond data frames in any
	// second, the first no earlier than the first chunk: n frames cannot
	// all have arrived within less than (n/FramesPerSecond - 1) seconds of
	// firstSent. Receive times alone prove nothing either way (a loaded
	// reader sees frames bunched up), so the bound is on the count
	// against the whole span.
	n := len(times)
	if span := times[n-1].Sub(firstSent); n > server.FramesPerSecond*(1+int(span/time.Second)) {
		t.Errorf("%d data frames within %s of the first output: more than %d a second", n, span, server.FramesPerSecond)
	}
	if n >= 200 {
		t.Errorf("%d data frames for 200 outputs: not coalesced", n)
	}

	// 512 KiB of input in 64 KiB frames: bounded attach_input frames, in
	// order, paced (256 KiB/s after a 256 KiB burst), the uplink intact.
	input := bytes.Repeat([]byte("0123456789abcdef"), 32<<10)
	t0 := time.Now()
	go func() {
		for off := 0; off < len(input); off += 64 << 10 {
			b, _ := json.Marshal(wire.TermFrame{Type: wire.WSInput, Bytes: input[off : off+64<<10]})
			if err := c.Write(t.Context(), websocket.MessageText, b); err != nil {
				return
			}
		}
	}()
	var relayed bytes.Buffer
	for relayed.Len() < len(input) {
		f := w.expect(wire.FrameAttachInput)
		if f.AttachID != open.AttachID || len(f.Bytes) > 32<<10 {
			t.Fatalf("attach_input of %d bytes for %s", len(f.Bytes), f.AttachID)
		}
		relayed.Write(f.Bytes)
	}
	if !bytes.Equal(relayed.Bytes(), input) {
		t.Fatal("input relayed out of order")
	}
	if d := time.Since(t0); d < 800*time.Millisecond {
		t.Errorf("512 KiB of input went through in %s: not paced", d)
	}

	// Resize reaches the worker.
	b, _ := json.Marshal(wire.TermFrame{Type: wire.WSResize, Rows: 50, Cols: 132})
	_ = c.Write(t.Context(), websocket.MessageText, b)
	if f := w.expect(wire.FrameAttachResize); f.AttachID != open.AttachID || f.Rows != 50 || f.Cols != 132 {
		t.Fatalf("attach_resize %+v", f)
	}

	// The worker ends the relay: relay_closed with its reason, then close.
	w.send(wire.AttachClosedFrame{AttachID: open.AttachID, Reason: "the tmux client exited"})
	var last wire.TermFrame
	for {
		f, err := readTerm(t, c, eventually.Short)
		if err != nil {
			break
		}
		last = f
	}
	if last.Code != wire.CodeRelayClosed || !strings.Contains(last.Message, "tmux client exited") {
		t.Fatalf("last frame %+v", last)
	}
	waitEvents := func() string { return e.topics(r.ID) }
	if !eventually.Within(eventually.Short, func() bool { return strings.Contains(waitEvents(), "run.lease_released") }) {
		t.Fatalf("no lease_released: %s", waitEvents())
	}
	if !strings.Contains(waitEvents(), "run.started run.lease_acquired run.lease_released") {
		t.Fatalf("events %s", waitEvents())
	}
}

// Keystrokes that go straight to the relay and input queued for the
// pump (frames larger than a chunk, and whatever comes behind them)
// reach the worker in the order they were typed.
func TestAttachInputOrder(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-order", 4, "shell")
	r := e.runningRun(w)
	c, open := e.attached(w, r.ID)
	var inputs [][]byte
	var want bytes.Buffer
	for i := range 24 {
		in := []byte{byte('a' + i)}
		if i%3 == 1 {
			in = bytes.Repeat([]byte{byte('a' + i)}, 40<<10)
		}
		inputs = append(inputs, in)
		want.Write(in)
	}
	go func() {
		for _, in := range inputs {
			b, _ := json.Marshal(wire.TermFrame{Type: wire.WSInput, Bytes: in})
			if err := c.Write(t.Context(), websocket.MessageText, b); err != nil {
				return
			}
		}
	}()
	var relayed bytes.Buffer
	for relayed.Len() < want.Len() {
		f := w.expect(wire.FrameAttachInput)
		if f.AttachID != open.AttachID {
			t.Fatalf("attach_input for %s", f.AttachID)
		}
		relayed.Write(f.Bytes)
	}
	if !bytes.Equal(relayed.Bytes(), want.Bytes()) {
		t.Fatal("input relayed out of order")
	}
}

// Attach output is relayed while the frame before it on the uplink waits
// for the database: here a snapshot whose write to the run's row is held
// up by a lock on it. The snapshot is handled once the lock goes.
func TestAttachOutputNotBehindDatabase(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-hol", 4, "shell")
	r := e.runningRun(w)
	c, open := e.attached(w, r.ID)

	tx, err := e.store.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`, r.ID); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	w.send(wire.SnapshotFrame{RunID: r.ID, Attempt: wire.IntPtr(r.Attempt), Capture: "screen\n", Timestamp: &now})
	w.send(wire.AttachOutputFrame{AttachID: open.AttachID, Bytes: []byte("echo")})
	f, err := readTerm(t, c, eventually.Medium)
	if err != nil || f.Type != wire.WSData || string(f.Bytes) != "echo" {
		t.Fatalf("attach output while the snapshot waits for the database: %+v %v", f, err)
	}
	lastOutput := func() (at time.Time) {
		if err := e.store.Pool.QueryRow(t.Context(), `SELECT coalesce(last_output_at, 'epoch') FROM runs WHERE id = $1`, r.ID).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	before := lastOutput()
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Medium, "the snapshot's write once the lock is gone", func() bool { return lastOutput().After(before) })
}

// Tokens and tickets in a socket URL never reach the log, whether the
// handshake is refused or accepted.
func TestSocketCredentialsNotLogged(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	var logs pamtest.Buffer
	srv := server.New(server.Options{Store: st, Token: testToken,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ts := serve(t, srv)
	e := &env{t: t, url: ts.URL, store: st}
	p := e.project("Logs")
	task := e.item(p.Slug, "task", "Log nothing secret", nil)
	var r wire.Run
	e.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell"}, &r)
	var tk wire.WSTicket
	e.must(201, "POST", "/api/v1/ws-tickets", map[string]any{"run_id": r.ID, "purpose": "pane"}, &tk)
	secret := "feedfacefeedfacefeedfacefeedface"
	base := "ws" + strings.TrimPrefix(ts.URL, "http") + "/api/v1/runs/" + r.ID + "/pane/ws"
	for _, q := range []string{"?token=" + secret, "?ticket=" + secret, "?token=" + testToken, "?ticket=" + tk.Ticket} {
		c, _, err := websocket.Dial(t.Context(), base+q, nil)
		if err == nil {
			c.Close(websocket.StatusNormalClosure, "")
		}
	}
	// The accepted sockets' log lines are written when their handlers end.
	if !eventually.Within(eventually.Short, func() bool { return strings.Count(logs.String(), "/pane/ws") >= 4 }) {
		t.Fatalf("socket requests were not logged: %s", logs.String())
	}
	out := logs.String()
	for _, s := range []string{secret, testToken, tk.Ticket, "token=", "ticket="} {
		if strings.Contains(out, s) {
			t.Fatalf("%q reached the log:\n%s", s, out)
		}
	}
}

// A socket takes the operator token from the Authorization header only,
// never from the URL, where it would land in proxies' logs: ?token= is
// refused even when it holds the right token, and the refusal says what
// to use instead. A ticket, spent once used, is what a URL carries.
func TestSocketRefusesTokenInURL(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ts := serve(t, server.New(server.Options{Store: st, Token: testToken}))
	e := &env{t: t, url: ts.URL, store: st}
	task := e.item(e.project("Tickets").Slug, "task", "Tickets only", nil)
	var r wire.Run
	e.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell"}, &r)
	base := "ws" + strings.TrimPrefix(ts.URL, "http") + "/api/v1/runs/" + r.ID
	for _, kind := range []string{"/pane/ws", "/attach/ws"} {
		c, resp, err := websocket.Dial(t.Context(), base+kind+"?token="+testToken, nil)
		if err == nil {
			c.CloseNow()
			t.Fatalf("%s?token= upgraded", kind)
		}
		if resp == nil || resp.StatusCode != 401 {
			t.Fatalf("%s?token=: %v %v", kind, resp, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), "ticket") || !strings.Contains(string(body), "Authorization") {
			t.Fatalf("%s?token= refused without saying what to use: %s", kind, body)
		}
	}
	var tk wire.WSTicket
	e.must(201, "POST", "/api/v1/ws-tickets", map[string]any{"run_id": r.ID, "purpose": "pane"}, &tk)
	c, _, err := websocket.Dial(t.Context(), base+"/pane/ws?ticket="+tk.Ticket, nil)
	if err != nil {
		t.Fatalf("ticket: %v", err)
	}
	c.CloseNow()
	c, _, err = websocket.Dial(t.Context(), base+"/pane/ws", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + testToken}}})
	if err != nil {
		t.Fatalf("header: %v", err)
	}
	c.CloseNow()
}

// Shutdown waits for what http.Server.Shutdown does not: WebSocket
// handlers (their connections are hijacked) and the lease watcher. A
// pane viewer that reads nothing keeps its handler in the close handshake
// for seconds, so a Shutdown that returned without waiting would leave it
// subscribed. Once Shutdown has begun, sockets are refused. When the test
// and its cleanups are done, no goroutine is left: not parallel, since
// goleak looks at the whole process (parallel tests start after it).
func TestShutdownWaitsForSockets(t *testing.T) {
	storetest.URL(t) // the test cluster and its waiter outlive this test
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { // the last cleanup: after the server's and the store's
		http.DefaultClient.CloseIdleConnections()
		goleak.VerifyNone(t, before)
	})
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-stop", 4, "shell")
	r := e.runningRun(w)
	c := e.dialAttach(r.ID)
	if f, err := readTerm(t, c, eventually.Short); err != nil || f.Type != wire.WSLeaseAcquired {
		t.Fatalf("first frame %+v %v", f, err)
	}
	w.expect(wire.FrameAttachOpen)
	viewer, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(e.url, "http")+"/api/v1/runs/"+r.ID+"/pane/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + testToken}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viewer.CloseNow() })
	eventually.Wait(t, eventually.Short, "the pane viewer", func() bool { return e.fleet.PaneViewers() == 1 })

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.fleet.PaneViewers(); n != 0 {
		t.Errorf("%d pane viewers left after Shutdown", n)
	}
	if n := e.fleet.Attaches(); n != 0 {
		t.Errorf("%d attach relays left after Shutdown", n)
	}
	if e.fleet.Connected(w.hostID) {
		t.Error("the uplink is still connected after Shutdown")
	}
	var l wire.EventList
	e.must(200, "GET", "/api/v1/runs/"+r.ID+"/events", nil, &l)
	reason := ""
	for _, ev := range l.Events {
		if ev.Topic == "run.lease_released" {
			var p struct{ Reason string }
			_ = json.Unmarshal(ev.Payload, &p)
			reason = p.Reason
		}
	}
	if reason != "server_stopping" {
		t.Errorf("lease released with reason %q before Shutdown returned, want server_stopping", reason)
	}

	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/api/v1/runs/"+r.ID+"/pane/ws", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	e.srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), wire.CodeUnavailable) {
		t.Errorf("socket after Shutdown: %d %s, want 503 unavailable", rec.Code, rec.Body)
	}
}
