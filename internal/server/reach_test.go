package server_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"pam/internal/server"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// reachEnv is a server with one of everything a route's path can name:
// a project, a task, a run (pending: no worker) and a host.
type reachEnv struct {
	*env
	srv     *server.Server
	project wire.Project
	task    wire.WorkItem
	run     wire.Run
	host    wire.Host
}

func newReachEnv(t *testing.T) *reachEnv {
	t.Helper()
	st := storetest.New(t)
	srv := server.New(server.Options{Store: st, Token: testToken})
	ts := serve(t, srv)
	e := &reachEnv{env: &env{t: t, url: ts.URL, store: st}, srv: srv}
	e.project = e.env.project("Reach")
	e.task = e.item(e.project.Slug, "task", "t", nil)
	e.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": e.task.ID, "provider": "shell"}, &e.run)
	var hc wire.HostCreated
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": "reach-host"}, &hc)
	e.host = hc.Host
	return e
}

// apiRoutes is every /api/v1 operation the server registers, as method
// and path pattern ("/runs/{id}").
func (e *reachEnv) apiRoutes() [][2]string {
	var out [][2]string
	for _, p := range e.srv.Routes() {
		method, path, ok := strings.Cut(p, " ")
		if rel, api := strings.CutPrefix(path, "/api/v1"); ok && api {
			out = append(out, [2]string{method, rel})
		}
	}
	if len(out) < 40 {
		e.t.Fatalf("only %d routes", len(out))
	}
	return out
}

// fill puts real references into a path pattern, and id in place of {id}.
func (e *reachEnv) fill(path, id string) string {
	ref := e.project.Slug
	if strings.HasPrefix(path, "/hosts/") {
		ref = e.host.Name
	}
	return strings.NewReplacer("{ref}", ref, "{id}", id).Replace(path)
}

// ask sends a request with the operator token and gives up after a while
// (a stream that should have been refused would otherwise never end).
func (e *reachEnv) ask(method, path, body string) (int, []byte) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.url+"/api/v1"+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	checkAgainstSpec(e.t, method, resp, out)
	return resp.StatusCode, out
}

// Every route refuses a query parameter it does not take with 400
// validation_failed naming it, before doing anything.
func TestUnknownQueryParameterRefused(t *testing.T) {
	t.Parallel()
	e := newReachEnv(t)
	for _, rt := range e.apiRoutes() {
		for _, q := range []string{"?colour=red", "?limit=1&colour=red", "?colour"} {
			path := e.fill(rt[1], e.run.ID) + q
			if strings.HasPrefix(rt[1], "/work-items/") {
				path = e.fill(rt[1], e.task.ID) + q
			}
			code, body := e.ask(rt[0], path, `{}`)
			if code != 400 {
				t.Errorf("%s %s: %d %.200s, want 400", rt[0], path, code, body)
				continue
			}
			if got := errorOf(t, body); got.Code != wire.CodeValidationFailed || got.Details["field"] != "colour" {
				t.Errorf("%s %s: %+v, want validation_failed naming colour", rt[0], path, got)
			}
		}
	}
	// Nothing was changed by the refused requests.
	var p wire.Project
	e.must(200, "GET", "/api/v1/projects/"+e.project.Slug, nil, &p)
	var r wire.Run
	e.must(200, "GET", "/api/v1/runs/"+e.run.ID, nil, &r)
	if p.Status != wire.ProjectActive || r.Status != wire.RunPending {
		t.Fatalf("changed by refused requests: project %s, run %s", p.Status, r.Status)
	}
}

// An {id} that Go's UUID parser takes but that is not the canonical form
// (urn:uuid:…, {…}, no dashes, upper case) names nothing: 404 not_found on
// every route, WebSockets included, never a 500 from the database.
func TestNonCanonicalIDIsNotFound(t *testing.T) {
	t.Parallel()
	e := newReachEnv(t)
	for _, rt := range e.apiRoutes() {
		if !strings.Contains(rt[1], "{id}") {
			continue
		}
		real := e.run.ID
		if strings.HasPrefix(rt[1], "/work-items/") {
			real = e.task.ID
		}
		for _, id := range []string{"urn:uuid:" + real, url.PathEscape("{" + real + "}"), strings.ReplaceAll(real, "-", ""),
			strings.ToUpper(real), "%00", "%FF"} {
			path := e.fill(rt[1], id)
			code, body := e.ask(rt[0], path, `{}`)
			if code != 404 || errorOf(t, body).Code != wire.CodeNotFound {
				t.Errorf("%s %s: %d %.200s, want 404 not_found", rt[0], path, code, body)
			}
		}
	}
	// A ref that is no storable text names nothing either.
	for _, path := range []string{"/projects/%00", "/projects/%FF", "/hosts/a%00b"} {
		if code, body := e.ask("GET", path, ""); code != 404 {
			t.Errorf("GET %s: %d %s, want 404", path, code, body)
		}
	}
	// In a body, a non-canonical id is a validation failure of its field.
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/runs", `{"task_id":"urn:uuid:` + e.task.ID + `","provider":"shell"}`, "task_id"},
		{"POST", "/runs", `{"task_id":"{` + e.task.ID + `}","provider":"shell"}`, "task_id"},
		{"POST", "/projects/" + e.project.Slug + "/work-items", `{"kind":"subtask","title":"s","parent_id":"urn:uuid:` + e.task.ID + `"}`, "parent_id"},
		{"PATCH", "/work-items/" + e.task.ID, `{"parent_id":"{` + e.task.ID + `}"}`, "parent_id"},
	} {
		code, body := e.ask(c.method, c.path, c.body)
		if got := errorOf(t, body); code != 400 || got.Code != wire.CodeValidationFailed || got.Details["field"] != c.field {
			t.Errorf("%s %s %s: %d %s, want 400 naming %s", c.method, c.path, c.body, code, body, c.field)
		}
	}
	// And in a query, too.
	for _, q := range []string{"project_id=urn:uuid:" + e.project.ID, "task_id=%7B" + e.task.ID + "%7D", "host_id=%00"} {
		if code, body := e.ask("GET", "/runs?"+q, ""); code != 400 || errorOf(t, body).Code != wire.CodeValidationFailed {
			t.Errorf("GET /runs?%s: %d %s, want 400", q, code, body)
		}
	}
}

