// Package server is pam's HTTP surface: the REST API of docs/api.md#resources, SSE
// (docs/api.md#server-sent-events), health and metrics. Handlers are methods on Server; the helpers at
// the bottom of this file read bounded JSON and write JSON or the error
// envelope, so every route answers errors the same way.
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pam/internal/defaults"
	"pam/internal/fleet"
	"pam/internal/runs"
	"pam/internal/store"
	"pam/internal/webui"
	"pam/internal/wire"
)

// MaxBody bounds every request body (413 beyond).
const MaxBody = 1 << 20

// LiveOnly, as the after of EventStreamer.ServeSSE, starts a stream
// with the events committed after the connection: no history.
const LiveOnly = -1

// EventStreamer serves the SSE stream (implemented by journal.Hub). after
// is the cursor (every event with a larger seq, then live), or LiveOnly.
type EventStreamer interface {
	ServeSSE(w http.ResponseWriter, r *http.Request, after int64, pattern *wire.TopicPattern)
	Subscribers() int
	Dropped() uint64
}

// Options configures a Server.
type Options struct {
	Store  *store.Store
	Events EventStreamer
	// Token is the operator token (32 hex): adopted as the admin token
	// named admin when the database has no token of that name.
	Token         string
	MetricsPublic bool
	// OperatorTokenChanged, if set, is told the new secret when the admin
	// token named admin is rotated: serve rewrites the local token file.
	OperatorTokenChanged func(secret string)
	Logger               *slog.Logger
	Version              string
	// HostOfflineAfter is PAM_HOST_OFFLINE_AFTER (0 = 90s): enable derives online/offline from it.
	HostOfflineAfter time.Duration
	// Fleet is the registry of connected workers and the pane cache; nil
	// gives a server without workers (the plan-only tests).
	Fleet *fleet.Fleet
	// Dispatcher is woken when something may be placed or freed.
	Dispatcher interface{ Wake() }
	// CaptureInterval is PAM_CAPTURE_INTERVAL as workers use it: a keys
	// request is "observed" when the pane changes within two of them.
	CaptureInterval time.Duration
	// LeaseTTL is PAM_LEASE_TTL (0 = 5m): an attach lease whose holder
	// sent nothing and answered no ping for this long expires.
	LeaseTTL time.Duration
	// SignalLanes is how many signal batches commit at once (0: one per
	// two cores, see store.BatcherOptions); a test sets 1 to see every
	// signal in one sequence of batches (docs/architecture.md#group-commit).
	SignalLanes int
	// ContinueTick is how often RunContinue looks for usage limits that
	// have reset (docs/architecture.md#continue-when-a-limit-resets); 0 is
	// 5s.
	ContinueTick time.Duration
	// Notifier is woken when a delivery is queued (a channel's test);
	// nil when nothing delivers notifications.
	Notifier interface{ Wake() }
	// Clock is the time the server decides at (nil: time.Now); a test
	// moves it.
	Clock func() time.Time
}

// Server holds the handlers' dependencies.
type Server struct {
	opts      Options
	store     *store.Store
	runs      *runs.Service // the run decisions, over store
	log       *slog.Logger
	mux       *routeMux
	registry  *prometheus.Registry
	metrics   *metrics
	streamCtx context.Context
	stopAll   context.CancelFunc
	term      *terminal // pane and attach sockets, tickets, leases
	outputs   *outputs  // pane changes, written off the uplinks' read path
	signals   *store.SignalBatcher
	// paneWatch: when each watched run's worker was last told (pane.go).
	paneWatch paneWatches
	// answers: the runs whose answer is being checked (answer.go).
	answers answerSet
	// linkAnswers: the answer URLs being checked (notifications.go).
	linkAnswers linkAnswers
	// agentCalls counts each run's calls of pam's tools (agent.go).
	agentCalls *callWindow
	// continuer: one ContinueLimited pass at a time (autocontinue.go).
	continuer continuer
	// auth: the token cache and each token's live connections (auth.go).
	auth *tokenAuth
	// bg owns what Shutdown waits for beyond http.Server.Shutdown: the
	// goroutines started outside any request (the lease watcher, relay
	// endings) and the WebSocket handlers, whose hijacked connections
	// http.Server no longer tracks.
	bg group
}

