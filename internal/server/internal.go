package server

import (
	"context"
	"net/http"

	"pam/internal/store"
	"pam/internal/wire"
)

// The internal API (docs/architecture.md#internal-api): workers register, read their runs and post
// signals. Worker tokens and signal tokens are good only here; the
// operator token is refused here, and worker tokens on /api/v1.

type ctxKey int

const hostKey ctxKey = 1

func hostOf(r *http.Request) wire.Host { return r.Context().Value(hostKey).(wire.Host) }

// workerAuth admits requests bearing a host's worker token.
func (s *Server) workerAuth(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, ok := s.workerFrom(r)
		if !ok && s.databaseDown(r) {
			writeError(w, store.ErrUnavailable)
			return
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pam-worker"`)
			writeError(w, wire.Errorf(wire.CodeUnauthorized, "missing or invalid worker token"))
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), hostKey, host)))
	})
}

// workerFrom resolves the worker token of a request to its host. Tokens
// are looked up by their SHA-256, so no comparison of secrets happens.
func (s *Server) workerFrom(r *http.Request) (wire.Host, bool) {
	tok := bearer(r)
	if len(tok) != 64 {
		return wire.Host{}, false
	}
	host, err := s.store.HostByToken(r.Context(), tok)
	return host, err == nil
}

// databaseDown tells a token that could not be checked from one that is
// wrong: while the database is unreachable a worker or a spooled signal
// must hear 503 (try again), never 401 (which a replay keeps, but a
// wrapper would report as a refusal).
func (s *Server) databaseDown(r *http.Request) bool {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	return s.store.Ping(ctx) != nil
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var in wire.Register
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.store.Register(r.Context(), hostOf(r), in, s.hostOfflineAfter())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if out.Pinned {
		// Only the pinned instance may now open the uplink
		// (docs/architecture.md#security-model).
		s.opts.Fleet.Pin(out.HostID, in.InstanceID)
	}
	s.log.Info("worker registered", "host", hostOf(r).Name, "host_id", out.HostID, "providers", in.Providers, "version", in.Version)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) workerRuns(w http.ResponseWriter, r *http.Request) {
	runs, err := s.store.WorkerRuns(r.Context(), hostOf(r).ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.WorkerRunList{Runs: runs})
}

func (s *Server) workerRun(w http.ResponseWriter, r *http.Request) {
	run, err := s.store.WorkerRun(r.Context(), hostOf(r).ID, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

// postSignal takes a signal from a worker (worker token) or from the
// wrapper or a hook of one run (its signal token, bound to run, attempt
// and host).
func (s *Server) postSignal(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	var hostID string
	tokenAttempt := 0
	if host, ok := s.workerFrom(r); ok {
		hostID = host.ID
	} else if h, att, ok := s.store.VerifySignalToken(r.Context(), runID, bearer(r)); ok {
		hostID, tokenAttempt = h, att
	} else if s.databaseDown(r) {
		writeError(w, store.ErrUnavailable)
		return
	} else {
		writeError(w, wire.Errorf(wire.CodeUnauthorized, "missing or invalid worker or signal token"))
		return
	}
	var sig wire.Signal
	if err := decodeJSON(w, r, &sig); err != nil {
		s.fail(w, r, err)
		return
	}
	if tokenAttempt != 0 && (sig.Attempt == nil || *sig.Attempt != tokenAttempt) {
		writeError(w, wire.Errorf(wire.CodeUnauthorized, "this signal token is for attempt %d", tokenAttempt))
		return
	}
	res, err := s.ingest(r.Context(), runID, hostID, sig)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if res.Result == wire.ResultApplied {
		status = http.StatusAccepted
	}
	writeJSON(w, status, wire.SignalResult{Result: res.Result})
}

// ingest is the one signal path of both transports: apply, then tell the
// sender to stop a stale incarnation and wake the dispatcher when a run's
// status changed.
func (s *Server) ingest(ctx context.Context, runID, hostID string, sig wire.Signal) (store.Ingest, error) {
	res, err := s.store.IngestSignal(ctx, runID, hostID, sig)
	if err != nil {
		return res, err
	}
	s.metrics.signals.WithLabelValues(sig.Kind, res.Result).Inc()
	if res.StopSender {
		_ = s.opts.Fleet.Send(hostID, wire.Frame{Type: wire.FrameRunStop, RunID: runID, Attempt: sig.Attempt, Force: true})
	}
	if res.StatusChange {
		s.opts.Dispatcher.Wake()
	}
	return res, nil
}
