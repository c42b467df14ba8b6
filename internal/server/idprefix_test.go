package server_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestIDPrefixFilter: GET /projects, /hosts, /runs and /work-items take
// ?id_prefix= and answer the objects whose id starts with it — exactly
// (the ends of the range are in, their neighbours out), whatever the case,
// at most 10 — and refuse anything that is not the beginning of a UUID,
// LIKE wildcards first, with 400 validation_failed (hardening issue item
// 18: the CLI resolves the 8 characters its tables print with it).
func TestIDPrefixFilter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := e.store.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Ids around the prefix abcd: its first and last UUID, one inside,
	// and the UUIDs just below and above it.
	ids := []string{
		"abcc" + "ffff-ffff-ffff-ffff-ffffffffffff",
		"abcd" + "0000-0000-0000-0000-000000000000",
		"abcd" + "1111-0000-4000-8000-000000000001",
		"abcd" + "ffff-ffff-ffff-ffff-ffffffffffff",
		"abce" + "0000-0000-0000-0000-000000000000",
	}
	p := e.project("Owner")
	task := e.item(p.Slug, "task", "owner task", nil)
	for i, id := range ids {
		exec(`INSERT INTO projects (id, name, slug) VALUES ($1, $2, $3)`, id, fmt.Sprintf("P%d", i), fmt.Sprintf("p%d", i))
		exec(`INSERT INTO hosts (id, name, worker_token_hash) VALUES ($1::uuid, $2, decode(md5($1::uuid::text), 'hex'))`, id, fmt.Sprintf("h%d", i))
		exec(`INSERT INTO work_items (id, project_id, kind, title, path) VALUES ($1::uuid, $2, 'task', $3, $1)`, id, p.ID, fmt.Sprintf("T%d", i))
		exec(`INSERT INTO runs (id, task_id, project_id, provider, session_name, status) VALUES ($1::uuid, $2, $3, 'shell', 'pam-' || left($1::uuid::text, 8), 'stopped')`,
			id, task.ID, p.ID)
	}
	// Twelve more items under one prefix: the answer stops at 10.
	for i := range 12 {
		exec(`INSERT INTO work_items (id, project_id, kind, title, path) VALUES ($1::uuid, $2, 'task', 'many', $1)`,
			fmt.Sprintf("beef%04d-0000-4000-8000-000000000000", i), p.ID)
	}

	// found lists the ids a route answers for a prefix.
	found := func(route, list, prefix string) []string {
		t.Helper()
		var page map[string]json.RawMessage // the list, and next for runs
		e.must(200, "GET", route+"id_prefix="+url.QueryEscape(prefix), nil, &page)
		var out []struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(page[list], &out); err != nil {
			t.Fatalf("%s: %v", list, err)
		}
		var got []string
		for _, o := range out {
			got = append(got, o.ID)
		}
		slices.Sort(got)
		return got
	}
	// The owner project and its task have random ids, which a short
	// prefix may match too: they are expected wherever they match.
	routes := []struct {
		route, list string
		random      []string
	}{
		{"/api/v1/projects?", "projects", []string{p.ID}},
		{"/api/v1/hosts?", "hosts", nil},
		{"/api/v1/runs?", "runs", nil},
		{"/api/v1/work-items?", "work_items", []string{task.ID}},
	}
	for _, r := range routes {
		for _, c := range []struct {
			prefix string
			want   []string
		}{
			{"abcd", ids[1:4]},
			{"ABCD", ids[1:4]},
			{"abcd1", ids[2:3]},
			{"abcd1111-", ids[2:3]},
			{ids[2], ids[2:3]},
			{"abc", ids},
			{"abcf", nil},
			{"0", nil},
		} {
			want := slices.Clone(c.want)
			for _, id := range r.random {
				if strings.HasPrefix(id, strings.ToLower(c.prefix)) {
					want = append(want, id)
				}
			}
			slices.Sort(want)
			if got := found(r.route, r.list, c.prefix); !slices.Equal(got, want) {
				t.Errorf("%sid_prefix=%s: %v, want %v", r.route, c.prefix, got, want)
			}
		}
	}
	if got := found("/api/v1/work-items?", "work_items", "beef"); len(got) != 10 {
		t.Errorf("work items under beef: %d, want the first 10 of 12", len(got))
	}
	if got := found("/api/v1/runs?limit=2&", "runs", "abc"); len(got) != 2 {
		t.Errorf("runs under abc with limit=2: %v", got)
	}
	if got := found("/api/v1/runs?status=pending&", "runs", "abc"); len(got) != 0 {
		t.Errorf("id_prefix and status together: %v", got)
	}

	hostile := []string{"", "%", "_", "abcd%", "ab_d", "%25", "abc*", "abcd ", "xyz", "abcd1111x", "abc-",
		"abcd1111-0000-4000-8000-0000000000011", strings.Repeat("a", 37), "abcd\x00", "abcd'--"}
	for _, r := range routes {
		for _, bad := range hostile {
			code, body := e.call("GET", r.route+"id_prefix="+url.QueryEscape(bad), nil)
			if code != 400 {
				t.Errorf("%sid_prefix=%q: status %d, want 400: %s", r.route, bad, code, body)
				continue
			}
			if got := errorOf(t, body); got.Code != "validation_failed" || got.Details["field"] != "id_prefix" {
				t.Errorf("%sid_prefix=%q: %+v", r.route, bad, got)
			}
		}
	}
	code, body := e.call("GET", "/api/v1/work-items", nil)
	if code != 400 || errorOf(t, body).Details["field"] != "id_prefix" {
		t.Errorf("GET /work-items without id_prefix: %d %s", code, body)
	}
	// Without the filter, the lists are what they were.
	var all map[string][]json.RawMessage
	e.must(200, "GET", "/api/v1/projects", nil, &all)
	if len(all["projects"]) != len(ids)+1 {
		t.Errorf("GET /projects lists %d, want %d", len(all["projects"]), len(ids)+1)
	}
}
