// Package storetest gives each test its own real PostgreSQL database: one
// private cluster per test binary (or PAM_TEST_DATABASE_URL), a template
// database migrated once, and a clone of it per test, so tests run in
// parallel without seeing each other's rows.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/embeddb"
	"pam/internal/store"
)

var (
	adminURL  string
	cluster   *embeddb.Cluster
	tmpDir    string
	template  string
	setupErr  error
	setupOnce sync.Once
)

// Main wraps testing.M.Run and stops the private cluster afterwards. Call
// it from TestMain in every package that uses New or URL.
func Main(m *testing.M) { os.Exit(M(m).Run()) }

// M wraps m so that its Run also stops the private cluster, for a TestMain
// that hands m to something that exits itself, such as
// goleak.VerifyTestMain: the leak check then runs after the cluster's
// process and the goroutine waiting for it are gone.
func M(m *testing.M) interface{ Run() int } { return runner{m} }

type runner struct{ m *testing.M }

func (r runner) Run() int {
	code := r.m.Run()
	if cluster != nil {
		_ = cluster.Stop()
	}
	if tmpDir != "" {
		_ = os.RemoveAll(tmpDir)
	}
	return code
}

func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if u := os.Getenv("PAM_TEST_DATABASE_URL"); u != "" {
		adminURL = u
	} else {
		dir, err := os.MkdirTemp("", "pamtest-")
		if err != nil {
			return err
		}
		tmpDir = dir
		// When root, the cluster runs as postgres, which must traverse here.
		if err := os.Chmod(dir, 0o711); err != nil {
			return err
		}
		c, err := embeddb.Start(ctx, embeddb.Options{Dir: dir + "/pg", Database: "postgres"})
		if err != nil {
			return fmt.Errorf("start test cluster: %w", err)
		}
		cluster = c
		adminURL = c.ConnString("postgres")
	}
	return createTemplate(ctx)
}

// createTemplate migrates a template database named after the migrations'
// content, so a schema change gets a fresh template and an unchanged one is
// reused even across test binaries sharing PAM_TEST_DATABASE_URL.
func createTemplate(ctx context.Context) error {
	h := sha256.New()
	_ = fs.WalkDir(store.MigrationFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := fs.ReadFile(store.MigrationFS(), p)
			h.Write([]byte(p))
			h.Write(b)
		}
		return nil
	})
	template = "pam_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16]
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect test database server: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7070)"); err != nil {
		return err
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(7070)")
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", template).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+template+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+template); err != nil {
		return err
	}
	s, err := store.Open(ctx, WithDatabase(adminURL, template))
	if err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	s.Close()
	_, err = conn.Exec(ctx, "ALTER DATABASE "+template+" WITH is_template true")
	return err
}

// WithDatabase returns the connection string u pointed at database db.
func WithDatabase(u, db string) string {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		parsed, err := url.Parse(u)
		if err == nil {
			parsed.Path = "/" + db
			return parsed.String()
		}
	}
	return u + " dbname=" + db
}

// URL creates a fresh database cloned from the migrated template and
// returns its connection string; it is dropped when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	setupOnce.Do(func() { setupErr = setup() })
	if setupErr != nil {
		t.Fatalf("test database: %v", setupErr)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "pam_t_" + hex.EncodeToString(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("connect test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+template); err != nil {
		t.Fatalf("clone template: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), adminURL)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return WithDatabase(adminURL, name)
}

// New opens a store on a fresh database.
func New(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), URL(t))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}
