package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run go test -update to accept):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func item(id, parent, kind, status, title string) wire.WorkItem {
	w := wire.WorkItem{ID: id, Kind: kind, Status: status, Title: title}
	if parent != "" {
		w.ParentID = &parent
	}
	return w
}

// treeItems is a 3-level hierarchy in the server's tree order, with two
// roots, siblings at every level and a last child that has children.
func treeItems() []wire.WorkItem {
	return []wire.WorkItem{
		item("11111111-aaaa", "", "milestone", "doing", "Launch v1"),
		item("22222222-aaaa", "11111111-aaaa", "epic", "doing", "Backend"),
		item("33333333-aaaa", "22222222-aaaa", "task", "done", "Schema"),
		item("44444444-aaaa", "22222222-aaaa", "task", "todo", "REST API"),
		item("55555555-aaaa", "11111111-aaaa", "epic", "todo", "Dashboard"),
		item("66666666-aaaa", "55555555-aaaa", "task", "todo", "Board view"),
		item("77777777-aaaa", "66666666-aaaa", "subtask", "cancelled", "Drag and drop"),
		item("88888888-aaaa", "", "task", "todo", "Write README"),
	}
}

func TestRenderTree(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	renderTree(&b, treeItems())
	golden(t, "tree.golden", b.String())
}

// A filtered list can lack an item's parent: the item is drawn as a root.
func TestRenderTreeOrphans(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	items := treeItems()
	renderTree(&b, []wire.WorkItem{items[2], items[3], items[6]})
	want := "task  done  Schema  (33333333)\ntask  todo  REST API  (44444444)\nsubtask  cancelled  Drag and drop  (77777777)\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// fakeAPI answers like the orchestrator from a route table and records
// each request's method, path, query and body.
type fakeAPI struct {
	mu     sync.Mutex
	routes map[string]func(w http.ResponseWriter, r *http.Request, body []byte)
	log    []string
}

func newFakeAPI(t *testing.T, e *testEnv) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{routes: map[string]func(http.ResponseWriter, *http.Request, []byte){}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	e.setenv("PAM_URL", srv.URL)
	e.setenv("PAM_TOKEN", testToken)
	return f, srv
}

func (f *fakeAPI) handle(pattern string, status int, body string) {
	f.routes[pattern] = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	line := r.Method + " " + r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		line += "?" + r.URL.RawQuery
	}
	if len(body) > 0 {
		line += " " + string(body)
	}
	f.mu.Lock()
	f.log = append(f.log, line)
	h, ok := f.routes[r.Method+" "+r.URL.Path]
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		w.WriteHeader(401)
		io.WriteString(w, `{"error":{"code":"unauthorized","message":"missing or invalid token","details":null}}`)
		return
	}
	if !ok {
		w.WriteHeader(404)
		io.WriteString(w, `{"error":{"code":"not_found","message":"no route","details":null}}`)
		return
	}
	h(w, r, body)
}

func (f *fakeAPI) last() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.log) == 0 {
		return ""
	}
	return f.log[len(f.log)-1]
}

const projectJSON = `{"id":"8b0c2f7e-0000-4000-8000-000000000001","name":"Demo","slug":"demo","description":"d","status":"active","auto_done":true,"auto_continue":true,"repo":null,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`

// itemID is the id of itemJSON; parentID1 and parentID2 are ids of other
// items: commands pass whole ids to the API as they are.
const (
	itemID    = "9c0c2f7e-0000-4000-8000-000000000002"
	parentID1 = "9c0c2f7e-0000-4000-8000-0000000000a1"
	parentID2 = "9c0c2f7e-0000-4000-8000-0000000000a2"
)

const itemJSON = `{"id":"9c0c2f7e-0000-4000-8000-000000000002","project_id":"8b0c2f7e-0000-4000-8000-000000000001","parent_id":null,"kind":"task","title":"T","body":"","status":"todo","path":"9c0c2f7e-0000-4000-8000-000000000002","position":0,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`

