package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// The instance ids of the uplink tests: A is the one fakeWorker registers
// and heartbeats with; B is a clone's.
const (
	instanceA = "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f"
	instanceB = "0b5a3c1e-8d2f-4e6a-9c7b-1f2e3d4c5b6a"
)

// heartbeat sends a heartbeat reporting instance.
func (w *fakeWorker) heartbeat(instance string) {
	w.t.Helper()
	now := time.Now()
	w.send(wire.HeartbeatFrame{HostID: w.hostID, InstanceID: instance, Timestamp: &now})
}

// register posts a register of instance with w's token.
func (w *fakeWorker) register(instance string) {
	w.t.Helper()
	code, body := w.e.callAs(w.token, "POST", "/api/internal/worker/register", wire.Register{HostName: w.name, Platform: "linux",
		InstanceID: instance, Providers: []string{"shell"}, Executor: "tmux", MaxRuns: 2, Protocol: 1})
	if code != 200 {
		w.t.Fatalf("register %s: %d %s", w.name, code, body)
	}
}

// waitClosed waits for the server to end w's current connection, and
// fails if a frame other than an error arrives first: a heartbeat_ack or
// a run_dispatch means the connection was still served.
func (w *fakeWorker) waitClosed(what string) {
	w.t.Helper()
	deadline := time.After(eventually.Short)
	for {
		select {
		case f := <-w.frames:
			if f.Type != wire.FrameError {
				w.t.Fatalf("%s: %s still got a %s frame", what, w.name, f.Type)
			}
		case <-w.gone:
			// The reader queued every frame of the connection before it
			// closed gone: the error frames the server sent as it refused
			// are taken here, not by the next connection's expect.
			for {
				select {
				case f := <-w.frames:
					if f.Type != wire.FrameError {
						w.t.Fatalf("%s: %s still got a %s frame", what, w.name, f.Type)
					}
				default:
					return
				}
			}
		case <-deadline:
			w.t.Fatalf("%s: the uplink of %s is still open %s later", what, w.name, eventually.Short)
		}
	}
}

// reconnect does what a worker does when the server ends its uplink:
// wait for the end, register again, open a new uplink.
func (w *fakeWorker) reconnect() {
	w.t.Helper()
	select {
	case <-w.gone:
	case <-time.After(eventually.Short):
		w.t.Fatalf("the uplink of %s is still open %s later", w.name, eventually.Short)
	}
	w.register(instanceA)
	w.connect()
}

// alive checks that w's connection is still served: a heartbeat is
// acked.
func (w *fakeWorker) alive(what string) {
	w.t.Helper()
	w.heartbeat(instanceA)
	select {
	case <-w.gone:
		w.t.Fatalf("%s: the uplink of %s was closed", what, w.name)
	default:
	}
	w.expect(wire.FrameHeartbeatAck)
}

// openRelay opens an attach relay to a running run of w, so a test can
// see that revocation ends the relays too.
func (e *runEnv) openRelay(w *fakeWorker) wire.Run {
	e.t.Helper()
	r := e.runningRun(w)
	c := e.dialAttach(r.ID)
	if f, err := readTerm(e.t, c, eventually.Short); err != nil || f.Type != wire.WSLeaseAcquired {
		e.t.Fatalf("first attach frame %+v %v", f, err)
	}
	w.expect(wire.FrameAttachOpen)
	if n := e.fleet.Attaches(); n != 1 {
		e.t.Fatalf("%d relays open, want 1", n)
	}
	return r
}

func (e *runEnv) waitCutOff(w *fakeWorker, what string) {
	e.t.Helper()
	w.waitClosed(what)
	eventually.Wait(e.t, eventually.Short, what+": host disconnected, relays closed", func() bool {
		return !e.fleet.Connected(w.hostID) && e.fleet.Attaches() == 0
	})
}

// Issue 9 item 1: rotating a worker token closes the uplink admitted with
// the old one, and its relays, at once; and every heartbeat is checked
// against the host's current credential, so a rotation this process did
// not make (another server on the database) ends the uplink at its next
// heartbeat. Before the fix the uplink stayed open and kept being acked.
func TestRevocationRotateClosesUplink(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("rot-1", 2, "shell")
	e.openRelay(w)
	var rot wire.WorkerToken
	e.must(200, "POST", "/api/v1/hosts/rot-1/rotate-token", nil, &rot)
	e.waitCutOff(w, "after rotate-token")

	// The old token opens nothing; the new one, after a register, does.
	if code, _ := e.callAs(w.token, "POST", "/api/internal/worker/register", wire.Register{HostName: "rot-1", InstanceID: instanceA, Protocol: 1}); code != 401 {
		t.Fatalf("register with the rotated token: %d, want 401", code)
	}
	w.token = rot.WorkerToken
	w.register(instanceA)
	w.connect()

	// Rotated behind this process's back: the next heartbeat ends it.
	w2 := e.worker("rot-2", 2, "shell")
	e.sql(`UPDATE hosts SET worker_token_hash = sha256('elsewhere') WHERE id = $1`, w2.hostID)
	w2.heartbeat(instanceA)
	w2.waitClosed("heartbeat after a rotation elsewhere")
	w.alive("the other host")
}

