// Package store is pam's PostgreSQL layer: the connection pool, embedded
// migrations applied under an advisory lock, transactions, and the queries
// of each entity. Only `pam serve` talks to the database.
package store

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Advisory lock keys. Distinct constants so that no two purposes collide.
const (
	lockMigrate int64 = 0x70616d_0001 // "pam" 1: schema migrations
	// LockActiveServer is held by the active `pam serve` for its lifetime;
	// a second server on the same database waits on it as a standby.
	LockActiveServer int64 = 0x70616d_0002
)

// Store wraps the pool.
type Store struct {
	Pool *pgxpool.Pool
	// AfterCommit, if set, is called after every transaction that appended
	// events commits: the journal's tailer uses it to wake up at once.
	AfterCommit func()
	// Policy is the restart policy and run defaults (docs/architecture.md#configuration-and-files-on-disk, docs/architecture.md#run-status-machine).
	Policy Policy
	// Clock is the time decisions are made at: every query whose result
	// depends on the time (timers, cutoffs, "older than") compares with
	// it, and the times those compare against are written from it
	// (docs/architecture.md#time); nil is time.Now.
	Clock func() time.Time

	secretMu     sync.Mutex
	signalSecret []byte
}

// Open connects, migrates and makes sure the server's singleton row exists.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if cfg.MaxConns < 8 {
		cfg.MaxConns = 8
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect database: %w", err)
	}
	s := &Store{Pool: pool}
	if err := Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the pool.
func (s *Store) Close() { s.Pool.Close() }

// WithOwnPool returns a Store on conns connections of its own to s's
// database, with s's settings (AfterCommit, Policy, Clock: set them on s
// first). The dispatcher works through one, so its passes never queue for
// a connection behind the API's requests: under pam-bench load 20
// editors held all 8 of the shared pool and a run waited 67 ms at p50 to
// be offered (docs/bench.md). Close it before s.
func (s *Store) WithOwnPool(ctx context.Context, conns int32) (*Store, error) {
	cfg := s.Pool.Config()
	cfg.MaxConns, cfg.MinConns = conns, 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect database: %w", err)
	}
	return &Store{Pool: pool, AfterCommit: s.AfterCommit, Policy: s.Policy, Clock: s.Clock}, nil
}

// Now is the store's clock: the time its timer queries compare with.
func (s *Store) Now() time.Time { return s.now() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.Pool.Ping(ctx) }

// Migrate applies the embedded migrations (see Migrator) and makes sure
// the server's singleton row exists.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := (Migrator{FS: sub}).Run(ctx, pool); err != nil {
		return err // Run names the step that failed
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("make the signal secret: %w", err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO server_state (signal_secret) VALUES ($1) ON CONFLICT DO NOTHING", secret); err != nil {
		return fmt.Errorf("store the signal secret: %w", err)
	}
	return nil
}

// Tx is the handle a transaction body receives. It records whether events
// were appended so that the commit can wake the journal's tailer.
type Tx struct {
	pgx.Tx
	Journaled bool
	// later, when set, holds the writes whose results nobody reads until
	// the next statement or the commit sends them in one round trip
	// (pipeline.go); nil writes at once.
	later  *pgx.Batch
	events laterEvents
	// now is the store's clock read once when the transaction began: the
	// transaction's time, as PostgreSQL's now() is.
	now time.Time
}

// Now is the transaction's time: the store's clock when it began.
func (tx *Tx) Now() time.Time { return tx.now }

// InTx runs fn in a transaction, committing if it returns nil.
func (s *Store) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	ptx, err := s.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin a transaction: %w", translate(err))
	}
	tx := &Tx{Tx: ptx, now: s.now()}
	if err := fn(tx); err != nil {
		_ = ptx.Rollback(context.Background())
		return translate(err)
	}
	if err := ptx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", translate(err))
	}
	if tx.Journaled && s.AfterCommit != nil {
		s.AfterCommit()
	}
	return nil
}

// ErrUnavailable marks failures to reach the database at all.
var ErrUnavailable = errors.New("database unavailable")

// translate marks connection failures so the HTTP layer answers 503.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 57 (the server shutting down, crashed or starting up; not
		// 57014, a cancelled query) and class 08 (connection exceptions)
		// mean the database is away, not that the query was wrong.
		if (strings.HasPrefix(pgErr.Code, "57") && pgErr.Code != "57014") || strings.HasPrefix(pgErr.Code, "08") {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err // the caller gave up: not the database's fault
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || isConnError(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

func isConnError(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, puddle.ErrClosedPool) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ENOENT) // the Unix socket of a stopped cluster
}

// IsUniqueViolation reports a unique-constraint failure on constraint name.
func IsUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && (constraint == "" || pgErr.ConstraintName == constraint)
}

// MigrationFS exposes the embedded migrations (for the test harness, which
// names its template database after their content).
func MigrationFS() fs.FS { return migrationFS }
