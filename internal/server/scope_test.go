package server_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pam/internal/eventually"
	"pam/internal/server"
	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestSignalTokenWithoutAttempt: a signal token speaks for one attempt,
// but a body without any attempt is the contract's 400 missing_attempt
// (with the run's current attempt), not a refused token.
func TestSignalTokenWithoutAttempt(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r := e.start(map[string]any{"host_id": w.hostID})
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == "spawning" })
	code, _, body := e.signal(d.SignalToken, r.ID, map[string]any{"kind": "started", "source": "wrapper"})
	if code != 400 {
		t.Fatalf("signal token, no attempt: %d %s, want 400", code, body)
	}
	if got := errorOf(t, body); got.Code != wire.CodeMissingAttempt || got.Details["current_attempt"] != float64(1) {
		t.Errorf("signal token, no attempt: %+v, want missing_attempt with current_attempt 1", got)
	}
	// Another attempt than the token's stays refused.
	if code, _, body := e.signal(d.SignalToken, r.ID, sig("started", 2)); code != 401 {
		t.Errorf("signal token for attempt 1 used for attempt 2: %d %s", code, body)
	}
}

// roundTrips counts what a store asks of its pool: every acquired
// connection (a query, a transaction or a ping) and every query.
type roundTrips struct{ acquires, queries atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}

func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *roundTrips) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	c.acquires.Add(1)
	return ctx
}

func (c *roundTrips) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {}

