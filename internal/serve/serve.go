package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
	"golang.org/x/term"

	"pam/internal/datadir"
	"pam/internal/dispatch"
	"pam/internal/embeddb"
	"pam/internal/fleet"
	"pam/internal/journal"
	"pam/internal/notify"
	"pam/internal/server"
	"pam/internal/store"
	"pam/internal/wire"
)

// Run is `pam serve`: it returns when ctx ends (after a graceful shutdown)
// or when something it cannot do without fails. Failures are also appended
// to <data>/serve.log, for the operator who finds the server gone.
func Run(ctx context.Context, o Options) (err error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.DataDir == "" {
		o.DataDir = datadir.DefaultDataDir()
	}
	defer func() {
		if err != nil {
			logFailure(o.DataDir, err)
		}
	}()
	if err := checkPlain(o); err != nil {
		return err
	}
	embedded := o.DatabaseURL == ""
	if err := datadir.Ensure(o.DataDir, embedded && os.Geteuid() == 0); err != nil {
		return err
	}
	lock, err := datadir.TryLock(filepath.Join(o.DataDir, "serve.lock"))
	if err != nil {
		return fmt.Errorf("another pam serve runs on this data dir: %w", err)
	}
	defer lock.Unlock()

	dbURL := o.DatabaseURL
	if embedded {
		start := time.Now()
		cluster, err := embeddb.Start(ctx, embeddb.Options{Dir: filepath.Join(o.DataDir, "postgres"), Durable: true, Logger: o.Logger})
		if err != nil {
			return err
		}
		defer func() {
			if err := cluster.Stop(); err != nil {
				o.Logger.Error("stop embedded database", "err", err)
			}
		}()
		o.Logger.Info("embedded database ready", "created", cluster.Created, "adopted", cluster.Adopted, "took", time.Since(start).Round(time.Millisecond))
		dbURL = cluster.URL()
	}

	// Listen before taking the active-server lock: a standby answers
	// /healthz 503 standby, so a load balancer in front of several serves
	// of one database sends traffic to the active one only.
	ln, scheme, err := listen(o)
	if err != nil {
		return err
	}
	front := &front{standby: server.Standby()}
	httpSrv := &http.Server{
		Handler:           front,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	httpSrv.RegisterOnShutdown(front.closeStreams)
	addr := ln.Addr().(*net.TCPAddr)
	host := o.Bind
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	base := fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, strconv.Itoa(addr.Port)))

	// Every part runs in g until ctx ends or one of them stops: a part
	// that fails cancels the others and its error, named, is what Run
	// returns. The HTTP side runs from the start, the standby's wait
	// included; the active parts join once the lock is ours. The shutdown
	// part stops the HTTP side once gctx ends; Run returns only when all
	// of them have, and the deferred closes of the store, the lock's
	// connection and the database come after that.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(runCtx)
	part := func(name string, run func(context.Context) error) {
		g.Go(func() error {
			err := run(gctx)
			switch {
			case err != nil:
				return fmt.Errorf("%s: %w", name, err)
			case gctx.Err() == nil:
				return fmt.Errorf("%s stopped unexpectedly", name)
			}
			return nil
		})
	}
	part("http server", func(context.Context) error {
		if err := httpSrv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		o.Logger.Info("pam serve shutting down")
		shutCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		// The listener first (and the plain requests in flight), then
		// the sockets and watchers only the server knows of.
		if err := httpSrv.Shutdown(shutCtx); err != nil {
			o.Logger.Warn("http shutdown", "err", err)
		}
		if err := front.shutdown(shutCtx); err != nil {
			o.Logger.Warn("server shutdown", "err", err)
		}
		return nil
	})
	// abort stops what runs so far and, once it has, returns why: nothing
	// when ctx asked for the stop (SIGTERM to a standby), the part that
	// failed when that is what cancelled the step, else the step's error.
	abort := func(err error) error {
		stop()
		werr := g.Wait()
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.Canceled) && werr != nil:
			return werr
		}
		return err
	}

	leader, err := becomeActive(gctx, dbURL, o.checkLeaderEvery, o.Logger, func() {
		fmt.Fprintf(o.Stdout, "pam serve standing by on %s\n", base)
	})
	if err != nil {
		return abort(err)
	}
	// Deferred after g started but run after g.Wait (every return below
	// waits for g first): the connection is Run's again by then.
	defer leader.Close(context.Background())

	st, err := store.Open(gctx, dbURL)
	if err != nil {
		return abort(err)
	}
	defer st.Close()
	token, err := operatorToken(gctx, st, o.DataDir, o.Logger)
	if err != nil {
		return abort(err)
	}
	// The operator token is the admin token named admin (adopted once,
	// on the first start with named tokens).
	if err := st.AdoptAdminToken(gctx, token); err != nil {
		return abort(err)
	}

	st.Policy = store.Policy{MaxAttempts: o.MaxAttempts, RestartInitialDelay: o.RestartInitialDelay, RestartMaxDelay: o.RestartMaxDelay}
	hub := journal.NewHub(st, journal.Options{Logger: o.Logger, Retention: o.EventRetention})
	logRun := runLogger(o.Logger)
	hub.Observe(func(evs []wire.Event) {
		for _, ev := range evs {
			logRun(ev)
		}
	})
	notifier := notify.New(notify.Options{Store: st, PublicURL: o.PublicURL, Logger: o.Logger})
	st.AfterCommit = func() { hub.Wake(); notifier.Wake() }
	workers := fleet.New(1000)
	// Placement has connections of its own: a busy API never makes a run
	// wait for one to be offered.
	placement, err := st.WithOwnPool(gctx, 2)
	if err != nil {
		return abort(err)
	}
	defer placement.Close()
	dispatcher := dispatch.New(placement, workers, dispatch.Options{
		AckTimeout: o.DispatchAckTimeout, DispatchTimeout: o.DispatchTimeout, SpawnTimeout: o.SpawnTimeout,
		HostOfflineAfter: o.HostOfflineAfter, HostLostAfter: o.HostLostAfter, CLIHangTimeout: o.CLIHangTimeout,
		CompletedStopAfter: o.CompletedStopAfter, Logger: o.Logger,
	})
	srv := server.New(server.Options{Store: st, Events: hub, Token: token, MetricsPublic: o.MetricsPublic, Logger: o.Logger,
		Version: o.Version, HostOfflineAfter: o.HostOfflineAfter, Fleet: workers, Dispatcher: dispatcher,
		LeaseTTL: o.LeaseTTL, CaptureInterval: o.CaptureInterval, Clock: o.Clock, ContinueTick: o.ContinueTick, Notifier: notifier,
		OperatorTokenChanged: func(secret string) {
			if err := datadir.WriteToken(o.DataDir, secret); err != nil {
				o.Logger.Warn("write the rotated admin token to the token file", "file", datadir.TokenPath(o.DataDir), "err", err)
			}
		}})
	// Revocations made by other serves of the database reach this one
	// through the journal.
	hub.Observe(srv.ObserveEvents)
	if !front.activate(srv) {
		return abort(gctx.Err()) // shutting down already
	}
	part("event journal", hub.Run)
	part("dispatcher", dispatcher.Run)
	part("notifications", notifier.Run)
	part("continue when a limit resets", srv.RunContinue)
	part("active-server lock", leader.Watch)

	o.Logger.Info("pam serve listening", "addr", addr.String(), "tls", scheme == "https", "version", o.Version)
	fmt.Fprintf(o.Stdout, "pam serve listening on %s\n", base)
	if o.DashboardURL {
		printDashboard(o.Stdout, base, token, o.DataDir)
	}
	if o.Ready != nil {
		o.Ready(base, token)
	}
	return g.Wait()
}

