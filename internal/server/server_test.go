package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/pamtest"
	"pam/internal/server"
	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestMain fails the package when a goroutine outlives its tests: the
// server's sockets, watchers and relays must all be stopped and waited for.
func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

const testToken = "0123456789abcdef0123456789abcdef"

type env struct {
	t     testing.TB
	url   string
	store *store.Store
}

func newEnv(t testing.TB) *env {
	t.Helper()
	st := storetest.New(t)
	srv := server.New(server.Options{Store: st, Token: testToken})
	ts := serve(t, srv)
	return &env{t: t, url: ts.URL, store: st}
}

// serve runs srv on a test server until the test ends, then stops it as
// pam serve does: streams, then the listener and plain requests, then
// srv.Shutdown, which must have waited for every socket and watcher
// before the store (cleaned up earlier, so closed later) goes.
func serve(t testing.TB, srv *server.Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.CloseStreams()
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	})
	return ts
}

// call sends a request with the operator token; body may be a string
// (sent raw) or a value (JSON-encoded).
func (e *env) call(method, path string, body any) (int, []byte) {
	e.t.Helper()
	return e.callAs(testToken, method, path, body)
}

func (e *env) callAs(token, method, path string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, _ := json.Marshal(b)
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	checkAgainstSpec(e.t, method, resp, out)
	return resp.StatusCode, out
}

// must sends a request that must answer want, decoding the body into v.
func (e *env) must(want int, method, path string, body, v any) {
	e.t.Helper()
	code, out := e.call(method, path, body)
	if code != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, out)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, out, err)
		}
	}
}