// TestFailedInternalAuthDoesNotPingDatabase: a wrong worker or signal
// token is refused from its lookup alone — no health ping per refusal,
// which would let anyone make the server ask the database twice per
// request. Only a lookup that failed for another reason checks health.
func TestFailedInternalAuthDoesNotPingDatabase(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(storetest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := &store.Store{Pool: pool}
	srv := server.New(server.Options{Store: st, Token: testToken})
	e := &env{t: t, url: serve(t, srv).URL, store: st}

	refused := func(what, token, method, path string, body any, acquires int64) {
		t.Helper()
		rt.acquires.Store(0)
		rt.queries.Store(0)
		code, out := e.callAs(token, method, path, body)
		if code != 401 {
			t.Fatalf("%s: %d %s, want 401", what, code, out)
		}
		if got := rt.acquires.Load(); got != acquires {
			t.Errorf("%s: %d connections acquired (%d queries), want %d", what, got, rt.queries.Load(), acquires)
		}
	}
	badWorker := strings.Repeat("ab", 32)
	runID := "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f"
	refused("unknown worker token", badWorker, "GET", "/api/internal/worker/runs", nil, 1)
	refused("unknown worker token on signals", badWorker, "POST", "/api/internal/runs/"+runID+"/signals", sig("started", 1), 1)
	// The first well-formed signal token reads the server's secret once;
	// from then on a forged one costs nothing.
	forged := "pst1." + runID + ".1." + strings.Repeat("0", 64)
	e.callAs(forged, "POST", "/api/internal/runs/"+runID+"/signals", sig("started", 1))
	refused("forged signal token", forged, "POST", "/api/internal/runs/"+runID+"/signals", sig("started", 1), 0)
	refused("garbage token", "nope", "POST", "/api/internal/runs/"+runID+"/signals", sig("started", 1), 0)
	refused("garbage token on the worker API", "nope", "GET", "/api/internal/worker/runs", nil, 0)

	// A lookup that could not be made is not a refusal: 503, try again.
	pool.Close()
	if code, out := e.callAs(badWorker, "GET", "/api/internal/worker/runs", nil); code != 503 {
		t.Errorf("worker token while the database is away: %d %s, want 503", code, out)
	}
}

// TestRunStateScopedToOfferedHost: a worker speaks only for runs offered
// to its host. Frames another host sends about a run — run_state,
// snapshot, signal, run_dispatch_ack, log_chunk — are answered not_found
// and leave nothing in the journal; and a signal's payload carries no
// string longer than 1,000 characters.
func TestRunStateScopedToOfferedHost(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	a := e.worker("host-a", 4, "shell")
	b := e.worker("host-b", 4, "shell")
	r := e.start(map[string]any{"host_id": a.hostID})
	d := a.expect(wire.FrameRunDispatch)
	a.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == "spawning" })
	before := e.topics(r.ID)

	one := wire.IntPtr(1)
	long := strings.Repeat("x", wire.MaxText)
	for _, state := range []string{wire.StateStaleSession, wire.StateSessionLost} {
		b.send(wire.RunStateFrame{RunID: r.ID, Attempt: one, State: state, Detail: long})
		if f := b.expect(wire.FrameError); f.Code != wire.CodeNotFound || f.RunID != r.ID {
			t.Errorf("run_state %s from another host: %+v, want not_found", state, f)
		}
	}
	// An orphan is by definition a session whose run is not this host's:
	// it is journaled for host B (run id and attempt in the payload),
	// never against the run, whose journal stays as it was.
	b.send(wire.RunStateFrame{RunID: r.ID, Attempt: one, State: wire.StateOrphanDetected, Detail: long})
	eventually.Wait(t, eventually.Medium, "host B's orphan report", func() bool {
		for _, ev := range e.events("run.orphan_detected") {
			if ev.HostID != nil && *ev.HostID == b.hostID && ev.RunID == nil && strings.Contains(string(ev.Payload), r.ID) {
				return true
			}
		}
		return false
	})
	now := time.Now()
	b.send(wire.SnapshotFrame{RunID: r.ID, Attempt: one, Capture: "not mine", Timestamp: &now})
	if f := b.expect(wire.FrameError); f.Code != wire.CodeNotFound {
		t.Errorf("snapshot from another host: %+v, want not_found", f)
	}
	yes := true
	b.send(wire.RunDispatchAckFrame{RunID: r.ID, Attempt: one, Accepted: &yes})
	if f := b.expect(wire.FrameError); f.Code != wire.CodeNotFound {
		t.Errorf("run_dispatch_ack from another host: %+v, want not_found", f)
	}
	b.send(wire.SignalFrame{RunID: r.ID, Attempt: one, Kind: wire.SignalStarted, Source: wire.SourceWrapper})
	if f := b.expect(wire.FrameSignalAck); f.Code != wire.CodeNotFound || f.Result != "" {
		t.Errorf("signal from another host: %+v, want signal_ack not_found", f)
	}
	b.send(wire.LogChunkFrame{RunID: r.ID, RequestID: "0b9f3c1e-2a4d-4e5f-8a6b-7c8d9e0f1a2b", Text: "forged"})
	if f := b.expect(wire.FrameError); f.Code != wire.CodeNotFound {
		t.Errorf("log_chunk from another host: %+v, want not_found", f)
	}
	if got := e.topics(r.ID); got != before {
		t.Errorf("frames of another host journaled: %s, was %s", got, before)
	}
	if p := e.fleet.Pane(r.ID); p.Capture != "" {
		t.Errorf("snapshot of another host kept: %q", p.Capture)
	}
	if got := e.run(r.ID); got.Status != "spawning" {
		t.Errorf("run after another host's frames: %s, want spawning", got.Status)
	}

	// The host it was offered to is heard.
	a.send(wire.RunStateFrame{RunID: r.ID, Attempt: one, State: wire.StateStaleSession, Detail: "old session"})
	eventually.Wait(t, eventually.Medium, "run.stale_session from the offered host", func() bool {
		return strings.Contains(e.topics(r.ID), "run.stale_session")
	})

	// A payload string over 1,000 characters is refused on both transports.
	big := sig("progress", 1, "seq", 1, "payload", map[string]any{"note": long + "x"})
	if code, _, body := e.signal(a.token, r.ID, big); code != 400 || errorOf(t, body).Code != wire.CodeValidationFailed {
		t.Errorf("progress with a 1,001-character string: %d %s, want 400 validation_failed", code, body)
	}
	seq := int64(2)
	a.send(wire.SignalFrame{RunID: r.ID, Attempt: one, Kind: wire.SignalProgress, Seq: &seq, Source: wire.SourceWrapper,
		Payload: []byte(`{"note":"` + long + `x"}`)})
	if f := a.expect(wire.FrameSignalAck); f.Code != wire.CodeValidationFailed {
		t.Errorf("progress frame with a 1,001-character string: %+v, want validation_failed", f)
	}
	if code, _, body := e.signal(a.token, r.ID, sig("progress", 1, "seq", 3, "payload", map[string]any{"note": long})); code != 202 {
		t.Errorf("progress with a 1,000-character string: %d %s, want 202", code, body)
	}
}
