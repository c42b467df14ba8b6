package mcpserver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"pam/internal/apiclient"
	"pam/internal/mcpserver"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

func TestMain(m *testing.M) { storetest.Main(m) }

const runID = "0d9e5a1c-3b7e-4a53-9d8f-2a5b8c9d0e1f"

// fakeOrchestrator answers the tool routes with canned answers and
// records what it was asked.
type fakeOrchestrator struct {
	mu      sync.Mutex
	got     []string
	answers map[string]struct {
		code int
		body string
	}
}

func (f *fakeOrchestrator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	key := r.Method + " " + r.URL.RequestURI()
	f.mu.Lock()
	f.got = append(f.got, strings.TrimSpace(key+" "+string(b))+" auth="+r.Header.Get("Authorization"))
	a, ok := f.answers[r.Method+" "+r.URL.Path]
	f.mu.Unlock()
	if !ok {
		a.code, a.body = 404, `{"error":{"code":"not_found","message":"work item not found","details":{}}}`
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.code)
	_, _ = io.WriteString(w, a.body)
}

// connect serves pam's tools over an in-memory transport for a run whose
// orchestrator is at url, and returns the client's session.
func connect(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	c, err := apiclient.New(url, "the-signal-token", "")
	if err != nil {
		t.Fatal(err)
	}
	srv := mcpserver.New(mcpserver.Options{Run: mcpserver.Run{ID: runID, Attempt: 1, APIURL: url, Token: "the-signal-token"}, Client: c, Version: "test"})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls a tool; a protocol error fails the test (a tool error is
// the result's IsError).
func call(t *testing.T, cs *mcp.ClientSession, name string, args any) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return res, strings.Join(text, "\n")
}

// TestToolsCallTheRoutes: each tool is one call of its route with the
// run's signal token; create_work_item's "root" is the route's null.
func TestToolsCallTheRoutes(t *testing.T) {
	t.Parallel()
	item := `{"id":"w1","project_id":"p1","parent_id":null,"kind":"task","title":"T","body":"","status":"todo","path":"w1","position":0,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`
	base := "/api/internal/runs/" + runID
	f := &fakeOrchestrator{answers: map[string]struct {
		code int
		body string
	}{
		"GET " + base + "/work-items":       {200, `{"work_items":[` + item + `]}`},
		"POST " + base + "/work-items":      {201, item},
		"GET " + base + "/work-items/w1":    {200, item},
		"PATCH " + base + "/work-items/w1":  {200, item},
		"POST " + base + "/progress":        {202, `{"result":"applied"}`},
		"PATCH " + base + "/work-items/bad": {409, `{"error":{"code":"illegal_transition","message":"run x is exited","details":{"status":"exited"}}}`},
	}}
	ts := httptest.NewServer(f)
	defer ts.Close()
	cs := connect(t, ts.URL)

	res, text := call(t, cs, wire.ToolListWorkItems, map[string]any{"status": "todo"})
	var list wire.WorkItemList
	if err := json.Unmarshal([]byte(text), &list); res.IsError || err != nil || len(list.WorkItems) != 1 || list.WorkItems[0].ID != "w1" {
		t.Errorf("list: %v %s", res.IsError, text)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{wire.ToolListWorkItems, nil},
		{wire.ToolCreateWorkItem, map[string]any{"title": "T", "parent_id": "root"}},
		{wire.ToolCreateWorkItem, map[string]any{"title": "T", "kind": "epic", "body": "b"}},
		{wire.ToolGetWorkItem, map[string]any{"id": "w1"}},
		{wire.ToolUpdateWorkItem, map[string]any{"id": "w1", "status": "done"}},
		{wire.ToolReportProgress, map[string]any{"text": "half way"}},
	} {
		if res, text := call(t, cs, c.tool, c.args); res.IsError {
			t.Errorf("%s %v: %s", c.tool, c.args, text)
		}
	}
	if res, text := call(t, cs, wire.ToolUpdateWorkItem, map[string]any{"id": "bad", "title": "x"}); !res.IsError || !strings.Contains(text, "no longer live") {
		t.Errorf("refused update: %v %q", res.IsError, text)
	}
	auth := " auth=Bearer the-signal-token"
	want := []string{
		"GET " + base + "/work-items?status=todo" + auth,
		"GET " + base + "/work-items" + auth,
		"POST " + base + `/work-items {"title":"T","parent_id":null}` + auth,
		"POST " + base + `/work-items {"title":"T","kind":"epic","body":"b"}` + auth,
		"GET " + base + "/work-items/w1" + auth,
		"PATCH " + base + `/work-items/w1 {"status":"done"}` + auth,
		"POST " + base + `/progress {"text":"half way"}` + auth,
		"PATCH " + base + `/work-items/bad {"title":"x"}` + auth,
	}
	if !slices.Equal(f.got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(f.got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBadArgumentsAreToolErrors: arguments the schemas or pam mcp refuse
// are tool errors naming what is wrong, and reach no route; the session
// goes on.
func TestBadArgumentsAreToolErrors(t *testing.T) {
	t.Parallel()
	f := &fakeOrchestrator{}
	ts := httptest.NewServer(f)
	defer ts.Close()
	cs := connect(t, ts.URL)
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{wire.ToolCreateWorkItem, map[string]any{}, "title"},
		{wire.ToolCreateWorkItem, map[string]any{"title": 5}, "title"},
		{wire.ToolCreateWorkItem, map[string]any{"title": "T", "colour": "red"}, "colour"},
		{wire.ToolCreateWorkItem, map[string]any{"title": "T", "kind": "story"}, "kind"},
		{wire.ToolCreateWorkItem, map[string]any{"title": "T", "parent_id": ""}, "parent_id"},
		{wire.ToolCreateWorkItem, map[string]any{"title": "T", "parent_id": nil}, "parent_id"},
		{wire.ToolGetWorkItem, map[string]any{}, "id"},
		{wire.ToolUpdateWorkItem, map[string]any{"id": "w1"}, "at least one of"},
		{wire.ToolUpdateWorkItem, map[string]any{"id": "w1", "status": "finished"}, "status"},
		{wire.ToolListWorkItems, map[string]any{"status": "blocked"}, "status"},
		{wire.ToolReportProgress, map[string]any{"text": ""}, "text"},
		{wire.ToolReportProgress, map[string]any{"text": strings.Repeat("x", wire.MaxProgressText+1)}, "text"},
	} {
		res, text := call(t, cs, c.tool, c.args)
		if !res.IsError || !strings.Contains(text, c.want) {
			t.Errorf("%s %v: isError %v, %q; want an error naming %s", c.tool, c.args, res.IsError, text, c.want)
		}
	}
	if len(f.got) != 0 {
		t.Errorf("refused arguments reached the orchestrator: %q", f.got)
	}
}

// TestUnreachableOrchestratorIsAToolError: nothing listens where the
// orchestrator should be; every tool says so, and the server lives on.
func TestUnreachableOrchestratorIsAToolError(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close()
	cs := connect(t, url)
	for range 2 {
		res, text := call(t, cs, wire.ToolCreateWorkItem, map[string]any{"title": "T"})
		if !res.IsError || !strings.Contains(text, "could not be reached") || !strings.Contains(text, url) {
			t.Errorf("isError %v, %q", res.IsError, text)
		}
	}
	if err := cs.Ping(t.Context(), nil); err != nil {
		t.Errorf("the server is gone: %v", err)
	}
}

// TestToolSchemasSayWhatToDo: every tool and every argument is described,
// objects take no argument they do not name, and pam's name is pam.
func TestToolSchemasSayWhatToDo(t *testing.T) {
	t.Parallel()
	cs := connect(t, "http://127.0.0.1:1")
	if got := cs.InitializeResult().ServerInfo.Name; got != wire.MCPServerName {
		t.Errorf("server name %q", got)
	}
	if cs.InitializeResult().Instructions == "" {
		t.Error("no instructions")
	}
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 30 {
			t.Errorf("%s: description %q", tool.Name, tool.Description)
		}
		b, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Type                 string
			Properties           map[string]struct{ Description string }
			AdditionalProperties *bool `json:"additionalProperties"`
		}
		if err := json.Unmarshal(b, &s); err != nil || s.Type != "object" || s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("%s: input schema %s", tool.Name, b)
		}
		for name, p := range s.Properties {
			if len(p.Description) < 10 {
				t.Errorf("%s.%s: description %q", tool.Name, name, p.Description)
			}
		}
	}
	slices.Sort(names)
	want := slices.Sorted(slices.Values(wire.MCPTools))
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
}
