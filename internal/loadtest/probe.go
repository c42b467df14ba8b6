package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// probe is a host of its own that speaks the uplink protocol from inside
// the driver, as the server's BenchmarkDispatchLatency does: its runs are
// pinned to it, so the moment run_dispatch reaches it is observed exactly
// (a real worker only shows it in its logs). It then plays the run's life
// in four frames — ack, started, a full-screen snapshot, finished — so
// every probe run leaves a snapshot in serve's pane cache: 1,000 of them
// are the "1,000 runs cached" of the memory figure.
type probe struct {
	api    *apiclient.Client // operator
	hostID string
	taskID string
	inst   string
	ws     *websocket.Conn
	screen string

	writeMu    sync.Mutex
	dispatches chan seen
	acks       chan wire.Frame
	readDone   chan struct{}
	readErr    error
	quit       chan struct{} // closed by close
	beatDone   chan struct{} // closed when beat returns; nil before it starts
}

// seen is a frame and when it arrived.
type seen struct {
	f  wire.RunDispatchFrame
	at time.Time
}

// probeScreen is a full 220×50 colour screen, as BenchmarkPaneCache1000
// fills the cache with.
var probeScreen = strings.Repeat("\x1b[32m"+strings.Repeat("x", 200)+"\x1b[0m\n", 50)

// newProbe provisions the probe host, registers it and opens its uplink.
func newProbe(ctx context.Context, api *apiclient.Client, taskID string) (*probe, error) {
	maxRuns := 1000
	created, err := api.CreateHost(ctx, wire.CreateHost{Name: "pam-load-probe", MaxRuns: &maxRuns})
	if err != nil {
		return nil, fmt.Errorf("probe host: %w", err)
	}
	p := &probe{api: api, hostID: created.Host.ID, taskID: taskID, inst: uuid.NewString(), screen: probeScreen,
		dispatches: make(chan seen, 16), acks: make(chan wire.Frame, 64), readDone: make(chan struct{}),
		quit: make(chan struct{})}
	wc := &apiclient.Client{BaseURL: api.BaseURL, Token: created.WorkerToken, HTTP: api.HTTP}
	var reg wire.Registered
	if err := wc.Do(ctx, http.MethodPost, "/api/internal/worker/register", nil, wire.Register{HostName: "pam-load-probe",
		Platform: "linux", InstanceID: p.inst, Providers: []string{"shell"}, Executor: "tmux", MaxRuns: maxRuns,
		Version: "load", Protocol: 1}, &reg); err != nil {
		return nil, fmt.Errorf("register the probe host: %w", err)
	}
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(api.BaseURL, "http")+"/api/internal/worker/uplink",
		&websocket.DialOptions{HTTPClient: api.HTTP, HTTPHeader: http.Header{"Authorization": {"Bearer " + created.WorkerToken}}})
	if err != nil {
		return nil, fmt.Errorf("probe uplink: %w", err)
	}
	ws.SetReadLimit(wire.MaxFrame)
	p.ws = ws
	go p.read()
	if err := p.heartbeat(ctx); err != nil {
		p.close()
		return nil, err
	}
	select {
	case f := <-p.acks:
		if _, ok := f.(wire.HeartbeatAckFrame); !ok {
			p.close()
			return nil, fmt.Errorf("probe uplink: first answer %+v", f)
		}
	case <-p.readDone:
		p.close()
		return nil, fmt.Errorf("probe uplink closed at once: %w", p.readErr)
	case <-time.After(30 * time.Second):
		p.close()
		return nil, errors.New("probe uplink: no heartbeat_ack within 30s")
	}
	p.beatDone = make(chan struct{})
	go p.beat()
	return p, nil
}

