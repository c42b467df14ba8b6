package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"pam/internal/server"
	"pam/internal/wire"
)

// roleTokens creates an operator and a viewer token on e's database and
// returns the secrets of each role (admin is the adopted testToken).
func roleTokens(t *testing.T, e *env) map[string]string {
	t.Helper()
	out := map[string]string{wire.RoleAdmin: testToken}
	for _, role := range []string{wire.RoleOperator, wire.RoleViewer} {
		var ts wire.TokenSecret
		e.must(201, "POST", "/api/v1/tokens", wire.CreateToken{Name: "the-" + role, Role: role}, &ts)
		if ts.Token.Role != role || len(ts.Secret) != 32 {
			t.Fatalf("created %+v", ts)
		}
		out[role] = ts.Secret
	}
	return out
}

// contractAllows is what the roles may do, stated independently of the
// server's table: admin everything; operator everything but hosts'
// changes, tokens and notifications; viewer reads, the stream and pane
// watching (and the ticket that opens a pane), never keys, messages,
// attach or the lease. Every role may ask who it is.
func contractAllows(role, method, path string) bool {
	if role == wire.RoleAdmin || path == "/tokens/self" {
		return true
	}
	if strings.HasPrefix(path, "/tokens") || strings.HasPrefix(path, "/notifications") {
		return false
	}
	if strings.HasPrefix(path, "/hosts") && method != "GET" {
		return false
	}
	if role == wire.RoleOperator {
		return true
	}
	if path == "/runs/{id}/attach/ws" {
		return false
	}
	return method == "GET" || path == "/ws-tickets"
}

// TestRolesCoverEveryOperation walks every operation of openapi.json with
// a token of each role: each has an entry in the role table, the table
// agrees with the contract's roles, and the server answers 403 forbidden
// exactly where the table refuses.
func TestRolesCoverEveryOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	secrets := roleTokens(t, e)
	ops := spec(t).operations()
	if len(ops) < 40 {
		t.Fatalf("only %d operations in the document", len(ops))
	}
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		pattern := method + " /api/v1" + path
		need, ok := server.RouteRoleEntry(pattern)
		if !ok {
			t.Errorf("%s has no entry in the role table (it would be admin-only)", op)
			continue
		}
		if need == "public" {
			continue
		}
		url := e.url + "/api/v1" + strings.NewReplacer("{id}", uuid.NewString(), "{ref}", "no-such-ref").Replace(path)
		for _, role := range []string{wire.RoleAdmin, wire.RoleOperator, wire.RoleViewer} {
			want := contractAllows(role, method, path)
			if got := server.RoleAllows(role, pattern); got != want {
				t.Errorf("%s for %s: table allows %v, the contract %v", op, role, got, want)
			}
			code, body := roleCall(t, secrets[role], method, url)
			refused := code == 403 && errorOf(t, body).Code == wire.CodeForbidden
			if refused == want {
				t.Errorf("%s as %s: %d %s; want refused=%v", op, role, code, body, !want)
			}
		}
	}
}

// roleCall sends one request and returns its status and body (a stream's
// body is not read: its status is what counts).
func roleCall(t *testing.T, secret, method, url string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var body io.Reader
	if method != "GET" && method != "DELETE" {
		body = strings.NewReader(`{}`)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp.StatusCode, nil
	}
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 403 {
		checkAgainstSpec(t, method, resp, out)
	}
	return resp.StatusCode, out
}

// TestRoleFailsClosed: a route missing from the table is admin-only.
func TestRoleFailsClosed(t *testing.T) {
	t.Parallel()
	p := "POST /api/v1/some-route-nobody-listed"
	if server.RouteRole(p) != wire.RoleAdmin || server.RoleAllows(wire.RoleOperator, p) || !server.RoleAllows(wire.RoleAdmin, p) {
		t.Fatalf("an unlisted route is %s", server.RouteRole(p))
	}
}