// New builds the server and its routes.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Fleet == nil {
		o.Fleet = fleet.New(1000)
	}
	if o.Dispatcher == nil {
		o.Dispatcher = noWake{}
	}
	if o.CaptureInterval <= 0 {
		o.CaptureInterval = defaults.CaptureInterval
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = defaults.LeaseTTL
	}
	if o.ContinueTick <= 0 {
		o.ContinueTick = defaultContinueTick
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	s := &Server{opts: o, store: o.Store, runs: runs.New(o.Store), log: o.Logger, mux: newRouteMux(), agentCalls: newCallWindow()}
	s.streamCtx, s.stopAll = context.WithCancel(context.Background())
	s.registry, s.metrics = newMetrics(s)
	s.signals = o.Store.NewSignalBatcher(store.BatcherOptions{Decide: s.runs.DecideSignal, Lanes: o.SignalLanes, OnBatch: func(n int, together bool) {
		s.metrics.signalBatch.Observe(float64(n))
		if !together {
			s.metrics.signalSplits.Inc()
		}
	}})
	s.term = newTerminal(s)
	s.auth = newTokenAuth(s)
	s.outputs = newOutputs(s)
	s.routes()
	return s
}

type noWake struct{}

func (noWake) Wake() {}

// CloseStreams ends every long-lived stream (SSE) so that a graceful
// shutdown does not wait for clients that never hang up.
func (s *Server) CloseStreams() { s.stopAll() }

// Shutdown ends every stream and socket and waits until every goroutine
// the server started has returned, or ctx ends (then it returns ctx's
// error and the stragglers end on their own). Call it once the
// http.Server has stopped accepting (after its Shutdown, which waits for
// plain requests but not for WebSockets): the caller may close the store
// when it returns. A socket that arrives after it is refused with 503.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopAll()
	if err := s.bg.closeAndWait(ctx); err != nil {
		return fmt.Errorf("wait for the server's sockets and watchers: %w", err)
	}
	if err := s.signals.Wait(ctx); err != nil {
		return fmt.Errorf("wait for the signal batches: %w", err)
	}
	return nil
}

// group counts goroutines that Shutdown must wait for. Unlike a bare
// WaitGroup it refuses newcomers once closed, so nothing is added while
// or after Shutdown waits.
type group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// enter counts the calling goroutine in; it reports false once the group
// is closed. A true enter must be matched by leave.
func (g *group) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *group) leave() { g.wg.Done() }

// goFunc runs f in a counted goroutine; it reports false, and does not
// run f, once the group is closed.
func (g *group) goFunc(f func()) bool {
	if !g.enter() {
		return false
	}
	go func() {
		defer g.leave()
		f()
	}()
	return true
}

// closeAndWait closes the group and waits for its goroutines or ctx.
func (g *group) closeAndWait(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// counted admits a WebSocket handler into bg, so that Shutdown waits for
// it after its connection was hijacked; once the server is shutting down
// the handshake is refused with 503 instead.
func (s *Server) counted(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.bg.enter() {
			writeError(w, wire.Errorf(wire.CodeUnavailable, "the server is shutting down"))
			return
		}
		defer s.bg.leave()
		h(w, r)
	}
}

