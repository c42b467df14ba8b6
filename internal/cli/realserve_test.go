package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"pam/internal/pamtest"
	"pam/internal/store/storetest"
)

// realServe starts pam serve on a fresh database, points e at it, and
// returns a connection to that database for the rows a test must place
// by hand (ids it chooses, runs on a host without a worker).
func realServe(t *testing.T, e *testEnv) *pgx.Conn {
	t.Helper()
	url := storetest.URL(t)
	sv := pamtest.StartServe(t, pamtest.ServeOptions{DatabaseURL: url})
	e.setenv("PAM_URL", sv.URL)
	e.setenv("PAM_TOKEN", sv.Token)
	db, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	return db
}

// pamJSON runs a command with --json that must succeed and decodes it.
func pamJSON[T any](e *testEnv, args ...string) T {
	e.t.Helper()
	var v T
	out := e.mustPam(append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		e.t.Fatalf("pam %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return v
}

// short is what the tables print of an id: its first 8 characters.
func short(id string) string { return id[:8] }

// insertTwins places, under ids that share the prefix abcd, two projects,
// two hosts, two work items and two runs (one on host, one pinned to it)
// — what a prefix of 4 characters makes possible and a test cannot wait
// for by chance.
func insertTwins(t *testing.T, db *pgx.Conn, project, task, host string) {
	t.Helper()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(t.Context(), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for i, id := range []string{twin1, twin2} {
		n := fmt.Sprint(i + 1)
		exec(`INSERT INTO projects (id, name, slug) VALUES ($1, $2, $3)`, id, "Twin "+n, "twin-"+n)
		exec(`INSERT INTO hosts (id, name, worker_token_hash) VALUES ($1::uuid, $2, decode(md5($1::uuid::text), 'hex'))`, id, "twin-host-"+n)
		exec(`INSERT INTO work_items (id, project_id, kind, title, path) VALUES ($1::uuid, $2, 'task', $3, $1)`, id, project, "Twin task "+n)
	}
	exec(`INSERT INTO runs (id, task_id, project_id, provider, session_name, status, host_id) VALUES ($1::uuid, $2, $3, 'shell', 'pam-' || left($1::uuid::text, 8), 'exited', $4)`,
		twin1, task, project, host)
	exec(`INSERT INTO runs (id, task_id, project_id, provider, session_name, status, target_host_id) VALUES ($1::uuid, $2, $3, 'shell', 'pam-' || left($1::uuid::text, 8), 'stopped', $4)`,
		twin2, task, project, host)
}

const (
	twin1 = "abcd1111-0000-4000-8000-000000000001"
	twin2 = "abcd2222-0000-4000-8000-000000000002"
)