// errorOf decodes an error envelope.
func errorOf(t *testing.T, body []byte) wire.Error {
	t.Helper()
	var env struct {
		Error *wire.Error `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Error == nil {
		t.Fatalf("not an error envelope: %s", body)
	}
	return *env.Error
}

func (e *env) project(name string) wire.Project {
	var p wire.Project
	e.must(201, "POST", "/api/v1/projects", map[string]any{"name": name}, &p)
	return p
}

func (e *env) item(projectRef, kind, title string, parent *string) wire.WorkItem {
	var w wire.WorkItem
	body := map[string]any{"kind": kind, "title": title}
	if parent != nil {
		body["parent_id"] = *parent
	}
	e.must(201, "POST", "/api/v1/projects/"+projectRef+"/work-items", body, &w)
	return w
}

func (e *env) events(topic string) []wire.Event {
	e.t.Helper()
	evs, err := e.store.EventsAfter(e.t.Context(), 0, math.MaxInt64, mustGlob(e.t, topic), 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

func mustGlob(t testing.TB, g string) *wire.TopicPattern {
	p, err := wire.ParseTopicGlob(g)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.project("Auth")
	w := e.item(p.Slug, "task", "t", nil)
	routes := []struct{ method, path string }{
		{"GET", "/api/v1/projects"},
		{"POST", "/api/v1/projects"},
		{"GET", "/api/v1/projects/" + p.Slug},
		{"PATCH", "/api/v1/projects/" + p.Slug},
		{"DELETE", "/api/v1/projects/" + p.Slug},
		{"GET", "/api/v1/projects/" + p.Slug + "/work-items"},
		{"POST", "/api/v1/projects/" + p.Slug + "/work-items"},
		{"GET", "/api/v1/work-items/" + w.ID},
		{"PATCH", "/api/v1/work-items/" + w.ID},
		{"DELETE", "/api/v1/work-items/" + w.ID},
		{"GET", "/api/v1/events"},
		{"GET", "/api/v1/events/stream"},
		{"GET", "/api/v1/no-such-route"},
	}
	for _, rt := range routes {
		for _, tok := range []string{"", "ffffffffffffffffffffffffffffffff", testToken + "x", "Basic abc"} {
			code, body := e.callAs(tok, rt.method, rt.path, `{}`)
			if code != 401 || errorOf(t, body).Code != wire.CodeUnauthorized {
				t.Errorf("%s %s with token %q: %d %s, want 401 unauthorized", rt.method, rt.path, tok, code, body)
			}
		}
	}
	// Nothing was changed by the refused requests.
	var got wire.Project
	e.must(200, "GET", "/api/v1/projects/"+p.Slug, nil, &got)
	if got.Status != "active" || got.Name != "Auth" {
		t.Fatalf("project changed by unauthorised requests: %+v", got)
	}
	e.must(200, "GET", "/api/v1/work-items/"+w.ID, nil, nil)
	// Metrics need the token unless public; healthz never does.
	if code, _ := e.callAs("", "GET", "/metrics", nil); code != 401 {
		t.Errorf("GET /metrics without token: %d, want 401", code)
	}
	if code, body := e.callAs(testToken, "GET", "/metrics", nil); code != 200 || !bytes.Contains(body, []byte("pam_http_requests_total")) {
		t.Errorf("GET /metrics with token: %d", code)
	}
	// So do Go's profiles of the server.
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1"} {
		if code, _ := e.callAs("", "GET", path, nil); code != 401 {
			t.Errorf("GET %s without token: %d, want 401", path, code)
		}
	}
	if code, body := e.callAs(testToken, "GET", "/debug/pprof/goroutine?debug=1", nil); code != 200 || !bytes.Contains(body, []byte("goroutine profile:")) {
		t.Errorf("GET /debug/pprof/goroutine with token: %d %.200s", code, body)
	}
	if code, body := e.callAs("", "GET", "/healthz", nil); code != 200 || !bytes.Contains(body, []byte(`"ok"`)) {
		t.Errorf("GET /healthz: %d %s", code, body)
	}
}

func TestProjectValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.must(201, "POST", "/api/v1/projects", map[string]any{"name": "Taken", "slug": "taken"}, nil)
	long := strings.Repeat("x", 201)
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, field        string
	}{
		{"empty name", "POST", "/api/v1/projects", map[string]any{"name": ""}, 400, "validation_failed", "name"},
		{"blank name", "POST", "/api/v1/projects", map[string]any{"name": "   "}, 400, "validation_failed", "name"},
		{"long name", "POST", "/api/v1/projects", map[string]any{"name": long}, 400, "validation_failed", "name"},
		{"missing name", "POST", "/api/v1/projects", map[string]any{}, 400, "validation_failed", "name"},
		{"bad slug", "POST", "/api/v1/projects", map[string]any{"name": "a", "slug": "Bad Slug"}, 400, "validation_failed", "slug"},
		{"slug dash first", "POST", "/api/v1/projects", map[string]any{"name": "a", "slug": "-a"}, 400, "validation_failed", "slug"},
		{"slug too long", "POST", "/api/v1/projects", map[string]any{"name": "a", "slug": strings.Repeat("a", 64)}, 400, "validation_failed", "slug"},
		{"slug taken", "POST", "/api/v1/projects", map[string]any{"name": "b", "slug": "taken"}, 409, "slug_taken", "slug"},
		{"unknown field", "POST", "/api/v1/projects", map[string]any{"name": "a", "colour": "red"}, 400, "validation_failed", "colour"},
		{"wrong type", "POST", "/api/v1/projects", map[string]any{"name": 5}, 400, "validation_failed", "name"},
		{"wrong type bool", "POST", "/api/v1/projects", map[string]any{"name": "a", "auto_done": "yes"}, 400, "validation_failed", "auto_done"},
		{"malformed", "POST", "/api/v1/projects", `{"name":`, 400, "malformed_json", ""},
		{"not an object", "POST", "/api/v1/projects", `[1,2]`, 400, "malformed_json", ""},
		{"trailing data", "POST", "/api/v1/projects", `{"name":"a"} {"name":"b"}`, 400, "malformed_json", ""},
		{"empty body", "POST", "/api/v1/projects", ``, 400, "malformed_json", ""},
		{"too large", "POST", "/api/v1/projects", `{"name":"a","description":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "body_too_large", ""},
		{"unknown project", "GET", "/api/v1/projects/nope", nil, 404, "not_found", ""},
		{"unknown project uuid", "GET", "/api/v1/projects/00000000-0000-4000-8000-000000000000", nil, 404, "not_found", ""},
		{"bad ref", "GET", "/api/v1/projects/NOT%20A%20REF", nil, 404, "not_found", ""},
		{"patch unknown", "PATCH", "/api/v1/projects/nope", map[string]any{"name": "x"}, 404, "not_found", ""},
		{"patch bad name", "PATCH", "/api/v1/projects/taken", map[string]any{"name": ""}, 400, "validation_failed", "name"},
		{"patch slug not allowed", "PATCH", "/api/v1/projects/taken", map[string]any{"slug": "other"}, 400, "validation_failed", "slug"},
		{"archive unknown", "DELETE", "/api/v1/projects/nope", nil, 404, "not_found", ""},
		{"wrong method", "PUT", "/api/v1/projects", map[string]any{}, 405, "method_not_allowed", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.call(c.method, c.path, c.body)
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
	// Nothing but the one project was written.
	var list wire.ProjectList
	e.must(200, "GET", "/api/v1/projects?include_archived=true", nil, &list)
	if len(list.Projects) != 1 {
		t.Fatalf("refused requests wrote projects: %+v", list.Projects)
	}
	if n := len(e.events("project.*")); n != 1 {
		t.Fatalf("refused requests journaled events: %d project events", n)
	}
}

func TestProjectLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var p wire.Project
	e.must(201, "POST", "/api/v1/projects", map[string]any{"name": "My Great Project!", "description": "d"}, &p)
	if p.Slug != "my-great-project" || p.Status != "active" || !p.AutoDone || !p.AutoContinue || p.Description != "d" {
		t.Fatalf("created %+v", p)
	}
	var p2 wire.Project
	e.must(201, "POST", "/api/v1/projects", map[string]any{"name": "My great project"}, &p2)
	if p2.Slug != "my-great-project-2" {
		t.Fatalf("derived slug on collision: %q", p2.Slug)
	}
	var byID, bySlug wire.Project
	e.must(200, "GET", "/api/v1/projects/"+p.ID, nil, &byID)
	e.must(200, "GET", "/api/v1/projects/"+p.Slug, nil, &bySlug)
	if byID.ID != p.ID || bySlug.ID != p.ID {
		t.Fatal("ref by id and slug disagree")
	}
	var up wire.Project
	e.must(200, "PATCH", "/api/v1/projects/"+p.Slug, map[string]any{"name": "Renamed", "auto_done": false, "auto_continue": false}, &up)
	if up.Name != "Renamed" || up.AutoDone || up.AutoContinue || up.Slug != p.Slug || up.Description != "d" {
		t.Fatalf("patched %+v", up)
	}
	var arch wire.Project
	e.must(200, "DELETE", "/api/v1/projects/"+p.Slug, nil, &arch)
	if arch.Status != "archived" {
		t.Fatalf("archive: %+v", arch)
	}
	e.must(200, "DELETE", "/api/v1/projects/"+p.Slug, nil, &arch) // idempotent
	var list wire.ProjectList
	e.must(200, "GET", "/api/v1/projects", nil, &list)
	if len(list.Projects) != 1 || list.Projects[0].ID != p2.ID {
		t.Fatalf("archived project listed by default: %+v", list.Projects)
	}
	e.must(200, "GET", "/api/v1/projects?include_archived=true", nil, &list)
	if len(list.Projects) != 2 {
		t.Fatalf("include_archived: %d projects", len(list.Projects))
	}
	topics := []string{}
	for _, ev := range e.events("project.*") {
		topics = append(topics, ev.Topic)
		if ev.ProjectID == nil {
			t.Errorf("%s without project_id", ev.Topic)
		}
	}
	want := "project.created project.created project.updated project.archived"
	if strings.Join(topics, " ") != want {
		t.Fatalf("events %v, want %s", topics, want)
	}
}

func TestMetricsPublicAndLogsWithoutTokens(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	var logs pamtest.Buffer
	srv := server.New(server.Options{Store: st, Token: testToken, MetricsPublic: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ts := serve(t, srv)
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("public metrics without token: %d", resp.StatusCode)
	}
	// A token in the query string or the header never reaches the log.
	secret := "feedfacefeedfacefeedfacefeedface"
	req, _ := http.NewRequest("GET", ts.URL+"/api/v1/projects?token="+secret+"&ticket="+secret, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("GET", ts.URL+"/api/v1/projects", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	out := logs.String()
	if !strings.Contains(out, "/api/v1/projects") {
		t.Fatalf("requests were not logged: %s", out)
	}
	if strings.Contains(out, secret) || strings.Contains(out, testToken) {
		t.Fatalf("a token reached the log: %s", out)
	}
}