// A NUL character in any text of a body is 400 validation_failed naming
// the field (PostgreSQL cannot store it: it was a 500).
func TestNULInTextRefused(t *testing.T) {
	t.Parallel()
	e := newReachEnv(t)
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/projects", `{"name":"n","description":"a\u0000b"}`, "description"},
		{"POST", "/projects", `{"name":"n\u0000"}`, "name"},
		{"PATCH", "/projects/" + e.project.Slug, `{"description":"\u0000"}`, "description"},
		{"POST", "/projects", `{"name":"n","repo":{"url":"https://example.com/r\u0000.git"}}`, "repo.url"},
		{"POST", "/projects/" + e.project.Slug + "/work-items", `{"kind":"task","title":"t","body":"x\u0000"}`, "body"},
		{"PATCH", "/work-items/" + e.task.ID, `{"body":"\u0000"}`, "body"},
		{"PATCH", "/work-items/" + e.task.ID, `{"title":"a\u0000"}`, "title"},
		{"POST", "/runs", `{"task_id":"` + e.task.ID + `","provider":"shell","args":["ok","b\u0000"]}`, "args[1]"},
		{"POST", "/runs/" + e.run.ID + "/messages", `{"text":"hi\u0000"}`, "text"},
		{"POST", "/runs/" + e.run.ID + "/keys", `{"keys":[{"key":"Enter"},{"paste":"\u0000"}]}`, "keys[1].paste"},
		{"POST", "/hosts", `{"name":"h\u0000"}`, "name"},
	} {
		code, body := e.ask(c.method, c.path, c.body)
		if got := errorOf(t, body); code != 400 || got.Code != wire.CodeValidationFailed || got.Details["field"] != c.field {
			t.Errorf("%s %s %s: %d %s, want 400 naming %s", c.method, c.path, c.body, code, body, c.field)
		}
	}
	// In a query value too.
	if code, body := e.ask("GET", "/events?topic=run.%00", ""); code != 400 || errorOf(t, body).Details["field"] != "topic" {
		t.Errorf("GET /events?topic=run.%%00: %d %s", code, body)
	}
}

// Boolean query parameters take true, false, 1 and 0; anything else is a
// 400 naming the parameter (it was read as false).
func TestBooleanQueryParameters(t *testing.T) {
	t.Parallel()
	e := newReachEnv(t)
	gone := e.env.project("Gone")
	e.must(200, "DELETE", "/api/v1/projects/"+gone.Slug, nil, nil)
	for q, want := range map[string]bool{"": false, "?include_archived=true": true, "?include_archived=1": true,
		"?include_archived=false": false, "?include_archived=0": false} {
		var l wire.ProjectList
		e.must(200, "GET", "/api/v1/projects"+q, nil, &l)
		has := slices.ContainsFunc(l.Projects, func(p wire.Project) bool { return p.ID == gone.ID })
		if has != want {
			t.Errorf("GET /projects%s lists the archived project: %v, want %v", q, has, want)
		}
	}
	for _, path := range []string{"/projects?include_archived=yes", "/runs/" + e.run.ID + "/diff?stat=yes",
		"/runs/" + e.run.ID + "/logs?follow=2", "/projects?include_archived="} {
		name := path[strings.Index(path, "?")+1 : strings.Index(path, "=")]
		code, body := e.ask("GET", path, "")
		if got := errorOf(t, body); code != 400 || got.Details["field"] != name {
			t.Errorf("GET %s: %d %s, want 400 naming %s", path, code, body, name)
		}
	}
}

// Junk in the {id} or {ref} of every route is never a 500: a 404 (or,
// for a {ref} of a request whose body is refused first, a 400).
func TestJunkIDsNeverFail(t *testing.T) {
	t.Parallel()
	e := newReachEnv(t)
	junk := []string{"%7B%7D", "urn:uuid:", "00000000-0000-0000-0000-00000000000g", "00000000-0000-4000-8000-000000000000x",
		"0000000000000000000000000000000000000", "%E2%80%8B", "..%2F..", "a%0Ab", strings.Repeat("f", 300)}
	for _, rt := range e.apiRoutes() {
		if !strings.Contains(rt[1], "{") {
			continue
		}
		for _, j := range junk {
			path := strings.NewReplacer("{ref}", j, "{id}", j, "{token}", j).Replace(rt[1])
			code, body := e.ask(rt[0], path, `{}`)
			if code >= 500 {
				t.Errorf("%s %s: %d %s", rt[0], path, code, body)
			}
			// An answer link's token that names nothing is one that no
			// longer holds (410), so that a link's answer never says
			// whether another exists; text no token can be is a 404.
			if strings.Contains(rt[1], "{token}") {
				if code != 410 && code != 404 {
					t.Errorf("%s %s: %d %.200s, want 410 or 404", rt[0], path, code, body)
				}
				continue
			}
			// An {id} is judged first; a {ref} (a slug or a name) may be
			// looked up after the body was.
			if code != 404 && (strings.Contains(rt[1], "{id}") || code != 400) {
				t.Errorf("%s %s: %d %.200s, want 404", rt[0], path, code, body)
			}
		}
	}
}