func (s *Server) routes() {
	api := func(pattern string, h http.HandlerFunc) {
		method, path, _ := strings.Cut(pattern, " ")
		if method == http.MethodGet && path != "/events/stream" {
			h = s.withEventSeq(h)
		}
		s.mux.Handle(method+" /api/v1"+path, s.operatorAuth(h))
	}
	api("GET /projects", s.listProjects)
	api("POST /projects", s.createProject)
	api("GET /projects/{ref}", s.getProject)
	api("PATCH /projects/{ref}", s.updateProject)
	api("DELETE /projects/{ref}", s.archiveProject)
	api("POST /projects/{ref}/unarchive", s.unarchiveProject)
	api("GET /projects/{ref}/work-items", s.listWorkItems)
	api("POST /projects/{ref}/work-items", s.createWorkItem)
	api("GET /work-items", s.findWorkItems)
	api("GET /work-items/{id}", s.getWorkItem)
	api("PATCH /work-items/{id}", s.updateWorkItem)
	api("DELETE /work-items/{id}", s.deleteWorkItem)
	api("GET /events", s.listEvents)
	api("GET /events/stream", s.streamEvents)
	api("GET /hosts", s.listHosts)
	api("POST /hosts", s.createHost)
	api("GET /hosts/{ref}", s.getHost)
	api("PATCH /hosts/{ref}", s.updateHost)
	api("POST /hosts/{ref}/disable", s.disableHost)
	api("POST /hosts/{ref}/enable", s.enableHost)
	api("POST /hosts/{ref}/clear-suspect", s.clearSuspect)
	api("POST /hosts/{ref}/rotate-token", s.rotateToken)
	api("DELETE /hosts/{ref}", s.deleteHost)
	api("GET /providers", s.listProviders)
	api("POST /runs", s.createRun)
	api("GET /runs", s.listRuns)
	api("GET /runs/{id}", s.getRun)
	api("POST /runs/{id}/stop", s.stopRun)
	api("POST /runs/{id}/retry", s.retryRun)
	api("POST /runs/{id}/continue", s.continueRun)
	api("POST /runs/{id}/complete", s.completeRun)
	api("POST /runs/{id}/keys", s.sendKeys)
	api("POST /runs/{id}/messages", s.sendMessage)
	api("GET /runs/{id}/pane", s.getPane)
	api("GET /runs/{id}/logs", s.runLogs)
	api("GET /runs/{id}/events", s.runEvents)
	api("GET /runs/{id}/diff", s.runDiff)
	api("POST /runs/{id}/push", s.pushRun)
	api("DELETE /runs/{id}/workspace", s.deleteWorkspace)
	api("GET /openapi.json", s.openAPI)
	s.terminalRoutes(api)
	s.tokenRoutes(api)
	s.notificationRoutes(api)

	internal := func(pattern string, h http.HandlerFunc) {
		method, path, _ := strings.Cut(pattern, " ")
		s.mux.Handle(method+" /api/internal"+path, s.workerAuth(h))
	}
	internal("POST /worker/register", s.register)
	internal("GET /worker/runs", s.workerRuns)
	internal("GET /worker/runs/{id}", s.workerRun)
	internal("GET /worker/uplink", s.counted(s.uplink))
	s.mux.HandleFunc("POST /api/internal/runs/{id}/signals", s.postSignal) // worker or signal token
	s.agentRoutes()                                                        // signal token only
	s.mux.Handle("/api/internal/", s.workerAuth(s.noRoute))
	// Anything else under /api/v1 is a 405 or 404 envelope, after auth.
	s.mux.Handle("/api/v1/", s.operatorAuth(s.noRoute))

	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.Handle("GET /metrics", s.metricsHandler())
	// Go's profiles of this process, for the operator (docs/bench.md#profiles):
	// how the figures of make bench that miss their goals were explained.
	s.mux.Handle("GET /debug/pprof/", s.operatorAuth(pprof.Index))
	s.mux.Handle("GET /debug/pprof/profile", s.operatorAuth(pprof.Profile))
	s.mux.Handle("GET /debug/pprof/trace", s.operatorAuth(pprof.Trace))
	s.mux.Handle("GET /debug/pprof/symbol", s.operatorAuth(pprof.Symbol))
	ui := webui.New()
	for _, p := range webui.Patterns {
		s.mux.Handle("GET "+p, ui)
	}
}

// withEventSeq answers a REST read with the header Pam-Event-Seq: N, the
// journal position the read saw (docs/api.md#server-sent-events). A
// client that loads state and then streams ?after=N must miss nothing and
// see nothing twice in the stream, so N is taken before the read, as
// store.SafeSeq: every event with seq <= N has committed (or aborted) by
// the time SafeSeq returns, and each committed together with the state
// change it journals, so the read — which starts after, in a newer
// snapshot — reflects every event up to N. It may also reflect changes
// whose events come after N (they committed between the two); the stream
// from N delivers those events once each, and applying an event whose
// change the read already showed changes nothing, since events carry the
// values they set. The other order (read, then N) would be wrong: an
// event committed between the two would be neither in the read nor after
// N. Taking N in the read's own snapshot is no better: a transaction
// holding a seq below the largest visible one can still commit after the
// snapshot, and its event would be skipped by ?after=N.
//
// The SSE stream and the WebSockets are not wrapped: they are positions
// of their own. A server without a store (tests of routes that read
// nothing) sends no header. The journal reads (GET /events, GET
// /runs/{id}/events) list up to N itself (safeSeq), so their last event
// and the header agree.
func (s *Server) withEventSeq(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.store != nil {
			seq, err := s.store.SafeSeq(r.Context())
			if err != nil {
				s.fail(w, r, fmt.Errorf("read the journal position: %w", err))
				return
			}
			w.Header().Set(wire.HeaderEventSeq, strconv.FormatInt(seq, 10))
			r = r.WithContext(context.WithValue(r.Context(), eventSeqKey{}, seq))
		}
		h(w, r)
	}
}

// eventSeqKey holds a read's Pam-Event-Seq in its request context.
type eventSeqKey struct{}

// safeSeq is the journal position a read lists events up to: the one its
// Pam-Event-Seq header announced, or a fresh store.SafeSeq.
func (s *Server) safeSeq(r *http.Request) (int64, error) {
	if seq, ok := r.Context().Value(eventSeqKey{}).(int64); ok {
		return seq, nil
	}
	return s.store.SafeSeq(r.Context())
}

