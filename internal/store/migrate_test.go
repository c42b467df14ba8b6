package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pam/internal/eventually"
	"pam/internal/store"
	"pam/internal/store/storetest"
)

// pool opens a pool on url whose sessions carry appName, so a test can
// find them in pg_stat_activity.
func pool(t *testing.T, url, appName string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// embedded is a copy of the embedded migrations that a test may edit.
func embedded(t *testing.T) fstest.MapFS {
	t.Helper()
	sub, err := fs.Sub(store.MigrationFS(), "migrations")
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		out[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil || len(out) < 3 {
		t.Fatalf("embedded migrations: %d files, %v", len(out), err)
	}
	return out
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checksums reads schema_migrations as version → checksum ("" for none).
func checksums(t *testing.T, p *pgxpool.Pool) map[int]string {
	t.Helper()
	rows, err := p.Query(t.Context(), "SELECT version, coalesce(checksum, '') FROM schema_migrations")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for rows.Next() {
		var v int
		var s string
		if err := rows.Scan(&v, &s); err != nil {
			t.Fatal(err)
		}
		out[v] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func tableExists(t *testing.T, p *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := p.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// A migration edited after it was applied stops the start, naming the
// version and both checksums, before any new migration is applied.
func TestMigrateRefusesChangedMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := pool(t, storetest.URL(t), "tamper")
	files := embedded(t)
	before := checksums(t, p)
	orig := files["0002_hosts.sql"].Data
	if before[2] != sum(orig) {
		t.Fatalf("the template recorded %q for 0002, want %s", before[2], sum(orig))
	}
	edited := append(bytes.Clone(orig), "\nALTER TABLE hosts ADD COLUMN sneaky int;\n"...)
	files["0002_hosts.sql"] = &fstest.MapFile{Data: edited}
	next := fmt.Sprintf("%04d_next.sql", len(files)+1) // after the embedded ones, whatever their number
	files[next] = &fstest.MapFile{Data: []byte("CREATE TABLE next_one (x int);\n")}

	err := store.Migrator{FS: files}.Run(ctx, p)
	var mm *store.ChecksumMismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("run with an edited migration: %v", err)
	}
	if mm.Version != 2 || mm.Name != "0002_hosts.sql" || mm.Applied != sum(orig) || mm.Current != sum(edited) {
		t.Fatalf("mismatch %+v", mm)
	}
	for _, want := range []string{"migration 2 ", "0002_hosts.sql", sum(orig), sum(edited)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if tableExists(t, p, "next_one") {
		t.Error("a new migration was applied despite the mismatch")
	}
	if got := checksums(t, p); !reflect.DeepEqual(got, before) {
		t.Errorf("schema_migrations changed: %v, was %v", got, before)
	}
	// The file restored, the start goes on and applies the new one.
	files["0002_hosts.sql"] = &fstest.MapFile{Data: orig}
	if err := (store.Migrator{FS: files}).Run(ctx, p); err != nil {
		t.Fatalf("run with the file restored: %v", err)
	}
	if !tableExists(t, p, "next_one") {
		t.Errorf("%s was not applied", next)
	}
}

// A database migrated before checksums existed gets them recorded once,
// from the files as they are, and is verified from then on.
func TestMigrateBackfillsChecksums(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := pool(t, storetest.URL(t), "backfill")
	if _, err := p.Exec(ctx, "ALTER TABLE schema_migrations DROP COLUMN checksum"); err != nil {
		t.Fatal(err)
	}
	files := embedded(t)
	var logs bytes.Buffer
	m := store.Migrator{FS: files, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := m.Run(ctx, p); err != nil {
		t.Fatalf("run on a database without checksums: %v", err)
	}
	got := checksums(t, p)
	want := map[int]string{}
	for name, f := range files {
		v := map[string]int{"0001_init.sql": 1, "0002_hosts.sql": 2, "0003_runs.sql": 3, "0004_attention.sql": 4}[name]
		if v == 0 {
			t.Fatalf("unexpected embedded migration %s: extend this table", name)
		}
		want[v] = sum(f.Data)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("checksums %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "recorded the checksum"); n != len(files) {
		t.Errorf("%d backfill log lines, want %d:\n%s", n, len(files), logs.String())
	}
	if strings.Contains(logs.String(), "applied migration") {
		t.Errorf("a migration was re-applied:\n%s", logs.String())
	}
	logs.Reset()
	if err := m.Run(ctx, p); err != nil || logs.Len() != 0 {
		t.Fatalf("second run: %v, logged %q", err, logs.String())
	}
	files["0001_init.sql"] = &fstest.MapFile{Data: append(bytes.Clone(files["0001_init.sql"].Data), "\n-- edited\n"...)}
	var mm *store.ChecksumMismatchError
	if err := m.Run(ctx, p); !errors.As(err, &mm) || mm.Version != 1 {
		t.Fatalf("an edit after the backfill: %v", err)
	}
}

// indexFS is a table with rows, then an index built concurrently.
func indexFS(annotate bool) fstest.MapFS {
	idx := "-- Built without blocking writes; re-runnable.\nDROP INDEX CONCURRENTLY IF EXISTS items_x;\nCREATE INDEX CONCURRENTLY items_x ON items (x);\n"
	if annotate {
		idx = store.NoTransaction + "\n" + idx
	}
	return fstest.MapFS{
		"0001_items.sql":   {Data: []byte("CREATE TABLE items (x int);\nINSERT INTO items SELECT generate_series(1, 10000);\n")},
		"0002_items_x.sql": {Data: []byte(idx)},
	}
}

func indexValid(t *testing.T, p *pgxpool.Pool) bool {
	t.Helper()
	var valid bool
	err := p.QueryRow(t.Context(), "SELECT coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('items_x')), false)").Scan(&valid)
	if err != nil {
		t.Fatal(err)
	}
	return valid
}

// A migration annotated no-transaction runs outside one (CREATE INDEX
// CONCURRENTLY refuses a transaction); without the annotation it fails
// and is not recorded.
func TestMigrateNoTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := pool(t, storetest.EmptyURL(t), "notx")
	if err := (store.Migrator{FS: indexFS(true)}).Run(ctx, p); err != nil {
		t.Fatalf("no-transaction migration: %v", err)
	}
	if !indexValid(t, p) {
		t.Fatal("items_x is missing or invalid")
	}
	if got := checksums(t, p); len(got) != 2 || got[2] != sum(indexFS(true)["0002_items_x.sql"].Data) {
		t.Fatalf("recorded %v", got)
	}

	q := pool(t, storetest.EmptyURL(t), "tx")
	err := store.Migrator{FS: indexFS(false)}.Run(ctx, q)
	if err == nil || !strings.Contains(err.Error(), "0002_items_x.sql") || !strings.Contains(err.Error(), "cannot run inside a transaction block") {
		t.Fatalf("CREATE INDEX CONCURRENTLY in a transaction: %v", err)
	}
	if got := checksums(t, q); len(got) != 1 || got[1] == "" {
		t.Fatalf("recorded %v, want only 0001", got)
	}
}

// Servers starting together on an empty database: one migrates, the
// others wait and then find nothing to do.
func TestMigrateConcurrentMigrators(t *testing.T) {
	t.Parallel()
	url := storetest.EmptyURL(t)
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		p := pool(t, url, "migrator")
		wg.Go(func() { errs[i] = store.Migrate(t.Context(), p) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}
	p := pool(t, url, "check")
	if got := checksums(t, p); len(got) != len(embedded(t)) {
		t.Fatalf("schema_migrations %v", got)
	}
	var states int
	if err := p.QueryRow(t.Context(), "SELECT count(*) FROM server_state").Scan(&states); err != nil || states != 1 {
		t.Fatalf("server_state rows %d %v", states, err)
	}
}

// Nobody waiting on an advisory lock may hold a snapshot meanwhile:
// CREATE INDEX CONCURRENTLY, run by the migrator holding the lock, waits
// for every older snapshot. A second migrator blocked in pg_advisory_lock
// would deadlock with it; a standby server blocked on the active-server
// lock would hold it up until the active server exits. Made deterministic
// by an open write transaction that holds the index build up until both
// are waiting.
func TestMigrateWaiterDoesNotBlockConcurrentIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := storetest.EmptyURL(t)
	admin := pool(t, url, "admin")
	if err := (store.Migrator{FS: fstest.MapFS{"0001_items.sql": indexFS(true)["0001_items.sql"]}}).Run(ctx, admin); err != nil {
		t.Fatal(err)
	}
	writer, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(context.Background())
	if _, err := writer.Exec(ctx, "INSERT INTO items VALUES (0)"); err != nil {
		t.Fatal(err)
	}
	activity := func(app, like string, lockWait bool) func() bool {
		return func() bool {
			var n int
			err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = $1 AND query LIKE $2
				AND (NOT $3 OR wait_event_type = 'Lock')`, app, like, lockWait).Scan(&n)
			return err == nil && n > 0
		}
	}
	// The active server's lock, and a standby waiting for it.
	active, err := admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer active.Release()
	if err := store.WaitAdvisoryLock(ctx, active, store.LockActiveServer); err != nil {
		t.Fatal(err)
	}
	defer active.Exec(context.Background(), "SELECT pg_advisory_unlock_all()")
	standby, err := pool(t, url, "standby").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Release()
	standbyCtx, stopStandby := context.WithCancel(ctx)
	standbyDone := make(chan error, 1)
	go func() { standbyDone <- store.WaitAdvisoryLock(standbyCtx, standby, store.LockActiveServer) }()
	defer func() {
		stopStandby()
		if err := <-standbyDone; !errors.Is(err, context.Canceled) {
			t.Errorf("the standby: %v, want it still waiting", err)
		}
	}()
	eventually.Wait(t, 20*time.Second, "the standby to try the lock", activity("standby", "%advisory_lock%", false))

	errc := make(chan error, 2)
	a, b := pool(t, url, "migrator-a"), pool(t, url, "migrator-b")
	go func() { errc <- store.Migrator{FS: indexFS(true)}.Run(ctx, a) }()
	eventually.Wait(t, 20*time.Second, "migrator a to wait in CREATE INDEX CONCURRENTLY", activity("migrator-a", "CREATE INDEX CONCURRENTLY%", true))
	go func() { errc <- store.Migrator{FS: indexFS(true)}.Run(ctx, b) }()
	eventually.Wait(t, 20*time.Second, "migrator b to try the lock", activity("migrator-b", "%advisory_lock%", false))
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("migrator: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("the migrators did not finish within a minute")
		}
	}
	if !indexValid(t, admin) {
		t.Fatal("items_x is missing or invalid")
	}
}

// A set of migrations that cannot be ordered or read as meant is refused
// before the database is touched (the pool here is nil).
func TestMigrateRefusesBadSet(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	cases := []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"no number", fstest.MapFS{"init.sql": file("SELECT 1")}, "name must be NNNN_what.sql"},
		{"zero", fstest.MapFS{"0000_init.sql": file("SELECT 1")}, "name must be NNNN_what.sql"},
		{"same version", fstest.MapFS{"0001_a.sql": file("SELECT 1"), "001_b.sql": file("SELECT 2")}, "same version"},
		{"annotation not first", fstest.MapFS{"0001_a.sql": file("-- index\n" + store.NoTransaction + "\nSELECT 1")}, "must be the first line"},
	}
	for _, c := range cases {
		err := store.Migrator{FS: c.files}.Run(t.Context(), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		sql  string
		want []string
	}{
		{"one", "CREATE INDEX CONCURRENTLY a ON t (x);", []string{"CREATE INDEX CONCURRENTLY a ON t (x)"}},
		{"no final semicolon", "SELECT 1;\nSELECT 2\n", []string{"SELECT 1", "SELECT 2"}},
		{"comments only dropped", "-- a; b\n/* c; */\n;\n-- trailing", nil},
		{"comment before", "-- one; two\nSELECT 1; -- after\n", []string{"-- one; two\nSELECT 1"}},
		{"nested block comment", "/* a /* b; */ c; */ SELECT 1; SELECT 2", []string{"/* a /* b; */ c; */ SELECT 1", "SELECT 2"}},
		{"string", "SELECT 'a;b''c;'; SELECT 2", []string{"SELECT 'a;b''c;'", "SELECT 2"}},
		{"escape string", `SELECT E'a\';b'; SELECT 2`, []string{`SELECT E'a\';b'`, "SELECT 2"}},
		{"identifier", `CREATE TABLE "a;b" (x int); SELECT 2`, []string{`CREATE TABLE "a;b" (x int)`, "SELECT 2"}},
		{"dollar", "CREATE FUNCTION f() RETURNS int AS $$ BEGIN RETURN 1; END; $$ LANGUAGE plpgsql; SELECT 2",
			[]string{"CREATE FUNCTION f() RETURNS int AS $$ BEGIN RETURN 1; END; $$ LANGUAGE plpgsql", "SELECT 2"}},
		{"tagged dollar", "DO $x$ BEGIN PERFORM '$$;'; END $x$; SELECT 2", []string{"DO $x$ BEGIN PERFORM '$$;'; END $x$", "SELECT 2"}},
		{"parameter is not a tag", "PREPARE p AS SELECT $1; SELECT 2", []string{"PREPARE p AS SELECT $1", "SELECT 2"}},
		{"unterminated", "SELECT 'a;", []string{"SELECT 'a;"}},
	}
	for _, c := range cases {
		if got := store.SplitStatements(c.sql); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
