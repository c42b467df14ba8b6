package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/tmux"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

const workerToken = "feedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedface"

// testHostID is the host id the fake orchestrator registers the worker as.
const testHostID = "0f0f0f0f-5555-4555-8555-555555555555"

// testTaskID is the task of every run the fake orchestrator dispatches.
const testTaskID = "7a5c0000-6666-4666-8666-666666666666"

// fakeOrch is a small in-test orchestrator: the register route and the
// uplink WebSocket of docs/architecture.md#internal-api, recording what the worker sends.
type fakeOrch struct {
	t   *testing.T
	srv *httptest.Server

	mu            sync.Mutex
	registrations []wire.Register
	failRegister  int    // answer this many registrations with 503
	regStatus     string // the host status registration answers; "" is online
	// protocol is the uplink protocol the fake speaks, 0 for this
	// build's: a worker claiming another is refused as serve refuses it.
	protocol int
	conn     *websocket.Conn
	conns    int
	frames   []wiretest.Frame
	bad      []string // frames the worker sent that do not decode or validate
	signals  []postedSignal
	// runs is what GET /api/internal/worker/runs[/{id}] answer (reconcile_test.go).
	runs fakeRuns

	// dials counts the uplink requests as they arrive, before the upgrade
	// is answered: one is counted before the worker's dial returns.
	dials int
}

// postedSignal is a signal the wrapper posted over HTTP.
type postedSignal struct {
	RunID, Auth string
	Body        wire.Signal
}

func newFakeOrch(t *testing.T) *fakeOrch {
	o := &fakeOrch{t: t}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/internal/worker/register", o.register)
	mux.HandleFunc("GET /api/internal/worker/uplink", o.uplink)
	mux.HandleFunc("POST /api/internal/runs/{id}/signals", o.signal)
	mux.HandleFunc("GET /api/internal/worker/runs", o.workerRuns)
	mux.HandleFunc("GET /api/internal/worker/runs/{id}", o.workerRun)
	o.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		o.srv.Close()
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.bad) > 0 {
			t.Errorf("the worker sent frames that do not decode or validate: %q", o.bad)
		}
	})
	return o
}

func (o *fakeOrch) authorized(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer "+workerToken
}

func (o *fakeOrch) register(w http.ResponseWriter, r *http.Request) {
	if !o.authorized(r) {
		http.Error(w, `{"error":{"code":"unauthorized","message":"bad token"}}`, http.StatusUnauthorized)
		return
	}
	var reg wire.Register
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&reg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.registrations = append(o.registrations, reg)
	fail := o.failRegister > 0
	if fail {
		o.failRegister--
	}
	o.mu.Unlock()
	if fail {
		http.Error(w, `{"error":{"code":"unavailable","message":"try later"}}`, http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	o.mu.Lock()
	status, protocol := o.regStatus, o.protocol
	o.mu.Unlock()
	if status == "" {
		status = "online"
	}
	if protocol == 0 {
		protocol = wire.UplinkProtocol
		if err := wire.CheckUplinkProtocol(reg.Protocol); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(wire.Envelope{Error: err.(*wire.Error)})
			return
		}
	}
	json.NewEncoder(w).Encode(wire.Registered{HostID: testHostID, Status: status, Protocol: protocol})
}

func (o *fakeOrch) signal(w http.ResponseWriter, r *http.Request) {
	var sig wire.Signal
	if err := json.NewDecoder(r.Body).Decode(&sig); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.signals = append(o.signals, postedSignal{RunID: r.PathValue("id"), Auth: r.Header.Get("Authorization"), Body: sig})
	answer := o.runs.signalAnswer
	o.mu.Unlock()
	if answer != nil {
		if status := answer(postedSignal{RunID: r.PathValue("id"), Auth: r.Header.Get("Authorization"), Body: sig}); status != http.StatusAccepted {
			http.Error(w, `{"error":{"code":"test","message":"test answer"}}`, status)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(wire.SignalResult{Result: wire.ResultApplied})
}

func (o *fakeOrch) uplink(w http.ResponseWriter, r *http.Request) {
	if !o.authorized(r) {
		http.Error(w, "bad token", http.StatusUnauthorized)
		return
	}
	o.mu.Lock()
	o.dials++
	o.mu.Unlock()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(wire.MaxFrame)
	o.mu.Lock()
	o.conn = c
	o.conns++
	o.mu.Unlock()
	for {
		_, data, err := c.Read(context.Background())
		if err != nil {
			return
		}
		f, err := wire.DecodeFrame(data)
		if err == nil {
			err = f.Validate()
		}
		fl, _ := wiretest.Decode(data)
		o.mu.Lock()
		if err != nil {
			o.bad = append(o.bad, err.Error()+": "+string(data))
		} else {
			o.frames = append(o.frames, fl)
		}
		o.mu.Unlock()
		if _, hb := f.(wire.HeartbeatFrame); err == nil && hb {
			now := time.Now()
			o.sendOn(c, wire.HeartbeatAckFrame{Timestamp: &now})
		}
	}
}

func (o *fakeOrch) sendOn(c *websocket.Conn, f wire.Frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return o.sendRaw(c, b)
}

func (o *fakeOrch) sendRaw(c *websocket.Conn, b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Write(ctx, websocket.MessageText, b)
}

// current waits for an uplink and returns it.
func (o *fakeOrch) current() *websocket.Conn {
	o.t.Helper()
	var c *websocket.Conn
	eventually.Wait(o.t, eventually.Medium, "an uplink", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		c = o.conn
		return c != nil
	})
	return c
}

// send sends a frame to the worker on the current uplink.
func (o *fakeOrch) send(f wire.Frame) {
	o.t.Helper()
	if err := o.sendOn(o.current(), f); err != nil {
		o.t.Fatalf("send %s: %v", f.Type(), err)
	}
}

// drop breaks the current uplink from the server side.
func (o *fakeOrch) drop() {
	o.mu.Lock()
	c := o.conn
	o.conn = nil
	o.mu.Unlock()
	if c != nil {
		c.CloseNow()
	}
}

// mark is the number of frames received so far, for waiting on later ones.
func (o *fakeOrch) mark() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.frames)
}