// checkPlain refuses plain HTTP on an address other machines can reach
// unless o.AllowInsecure: every token would cross the network in clear.
func checkPlain(o Options) error {
	if o.TLSCert != "" || o.TLSKey != "" || IsLoopback(o.Bind) || o.AllowInsecure {
		return nil
	}
	return fmt.Errorf("refusing plain HTTP on %s, an address other machines can reach: every token would cross the network in clear. "+
		"Set PAM_TLS_CERT and PAM_TLS_KEY, or bind 127.0.0.1 (PAM_BIND) behind a TLS reverse proxy, or set PAM_ALLOW_INSECURE=1 on a network you trust", o.Bind)
}

// IsLoopback reports whether host (a name or an IP address, without a
// port) is this machine's loopback: "localhost" or a loopback address.
// Plain http:// is safe there only.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// printDashboard prints where the dashboard is. To a terminal the URL
// carries the token in its fragment, one click away from signed in; to
// anything else (a file, a pipe into a log collector, a systemd journal)
// the token would be kept wherever that output goes, so the line names
// the token file instead.
func printDashboard(w io.Writer, base, token, dataDir string) {
	if isTerminal(w) {
		fmt.Fprintf(w, "dashboard: %s/#token=%s\n", base, token)
		return
	}
	fmt.Fprintf(w, "dashboard: %s/ (sign in with the token in %s; a URL that carries it is printed only to a terminal)\n", base, datadir.TokenPath(dataDir))
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// listen opens serve's listener, with TLS when a certificate is
// configured, and returns it with its URL scheme.
func listen(o Options) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Bind, strconv.Itoa(o.Port)))
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s:%d: %w", o.Bind, o.Port, err)
	}
	if o.TLSCert != "" || o.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			ln.Close()
			return nil, "", fmt.Errorf("load TLS certificate (PAM_TLS_CERT/PAM_TLS_KEY): %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}})
		return ln, "https", nil
	}
	if !IsLoopback(o.Bind) {
		o.Logger.Warn("serving plain HTTP on a non-loopback address: tokens cross the network in clear; set PAM_TLS_CERT/PAM_TLS_KEY or put a TLS proxy in front", "bind", o.Bind)
	}
	return ln, "http", nil
}

