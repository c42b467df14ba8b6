package server_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"pam/internal/wire"
)

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// sql runs a statement against the test's database, standing in for the
// parts of the system (heartbeats, dispatch) these tests do not drive.
func (e *env) sql(q string, args ...any) {
	e.t.Helper()
	if _, err := e.store.Pool.Exec(e.t.Context(), q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

func (e *env) host(name string) wire.HostCreated {
	e.t.Helper()
	var out wire.HostCreated
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": name}, &out)
	return out
}

func (e *env) tokenHash(hostID string) []byte {
	e.t.Helper()
	var h []byte
	if err := e.store.Pool.QueryRow(e.t.Context(), `SELECT worker_token_hash FROM hosts WHERE id = $1`, hostID).Scan(&h); err != nil {
		e.t.Fatal(err)
	}
	return h
}

func sha(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func topics(evs []wire.Event) string {
	var ts []string
	for _, ev := range evs {
		ts = append(ts, ev.Topic)
	}
	return strings.Join(ts, " ")
}

func TestHostCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	code, body := e.call("POST", "/api/v1/hosts", map[string]any{"name": "gpu-1.lab"})
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	// Every field of the shape is present, null where unknown.
	var raw struct {
		Host map[string]any `json:"host"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id", "name", "platform", "status", "disabled", "instance_id", "instance_suspect", "last_seen_at",
		"providers", "max_runs", "executor", "active_runs", "created_at", "updated_at"} {
		if _, ok := raw.Host[f]; !ok {
			t.Errorf("host lacks field %s: %s", f, body)
		}
	}
	var out wire.HostCreated
	json.Unmarshal(body, &out)
	h := out.Host
	if h.Name != "gpu-1.lab" || h.Status != "registered" || h.Disabled || h.MaxRuns != 8 || h.ActiveRuns != 0 ||
		h.Providers == nil || h.InstanceID != nil || h.LastSeenAt != nil {
		t.Fatalf("created %+v", h)
	}
	if !hex64.MatchString(out.WorkerToken) {
		t.Fatalf("worker token %q is not 64 lowercase hex", out.WorkerToken)
	}
	// Only the SHA-256 is stored, and the token is in no event.
	if got := e.tokenHash(h.ID); !bytes.Equal(got, sha(out.WorkerToken)) {
		t.Fatalf("stored %x, want sha256 of the token", got)
	}
	var leaks int
	if err := e.store.Pool.QueryRow(t.Context(),
		`SELECT count(*) FROM events WHERE strpos(payload::text, $1) > 0`, out.WorkerToken).Scan(&leaks); err != nil || leaks != 0 {
		t.Fatalf("token found in %d event payloads (%v)", leaks, err)
	}
	evs := e.events("host.*")
	if topics(evs) != "host.created" || evs[0].HostID == nil || *evs[0].HostID != h.ID {
		t.Fatalf("events %+v", evs)
	}
	var p wire.Host
	json.Unmarshal(evs[0].Payload, &p)
	if p.ID != h.ID || p.Name != h.Name {
		t.Fatalf("host.created payload %s", evs[0].Payload)
	}

	var h2 wire.HostCreated
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": "b", "max_runs": 1000}, &h2)
	if h2.Host.MaxRuns != 1000 || h2.WorkerToken == out.WorkerToken {
		t.Fatalf("second host %+v", h2)
	}
	var list wire.HostList
	e.must(200, "GET", "/api/v1/hosts", nil, &list)
	if len(list.Hosts) != 2 || list.Hosts[0].Name != "b" || list.Hosts[1].Name != "gpu-1.lab" {
		t.Fatalf("list %+v", list.Hosts)
	}
	// The token never appears in a read.
	_, all := e.call("GET", "/api/v1/hosts", nil)
	if bytes.Contains(all, []byte(out.WorkerToken)) || bytes.Contains(all, []byte("token")) {
		t.Fatalf("host list shows a token: %s", all)
	}
}

func TestHostValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.host("taken")
	cases := []struct {
		name        string
		body        any
		status      int
		code, field string
	}{
		{"missing name", map[string]any{}, 400, "validation_failed", "name"},
		{"empty name", map[string]any{"name": ""}, 400, "validation_failed", "name"},
		{"space", map[string]any{"name": "a b"}, 400, "validation_failed", "name"},
		{"leading dash", map[string]any{"name": "-a"}, 400, "validation_failed", "name"},
		{"leading dot", map[string]any{"name": ".a"}, 400, "validation_failed", "name"},
		{"slash", map[string]any{"name": "a/b"}, 400, "validation_failed", "name"},
		{"non-ascii", map[string]any{"name": "hôte"}, 400, "validation_failed", "name"},
		{"64 chars", map[string]any{"name": strings.Repeat("a", 64)}, 400, "validation_failed", "name"},
		{"name wrong type", map[string]any{"name": 5}, 400, "validation_failed", "name"},
		{"max_runs 0", map[string]any{"name": "a", "max_runs": 0}, 400, "validation_failed", "max_runs"},
		{"max_runs negative", map[string]any{"name": "a", "max_runs": -1}, 400, "validation_failed", "max_runs"},
		{"max_runs 1001", map[string]any{"name": "a", "max_runs": 1001}, 400, "validation_failed", "max_runs"},
		{"max_runs fraction", map[string]any{"name": "a", "max_runs": 1.5}, 400, "validation_failed", "max_runs"},
		{"max_runs string", map[string]any{"name": "a", "max_runs": "8"}, 400, "validation_failed", "max_runs"},
		{"unknown field", map[string]any{"name": "a", "worker_token": "x"}, 400, "validation_failed", "worker_token"},
		{"duplicate", map[string]any{"name": "taken"}, 409, "conflict", "name"},
		{"malformed", `{"name":`, 400, "malformed_json", ""},
		{"empty body", ``, 400, "malformed_json", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.call("POST", "/api/v1/hosts", c.body)
			if code != c.status {
				t.Fatalf("status %d, want %d: %s", code, c.status, body)
			}
			got := errorOf(t, body)
			if got.Code != c.code {
				t.Fatalf("code %q, want %q: %s", got.Code, c.code, body)
			}
			if c.field != "" && got.Details["field"] != c.field {
				t.Fatalf("details.field %v, want %q: %s", got.Details["field"], c.field, body)
			}
		})
	}
	// The edges that are allowed.
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": strings.Repeat("a", 63), "max_runs": 1}, nil)
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": "A_b.c-9"}, nil)
	if n := len(e.events("host.*")); n != 3 {
		t.Fatalf("%d host events, want 3 (refused requests journal nothing)", n)
	}
}

func TestHostRefs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := e.host("worker-7").Host
	var byName, byID wire.Host
	e.must(200, "GET", "/api/v1/hosts/worker-7", nil, &byName)
	e.must(200, "GET", "/api/v1/hosts/"+h.ID, nil, &byID)
	if byName.ID != h.ID || byID.Name != "worker-7" {
		t.Fatalf("by name %+v, by id %+v", byName, byID)
	}
	for _, ref := range []string{"nope", "00000000-0000-4000-8000-000000000000", "NOT%20A%20HOST", "-x", "Worker-7"} {
		for _, rt := range []struct{ method, action string }{
			{"GET", ""}, {"POST", "/disable"}, {"POST", "/enable"}, {"POST", "/clear-suspect"}, {"POST", "/rotate-token"}, {"DELETE", ""},
		} {
			code, body := e.call(rt.method, "/api/v1/hosts/"+ref+rt.action, nil)
			if code != 404 || errorOf(t, body).Code != "not_found" {
				t.Errorf("%s /hosts/%s%s: %d %s, want 404 not_found", rt.method, ref, rt.action, code, body)
			}
		}
	}
}

// PATCH /hosts/{ref} sets max_runs (1..1000, required, nothing else
// accepted) and journals host.updated; it answered 405 before (issue 9
// item 15), so `pam up` could not change the limit a host was created with.
func TestPatchHostMaxRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := e.host("h1").Host
	var got wire.Host
	e.must(200, "PATCH", "/api/v1/hosts/h1", map[string]any{"max_runs": 110}, &got)
	if got.ID != h.ID || got.MaxRuns != 110 {
		t.Fatalf("patched host %+v, want max_runs 110", got)
	}
	e.must(200, "GET", "/api/v1/hosts/"+h.ID, nil, &got)
	if got.MaxRuns != 110 {
		t.Fatalf("host reads max_runs %d after PATCH, want 110", got.MaxRuns)
	}
	e.must(200, "PATCH", "/api/v1/hosts/"+h.ID, map[string]any{"max_runs": 1000}, &got)
	if got.MaxRuns != 1000 {
		t.Fatalf("patched by id to %d, want 1000", got.MaxRuns)
	}
	e.must(200, "PATCH", "/api/v1/hosts/h1", map[string]any{"max_runs": 1000}, &got) // unchanged: no event
	evs := e.events("host.updated")
	if len(evs) != 2 {
		t.Fatalf("%d host.updated events, want 2: %+v", len(evs), evs)
	}
	var payload struct {
		HostID   string         `json:"host_id"`
		Host     wire.Host      `json:"host"`
		Changed  map[string]any `json:"changed"`
		Previous map[string]any `json:"previous"`
	}
	if err := json.Unmarshal(evs[0].Payload, &payload); err != nil {
		t.Fatal(err)
	}
	if evs[0].HostID == nil || *evs[0].HostID != h.ID || payload.HostID != h.ID || payload.Host.MaxRuns != 110 ||
		payload.Changed["max_runs"] != float64(110) || payload.Previous["max_runs"] != float64(8) {
		t.Fatalf("host.updated %s", evs[0].Payload)
	}

	cases := []struct {
		name        string
		ref         string
		body        any
		status      int
		code, field string
	}{
		{"max_runs 0", "h1", map[string]any{"max_runs": 0}, 400, "validation_failed", "max_runs"},
		{"max_runs 1001", "h1", map[string]any{"max_runs": 1001}, 400, "validation_failed", "max_runs"},
		{"max_runs negative", "h1", map[string]any{"max_runs": -1}, 400, "validation_failed", "max_runs"},
		{"max_runs string", "h1", map[string]any{"max_runs": "8"}, 400, "validation_failed", "max_runs"},
		{"max_runs null", "h1", map[string]any{"max_runs": nil}, 400, "validation_failed", "max_runs"},
		{"missing", "h1", map[string]any{}, 400, "validation_failed", "max_runs"},
		{"unknown field", "h1", map[string]any{"max_runs": 4, "name": "h2"}, 400, "validation_failed", "name"},
		{"malformed", "h1", `{"max_runs":`, 400, "malformed_json", ""},
		{"unknown host", "nope", map[string]any{"max_runs": 4}, 404, "not_found", ""},
		{"unknown id", uuid.NewString(), map[string]any{"max_runs": 4}, 404, "not_found", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.call("PATCH", "/api/v1/hosts/"+c.ref, c.body)
			if code != c.status {
				t.Fatalf("status %d, want %d: %s", code, c.status, body)
			}
			got := errorOf(t, body)
			if got.Code != c.code {
				t.Fatalf("code %q, want %q: %s", got.Code, c.code, body)
			}
			if c.field != "" && got.Details["field"] != c.field {
				t.Fatalf("details.field %v, want %q: %s", got.Details["field"], c.field, body)
			}
		})
	}
	e.must(200, "GET", "/api/v1/hosts/h1", nil, &got)
	if got.MaxRuns != 1000 {
		t.Fatalf("refused PATCHes changed max_runs to %d", got.MaxRuns)
	}
	if n := len(e.events("host.updated")); n != 2 {
		t.Fatalf("%d host.updated events after refused PATCHes, want 2", n)
	}
}

func TestHostDisableIsSticky(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := e.host("h1").Host
	var got wire.Host
	e.must(200, "POST", "/api/v1/hosts/h1/disable", nil, &got)
	if got.Status != "disabled" || !got.Disabled {
		t.Fatalf("disabled: %+v", got)
	}
	e.must(200, "POST", "/api/v1/hosts/h1/disable", nil, &got) // idempotent
	// A heartbeat arrives: it may write last_seen_at and status, but the
	// host stays disabled.
	e.sql(`UPDATE hosts SET last_seen_at = now(), status = 'online' WHERE id = $1`, h.ID)
	e.must(200, "GET", "/api/v1/hosts/h1", nil, &got)
	if got.Status != "disabled" || !got.Disabled || got.LastSeenAt == nil {
		t.Fatalf("after a heartbeat: %+v", got)
	}
	e.must(200, "POST", "/api/v1/hosts/"+h.ID+"/enable", nil, &got)
	if got.Status != "online" || got.Disabled {
		t.Fatalf("enabled after a fresh heartbeat: %+v", got)
	}
	e.must(200, "POST", "/api/v1/hosts/h1/enable", nil, &got) // idempotent
	if got.Status != "online" {
		t.Fatalf("enable again: %+v", got)
	}
	evs := e.events("host.*")
	if topics(evs) != "host.created host.disabled host.enabled" {
		t.Fatalf("events %s", topics(evs))
	}
	for _, ev := range evs {
		if ev.HostID == nil || *ev.HostID != h.ID {
			t.Errorf("%s without host_id", ev.Topic)
		}
	}
}

func TestHostEnableDerivesStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name, lastSeen, want string
	}{
		{"never-seen", "NULL", "registered"},
		{"fresh", "now() - interval '10 seconds'", "online"},
		{"stale", "now() - interval '10 minutes'", "offline"},
	}
	for _, c := range cases {
		h := e.host(c.name).Host
		e.sql(`UPDATE hosts SET last_seen_at = `+c.lastSeen+`, status = 'online' WHERE id = $1`, h.ID)
		if c.lastSeen == "NULL" {
			e.sql(`UPDATE hosts SET status = 'registered' WHERE id = $1`, h.ID)
		}
		e.must(200, "POST", "/api/v1/hosts/"+c.name+"/disable", nil, nil)
		var got wire.Host
		e.must(200, "POST", "/api/v1/hosts/"+c.name+"/enable", nil, &got)
		if got.Status != c.want || got.Disabled {
			t.Errorf("%s: enabled to %q, want %q", c.name, got.Status, c.want)
		}
	}
}

func TestHostClearSuspect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := e.host("h1").Host
	pinned, reported := uuid.NewString(), uuid.NewString()
	e.sql(`UPDATE hosts SET instance_id = $2, instance_suspect = true, reported_instance_id = $3 WHERE id = $1`, h.ID, pinned, reported)
	var got wire.Host
	e.must(200, "GET", "/api/v1/hosts/h1", nil, &got)
	if !got.InstanceSuspect || got.InstanceID == nil || *got.InstanceID != pinned {
		t.Fatalf("suspect host reads %+v", got)
	}
	e.must(200, "POST", "/api/v1/hosts/h1/clear-suspect", nil, &got)
	if got.InstanceSuspect || got.InstanceID == nil || *got.InstanceID != reported {
		t.Fatalf("after clear-suspect: %+v", got)
	}
	e.must(200, "POST", "/api/v1/hosts/h1/clear-suspect", nil, &got) // nothing to clear
	if got.InstanceSuspect || *got.InstanceID != reported {
		t.Fatalf("second clear-suspect: %+v", got)
	}
	evs := e.events("host.updated")
	if len(evs) != 1 {
		t.Fatalf("%d host.updated events, want 1", len(evs))
	}
	var payload struct {
		HostID  string         `json:"host_id"`
		Changed map[string]any `json:"changed"`
	}
	json.Unmarshal(evs[0].Payload, &payload)
	if payload.HostID != h.ID || payload.Changed["instance_id"] != reported {
		t.Fatalf("payload %s", evs[0].Payload)
	}
}

func TestHostRotateToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := e.host("h1")
	var rot wire.WorkerToken
	e.must(200, "POST", "/api/v1/hosts/h1/rotate-token", nil, &rot)
	if !hex64.MatchString(rot.WorkerToken) || rot.WorkerToken == created.WorkerToken {
		t.Fatalf("rotated token %q", rot.WorkerToken)
	}
	if got := e.tokenHash(created.Host.ID); !bytes.Equal(got, sha(rot.WorkerToken)) {
		t.Fatal("stored hash is not that of the new token")
	}
	ctx := t.Context()
	if _, err := e.store.HostByToken(ctx, created.WorkerToken); !wire.HasCode(err, "not_found") {
		t.Fatalf("old token still works: %v", err)
	}
	if h, err := e.store.HostByToken(ctx, rot.WorkerToken); err != nil || h.ID != created.Host.ID {
		t.Fatalf("new token: %+v %v", h, err)
	}
	evs := e.events("host.updated")
	if len(evs) != 1 || !bytes.Contains(evs[0].Payload, []byte(`"rotated":"worker_token"`)) && !bytes.Contains(evs[0].Payload, []byte(`"rotated": "worker_token"`)) {
		t.Fatalf("events %+v", evs)
	}
	for _, tok := range []string{created.WorkerToken, rot.WorkerToken} {
		if bytes.Contains(evs[0].Payload, []byte(tok)) {
			t.Fatal("a token reached the journal")
		}
	}
}

// run inserts a run row on a host the way dispatch would leave it.
func (e *env) run(taskID, projectID, status string, hostCol, hostID string) string {
	e.t.Helper()
	id := uuid.NewString()
	e.sql(`INSERT INTO runs (id, task_id, project_id, provider, status, session_name, `+hostCol+`)
		VALUES ($1, $2, $3, 'claude', $4, $5, $6)`, id, taskID, projectID, status, "pam-"+id[:8], hostID)
	return id
}

func TestHostDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.project("P")
	task := e.item(p.Slug, "task", "t", nil)
	h := e.host("h1").Host

	for _, c := range []struct{ status, col string }{
		{"running", "host_id"}, {"spawning", "host_id"}, {"pending", "host_id"}, {"pending", "target_host_id"},
	} {
		run := e.run(task.ID, p.ID, c.status, c.col, h.ID)
		code, body := e.call("DELETE", "/api/v1/hosts/h1", nil)
		if code != 409 || errorOf(t, body).Code != "has_active_runs" {
			t.Fatalf("delete with a %s run (%s): %d %s", c.status, c.col, code, body)
		}
		if c.col == "host_id" {
			var got wire.Host
			e.must(200, "GET", "/api/v1/hosts/h1", nil, &got)
			if got.ActiveRuns != 1 {
				t.Fatalf("active_runs %d with one %s run", got.ActiveRuns, c.status)
			}
		}
		e.sql(`UPDATE runs SET status = 'exited' WHERE id = $1`, run)
	}
	// History on the host: terminal runs and their attempts.
	var runID string
	if err := e.store.Pool.QueryRow(t.Context(), `SELECT id::text FROM runs WHERE host_id = $1 LIMIT 1`, h.ID).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	e.sql(`INSERT INTO run_attempts (run_id, attempt, host_id, outcome) VALUES ($1, 1, $2, 'exited')`, runID, h.ID)

	code, body := e.call("DELETE", "/api/v1/hosts/"+h.ID, nil)
	if code != 204 || len(body) != 0 {
		t.Fatalf("delete: %d %s", code, body)
	}
	e.must(404, "GET", "/api/v1/hosts/h1", nil, nil)
	// Which host ran each run and attempt is kept (the runs that only
	// wished for it drop the wish), and so is its name.
	var ran, attempts, wishes int
	var name string
	if err := e.store.Pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM runs WHERE host_id = $1),
		(SELECT count(*) FROM run_attempts WHERE host_id = $1),
		(SELECT count(*) FROM runs WHERE target_host_id IS NOT NULL),
		(SELECT name FROM removed_hosts WHERE id = $1)`, h.ID).Scan(&ran, &attempts, &wishes, &name); err != nil {
		t.Fatal(err)
	}
	if ran != 3 || attempts != 1 || wishes != 0 || name != "h1" {
		t.Fatalf("after removal: %d runs and %d attempts name the host (want 3 and 1), %d runs still target it, removed_hosts names it %q",
			ran, attempts, wishes, name)
	}
	var run wire.Run
	e.must(200, "GET", "/api/v1/runs/"+runID, nil, &run)
	if run.HostID == nil || *run.HostID != h.ID {
		t.Fatalf("GET /runs/{id} of a removed host's run: host_id %v, want %s", run.HostID, h.ID)
	}
	var runs int
	e.store.Pool.QueryRow(t.Context(), `SELECT count(*) FROM runs`).Scan(&runs)
	if runs != 4 {
		t.Fatalf("%d runs left, want the 4 terminal ones kept", runs)
	}
	evs := e.events("host.*")
	if topics(evs) != "host.created host.removed" || *evs[1].HostID != h.ID {
		t.Fatalf("events %s", topics(evs))
	}
	// The name is free again.
	e.host("h1")
}

func TestProviders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var list wire.ProviderList
	code, body := e.call("GET", "/api/v1/providers", nil)
	if code != 200 || strings.TrimSpace(string(body)) != `{"providers":[]}` {
		t.Fatalf("no hosts: %d %s", code, body)
	}
	a, b := e.host("alpha").Host, e.host("Beta").Host
	e.host("gamma") // offers nothing
	e.sql(`UPDATE hosts SET providers = '{codex,claude}' WHERE id = $1`, a.ID)
	e.sql(`UPDATE hosts SET providers = '{shell,claude}' WHERE id = $1`, b.ID)
	e.must(200, "GET", "/api/v1/providers", nil, &list)
	want := []wire.ProviderHosts{
		{Name: "claude", Hosts: []string{"Beta", "alpha"}},
		{Name: "codex", Hosts: []string{"alpha"}},
		{Name: "shell", Hosts: []string{"Beta"}},
	}
	if !reflect.DeepEqual(list.Providers, want) {
		t.Fatalf("providers %+v, want %+v", list.Providers, want)
	}
}

// Every host route refuses a missing or wrong operator token, and a worker
// token is no operator token.
func TestHostAuthMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := e.host("h1")
	routes := []struct{ method, path string }{
		{"GET", "/api/v1/hosts"},
		{"POST", "/api/v1/hosts"},
		{"GET", "/api/v1/hosts/h1"},
		{"POST", "/api/v1/hosts/h1/disable"},
		{"POST", "/api/v1/hosts/h1/enable"},
		{"POST", "/api/v1/hosts/h1/clear-suspect"},
		{"POST", "/api/v1/hosts/h1/rotate-token"},
		{"DELETE", "/api/v1/hosts/h1"},
		{"PATCH", "/api/v1/hosts/h1"},
		{"GET", "/api/v1/providers"},
	}
	for _, rt := range routes {
		for _, tok := range []string{"", "ffffffffffffffffffffffffffffffff", testToken + "x", created.WorkerToken} {
			code, body := e.callAs(tok, rt.method, rt.path, `{"name":"h2"}`)
			if code != 401 || errorOf(t, body).Code != wire.CodeUnauthorized {
				t.Errorf("%s %s with token %q: %d %s, want 401 unauthorized", rt.method, rt.path, tok, code, body)
			}
		}
	}
	var got wire.Host
	e.must(200, "GET", "/api/v1/hosts/h1", nil, &got)
	if got.Status != "registered" || !bytes.Equal(e.tokenHash(got.ID), sha(created.WorkerToken)) {
		t.Fatalf("host changed by refused requests: %+v", got)
	}
	if n := len(e.events("host.*")); n != 1 {
		t.Fatalf("refused requests journaled %d host events", n-1)
	}
}
