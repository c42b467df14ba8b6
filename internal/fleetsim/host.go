package fleetsim

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"pam/internal/worker"
)

// simHost is one simulated host: a real worker (package worker, run in
// this process with a data dir of its own) whose sessions are fake
// (fakeSessions). What the simulation measures of it is read from the
// worker's own log records (hostLog): when its uplink is admitted, when
// each heartbeat is acked, which offers it took.
type simHost struct {
	sim     *sim
	name    string
	hostID  string
	token   string
	dataDir string
	ex      *fakeSessions

	mu        sync.Mutex
	connected time.Time // the current uplink's "uplink connected"; zero when down
	acks      int       // heartbeats acked on the current uplink
}

func newSimHost(s *sim, dir, name, hostID, token string) *simHost {
	h := &simHost{sim: s, name: name, hostID: hostID, token: token, dataDir: filepath.Join(dir, name)}
	h.ex = newFakeSessions(s, filepath.Join(h.dataDir, "worker"))
	return h
}

// options are the worker's: the real defaults but for the intervals the
// simulation sets, its fake sessions and the log the figures are read
// from.
func (h *simHost) options(pam string) worker.Options {
	o := h.sim.o
	return worker.Options{
		URL: h.sim.base, Token: h.token, HostName: h.name, DataDir: h.dataDir,
		MaxRuns: o.RunsPerWorker, HeartbeatInterval: o.HeartbeatInterval, ReconcileInterval: o.ReconcileInterval,
		PamBinary: pam, Version: "pam-bench-fleet", Sessions: h.ex,
		Providers: func() map[string]string { return map[string]string{Provider: "/bin/sh"} },
		Logger:    slog.New(hostLog{h}),
	}
}

// run runs the worker until ctx ends, then lets its fake sessions go.
func (h *simHost) run(ctx context.Context, pam string) {
	defer h.ex.close()
	if err := worker.Run(ctx, h.options(pam)); err != nil {
		h.sim.count("worker failed")
		h.sim.noteErr("worker "+h.name, err.Error())
	}
}

// uplinkConnected starts the count of a new uplink's heartbeats: its
// first, the greeting's, is sent right after this record.
func (h *simHost) uplinkConnected(at time.Time) {
	h.mu.Lock()
	h.connected, h.acks = at, 0
	h.mu.Unlock()
}

// heartbeatAcked times an ack. The worker sends the greeting's heartbeat
// as its uplink connects and the others every HeartbeatInterval from
// then: the k-th ack answers the heartbeat sent k intervals after the
// connect (a time at most the greeting's few writes early). The first
// ack admits the uplink.
func (h *simHost) heartbeatAcked(at time.Time) {
	h.mu.Lock()
	k, since := h.acks, h.connected
	h.acks++
	h.mu.Unlock()
	if since.IsZero() {
		return
	}
	if k == 0 {
		h.sim.noteAdmitted(h, at)
	}
	sent := since.Add(time.Duration(k) * h.sim.o.HeartbeatInterval)
	h.sim.heartbeatAcked(max(0, at.Sub(sent)))
}

// hostLog is the slog handler of one host's worker: it reads the
// records the figures come from and counts every warning.
type hostLog struct{ h *simHost }

func (l hostLog) Enabled(context.Context, slog.Level) bool { return true }
func (l hostLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l hostLog) WithGroup(string) slog.Handler            { return l }

func (l hostLog) Handle(_ context.Context, r slog.Record) error {
	h, s := l.h, l.h.sim
	switch r.Message {
	case "uplink connected":
		h.uplinkConnected(r.Time)
	case "heartbeat acked":
		h.heartbeatAcked(r.Time)
	case "run accepted", "repeated dispatch acked again":
		a := attrsOf(r)
		s.noteDispatch(a.runID, h.hostID, a.attempt, r.Time)
	case "run refused":
		a := attrsOf(r)
		s.noteDispatch(a.runID, h.hostID, a.attempt, r.Time)
		s.refusals.Add(1)
	case "uplink down; reconnecting":
		s.count("uplink down")
	case "spooled signal replayed":
		a := attrsOf(r)
		s.signalResult(a.kind, a.result, "")
	default:
		if r.Level >= slog.LevelWarn {
			s.noteWarning(r.Message, attrsOf(r).err)
		}
	}
	return nil
}

// recordAttrs are the attributes of a worker's record the simulation
// reads.
type recordAttrs struct {
	runID, kind, result, err string
	attempt                  int
}

func attrsOf(r slog.Record) recordAttrs {
	var a recordAttrs
	r.Attrs(func(x slog.Attr) bool {
		switch x.Key {
		case "run_id":
			a.runID = x.Value.String()
		case "attempt":
			if x.Value.Kind() == slog.KindInt64 {
				a.attempt = int(x.Value.Int64())
			}
		case "kind":
			a.kind = x.Value.String()
		case "result":
			a.result = x.Value.String()
		case "err":
			a.err = x.Value.String()
		}
		return true
	})
	return a
}