// wait returns the first frame at or after index from that matches, and
// its index.
func (o *fakeOrch) wait(from int, what string, match func(wiretest.Frame) bool) (wiretest.Frame, int) {
	o.t.Helper()
	var got wiretest.Frame
	idx := -1
	eventually.Wait(o.t, 15*time.Second, what, func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		for i := from; i < len(o.frames); i++ {
			if match(o.frames[i]) {
				got, idx = o.frames[i], i
				return true
			}
		}
		return false
	})
	return got, idx
}

// count is the number of frames from index from that match.
func (o *fakeOrch) count(from int, match func(wiretest.Frame) bool) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for i := from; i < len(o.frames); i++ {
		if match(o.frames[i]) {
			n++
		}
	}
	return n
}

func (o *fakeOrch) regs() []wire.Register {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]wire.Register(nil), o.registrations...)
}

func isType(typ, runID string) func(wiretest.Frame) bool {
	return func(f wiretest.Frame) bool { return f.Type == typ && (runID == "" || f.RunID == runID) }
}

// fakePam is the sessions' foreground command in these tests: it prints
// its arguments and sleeps (ignoring SIGTERM for run ids holding 7777, to
// exercise the stop ladder). The real wrapper is `pam exec run`.
const fakePam = `#!/bin/sh
case "$*" in *7777*) trap '' TERM;; esac
echo "fake pam: $*"
case "$*" in *5555aaaa*) printf 'Continue? (y/n) '; read a; echo "answered $a";; *6666bbbb*) echo "* Working (esc to interrupt)";; esac
while :; do sleep 1; done
`

// harness is one worker under test with its private tmux server.
type harness struct {
	t    *testing.T
	orch *fakeOrch
	opts Options
	tm   *tmux.Tmux
	// ex is the executor the worker under test runs (tmux unless
	// newHarnessFor says pty), for the helpers that make and list
	// sessions as an earlier worker would have.
	ex      Executor
	tmuxDir string
	calls   string // log of every tmux invocation
	cancel  context.CancelFunc
	done    chan error
}

// newHarness prepares a worker (not started) on a fresh data dir, a
// private tmux server whose invocations are recorded, and a fake pam.
func newHarness(t *testing.T, orch *fakeOrch) *harness {
	t.Helper()
	return newHarnessFor(t, orch, "tmux")
}