func TestClientCommandsSendWhatWasGiven(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	f.handle("POST /api/v1/projects", 201, projectJSON)
	f.handle("PATCH /api/v1/projects/demo", 200, projectJSON)
	f.handle("DELETE /api/v1/projects/demo", 200, projectJSON)
	f.handle("POST /api/v1/projects/demo/work-items", 201, itemJSON)
	f.handle("PATCH /api/v1/work-items/"+itemID, 200, itemJSON)
	f.handle("DELETE /api/v1/work-items/"+itemID, 204, "")
	f.handle("GET /api/v1/projects/demo/work-items", 200, `{"work_items":[`+itemJSON+`]}`)

	tests := []struct {
		args []string
		want string // the request line
	}{
		{[]string{"project", "create", "--name", "Demo"}, `POST /api/v1/projects {"name":"Demo"}`},
		{[]string{"project", "create", "--name", "Demo", "--slug", "d", "--description", "", "--auto-done=false"}, `POST /api/v1/projects {"name":"Demo","slug":"d","description":"","auto_done":false}`},
		{[]string{"project", "update", "demo", "--description", "new"}, `PATCH /api/v1/projects/demo {"description":"new"}`},
		{[]string{"project", "update", "--auto-done=false", "demo"}, `PATCH /api/v1/projects/demo {"auto_done":false}`},
		{[]string{"project", "update", "--auto-continue=false", "demo"}, `PATCH /api/v1/projects/demo {"auto_continue":false}`},
		{[]string{"project", "create", "--name", "Demo", "--auto-continue=false"}, `POST /api/v1/projects {"name":"Demo","auto_continue":false}`},
		{[]string{"project", "archive", "demo"}, `DELETE /api/v1/projects/demo`},
		{[]string{"item", "add", "demo", "--kind", "task", "--title", "T"}, `POST /api/v1/projects/demo/work-items {"kind":"task","title":"T"}`},
		{[]string{"item", "add", "demo", "--kind", "task", "--title", "T", "--parent", parentID1, "--status", "doing", "--body", "b"}, `POST /api/v1/projects/demo/work-items {"kind":"task","title":"T","body":"b","parent_id":"` + parentID1 + `","status":"doing"}`},
		{[]string{"item", "move", itemID, "--root"}, `PATCH /api/v1/work-items/` + itemID + ` {"parent_id":null}`},
		{[]string{"item", "move", itemID, "--parent", parentID2, "--status", "done", "--position", "0"}, `PATCH /api/v1/work-items/` + itemID + ` {"status":"done","position":0,"parent_id":"` + parentID2 + `"}`},
		{[]string{"item", "update", itemID, "--title", "New"}, `PATCH /api/v1/work-items/` + itemID + ` {"title":"New"}`},
		{[]string{"item", "delete", itemID}, `DELETE /api/v1/work-items/` + itemID},
		{[]string{"item", "list", "demo", "--status", "todo", "--kind", "task"}, `GET /api/v1/projects/demo/work-items?kind=task&status=todo`},
	}
	for _, tt := range tests {
		e.mustPam(tt.args...)
		if got := f.last(); got != tt.want {
			t.Errorf("pam %s sent\n  %s\nwant\n  %s", strings.Join(tt.args, " "), got, tt.want)
		}
	}
}

