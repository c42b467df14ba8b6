package server

import (
	"context"
	"errors"
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

// workerAuth admits requests bearing a host's worker token. A token that
// names no host is refused from that one lookup: only a lookup that failed
// for another reason costs a health check (docs/architecture.md#security-model).
func (s *Server) workerAuth(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, err := s.workerFrom(r)
		if err != nil && s.lookupFailed(r, err) {
			writeError(w, store.ErrUnavailable)
			return
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pam-worker"`)
			writeError(w, wire.Errorf(wire.CodeUnauthorized, "missing or invalid worker token"))
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), hostKey, host)))
	})
}

// errNoCredential is a token that names no host or run: a refusal, told
// apart without asking the database again.
var errNoCredential = wire.Errorf(wire.CodeUnauthorized, "missing or invalid token")

// workerFrom resolves the worker token of a request to its host. Tokens
// are looked up by their SHA-256, so no comparison of secrets happens.
// A token that names no host is errNoCredential; any other error is the
// lookup's.
func (s *Server) workerFrom(r *http.Request) (wire.Host, error) {
	tok := bearer(r)
	if len(tok) != 64 {
		return wire.Host{}, errNoCredential
	}
	host, err := s.store.HostByToken(r.Context(), tok)
	if wire.HasCode(err, wire.CodeNotFound) {
		return wire.Host{}, errNoCredential
	}
	return host, err
}

// lookupFailed tells a token that could not be checked from one that is
// wrong: while the database is unreachable a worker or a spooled signal
// must hear 503 (try again), never 401 (which a replay keeps, but a
// wrapper would report as a refusal). A wrong token is known as such from
// its lookup alone, so refusing one never pings the database; only a
// lookup that failed otherwise is checked against a ping.
func (s *Server) lookupFailed(r *http.Request, err error) bool {
	if errors.Is(err, errNoCredential) {
		return false
	}
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
	host := hostOf(r)
	if in.HostName != host.Name {
		s.fail(w, r, wire.Errorf(wire.CodeUnauthorized, "this worker token belongs to another host"))
		return
	}
	if in.Protocol != wire.UplinkProtocol {
		s.fail(w, r, wire.Errorf(wire.CodeProtocolMismatch,
			"this server speaks uplink protocol %d, the worker %d", wire.UplinkProtocol, in.Protocol).With("protocols", []int{wire.UplinkProtocol}))
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.store.Register(r.Context(), host, in, s.hostOfflineAfter())
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
	host, err := s.workerFrom(r)
	if errors.Is(err, errNoCredential) {
		var h string
		h, tokenAttempt, err = s.verifySignalToken(r.Context(), runID, bearer(r))
		if wire.HasCode(err, wire.CodeUnauthorized) {
			err = errNoCredential
		}
		hostID = h
	} else {
		hostID = host.ID
	}
	if err != nil {
		if s.lookupFailed(r, err) {
			writeError(w, store.ErrUnavailable)
			return
		}
		writeError(w, wire.Errorf(wire.CodeUnauthorized, "missing or invalid worker or signal token"))
		return
	}
	var sig wire.Signal
	if err := decodeJSON(w, r, &sig); err != nil {
		s.fail(w, r, err)
		return
	}
	// A signal token speaks for one attempt: another attempt is refused
	// here, and no attempt at all is ingest's missing_attempt (400).
	if tokenAttempt != 0 && sig.Attempt != nil && *sig.Attempt != tokenAttempt {
		writeError(w, wire.Errorf(wire.CodeUnauthorized, "this signal token is for attempt %d", tokenAttempt))
		return
	}
	res, err := s.ingest(r.Context(), runID, hostID, sig, tokenAttempt != 0)
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

// ingest is the one signal path of both transports, for a sender that
// waits for the answer: see ingestAsync.
// byToken says it came with a signal token (refused once its run ended
// a day ago).
func (s *Server) ingest(ctx context.Context, runID, hostID string, sig wire.Signal, byToken bool) (store.Ingest, error) {
	ch := make(chan store.SignalOut, 1)
	s.ingestAsync(runID, hostID, sig, byToken, func(o store.SignalOut) { ch <- o })
	select {
	case o := <-ch:
		return o.Ingest, o.Err
	case <-ctx.Done():
		return store.Ingest{}, ctx.Err() // the signal may still be applied: the sender retries
	}
}

// ingestAsync hands a signal to the group commit
// (docs/architecture.md#group-commit) and, once its transaction has
// committed, tells the sender to stop a stale incarnation, wakes the
// dispatcher when a run's status changed, and calls done (from the
// batcher's goroutine: done must not block).
func (s *Server) ingestAsync(runID, hostID string, sig wire.Signal, byToken bool, done func(store.SignalOut)) {
	in := store.SignalIn{RunID: runID, Sender: hostID, Signal: sig, ByToken: byToken}
	if sig.Kind == wire.SignalNeedsInput {
		in.Screen = s.screenQuestion(runID, hostID, sig.Attempt)
	}
	s.signals.Submit(in, func(o store.SignalOut) {
		if o.Err == nil {
			s.metrics.signals.WithLabelValues(sig.Kind, o.Result).Inc()
			if o.StopSender {
				_ = s.opts.Fleet.Send(hostID, wire.RunStopFrame{RunID: runID, Attempt: sig.Attempt, Force: true})
			}
			if o.StatusChange {
				s.opts.Dispatcher.Wake()
			}
			if sig.Kind == wire.SignalStarted && o.StatusChange && sig.Attempt != nil {
				s.askKeptScreen(runID, hostID, *sig.Attempt)
			}
		}
		done(o)
	})
}
