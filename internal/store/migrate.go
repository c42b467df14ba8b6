package store

// The migration runner.
//
// pam keeps its own runner instead of goose v3's Provider API. What the
// runner has to do is small and mostly already here: read numbered SQL
// files from an embed.FS, apply each in a transaction on a pgx pool, and
// hold a PostgreSQL advisory lock so that servers starting together do
// not race; the test harness names its template database after the same
// files. Goose would change more than it saves:
//
//   - it records no checksums, so verifying applied migrations would still
//     be ours, in a table of ours beside goose_db_version;
//   - it needs a database/sql handle (pgx's stdlib adapter) next to the
//     pgx pool, and its own version table, so every existing database would
//     need its schema_migrations adopted into goose_db_version;
//   - its SQL files need `-- +goose Up` and, for the dollar-quoted trigger
//     function of 0002, `StatementBegin/End` annotations: editing files
//     that databases have already applied is exactly what the checksums
//     below forbid;
//   - v3.30.0's go.mod requires the drivers and SDKs of a dozen other
//     databases (ClickHouse, MySQL, MSSQL, YDB, Vertica, libsql, sqlite)
//     and Docker's client, which would all join our module graph (go.mod,
//     go.sum) for two features that fit in this file.
//
// So the runner grew the two things it lacked, in goose's spirit:
//
//   - Checksums. schema_migrations records the SHA-256 of each migration
//     file as applied. At every start, before anything is applied, each
//     applied migration's file is hashed again; a file that changed makes
//     the start fail with a ChecksumMismatchError naming the version and
//     both sums (a migration is history: fix forward with a new one). Rows
//     from before checksums existed have none; they get the file's sum
//     once, and are verified from then on.
//   - `-- pam:no-transaction` as a file's first line (goose spells it
//     `-- +goose NO TRANSACTION`) runs that migration outside a transaction,
//     one statement at a time, for what PostgreSQL refuses inside one
//     (CREATE INDEX CONCURRENTLY). Such a migration can fail half-way and
//     is then re-run from its first statement, so it must be written to be
//     re-runnable (DROP INDEX CONCURRENTLY IF EXISTS before CREATE INDEX
//     CONCURRENTLY, since a failed build leaves an invalid index behind).
//
// Waiting for the lock is a poll of pg_try_advisory_lock, not a blocking
// pg_advisory_lock: a session blocked inside pg_advisory_lock holds a
// snapshot for as long as it waits, CREATE INDEX CONCURRENTLY waits for
// every older snapshot to go, and the migrator holding the lock would then
// wait for the one waiting for it (PostgreSQL reports a deadlock and one of
// them fails).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NoTransaction, as the first line of a migration file, runs that
// migration outside a transaction (for CREATE INDEX CONCURRENTLY).
const NoTransaction = "-- pam:no-transaction"

// Migrator applies numbered SQL migrations and verifies the ones already
// applied. Open runs it over the embedded migrations; tests run it over
// their own files.
type Migrator struct {
	// FS holds the migrations at its root, named NNNN_what.sql and applied
	// in the order of NNNN. Other files are ignored.
	FS fs.FS
	// Logger, if set, is told of each migration applied and each checksum
	// backfilled.
	Logger *slog.Logger
}

// ChecksumMismatchError is a migration whose file no longer matches what
// was applied. Starting on such a database would mean running code against
// a schema nobody can name, so start fails until the file is restored.
type ChecksumMismatchError struct {
	Version int
	Name    string
	Applied string // hex SHA-256 recorded when it was applied
	Current string // hex SHA-256 of the file now
}

// Error names the version and both checksums, which is what an operator
// needs to find the edit.
func (e *ChecksumMismatchError) Error() string {
	return fmt.Sprintf("migration %d (%s) changed after it was applied: applied sha256 %s, file now sha256 %s; restore the file and put the change in a new migration",
		e.Version, e.Name, e.Applied, e.Current)
}

// migration is one file of the set.
type migration struct {
	version  int
	name     string
	sql      string
	checksum string
	noTx     bool
}

// loadMigrations reads, hashes and orders the migrations of fsys.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var ms []migration
	for _, name := range files {
		num, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_what.sql with NNNN > 0", name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		sum := sha256.Sum256(b)
		first, rest, _ := strings.Cut(string(b), "\n")
		noTx := strings.TrimSpace(first) == NoTransaction
		if strings.Contains(rest, strings.TrimPrefix(NoTransaction, "-- ")) {
			return nil, fmt.Errorf("migration %s: %q must be the first line", name, NoTransaction)
		}
		ms = append(ms, migration{version: version, name: name, sql: string(b), checksum: hex.EncodeToString(sum[:]), noTx: noTx})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s have the same version", ms[i-1].name, ms[i].name)
		}
	}
	return ms, nil
}