// front is what the listener serves: the standby's answers until this
// serve becomes active, the API server from then on. Once shut down it
// refuses to become active, so a server made while the HTTP side was
// stopping is never left running.
type front struct {
	standby http.Handler
	active  atomic.Pointer[server.Server]
	mu      sync.Mutex
	closed  bool
}

// ServeHTTP hands the request to the active server, or to the standby.
func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s := f.active.Load(); s != nil {
		s.ServeHTTP(w, r)
		return
	}
	f.standby.ServeHTTP(w, r)
}

// activate makes s the handler; false once shutdown has begun.
func (f *front) activate(s *server.Server) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.active.Store(s)
	return true
}

// closeStreams ends the active server's long-lived streams, if any.
func (f *front) closeStreams() {
	if s := f.active.Load(); s != nil {
		s.CloseStreams()
	}
}

// shutdown closes the front and shuts the active server down, if any.
func (f *front) shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.closed = true
	s := f.active.Load()
	f.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Shutdown(ctx)
}

// operatorToken returns the database's operator token, storing one first
// when the database has none: this data dir's token file if it holds a
// valid one (a server upgraded from when the token lived there keeps its
// credential), else a new one. A damaged file is then refused, never
// replaced behind the operator's back. Once the database has a token,
// <data>/token is made that token (0600, atomically), so that the local
// CLI works against whichever serve of the database is active. The token
// itself is never logged.
func operatorToken(ctx context.Context, st *store.Store, dir string, log *slog.Logger) (string, error) {
	path := datadir.TokenPath(dir)
	local, localErr := datadir.ReadToken(dir)
	tok, err := st.OperatorToken(ctx)
	if err != nil {
		return "", err
	}
	if tok == "" {
		candidate := local
		switch {
		case localErr == nil:
		case errors.Is(localErr, fs.ErrNotExist):
			if candidate, err = datadir.NewToken(); err != nil {
				return "", err
			}
		default:
			return "", localErr
		}
		if tok, err = st.InitOperatorToken(ctx, candidate); err != nil {
			return "", err
		}
		switch tok {
		case local:
			log.Info("operator token adopted into the database from the token file", "file", path)
		case candidate:
			log.Info("operator token created", "file", path)
		}
	}
	if tok == local {
		return tok, nil
	}
	if err := datadir.WriteToken(dir, tok); err != nil {
		return "", err
	}
	if localErr == nil || !errors.Is(localErr, fs.ErrNotExist) {
		log.Warn("token file replaced by the database's operator token: it held another token or none valid", "file", path)
	}
	return tok, nil
}