// TestTokensLifecycle: create shows the secret once, list never shows it,
// self names the token, rotate refuses the old secret at once, revoke
// refuses it for good, the last admin cannot be revoked, and every
// change is journaled naming who made it.
func TestTokensLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ts wire.TokenSecret
	e.must(201, "POST", "/api/v1/tokens", wire.CreateToken{Name: "ci", Role: wire.RoleOperator}, &ts)
	var self wire.Token
	if code, body := e.callAs(ts.Secret, "GET", "/api/v1/tokens/self", nil); code != 200 {
		t.Fatalf("self: %d %s", code, body)
	} else if err := json.Unmarshal(body, &self); err != nil || self.Name != "ci" || self.Role != wire.RoleOperator {
		t.Fatalf("self: %s", body)
	}
	var list wire.TokenList
	e.must(200, "GET", "/api/v1/tokens", nil, &list)
	names := []string{}
	for _, tk := range list.Tokens {
		names = append(names, tk.Name+":"+tk.Role)
	}
	if fmt.Sprint(names) != "[admin:admin ci:operator]" {
		t.Fatalf("tokens %v", names)
	}
	if code, _ := e.call("POST", "/api/v1/tokens", wire.CreateToken{Name: "ci", Role: wire.RoleViewer}); code != 409 {
		t.Fatalf("a second ci: %d, want 409", code)
	}
	if code, body := e.call("POST", "/api/v1/tokens", wire.CreateToken{Name: "x", Role: "root"}); code != 400 || errorOf(t, body).Details["field"] != "role" {
		t.Fatalf("role root: %d %s", code, body)
	}

	// Rotate: the old secret is refused at once, the new one works.
	var rot wire.TokenSecret
	e.must(200, "POST", "/api/v1/tokens/"+ts.Token.ID+"/rotate", nil, &rot)
	if rot.Secret == ts.Secret || rot.Token.ID != ts.Token.ID {
		t.Fatalf("rotated %+v", rot)
	}
	if code, body := e.callAs(ts.Secret, "GET", "/api/v1/projects", nil); code != 401 || errorOf(t, body).Code != wire.CodeUnauthorized {
		t.Fatalf("old secret after rotate: %d %s", code, body)
	}
	if code, _ := e.callAs(rot.Secret, "GET", "/api/v1/projects", nil); code != 200 {
		t.Fatalf("new secret: %d", code)
	}
	// An operator cannot manage tokens.
	if code, body := e.callAs(rot.Secret, "GET", "/api/v1/tokens", nil); code != 403 || errorOf(t, body).Code != wire.CodeForbidden {
		t.Fatalf("operator lists tokens: %d %s", code, body)
	}
	// Events a token causes name it.
	if code, _ := e.callAs(rot.Secret, "POST", "/api/v1/projects", map[string]any{"name": "By CI"}); code != 201 {
		t.Fatalf("create project as ci: %d", code)
	}
	evs := e.events("project.created")
	if a := evs[len(evs)-1].Actor; a == nil || *a != "ci" {
		t.Fatalf("project.created actor %v, want ci", a)
	}

	// Revoke: refused for good; the name can be taken again.
	e.must(204, "DELETE", "/api/v1/tokens/"+ts.Token.ID, nil, nil)
	if code, _ := e.callAs(rot.Secret, "GET", "/api/v1/projects", nil); code != 401 {
		t.Fatalf("revoked secret: %d", code)
	}
	if code, _ := e.call("DELETE", "/api/v1/tokens/"+ts.Token.ID, nil); code != 404 {
		t.Fatalf("revoke twice: %d, want 404", code)
	}
	e.must(201, "POST", "/api/v1/tokens", wire.CreateToken{Name: "ci", Role: wire.RoleViewer}, nil)

	// The last admin stays.
	var admin wire.Token
	e.must(200, "GET", "/api/v1/tokens/self", nil, &admin)
	if admin.Name != wire.AdminTokenName || admin.Role != wire.RoleAdmin {
		t.Fatalf("the operator token is %+v, want the admin token named admin", admin)
	}
	if code, body := e.call("DELETE", "/api/v1/tokens/"+admin.ID, nil); code != 409 {
		t.Fatalf("revoke the last admin: %d %s", code, body)
	}

	created, revoked := e.events("token.created"), e.events("token.revoked")
	if len(created) != 2 || len(revoked) != 2 {
		t.Fatalf("%d token.created, %d token.revoked; want 2 and 2", len(created), len(revoked))
	}
	for _, ev := range append(created, revoked...) {
		if ev.Actor == nil || *ev.Actor != "admin" {
			t.Errorf("%s actor %v, want admin", ev.Topic, ev.Actor)
		}
		if strings.Contains(string(ev.Payload), ts.Secret) || strings.Contains(string(ev.Payload), rot.Secret) {
			t.Errorf("%s payload carries a secret: %s", ev.Topic, ev.Payload)
		}
	}
}

// TestActorNamesToken: the events of a person's actions on runs name the
// token that made them: the run created, its keys' attention change, its
// stop; pam's own decisions and the worker's signals name no token.
func TestActorNamesToken(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-actor", 4, "shell")
	var ts wire.TokenSecret
	e.must(201, "POST", "/api/v1/tokens", wire.CreateToken{Name: "carol", Role: wire.RoleOperator}, &ts)
	code, body := e.callAs(ts.Secret, "POST", "/api/v1/runs", map[string]any{"task_id": e.task.ID, "provider": "shell", "host_id": w.hostID})
	var r wire.Run
	if code != 202 || json.Unmarshal(body, &r) != nil {
		t.Fatalf("start as carol: %d %s", code, body)
	}
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == "spawning" })
	if code, _, body := e.signal(d.SignalToken, r.ID, sig("started", 1)); code != 202 {
		t.Fatalf("started: %d %s", code, body)
	}
	if code, body := e.callAs(ts.Secret, "POST", "/api/v1/runs/"+r.ID+"/stop", map[string]any{}); code != 202 {
		t.Fatalf("stop as carol: %d %s", code, body)
	}
	var evs struct {
		Events []wire.Event `json:"events"`
	}
	e.must(200, "GET", "/api/v1/runs/"+r.ID+"/events", nil, &evs)
	want := map[string]string{"run.created": "carol", "run.stopped": "carol", "run.started": "", "run.dispatched": ""}
	seen := map[string]bool{}
	for _, ev := range evs.Events {
		w, ok := want[ev.Topic]
		if !ok {
			continue
		}
		seen[ev.Topic] = true
		got := ""
		if ev.Actor != nil {
			got = *ev.Actor
		}
		if got != w {
			t.Errorf("%s actor %q, want %q", ev.Topic, got, w)
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("saw %v of %v", seen, want)
	}
}