// ServeHTTP logs, counts and routes every request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.instrument(s.envelopeMuxErrors).ServeHTTP(w, r)
}

// envelopeMuxErrors answers requests that match no route (404) or match a
// path with another method (405) with the error envelope instead of the
// mux's plain text.
func (s *Server) envelopeMuxErrors(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	rec := &statusOnly{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if allow := rec.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	if rec.status == http.StatusMethodNotAllowed {
		writeError(w, wire.Errorf(wire.CodeMethodNotAllowed, "method %s not allowed for %s", r.Method, r.URL.Path))
		return
	}
	writeError(w, wire.Errorf(wire.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
}

// noRoute answers an /api/v1 request no route took: 405 with Allow when
// the path exists for other methods, else 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{"GET", "POST", "PATCH", "PUT", "DELETE"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/api/v1/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, wire.Errorf(wire.CodeMethodNotAllowed, "method %s not allowed for %s", r.Method, r.URL.Path))
		return
	}
	writeError(w, wire.Errorf(wire.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
}

// statusOnly captures the status the mux's fallback handler would write.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header         { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusOnly) WriteHeader(code int)        { s.status = code }

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"status": "unavailable",
			"error":  wire.Error{Code: wire.CodeUnavailable, Message: "database unreachable"},
		})
		return
	}
	writeJSON(w, http.StatusOK, wire.Health{Status: "ok"})
}

// decodeJSON reads a bounded JSON body into v, rejecting unknown fields
// and trailing data. Failures come back as wire errors.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	return DecodeStrict(r.Body, v)
}

// DecodeStrict decodes exactly one JSON value into v: unknown fields are a
// validation_failed naming the field, wrong types name the field too, so
// does a string holding NUL; anything unparsable is malformed_json, an
// oversized body body_too_large.
func DecodeStrict(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return jsonError(err)
		}
		return wire.Errorf(wire.CodeMalformedJSON, "request body must hold exactly one JSON object")
	}
	return refuseNUL(v)
}

func jsonError(err error) error {
	var tooLarge *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &tooLarge):
		return wire.Errorf(wire.CodeBodyTooLarge, "request body exceeds %d bytes", MaxBody)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return wire.Errorf(wire.CodeMalformedJSON, "request body must be a JSON object")
		}
		return wire.Invalid(field, "field %s must be %s", field, jsonTypeName(typeErr.Type.Kind().String()))
	case errors.As(err, &syntaxErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return wire.Errorf(wire.CodeMalformedJSON, "request body is not valid JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.TrimPrefix(err.Error(), "json: unknown field ")
		if unq, err := strconv.Unquote(field); err == nil && unq != "" {
			field = unq
		}
		return wire.Invalid(field, "unknown field %s", strconv.Quote(field))
	default:
		return wire.Errorf(wire.CodeMalformedJSON, "request body is not valid JSON: %v", err)
	}
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "int32", "float64":
		return "a number"
	case "struct", "map":
		return "an object"
	case "slice":
		return "an array"
	}
	return "of another type"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeError maps any error to the envelope: a wire error's status comes
// from its code (StatusOf); an unreachable database is 503 unavailable;
// anything else is a 500 whose detail is logged by the caller, never sent.
func writeError(w http.ResponseWriter, err error) {
	if e, ok := wire.AsError(err); ok {
		if e.Details == nil { // the envelope always carries details
			c := *e
			c.Details = map[string]any{}
			e = &c
		}
		writeJSON(w, StatusOf(e), wire.Envelope{Error: e})
		return
	}
	if errors.Is(err, store.ErrUnavailable) {
		writeJSON(w, http.StatusServiceUnavailable, wire.Envelope{Error: &wire.Error{Code: wire.CodeUnavailable, Message: "database unavailable", Details: map[string]any{}}})
		return
	}
	writeJSON(w, http.StatusInternalServerError, wire.Envelope{Error: &wire.Error{Code: wire.CodeInternal, Message: "internal error", Details: map[string]any{}}})
}

// fail writes err and logs it when it is not a client error.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if e, ok := wire.AsError(err); !ok || StatusOf(e) >= 500 {
		if !errors.Is(err, context.Canceled) {
			s.log.Error("request failed", "method", r.Method, "route", r.Pattern, "err", err)
		}
	}
	writeError(w, err)
}

// contextWithCancelOn derives a context from ctx that also ends when other
// ends.
func contextWithCancelOn(ctx, other context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(other, cancel)
	return ctx, func() { stop(); cancel() }
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