// shutdownTimeout bounds the graceful shutdown: in-flight requests, then
// sockets and watchers.
const shutdownTimeout = 15 * time.Second

// logFailure appends a failure to <data>/serve.log (0600).
func logFailure(dir string, failure error) {
	f, err := os.OpenFile(filepath.Join(dir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s pam serve: %v\n", time.Now().UTC().Format(time.RFC3339), failure)
}

// activeLock holds the PostgreSQL advisory lock that makes this process
// the one active server of its database (docs/architecture.md#central-duties), on a connection of its own.
//
// A pgx.Conn is not safe for concurrent use, so the connection has one
// owner at a time: becomeActive's caller, then Watch while it runs (it
// may replace the connection), then the caller again for Close once
// Watch has returned. Run keeps that order by closing the lock only after
// its errgroup, and so Watch, is done.
type activeLock struct {
	url   string
	conn  *pgx.Conn
	log   *slog.Logger
	every time.Duration // how often Watch checks the connection
}

// becomeActive takes the active-server lock, waiting as a standby while
// another server holds it; onStandby is called once when the wait begins.
func becomeActive(ctx context.Context, url string, every time.Duration, log *slog.Logger, onStandby func()) (*activeLock, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect database: %w", err)
	}
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", store.LockActiveServer).Scan(&got); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("active-server lock: %w", err)
	}
	if !got {
		log.Warn("another pam serve is active on this database; waiting as a standby")
		onStandby()
		// Polled, not blocking: a session blocked in pg_advisory_lock
		// holds a snapshot, which would hold up the active server's
		// CREATE INDEX CONCURRENTLY migrations indefinitely.
		if err := store.WaitAdvisoryLock(ctx, conn, store.LockActiveServer); err != nil {
			conn.Close(context.Background())
			return nil, fmt.Errorf("standby: %w", err)
		}
		log.Info("took over as the active pam serve")
	}
	if every <= 0 {
		every = 3 * time.Second
	}
	return &activeLock{url: url, conn: conn, log: log, every: every}, nil
}

// Watch checks the lock's connection every few seconds until ctx ends.
// If the connection is lost (a database restart), it reconnects and takes
// the lock again without waiting; if another server took it meanwhile,
// this one must stop being active and Watch returns an error. It owns the
// connection while it runs.
func (a *activeLock) Watch(ctx context.Context) error {
	t := time.NewTicker(a.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := a.conn.Ping(pctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			continue
		}
		a.log.Warn("lost the database connection holding the active-server lock; retaking it", "err", err)
		oldPID := a.conn.PgConn().PID()
		conn, err := pgx.Connect(ctx, a.url)
		if err != nil {
			continue // database still down: keep serving what we can, retry
		}
		var got bool
		var holder *uint32
		err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1),
			(SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
				AND ((classid::bigint << 32) | objid::bigint) = $1
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1)`,
			store.LockActiveServer).Scan(&got, &holder)
		if err != nil {
			conn.Close(context.Background())
			continue
		}
		if !got && holder != nil && *holder == oldPID {
			// Our own old session still holds it: a terminated backend
			// takes a moment to exit. Try again on the next tick.
			conn.Close(context.Background())
			continue
		}
		if !got {
			conn.Close(context.Background())
			return errors.New("another pam serve became active while the database was unreachable; stepping down")
		}
		a.conn.Close(context.Background())
		a.conn = conn
		a.log.Info("active-server lock retaken")
	}
}

// Close releases the lock by closing its connection. It must not run
// while Watch does.
func (a *activeLock) Close(ctx context.Context) { a.conn.Close(ctx) }
