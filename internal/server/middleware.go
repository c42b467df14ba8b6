package server

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"pam/internal/wire"
)

const healthTimeout = 2 * time.Second

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// operatorAuth admits requests carrying a live named token whose role may
// use the route (authenticated, roles.go), then refuses what the route
// cannot take (checkRequest): an unknown query parameter, a malformed id.
// The handler runs as that token (asToken): its events name it, and it
// ends when the token is revoked.
func (s *Server) operatorAuth(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, present := secretHash(bearer(r))
		tok, ok := s.authenticated(w, r, key, present)
		if !ok {
			return
		}
		if err := checkRequest(r.Pattern, r); err != nil {
			writeError(w, err)
			return
		}
		r, release := s.asToken(r, tok, key)
		defer release()
		h(w, r)
	})
}

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	signals  *prometheus.CounterVec
	uplinks  prometheus.Gauge
	// signalBatch is the size of every group commit of signals
	// (docs/architecture.md#group-commit); signalSplits counts the
	// batches that failed and were applied one signal at a time.
	signalBatch  prometheus.Histogram
	signalSplits prometheus.Counter
}

func newMetrics(s *Server) (*prometheus.Registry, *metrics) {
	reg := prometheus.NewRegistry()
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pam_http_requests_total", Help: "HTTP requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pam_http_request_duration_seconds", Help: "HTTP request latency by route pattern (streams and sockets excluded).",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
	}
	m.signals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pam_signals_total", Help: "Run signals ingested, by kind and result.",
	}, []string{"kind", "result"})
	m.uplinks = prometheus.NewGauge(prometheus.GaugeOpts{Name: "pam_uplinks_connected", Help: "Connected worker uplinks."})
	m.signalBatch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "pam_signal_batch_size", Help: "Signals per group commit of the signal ingest.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 8),
	})
	m.signalSplits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pam_signal_batch_splits_total", Help: "Signal batches that failed and were applied one signal per transaction.",
	})
	reg.MustRegister(m.requests, m.duration, m.signals, m.uplinks, m.signalBatch, m.signalSplits,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pam_signals_waiting", Help: "Signals queued for or in a group commit."},
			func() float64 { return float64(s.signals.Waiting()) }),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pam_sse_subscribers", Help: "Connected SSE subscribers."},
			func() float64 {
				if s.opts.Events == nil {
					return 0
				}
				return float64(s.opts.Events.Subscribers())
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pam_sse_dropped_total", Help: "SSE subscribers disconnected for passing the pending bound."},
			func() float64 {
				if s.opts.Events == nil {
					return 0
				}
				return float64(s.opts.Events.Dropped())
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pam_db_pool_acquired_conns", Help: "Database connections in use."},
			func() float64 { return float64(s.store.Pool.Stat().AcquiredConns()) }),
	)
	return reg, m
}

// Registry lets other parts of serve register their own collectors.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

func (s *Server) metricsHandler() http.Handler {
	h := promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})
	if s.opts.MetricsPublic {
		return h
	}
	return s.operatorAuth(h.ServeHTTP)
}

// recorder remembers the status and size written, and passes Flush and
// Unwrap through so streams and http.ResponseController keep working.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += n
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// instrument logs each request (method, path without the query string —
// which may carry a token — and without an answer URL's token, route, status, duration) and counts it.
func (s *Server) instrument(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("handler panic", "method", r.Method, "path", logPath(r), "panic", p)
				if rec.status == 0 {
					writeError(rec, wire.Errorf(wire.CodeInternal, "internal error"))
				}
			}
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			elapsed := time.Since(start)
			s.metrics.requests.WithLabelValues(route, r.Method, strconv.Itoa(rec.status)).Inc()
			if !strings.HasSuffix(route, "/stream") && !strings.HasSuffix(route, "/ws") && !strings.HasSuffix(route, "/uplink") {
				s.metrics.duration.WithLabelValues(route).Observe(elapsed.Seconds())
			}
			s.log.Log(r.Context(), requestLevel(r.URL.Path, rec.status), "http request", "method", r.Method, "path", logPath(r), "route", route,
				"status", rec.status, "bytes", rec.bytes, "duration", elapsed.Round(time.Microsecond), "remote", r.RemoteAddr)
		}()
		next(rec, r)
	})
}

// requestLevel is the log level of a request's line: the workers' and
// wrappers' own traffic (/api/internal/…: a poll every second or 30 s per
// worker, every signal and snapshot) is at debug, so that the console of
// pam up or serve shows what people do and what runs do (serve logs a
// run's start, end and questions once each) unless it fails on the
// server's side; every other request is at info.
func requestLevel(path string, status int) slog.Level {
	if strings.HasPrefix(path, "/api/internal/") && status < 500 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