// Run verifies the applied migrations and applies the others, in order,
// holding the migration lock.
func (m Migrator) Run(ctx context.Context, pool *pgxpool.Pool) error {
	log := m.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ms, err := loadMigrations(m.FS)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if err := WaitAdvisoryLock(ctx, conn, lockMigrate); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lockMigrate)

	// The checksum column came after the table: add it where missing.
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
		ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text NULL`); err != nil {
		return fmt.Errorf("migrate: schema_migrations: %w", err)
	}
	applied := map[int]*string{}
	rows, err := conn.Query(ctx, "SELECT version, checksum FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	for rows.Next() {
		var v int
		var sum *string
		if err := rows.Scan(&v, &sum); err != nil {
			rows.Close()
			return fmt.Errorf("migrate: read schema_migrations: %w", err)
		}
		applied[v] = sum
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("migrate: read schema_migrations: %w", err)
	}

	// Verify everything applied before touching anything. A version
	// applied but absent here (a database ahead of this binary) is left
	// alone.
	var mismatched []error
	var backfill []migration
	for _, mg := range ms {
		sum, ok := applied[mg.version]
		switch {
		case !ok:
		case sum == nil:
			backfill = append(backfill, mg)
		case *sum != mg.checksum:
			mismatched = append(mismatched, &ChecksumMismatchError{Version: mg.version, Name: mg.name, Applied: *sum, Current: mg.checksum})
		}
	}
	if len(mismatched) > 0 {
		return fmt.Errorf("migrate: %w", errors.Join(mismatched...))
	}
	for _, mg := range backfill {
		if _, err := conn.Exec(ctx, "UPDATE schema_migrations SET checksum = $2 WHERE version = $1 AND checksum IS NULL", mg.version, mg.checksum); err != nil {
			return fmt.Errorf("migrate: backfill checksum of %s: %w", mg.name, err)
		}
		log.Info("recorded the checksum of a migration applied before checksums existed", "migration", mg.name, "sha256", mg.checksum)
	}

	for _, mg := range ms {
		if _, ok := applied[mg.version]; ok {
			continue
		}
		if err := apply(ctx, conn, mg); err != nil {
			return fmt.Errorf("migrate: %s: %w", mg.name, err)
		}
		log.Info("applied migration", "migration", mg.name, "transaction", !mg.noTx)
	}
	return nil
}

// apply runs one migration and records it: in one transaction, or, for a
// no-transaction migration, statement by statement and then the record.
func apply(ctx context.Context, conn *pgxpool.Conn, mg migration) error {
	const record = "INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)"
	if mg.noTx {
		// One statement per round trip: several in one simple-protocol
		// message would form an implicit transaction again.
		for _, stmt := range splitStatements(mg.sql) {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return err // the caller names the migration; the error, the statement
			}
		}
		if _, err := conn.Exec(ctx, record, mg.version, mg.checksum); err != nil {
			return fmt.Errorf("record it: %w", err)
		}
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin a transaction: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, mg.sql); err != nil {
		return err // the caller names the migration; the error, the statement
	}
	if _, err := tx.Exec(ctx, record, mg.version, mg.checksum); err != nil {
		return fmt.Errorf("record it: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// WaitAdvisoryLock takes the session advisory lock key on q's session,
// retrying with backoff while another session holds it. Between tries the
// session runs no statement and so holds no snapshot, which a session
// blocked inside pg_advisory_lock would, for as long as it waits: CREATE
// INDEX CONCURRENTLY in a migration would then wait for it, and it for
// whoever holds the lock (see the top of this file). Anything that may
// wait on an advisory lock while migrations run (the migrators, a standby
// server) waits through this.
func WaitAdvisoryLock(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key int64) error {
	wait := 10 * time.Millisecond
	for {
		var got bool
		if err := q.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil {
			return fmt.Errorf("try advisory lock %#x: %w", key, err)
		}
		if got {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// splitStatements cuts SQL into statements at the semicolons that end
// them, that is outside quotes, quoted identifiers, dollar quotes and
// comments. Pieces holding nothing but comments and space are dropped.
func splitStatements(sql string) []string {
	var out []string
	start, code := 0, false // code: the piece has more than comments
	flush := func(end int) {
		if code {
			out = append(out, strings.TrimSpace(sql[start:end]))
		}
		start, code = end+1, false
	}
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == ';':
			flush(i)
			continue
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if j := strings.IndexByte(sql[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(sql)
			}
			continue
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			// Block comments nest in PostgreSQL.
			depth := 0
			for ; i < len(sql); i++ {
				if strings.HasPrefix(sql[i:], "/*") {
					depth++
					i++
				} else if strings.HasPrefix(sql[i:], "*/") {
					depth--
					i++
					if depth == 0 {
						break
					}
				}
			}
			continue
		case c == '\'' || c == '"':
			// '' and "" inside are the quote itself: scanning on to the
			// next quote char and re-entering handles them.
			escapes := c == '\'' && i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e')
			for i++; i < len(sql) && sql[i] != c; i++ {
				if escapes && sql[i] == '\\' {
					i++
				}
			}
		case c == '$':
			if tag, ok := dollarTag(sql[i:]); ok {
				if j := strings.Index(sql[i+len(tag):], tag); j >= 0 {
					i += len(tag) + j + len(tag) - 1
				} else {
					i = len(sql)
				}
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		code = true
	}
	flush(len(sql))
	return out
}

// dollarTag returns the $tag$ that s starts with, if it starts with one.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1], true
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 || j > 1 && c >= '0' && c <= '9':
		default:
			return "", false
		}
	}
	return "", false
}