// read sorts the server's frames: dispatches (with their arrival time)
// and everything else.
func (p *probe) read() {
	defer close(p.readDone)
	for {
		_, b, err := p.ws.Read(context.Background())
		at := time.Now()
		if err != nil {
			p.readErr = err
			return
		}
		f, err := wire.DecodeFrame(b)
		if err != nil {
			p.readErr = fmt.Errorf("undecodable frame: %w", err)
			return
		}
		if d, ok := f.(wire.RunDispatchFrame); ok {
			select {
			case p.dispatches <- seen{d, at}:
			case <-p.quit:
				return
			}
			continue
		}
		select {
		case p.acks <- f:
		default: // nobody waits for it (a heartbeat_ack between cycles)
		}
	}
}

// beat keeps the probe host online.
func (p *probe) beat() {
	defer close(p.beatDone)
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = p.heartbeat(ctx)
			cancel()
		}
	}
}

func (p *probe) heartbeat(ctx context.Context) error {
	now := time.Now()
	return p.send(ctx, wire.HeartbeatFrame{HostID: p.hostID, InstanceID: p.inst, Timestamp: &now})
}

func (p *probe) send(ctx context.Context, f wire.Frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if err := p.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("probe: send %s: %w", f.Type(), err)
	}
	return nil
}

// cycle starts one run on the probe host and returns how long POST /runs
// took to reach it as run_dispatch; it returns once the run's finished
// signal is acked, so cycles do not pile up.
func (p *probe) cycle(ctx context.Context) (time.Duration, error) {
	prompt := "probe"
	t0 := time.Now()
	run, err := p.api.CreateRun(ctx, wire.CreateRun{TaskID: p.taskID, Provider: "shell", HostID: &p.hostID, Prompt: &prompt})
	if err != nil {
		return 0, fmt.Errorf("probe: POST /runs: %w", err)
	}
	var d seen
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for d.f.RunID != run.ID {
		select {
		case d = <-p.dispatches:
		case <-p.readDone:
			return 0, fmt.Errorf("probe: uplink closed: %w", p.readErr)
		case <-timeout.C:
			return 0, fmt.Errorf("probe: no run_dispatch of run %s within 30s", run.ID)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	lat := d.at.Sub(t0)
	accepted := true
	now := time.Now()
	frames := []wire.Frame{
		wire.RunDispatchAckFrame{RunID: run.ID, Attempt: d.f.Attempt, Accepted: &accepted, Reason: "load probe"},
		wire.SignalFrame{RunID: run.ID, Kind: "started", Attempt: d.f.Attempt, Source: wire.SourceWrapper, Timestamp: &now},
		wire.SnapshotFrame{RunID: run.ID, Attempt: d.f.Attempt, Capture: p.screen + run.ID, Timestamp: &now},
		wire.SignalFrame{RunID: run.ID, Kind: "finished", Attempt: d.f.Attempt, Source: wire.SourceWrapper,
			Payload: json.RawMessage(`{"exit_code":0}`), Timestamp: &now},
	}
	for _, f := range frames {
		if err := p.send(ctx, f); err != nil {
			return 0, err
		}
	}
	for {
		select {
		case f := <-p.acks:
			switch f := f.(type) {
			case wire.ErrorFrame:
				return 0, fmt.Errorf("probe: the server refused a frame of run %s: %s %s", run.ID, f.Code, f.Message)
			case wire.SignalAckFrame:
				if f.Code != "" {
					return 0, fmt.Errorf("probe: %s signal of run %s refused: %s %s", f.Kind, run.ID, f.Code, f.Message)
				}
				if f.RunID != run.ID || f.Kind != "finished" {
					continue
				}
				if f.Result != wire.ResultApplied {
					return 0, fmt.Errorf("probe: finished of run %s: %s", run.ID, f.Result)
				}
				return lat, nil
			}
		case <-p.readDone:
			return 0, fmt.Errorf("probe: uplink closed: %w", p.readErr)
		case <-timeout.C:
			return 0, fmt.Errorf("probe: finished of run %s not acked within 30s", run.ID)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// close ends the uplink and waits for the probe's goroutines.
func (p *probe) close() {
	close(p.quit)
	_ = p.ws.Close(websocket.StatusNormalClosure, "load done")
	_ = p.ws.CloseNow()
	<-p.readDone
	if p.beatDone != nil {
		<-p.beatDone
	}
}