func TestJSONOutputIsTheAPIShape(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	f.handle("GET /api/v1/projects", 200, `{"projects":[`+projectJSON+`]}`)
	f.handle("GET /api/v1/projects/demo", 200, projectJSON)
	f.handle("GET /api/v1/events", 200, `{"events":[]}`)

	var list map[string][]map[string]any
	if err := json.Unmarshal([]byte(e.mustPam("project", "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list["projects"]) != 1 || list["projects"][0]["slug"] != "demo" {
		t.Errorf("project list --json: %v", list)
	}
	var one, api map[string]any
	json.Unmarshal([]byte(e.mustPam("project", "show", "demo", "--json")), &one)
	json.Unmarshal([]byte(projectJSON), &api)
	if fmt.Sprint(one) != fmt.Sprint(api) {
		t.Errorf("project show --json\n%v\nwant\n%v", one, api)
	}
	if out := e.mustPam("events", "--json"); !strings.Contains(out, `"events": []`) {
		t.Errorf("events --json with no events: %s", out)
	}
	if out := e.mustPam("project", "list"); !strings.Contains(out, "SLUG") || !strings.Contains(out, "demo") {
		t.Errorf("project list table:\n%s", out)
	}
}

func TestAPIErrorExitsOne(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	f.handle("GET /api/v1/projects/nope", 404, `{"error":{"code":"not_found","message":"project \"nope\" not found","details":null}}`)
	f.handle("POST /api/v1/projects", 400, `{"error":{"code":"validation_failed","message":"name must be 1-200 characters","details":{"field":"name"}}}`)
	f.handle("DELETE /api/v1/work-items/"+itemID, 409, `{"error":{"code":"has_children","message":"work item has children","details":null}}`)
	f.handle("GET /api/v1/projects", 502, `<html>Bad Gateway</html>`)

	tests := []struct {
		args []string
		want string
	}{
		{[]string{"project", "show", "nope"}, "pam: project \"nope\" not found\n"},
		{[]string{"project", "create", "--name", "x"}, "pam: name must be 1-200 characters\n"},
		{[]string{"item", "delete", itemID}, "pam: work item has children\n"},
		{[]string{"project", "list"}, "pam: Bad Gateway\n"},
	}
	for _, tt := range tests {
		r := e.pam(tt.args...)
		if r.code != 1 || r.stderr != tt.want || r.stdout != "" {
			t.Errorf("pam %s: %v\nwant exit 1 and stderr %q", strings.Join(tt.args, " "), r, tt.want)
		}
	}

	e.setenv("PAM_TOKEN", "wrong")
	r := e.pam("project", "show", "demo")
	if r.code != 1 || !strings.Contains(r.stderr, "missing or invalid token") {
		t.Errorf("wrong token: %v", r)
	}
}

func sseEvent(w io.Writer, seq int64, topic string) {
	ev := wire.Event{Seq: seq, Topic: topic, Payload: json.RawMessage(`{"n":` + fmt.Sprint(seq) + `}`), CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	b, _ := json.Marshal(ev)
	fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", seq, topic, b)
	w.(http.Flusher).Flush()
}

// events --follow prints each event, resumes after a dropped stream from
// the last seq seen, and exits 0 when interrupted.
func TestEventsFollowReconnects(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	e.reconnectMin = 10 * time.Millisecond

	f, _ := newFakeAPI(t, e)
	var mu sync.Mutex
	var cursors []string
	conns := 0
	f.routes["GET /api/v1/events/stream"] = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		mu.Lock()
		conns++
		n := conns
		cursors = append(cursors, r.Header.Get("Last-Event-ID")+"|"+r.URL.Query().Get("after")+"|"+r.URL.Query().Get("topic"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		switch n {
		case 1:
			io.WriteString(w, ": hello\n\n")
			sseEvent(w, 4, "run.started")
			sseEvent(w, 5, "run.progress")
			// and the connection drops
		case 2:
			w.WriteHeader(503)
			io.WriteString(w, `{"error":{"code":"unavailable","message":"restarting","details":null}}`)
		default:
			sseEvent(w, 6, "run.exited")
			<-r.Context().Done()
		}
	}

	for _, asJSON := range []bool{false, true} {
		mu.Lock()
		conns, cursors = 0, nil
		mu.Unlock()
		ctx, cancel := context.WithCancel(t.Context())
		var out, errb pamtest.Buffer
		done := make(chan int)
		args := []string{"events", "--follow", "--after", "3", "--topic", "run.*"}
		if asJSON {
			args = append(args, "--json")
		}
		env := e.env()
		go func() { done <- env.Main(ctx, args, &out, &errb) }()
		eventually.Within(eventually.Medium, func() bool { return strings.Count(out.String(), "\n") >= 3 })
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("exit %d after interrupt; stderr:\n%s", code, errb.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if asJSON {
			for i, want := range []int64{4, 5, 6} {
				var ev wire.Event
				if err := json.Unmarshal([]byte(lines[i]), &ev); err != nil || ev.Seq != want {
					t.Errorf("line %d %q: %v", i, lines[i], err)
				}
			}
		} else {
			want := []string{
				`4  2026-01-02T03:04:05Z  run.started  {"n":4}`,
				`5  2026-01-02T03:04:05Z  run.progress  {"n":5}`,
				`6  2026-01-02T03:04:05Z  run.exited  {"n":6}`,
			}
			if strings.Join(lines, "\n") != strings.Join(want, "\n") {
				t.Errorf("output:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
			}
		}
		mu.Lock()
		got := strings.Join(cursors, " ")
		mu.Unlock()
		if got != "3|3|run.* 5|5|run.* 5|5|run.*" {
			t.Errorf("cursors (Last-Event-ID|after|topic) %s", got)
		}
		if !strings.Contains(errb.String(), "reconnecting") {
			t.Errorf("no reconnect message on stderr: %q", errb.String())
		}
	}
}

// A refusal (401) ends --follow with exit 1 instead of retrying forever.
func TestEventsFollowStopsOnRefusal(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	newFakeAPI(t, e)
	e.setenv("PAM_TOKEN", "wrong")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := e.pamCtx(ctx, "events", "--follow")
	if r.code != 1 || !strings.Contains(r.stderr, "invalid token") {
		t.Errorf("%v", r)
	}
}

func TestEventsList(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	f.handle("GET /api/v1/events", 200, `{"events":[{"seq":1,"topic":"project.created","run_id":null,"project_id":"p","host_id":null,"actor":null,"payload":{"a": 1},"created_at":"2026-01-02T03:04:05Z"}]}`)
	out := e.mustPam("events", "--after", "0", "--limit", "5", "--topic", "project.*")
	if f.last() != "GET /api/v1/events?limit=5&topic=project.%2A" {
		t.Errorf("request %s", f.last())
	}
	want := "SEQ  TIME                  TOPIC            PAYLOAD\n1    2026-01-02T03:04:05Z  project.created  {\"a\":1}\n"
	if out != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}

func TestDoctor(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	dir := e.dir
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			w.WriteHeader(404)
			return
		}
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer srv.Close()
	e.setenv("PAM_URL", srv.URL)
	writeToken(t, dir, testToken)
	e.setenv("PAM_DATABASE_URL", "postgres://pam:secret@db/pam")

	r := e.pam("doctor", "--json")
	var got struct {
		OK     bool    `json:"ok"`
		Checks []check `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v\n%v", err, r)
	}
	byName := map[string]check{}
	for _, c := range got.Checks {
		byName[c.Name] = c
	}
	for _, name := range []string{"data dir", "token", "database", "orchestrator"} {
		if !byName[name].OK {
			t.Errorf("%s: %+v", name, byName[name])
		}
	}
	if strings.Contains(r.stdout, "secret") {
		t.Errorf("doctor shows the database password:\n%s", r.stdout)
	}
	if _, ok := byName["tmux"]; !ok {
		t.Error("no tmux check")
	}
	if c := byName["git"]; !c.OK || !strings.Contains(c.Detail, "git version") {
		t.Errorf("git check %+v", c)
	}
	if got.OK != (r.code == 0) {
		t.Errorf("ok %v but exit %d", got.OK, r.code)
	}

	// Break things: an open token file, an unreachable orchestrator.
	os.Chmod(filepath.Join(dir, "token"), 0o644)
	srv.Close()
	r = e.pam("doctor")
	if r.code != 1 {
		t.Fatalf("broken setup: %v", r)
	}
	for _, want := range []string{"FAIL  token", "chmod 600", "FAIL  orchestrator", "fix: start pam serve"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "checks failed") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	if out := e.mustPam("version"); !strings.HasPrefix(out, "pam ") || !strings.Contains(out, "go1.") {
		t.Errorf("version:\n%s", out)
	}
	var b buildInfo
	if err := json.Unmarshal([]byte(e.mustPam("version", "--json")), &b); err != nil || b.Version == "" || b.GoVersion == "" {
		t.Errorf("version --json: %+v %v", b, err)
	}
}

// TestDoctorListsProviders: doctor shows every provider of this host's
// catalog, the binary a worker would run (or that it is missing), and
// which of the variables its CLI would be passed are set: names only,
// never a value. Without tmux it says to install tmux or to use the
// built-in PTY holder (PAM_EXECUTOR=pty).
func TestDoctorListsProviders(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	bin := t.TempDir()
	for _, name := range []string{"claude", "my-agent"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := t.TempDir()
	os.WriteFile(filepath.Join(conf, "providers.toml"), []byte(`
[providers.mine]
binary = "`+filepath.Join(bin, "my-agent")+`"
pass_env = ["MINE_KEY"]
`), 0o600)
	const secret = "sk-ant-doctor-must-not-show-this"
	e.setenv("PATH", bin) // no tmux there
	e.setenv("PAM_CONFIG_DIR", conf)
	e.setenv("ANTHROPIC_API_KEY", secret)
	e.setenv("PAM_PASS_ENV", "CORP_TOKEN")
	e.setenv("PAM_URL", "http://127.0.0.1:1")

	r := e.pam("doctor", "--json")
	var got struct {
		Checks    []check          `json:"checks"`
		Providers []doctorProvider `json:"providers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v\n%v", err, r)
	}
	type row struct {
		resolved string
		passEnv  string
	}
	want := map[string]row{
		"claude": {filepath.Join(bin, "claude"), "ANTHROPIC_API_KEY=set CORP_TOKEN=unset"},
		"codex":  {"", "CORP_TOKEN=unset OPENAI_API_KEY=unset"},
		"gemini": {"", "CORP_TOKEN=unset GEMINI_API_KEY=unset GOOGLE_API_KEY=unset"},
		"grok":   {"", "CORP_TOKEN=unset XAI_API_KEY=unset"},
		"mine":   {filepath.Join(bin, "my-agent"), "CORP_TOKEN=unset MINE_KEY=unset"},
		"shell":  {"/bin/sh", "CORP_TOKEN=unset"},
	}
	if len(got.Providers) != len(want) {
		t.Errorf("providers %+v, want %d", got.Providers, len(want))
	}
	for _, p := range got.Providers {
		w, ok := want[p.Name]
		if !ok {
			t.Errorf("unexpected provider %+v", p)
			continue
		}
		resolved := ""
		if p.Resolved != nil {
			resolved = *p.Resolved
		}
		var vars []string
		for _, v := range p.PassEnv {
			vars = append(vars, v.Name+"="+map[bool]string{true: "set", false: "unset"}[v.Set])
		}
		if resolved != w.resolved || strings.Join(vars, " ") != w.passEnv || (resolved == "") != (p.Error != "") {
			t.Errorf("%s: resolved %q (error %q), pass_env %q; want %q, %q", p.Name, resolved, p.Error, vars, w.resolved, w.passEnv)
		}
	}
	byName := map[string]check{}
	for _, c := range got.Checks {
		byName[c.Name] = c
	}
	if c := byName["providers"]; !c.OK || !strings.Contains(c.Detail, "3 of 6") {
		t.Errorf("providers check %+v", c)
	}
	if c := byName["tmux"]; c.OK || !strings.Contains(c.Fix, "install tmux") || !strings.Contains(c.Fix, "PAM_EXECUTOR=pty") {
		t.Errorf("tmux check without tmux on PATH: %+v", c)
	}
	if c := byName["executor"]; !c.OK || !strings.Contains(c.Detail, "tmux") {
		t.Errorf("executor check: %+v", c)
	}
	text := e.pam("doctor")
	for _, out := range []string{r.stdout, text.stdout} {
		if strings.Contains(out, secret) {
			t.Errorf("doctor shows a credential's value:\n%s", out)
		}
	}
	if !strings.Contains(text.stdout, "ANTHROPIC_API_KEY (set)") || !strings.Contains(text.stdout, "missing: codex") {
		t.Errorf("doctor's providers table:\n%s", text.stdout)
	}

	// A PAM_PASS_ENV the worker would refuse fails the check; the
	// providers are still listed.
	e.setenv("PAM_PASS_ENV", "PAM_WORKER_TOKEN")
	r = e.pam("doctor", "--json")
	got.Checks, got.Providers = nil, nil
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Checks {
		if c.Name == "providers" && (c.OK || !strings.Contains(c.Detail, "PAM_PASS_ENV")) {
			t.Errorf("bad PAM_PASS_ENV: %+v", c)
		}
	}
	if len(got.Providers) != len(want) {
		t.Errorf("providers not listed with a bad PAM_PASS_ENV: %+v", got.Providers)
	}
}

// TestDoctorPTYExecutor: with PAM_EXECUTOR=pty doctor checks the
// built-in PTY holder (a PTY opens) instead of tmux, so a host without
// tmux passes that check.
func TestDoctorPTYExecutor(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	e.setenv("PATH", t.TempDir()) // no tmux there
	e.setenv("PAM_EXECUTOR", "pty")
	e.setenv("PAM_URL", "http://127.0.0.1:1")
	r := e.pam("doctor", "--json")
	var got struct {
		Checks []check `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v\n%v", err, r)
	}
	var exec *check
	for i, c := range got.Checks {
		if c.Name == "tmux" {
			t.Errorf("a tmux check with PAM_EXECUTOR=pty: %+v", c)
		}
		if c.Name == "executor" {
			exec = &got.Checks[i]
		}
	}
	if exec == nil || !exec.OK || !strings.Contains(exec.Detail, "pty") || !strings.Contains(exec.Detail, "0 live holder") {
		t.Fatalf("executor check: %+v", exec)
	}
}

// pam events prints the newest events, oldest first (--after N reads the
// history after N instead), and --follow starts live, at the journal's
// position, not with a replay of everything retained.
func TestEventsNewestAndLiveFollow(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	const head = 2500 // seqs 1..2500; every 50th is rare.x
	topicOf := func(seq int64) string {
		if seq%50 == 0 {
			return "rare.x"
		}
		return "run.progress"
	}
	f.routes["GET /api/v1/events"] = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		q := r.URL.Query()
		after, _ := strconv.ParseInt(cmp.Or(q.Get("after"), "0"), 10, 64)
		limit, _ := strconv.Atoi(cmp.Or(q.Get("limit"), "100"))
		if limit < 1 || limit > 1000 {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"code":"invalid","message":"limit","details":null}}`)
			return
		}
		evs := []wire.Event{}
		for s := after + 1; s <= head && len(evs) < limit; s++ {
			if q.Get("topic") == "rare.*" && topicOf(s) != "rare.x" {
				continue
			}
			evs = append(evs, wire.Event{Seq: s, Topic: topicOf(s), Payload: json.RawMessage(`{}`)})
		}
		w.Header().Set(wire.HeaderEventSeq, strconv.Itoa(head))
		json.NewEncoder(w).Encode(wire.EventList{Events: evs})
	}
	seqs := func(args ...string) []int64 {
		t.Helper()
		var l wire.EventList
		if err := json.Unmarshal([]byte(e.mustPam(append([]string{"events", "--json"}, args...)...)), &l); err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, ev := range l.Events {
			out = append(out, ev.Seq)
		}
		return out
	}
	if got := seqs(); len(got) != 100 || got[0] != head-99 || got[99] != head {
		t.Errorf("pam events: %d events, %v … %v; want the newest 100, %d to %d", len(got), got[:min(3, len(got))], got[max(0, len(got)-3):], head-99, head)
	}
	if got := seqs("--limit", "3", "--topic", "rare.*"); !slices.Equal(got, []int64{2400, 2450, 2500}) {
		t.Errorf("pam events --limit 3 --topic rare.*: %v", got)
	}
	if got := seqs("--limit", "1500"); len(got) != 1500 || got[0] != head-1499 || got[1499] != head {
		t.Errorf("pam events --limit 1500: %d events", len(got))
	}
	if got := seqs("--after", "10", "--limit", "2"); !slices.Equal(got, []int64{11, 12}) {
		t.Errorf("pam events --after 10: %v", got)
	}

	var mu sync.Mutex
	var cursors []string
	f.routes["GET /api/v1/events/stream"] = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		mu.Lock()
		cursors = append(cursors, r.URL.Query().Get("after"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if r.URL.Query().Get("after") == "0" || !r.URL.Query().Has("after") {
			sseEvent(w, 1, "run.progress") // a replay from the start
		}
		sseEvent(w, head+1, "run.started")
		<-r.Context().Done()
	}
	ctx, cancel := context.WithCancel(t.Context())
	var out, errb pamtest.Buffer
	done := make(chan int)
	env := e.env()
	go func() { done <- env.Main(ctx, []string{"events", "--follow", "--json"}, &out, &errb) }()
	eventually.Wait(t, eventually.Medium, "the live event", func() bool { return strings.Contains(out.String(), `"seq":2501`) })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Count(out.String(), "\n") != 1 || !slices.Equal(cursors, []string{strconv.Itoa(head)}) {
		t.Errorf("--follow printed %q from cursors %v; want only the live event, from after=%d", out.String(), cursors, head)
	}
}