// Issue 9 item 1: removing a host closes its live uplink at once. Before
// the fix the uplink of a removed host stayed open.
func TestRevocationDeleteClosesUplink(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("del-1", 2, "shell")
	keep := e.worker("del-2", 2, "shell")
	e.must(204, "DELETE", "/api/v1/hosts/del-1", nil, nil)
	e.waitCutOff(w, "after delete")
	keep.alive("another host")
}

// Issue 9 item 1 with docs/architecture.md#security-model: disabling a
// host closes its live uplink and relays at once; the worker's token
// still holds, so it registers again, reconnects and goes on signalling
// its run (drain-only), but is dispatched nothing new. Disabling a
// disabled host cuts nothing. Before the fix the uplink and the relay
// stayed open.
func TestRevocationDisableClosesUplink(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("dis-1", 2, "shell")
	r := e.openRelay(w)
	e.must(200, "POST", "/api/v1/hosts/dis-1/disable", nil, nil)
	e.waitCutOff(w, "after disable")

	w.register(instanceA)
	w.connect()
	e.must(200, "POST", "/api/v1/hosts/dis-1/disable", nil, nil)
	w.alive("after disabling a disabled host")

	w.send(wire.SignalFrame{RunID: r.ID, Kind: "finished", Attempt: wire.IntPtr(1), Source: "wrapper", Payload: json.RawMessage(`{"exit_code":0}`)})
	if ack := w.expect(wire.FrameSignalAck); ack.Result != wire.ResultApplied {
		t.Fatalf("signal of the disabled host's run: %+v", ack)
	}
	next := e.start(map[string]any{"host_id": w.hostID})
	e.waitPasses(3)
	if got := e.run(next.ID); got.Status != wire.RunPending {
		t.Fatalf("a run went to a disabled host: %+v", got)
	}
	for len(w.frames) > 0 {
		if f := <-w.frames; f.Type == wire.FrameRunDispatch {
			t.Fatalf("a disabled host was dispatched %+v", f)
		}
	}
}

// Issue 9 item 2: an uplink opened without a register of its instance in
// this server's lifetime is refused: no heartbeat_ack, no dispatch, not
// connected. Before the fix a token alone opened the uplink.
func TestUplinkWithoutRegisterRefused(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	var created wire.HostCreated
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": "noreg", "max_runs": 2}, &created)
	w := &fakeWorker{t: t, e: e, token: created.WorkerToken, hostID: created.Host.ID, name: "noreg", frames: make(chan wiretest.Frame, 1000)}
	w.dial()
	w.heartbeat(instanceA)
	w.waitClosed("uplink without register")
	if e.fleet.Connected(w.hostID) {
		t.Fatal("a host that never registered is connected")
	}
	var h wire.Host
	e.must(200, "GET", "/api/v1/hosts/noreg", nil, &h)
	if h.Status != "registered" || h.LastSeenAt != nil {
		t.Fatalf("the refused heartbeat was recorded: %+v", h)
	}

	// The first frame must be the admitting heartbeat.
	w.register(instanceA)
	w.dial()
	w.send(wire.LogChunkFrame{RequestID: "x", Text: "hi"})
	w.waitClosed("uplink whose first frame is not a heartbeat")

	// Registered, it is admitted.
	w.connect()
}

// Issue 9 item 2: a connection reporting another instance than the
// pinned one, while that one is live, never replaces it and gets nothing;
// the host is marked suspect with worker.instance_suspect journaled once,
// whether the clone registered first or not. Before the fix the clone
// replaced the real worker's connection ("connection replaced") and took
// its dispatches while the host read instance_suspect false.
func TestUplinkOtherInstanceNeverReplaces(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("pin-1", 2, "shell")
	clone := &fakeWorker{t: t, e: e, token: w.token, hostID: w.hostID, name: "pin-1 clone", frames: make(chan wiretest.Frame, 1000)}
	clone.dial()
	clone.heartbeat(instanceB)
	clone.waitClosed("clone without register")
	w.alive("the pinned worker after a clone's uplink")

	var h wire.Host
	e.must(200, "GET", "/api/v1/hosts/pin-1", nil, &h)
	if !h.InstanceSuspect || h.InstanceID == nil || *h.InstanceID != instanceA {
		t.Fatalf("host after a clone's uplink: suspect %v instance %v", h.InstanceSuspect, h.InstanceID)
	}

	// Registering first does not help the clone either.
	clone.name = "pin-1 registered clone"
	code, body := e.callAs(w.token, "POST", "/api/internal/worker/register", wire.Register{HostName: "pin-1", InstanceID: instanceB, Providers: []string{"shell"}, Protocol: 1})
	if code != 200 {
		t.Fatalf("clone register: %d %s", code, body)
	}
	clone.dial()
	clone.heartbeat(instanceB)
	clone.waitClosed("registered clone")
	w.alive("the pinned worker after a registered clone's uplink")
	if n := len(e.events(string(wire.TopicWorkerInstanceSuspect))); n != 1 {
		t.Fatalf("%d worker.instance_suspect events, want 1", n)
	}

	// An admitted connection that starts reporting another instance is
	// ended, without replacing anything.
	w.heartbeat(instanceB)
	w.waitClosed("the pinned connection reporting another instance")
}