// newHarnessFor is newHarness for the executor named: "tmux", or "pty"
// (sessions are PTY holders, run by the real pam's `exec hold`; the fake
// pam stays their program).
func newHarnessFor(t *testing.T, orch *fakeOrch, executor string) *harness {
	t.Helper()
	tmuxDir := pamtest.NewTmux(t).Dir
	real, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls")
	recorder := filepath.Join(bin, "tmux")
	os.WriteFile(recorder, []byte(fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' \"$*\" >> %s\nexec %s \"$@\"\n", calls, real)), 0o755)
	pam := filepath.Join(bin, "pam")
	script := fakePam
	if executor == "pty" {
		script = strings.Replace(fakePam, "\n", fmt.Sprintf("\ncase \"$1 $2\" in \"exec hold\") shift 2; exec %s exec hold \"$@\";; esac\n", pamtest.Pam(t)), 1)
	}
	os.WriteFile(pam, []byte(script), 0o755)
	h := &harness{t: t, orch: orch, tmuxDir: tmuxDir, calls: calls}
	h.opts = Options{
		URL:               orch.srv.URL,
		Token:             workerToken,
		HostName:          "test-host",
		DataDir:           filepath.Join(t.TempDir(), "data"),
		MaxRuns:           4,
		HeartbeatInterval: 200 * time.Millisecond,
		CaptureInterval:   50 * time.Millisecond,
		IdleAfter:         time.Hour, // no idle report unless a test asks (capture_test.go)
		LivenessInterval:  200 * time.Millisecond,
		StopGrace:         3 * time.Second,
		PamBinary:         pam,
		Version:           "test",
		Logger:            slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		Providers:         func() map[string]string { return map[string]string{"shell": "/bin/sh", "fake": "/bin/true"} },
		Tmux:              tmux.Options{Binary: recorder, TmuxTmpDir: tmuxDir},
		BackoffMin:        20 * time.Millisecond,
		BackoffMax:        200 * time.Millisecond,
	}
	h.tm, err = tmux.New(tmux.Options{TmuxTmpDir: tmuxDir})
	if err != nil {
		t.Fatal(err)
	}
	h.ex = tmuxExecutor{h.tm}
	if executor == "pty" {
		h.opts.Executor = "pty"
		workerDir := filepath.Join(h.opts.DataDir, "worker")
		h.ex = newPTYExecutor(h.opts, workerDir, h.opts.Logger)
		t.Cleanup(func() { pamtest.KillHolders(filepath.Join(workerDir, holdersDir)) })
	}
	return h
}

// start runs the worker until the test ends (or stop).
func (h *harness) start() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	o := h.opts
	go func() { h.done <- Run(ctx, o) }()
	h.t.Cleanup(func() { h.stop() })
}

// stop cancels the worker and waits for Run to return its error.
func (h *harness) stop() error {
	if h.cancel == nil {
		return nil
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		return err
	case <-time.After(eventually.Long):
		h.t.Fatal("worker did not stop")
		return nil
	}
}

// tmuxCalls is every tmux invocation so far.
func (h *harness) tmuxCalls() []string {
	b, _ := os.ReadFile(h.calls)
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func (h *harness) sessions() []tmux.Session {
	h.t.Helper()
	list, err := h.ex.ListSessions(h.t.Context())
	if err != nil {
		h.t.Fatal(err)
	}
	return list
}

func (h *harness) session(runID string) (tmux.Session, bool) {
	for _, s := range h.sessions() {
		if s.RunID == runID {
			return s, true
		}
	}
	return tmux.Session{}, false
}

// dispatchFrame is a valid run_dispatch for runID.
func (h *harness) dispatchFrame(runID string, attempt int) wire.RunDispatchFrame {
	return wire.RunDispatchFrame{
		RunID: runID, Attempt: wire.IntPtr(attempt),
		TaskID: testTaskID, Provider: "shell", SessionName: "pam-" + runID[:8],
		Cwd: h.t.TempDir(), Prompt: "echo hi; rm -rf /", Args: []string{"--flag"},
		TaskTitle: "Fix the Login Bug!", SignalToken: "signal-token-" + runID[:8],
	}
}

// spawnRun dispatches runID and waits for its accepted ack and first
// snapshot; it returns the frame index of the ack.
func (h *harness) spawnRun(runID string, attempt int) (wiretest.Frame, int) {
	h.t.Helper()
	from := h.orch.mark()
	h.orch.send(h.dispatchFrame(runID, attempt))
	ack, i := h.orch.wait(from, "run_dispatch_ack", isType(wire.FrameRunDispatchAck, runID))
	if ack.Accepted == nil || !*ack.Accepted {
		h.t.Fatalf("dispatch of %s refused: %q", runID, ack.Reason)
	}
	snap, _ := h.orch.wait(from, "a snapshot of "+runID, func(f wiretest.Frame) bool {
		return f.Type == wire.FrameSnapshot && f.RunID == runID && strings.Contains(f.Capture, "fake pam:")
	})
	return snap, i
}

// instanceID is the worker's instance id, what its sessions carry as
// @pam_instance; it is created now if the worker has not started yet
// (the worker reads the same file).
func (h *harness) instanceID() string {
	h.t.Helper()
	dir := filepath.Join(h.opts.DataDir, "worker")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		h.t.Fatal(err)
	}
	id, err := loadInstanceID(dir)
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}
