package worker

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"pam/internal/tmux"
	"pam/internal/wire"
)

// Interactive attach relays (docs/architecture.md#internal-api attach_* frames, docs/architecture.md#pane-logs-and-attach):
// for each attach_open the worker runs `tmux -L pam attach-session` on a
// PTY sized to the remote terminal and bridges bytes both ways over the
// uplink. Relays belong to the uplink they were opened on: when it drops,
// they are torn down (the orchestrator has dropped its end too).

const (
	// maxRelays bounds the relays of one worker (one per attached run).
	maxRelays = 32
	// relayReadBuf is the most PTY output one attach_output frame carries.
	relayReadBuf = 32 << 10
	// relayInputQueue bounds the input frames waiting for the PTY; the
	// orchestrator paces input, so a full queue means a stuck relay.
	relayInputQueue = 64
	// relayExitWait is how long a detached tmux client may take to exit
	// before it is killed.
	relayExitWait = 5 * time.Second
)

// relaySet is the worker's open relays, by attach id.
type relaySet struct {
	mu sync.Mutex
	m  map[string]*relay
}

// relay is one attach client: a tmux client on a PTY, or a reader of
// the run's holder (the executor's attachment).
type relay struct {
	id    string
	runID string
	term  Attachment
	input chan []byte

	once   sync.Once
	reason string
	stop   chan struct{}
}

// openRelay answers a valid attach_open (Validate checked the ids, that
// the session name is the run's and the size). It checks that the run is
// one of this worker's live sessions, then starts the tmux client; any
// refusal is an attach_closed with the reason.
func (w *agent) openRelay(f wire.AttachOpenFrame) {
	refuse := func(reason string) {
		w.log.Warn("attach refused", "attach_id", f.AttachID, "run_id", f.RunID, "reason", reason)
		_ = w.send(wire.AttachClosedFrame{AttachID: f.AttachID, Reason: wire.BoundText(reason)})
	}
	name, err := tmux.SessionForRun(f.RunID)
	if err != nil {
		refuse(err.Error()) // not reached: Validate checked the run id
		return
	}
	rows, cols := f.Rows, f.Cols
	if rows == 0 && cols == 0 {
		rows, cols = 24, 80
	}
	w.mu.Lock()
	r := w.runs[f.RunID]
	live := r != nil && r.state == stateLive && r.name == name
	w.mu.Unlock()
	if !live {
		refuse("the run has no live session on this host")
		return
	}
	w.relays.mu.Lock()
	if w.relays.m == nil {
		w.relays.m = map[string]*relay{}
	}
	if _, dup := w.relays.m[f.AttachID]; dup {
		w.relays.mu.Unlock()
		refuse("attach_id already open")
		return
	}
	if len(w.relays.m) >= maxRelays {
		w.relays.mu.Unlock()
		refuse(fmt.Sprintf("this host already relays %d terminals", maxRelays))
		return
	}
	term, err := w.tm.Attach(name, rows, cols)
	if err != nil {
		w.relays.mu.Unlock()
		refuse("start the attach client: " + err.Error())
		return
	}
	rl := &relay{id: f.AttachID, runID: f.RunID, term: term,
		input: make(chan []byte, relayInputQueue), stop: make(chan struct{})}
	w.relays.m[rl.id] = rl
	w.relays.mu.Unlock()
	w.log.Info("attach relay opened", "attach_id", rl.id, "run_id", rl.runID, "rows", rows, "cols", cols)
	w.ops.Go(func() { w.runRelay(rl) })
}

// runRelay bridges one relay until either side ends, then tears it down
// and reports attach_closed.
func (w *agent) runRelay(rl *relay) {
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, relayReadBuf)
		for {
			n, err := rl.term.Read(buf)
			if n > 0 {
				f := wire.AttachOutputFrame{AttachID: rl.id, Bytes: append([]byte(nil), buf[:n]...)}
				if serr := w.send(f); serr != nil {
					rl.end("the uplink is gone")
					return
				}
			}
			if err != nil {
				// EIO once the tmux client has exited: the session ended,
				// or the client was detached.
				rl.end("the tmux client exited (the session may have ended)")
				return
			}
		}
	}()
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		for {
			select {
			case <-rl.stop:
				return
			case b := <-rl.input:
				if _, err := rl.term.Write(b); err != nil {
					rl.end("write to the terminal: " + err.Error())
					return
				}
			}
		}
	}()
	<-rl.stop
	// Detach: the client hangs up (tmux) or leaves the holder; the
	// session never ends for it.
	_ = rl.term.Close()
	<-outDone
	<-inDone
	w.relays.mu.Lock()
	delete(w.relays.m, rl.id)
	w.relays.mu.Unlock()
	w.log.Info("attach relay closed", "attach_id", rl.id, "run_id", rl.runID, "reason", rl.reason)
	if err := w.send(wire.AttachClosedFrame{AttachID: rl.id, Reason: rl.reason}); err != nil && !errors.Is(err, errNotConnected) {
		w.log.Debug("attach_closed not sent", "attach_id", rl.id, "err", err)
	}
}

// end stops the relay once, keeping the first reason.
func (rl *relay) end(reason string) {
	rl.once.Do(func() {
		rl.reason = reason
		close(rl.stop)
	})
}

func (w *agent) relay(id string) *relay {
	w.relays.mu.Lock()
	defer w.relays.mu.Unlock()
	return w.relays.m[id]
}

// relayInput answers attach_input without blocking the uplink: a relay
// whose PTY does not keep up is closed rather than waited for.
func (w *agent) relayInput(f wire.AttachInputFrame) {
	rl := w.relay(f.AttachID)
	if rl == nil || len(f.Bytes) == 0 {
		return
	}
	w.inputArrived(rl.runID)
	select {
	case rl.input <- f.Bytes:
	case <-rl.stop:
	default:
		rl.end("input overflow: the terminal does not take input")
	}
}

// relayResize answers attach_resize (its size in bounds: Validate): the
// PTY takes the new size and tmux resizes the window to it.
func (w *agent) relayResize(f wire.AttachResizeFrame) {
	rl := w.relay(f.AttachID)
	if rl == nil {
		return
	}
	if err := rl.term.Resize(f.Rows, f.Cols); err != nil {
		w.log.Debug("attach resize", "attach_id", rl.id, "err", err)
	}
}

// closeRelay answers attach_close.
func (w *agent) closeRelay(f wire.AttachCloseFrame) {
	if rl := w.relay(f.AttachID); rl != nil {
		rl.end("closed by the orchestrator")
	}
}

// closeRelays ends every relay: their uplink is gone.
func (w *agent) closeRelays(reason string) {
	w.relays.mu.Lock()
	defer w.relays.mu.Unlock()
	for _, rl := range w.relays.m {
		rl.end(reason)
	}
}
