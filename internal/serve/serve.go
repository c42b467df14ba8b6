package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"pam/internal/datadir"
	"pam/internal/dispatch"
	"pam/internal/embeddb"
	"pam/internal/fleet"
	"pam/internal/journal"
	"pam/internal/server"
	"pam/internal/store"
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
	embedded := o.DatabaseURL == ""
	if err := datadir.Ensure(o.DataDir, embedded && os.Geteuid() == 0); err != nil {
		return err
	}
	lock, err := datadir.TryLock(filepath.Join(o.DataDir, "serve.lock"))
	if err != nil {
		return fmt.Errorf("another pam serve runs on this data dir: %w", err)
	}
	defer lock.Unlock()
	token, err := datadir.LoadOrCreateToken(o.DataDir)
	if err != nil {
		return err
	}

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

	leader, err := becomeActive(ctx, dbURL, o.checkLeaderEvery, o.Logger)
	if err != nil {
		return err
	}
	// Deferred before anything that starts Watch: it runs after g.Wait,
	// when the connection is Run's again.
	defer leader.Close(context.Background())

	st, err := store.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer st.Close()

	st.Policy = store.Policy{MaxAttempts: o.MaxAttempts, RestartInitialDelay: o.RestartInitialDelay, RestartMaxDelay: o.RestartMaxDelay}
	hub := journal.NewHub(st, journal.Options{Logger: o.Logger, Retention: o.EventRetention})
	st.AfterCommit = hub.Wake
	workers := fleet.New(1000)
	dispatcher := dispatch.New(st, workers, dispatch.Options{
		AckTimeout: o.DispatchAckTimeout, DispatchTimeout: o.DispatchTimeout, SpawnTimeout: o.SpawnTimeout,
		HostOfflineAfter: o.HostOfflineAfter, HostLostAfter: o.HostLostAfter, CLIHangTimeout: o.CLIHangTimeout, Logger: o.Logger,
	})
	srv := server.New(server.Options{Store: st, Events: hub, Token: token, MetricsPublic: o.MetricsPublic, Logger: o.Logger,
		Version: o.Version, HostOfflineAfter: o.HostOfflineAfter, Fleet: workers, Dispatcher: dispatcher,
		LeaseTTL: o.LeaseTTL, CaptureInterval: o.CaptureInterval})

	ln, err := net.Listen("tcp", net.JoinHostPort(o.Bind, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("listen on %s:%d: %w", o.Bind, o.Port, err)
	}
	scheme := "http"
	if o.TLSCert != "" || o.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			ln.Close()
			return fmt.Errorf("load TLS certificate (PAM_TLS_CERT/PAM_TLS_KEY): %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}})
		scheme = "https"
	} else if ip := net.ParseIP(o.Bind); ip == nil || !ip.IsLoopback() {
		o.Logger.Warn("serving plain HTTP on a non-loopback address: tokens cross the network in clear; set PAM_TLS_CERT/PAM_TLS_KEY or put a TLS proxy in front", "bind", o.Bind)
	}
	httpSrv := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	httpSrv.RegisterOnShutdown(srv.CloseStreams)

	// Every part runs in g until ctx ends or one of them stops: a part
	// that fails cancels the others and its error, named, is what Run
	// returns. The shutdown part stops the HTTP side once gctx ends; Run
	// returns only when all of them have, and the deferred closes of the
	// store, the lock's connection and the database come after that.
	g, gctx := errgroup.WithContext(ctx)
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
	part("event journal", hub.Run)
	part("dispatcher", dispatcher.Run)
	part("active-server lock", leader.Watch)
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
		if err := srv.Shutdown(shutCtx); err != nil {
			o.Logger.Warn("server shutdown", "err", err)
		}
		return nil
	})

	addr := ln.Addr().(*net.TCPAddr)
	host := o.Bind
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	base := fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, strconv.Itoa(addr.Port)))
	o.Logger.Info("pam serve listening", "addr", addr.String(), "tls", scheme == "https", "version", o.Version)
	fmt.Fprintf(o.Stdout, "pam serve listening on %s\n", base)
	if o.DashboardURL {
		fmt.Fprintf(o.Stdout, "dashboard: %s/#token=%s\n", base, token)
	}
	if o.Ready != nil {
		o.Ready(base, token)
	}
	return g.Wait()
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
// another server holds it.
func becomeActive(ctx context.Context, url string, every time.Duration, log *slog.Logger) (*activeLock, error) {
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
