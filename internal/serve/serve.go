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
	"golang.org/x/term"

	"pam/internal/datadir"
	"pam/internal/embeddb"
	"pam/internal/server"
	"pam/internal/store"
)

// Run is `pam serve`: it returns when ctx ends (after a graceful shutdown)
// or when something it cannot do without fails. Failures are also appended
// to <data>/serve.log, for the operator who finds the server gone.
func Run(ctx context.Context, o Options) (err error) {
	o = o.withDefaults()
	defer func() {
		if err != nil {
			logFailure(o.DataDir, err)
		}
	}()
	if err := checkPlain(o); err != nil {
		return err
	}
	unlock, err := lockDataDir(o)
	if err != nil {
		return err
	}
	defer unlock()

	dbURL, stopDB, err := startDatabase(ctx, o)
	if err != nil {
		return err
	}
	defer stopDB()

	// Listen before taking the active-server lock: a standby answers
	// /healthz 503 standby, so a load balancer in front of several serves
	// of one database sends traffic to the active one only.
	ln, scheme, err := listen(o)
	if err != nil {
		return err
	}
	front := &front{standby: server.Standby()}
	httpSrv := newHTTPServer(o, front)
	addr := ln.Addr().(*net.TCPAddr)
	base := baseURL(o, scheme, addr)

	p := startParts(ctx)
	defer p.stop()
	p.serveHTTP(httpSrv, ln, front, o.Logger)

	leader, err := becomeActive(p.gctx, dbURL, o.checkLeaderEvery, o.Logger, func() {
		fmt.Fprintf(o.Stdout, "pam serve standing by on %s\n", base)
	})
	if err != nil {
		return p.abort(err)
	}
	// Deferred after the parts started but run after they all stopped
	// (every return below waits for them first): the connection is Run's
	// again by then.
	defer leader.Close(context.Background())

	st, err := store.Open(p.gctx, dbURL)
	if err != nil {
		return p.abort(err)
	}
	defer st.Close()
	token, err := adoptOperatorToken(p.gctx, st, o)
	if err != nil {
		return p.abort(err)
	}
	a, err := assemble(p.gctx, st, token, o)
	if err != nil {
		return p.abort(err)
	}
	defer a.placement.Close()
	if !front.activate(a.srv) {
		return p.abort(p.gctx.Err()) // shutting down already
	}
	p.run("event journal", a.hub.Run)
	p.run("dispatcher", a.dispatcher.Run)
	p.run("notifications", a.notifier.Run)
	p.run("continue when a limit resets", a.srv.RunContinue)
	p.run("active-server lock", leader.Watch)

	announce(o, addr, scheme == "https", base, token)
	return p.g.Wait()
}

// lockDataDir makes the data dir private (traversable when root runs the
// embedded database, whose server runs as another user) and takes its lock: one serve per data dir.
func lockDataDir(o Options) (unlock func(), err error) {
	embedded := o.DatabaseURL == ""
	if err := datadir.Ensure(o.DataDir, embedded && os.Geteuid() == 0); err != nil {
		return nil, err
	}
	lock, err := datadir.TryLock(filepath.Join(o.DataDir, "serve.lock"))
	if err != nil {
		return nil, fmt.Errorf("another pam serve runs on this data dir: %w", err)
	}
	return func() { lock.Unlock() }, nil
}

// announce tells the log, the operator (and a test, through o.Ready) that
// the active serve takes requests.
func announce(o Options, addr *net.TCPAddr, tls bool, base, token string) {
	o.Logger.Info("pam serve listening", "addr", addr.String(), "tls", tls, "version", o.Version)
	fmt.Fprintf(o.Stdout, "pam serve listening on %s\n", base)
	if o.DashboardURL {
		printDashboard(o.Stdout, base, token, o.DataDir)
	}
	if o.Ready != nil {
		o.Ready(base, token)
	}
}

// withDefaults fills what a caller (a test, mostly) may leave out.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.DataDir == "" {
		o.DataDir = datadir.DefaultDataDir()
	}
	return o
}

// startDatabase is the database's URL: o.DatabaseURL, or else the
// embedded cluster's under the data dir, started here; stop stops it
// (once Run is done with it).
func startDatabase(ctx context.Context, o Options) (url string, stop func(), err error) {
	if o.DatabaseURL != "" {
		return o.DatabaseURL, func() {}, nil
	}
	start := time.Now()
	cluster, err := embeddb.Start(ctx, embeddb.Options{Dir: filepath.Join(o.DataDir, "postgres"), Durable: true, Logger: o.Logger})
	if err != nil {
		return "", nil, err
	}
	o.Logger.Info("embedded database ready", "created", cluster.Created, "adopted", cluster.Adopted, "took", time.Since(start).Round(time.Millisecond))
	return cluster.URL(), func() {
		if err := cluster.Stop(); err != nil {
			o.Logger.Error("stop embedded database", "err", err)
		}
	}, nil
}

// newHTTPServer serves front with timeouts that keep idle and slow
// clients from holding connections; its shutdown also closes the
// long-lived streams only the server knows of.
func newHTTPServer(o Options, front *front) *http.Server {
	httpSrv := &http.Server{
		Handler:           front,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	httpSrv.RegisterOnShutdown(front.closeStreams)
	return httpSrv
}

// baseURL is the address printed for the operator: a wildcard bind is
// reached on the loopback address.
func baseURL(o Options, scheme string, addr *net.TCPAddr) string {
	host := o.Bind
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, strconv.Itoa(addr.Port)))
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
