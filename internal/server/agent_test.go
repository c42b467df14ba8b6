package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"pam/internal/wire"
)

// pam's tools for the agent through their internal routes
// (docs/api.md#internal-api): the run's signal token, the run's project,
// a live run, a bounded rate, and every change naming the run.

// agentRun starts a run of taskID on w and brings it to running; it
// returns the run and its signal token.
func (e *runEnv) agentRun(w *fakeWorker, taskID string) runWithToken {
	e.t.Helper()
	r := e.start(map[string]any{"host_id": w.hostID, "task_id": taskID})
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })
	if code, _, body := e.signal(d.SignalToken, r.ID, sig(wire.SignalStarted, 1)); code != 202 {
		e.t.Fatalf("started: %d %s", code, body)
	}
	return runWithToken{Run: e.run(r.ID), token: d.SignalToken}
}

// tool calls an internal route of pam's tools for run with token.
func (e *runEnv) tool(token, method, runID, path string, body any) (int, []byte) {
	e.t.Helper()
	return e.callAs(token, method, "/api/internal/runs/"+runID+path, body)
}

// mustTool is tool that must answer want, decoding into v.
func (e *runEnv) mustTool(r runWithToken, want int, method, path string, body, v any) {
	e.t.Helper()
	code, out := e.tool(r.token, method, r.ID, path, body)
	if code != want {
		e.t.Fatalf("%s %s: %d, want %d: %s", method, path, code, want, out)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, out, err)
		}
	}
}

// refused checks an error answer's status, code and (if any) field.
func refused(t *testing.T, what string, code int, body []byte, wantCode int, wantErr, wantField string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("%s: %d %s, want %d %s", what, code, body, wantCode, wantErr)
		return
	}
	e := errorOf(t, body)
	if e.Code != wantErr {
		t.Errorf("%s: code %s (%s), want %s", what, e.Code, e.Message, wantErr)
	}
	if f, _ := e.Details["field"].(string); f != wantField {
		t.Errorf("%s: field %q, want %q (%s)", what, f, wantField, e.Message)
	}
}

// journaled finds the events of a topic whose payload names the item
// (work_item.*: payload id or work_item_id) or the run (run.*).
func (e *runEnv) journaled(topic wire.Topic, id string) []wire.Event {
	e.t.Helper()
	var l wire.EventList
	e.must(200, "GET", "/api/v1/events?after=0&limit=1000&topic="+string(topic), nil, &l)
	var out []wire.Event
	for _, ev := range l.Events {
		var p struct{ ID, WorkItemID, RunID string }
		var raw map[string]any
		_ = json.Unmarshal(ev.Payload, &raw)
		p.ID, _ = raw["id"].(string)
		p.WorkItemID, _ = raw["work_item_id"].(string)
		p.RunID, _ = raw["run_id"].(string)
		if p.ID == id || p.WorkItemID == id || p.RunID == id {
			out = append(out, ev)
		}
	}
	return out
}

func actorOf(ev wire.Event) string {
	if ev.Actor == nil {
		return "<null>"
	}
	return *ev.Actor
}

// TestAgentToolsStayInTheRunsProject: the run lists, reads, creates and
// changes items of its own project, whose changes name it as actor; an
// item of another project does not exist for it, nor as a parent.
func TestAgentToolsStayInTheRunsProject(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("agent-host", 4, "shell")
	r := e.agentRun(w, e.task.ID)
	actor := "agent:" + r.ID[:8]
	other := e.project("Other")
	foreign := e.item(other.Slug, "task", "Not yours", nil)

	var list wire.WorkItemList
	e.mustTool(r, 200, "GET", "/work-items", nil, &list)
	if len(list.WorkItems) != 1 || list.WorkItems[0].ID != e.task.ID {
		t.Fatalf("list: %+v, want the run's own task only", list.WorkItems)
	}
	var got wire.WorkItem
	e.mustTool(r, 200, "GET", "/work-items/"+e.task.ID, nil, &got)
	if got.ID != e.task.ID || got.Status != "doing" {
		t.Errorf("get: %+v", got)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/work-items/" + foreign.ID, nil},
		{"PATCH", "/work-items/" + foreign.ID, map[string]any{"title": "Mine now"}},
		{"GET", "/work-items/6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", nil},
		{"GET", "/work-items/not-a-uuid", nil},
	} {
		code, body := e.tool(r.token, c.method, r.ID, c.path, c.body)
		refused(t, c.method+" "+c.path, code, body, 404, wire.CodeNotFound, "")
	}
	code, body := e.tool(r.token, "POST", r.ID, "/work-items", map[string]any{"title": "Sneak in", "parent_id": foreign.ID})
	refused(t, "create under another project's item", code, body, 400, wire.CodeValidationFailed, "parent_id")
	if strings.Contains(string(body), other.ID) || strings.Contains(string(body), "another project") {
		t.Errorf("the refusal tells about the other project: %s", body)
	}
	var theirs wire.WorkItem
	e.must(200, "GET", "/api/v1/work-items/"+foreign.ID, nil, &theirs)
	if theirs.Title != "Not yours" {
		t.Errorf("the other project's item changed: %+v", theirs)
	}

	var made wire.WorkItem
	e.mustTool(r, 201, "POST", "/work-items", map[string]any{"title": "Follow-up", "body": "found while fixing"}, &made)
	if made.ProjectID != r.ProjectID || made.Kind != "task" || made.ParentID != nil || made.Status != "todo" || made.Body != "found while fixing" {
		t.Errorf("created %+v, want a todo task at the run's project's top level (its task's parent)", made)
	}
	e.mustTool(r, 200, "PATCH", "/work-items/"+made.ID, map[string]any{"status": "done", "title": "Follow-up, done"}, &got)
	if got.Status != "done" || got.Title != "Follow-up, done" {
		t.Errorf("updated %+v", got)
	}
	var res wire.SignalResult
	e.mustTool(r, 202, "POST", "/progress", map[string]any{"text": "halfway: tests pass"}, &res)
	if res.Result != wire.ResultApplied {
		t.Errorf("progress: %+v", res)
	}

	for _, c := range []struct {
		topic wire.Topic
		id    string
	}{
		{wire.TopicWorkItemCreated, made.ID},
		{wire.TopicWorkItemUpdated, made.ID},
		{wire.TopicWorkItemStatusChanged, made.ID},
		{wire.TopicRunProgress, r.ID},
	} {
		evs := e.journaled(c.topic, c.id)
		var actors []string
		for _, ev := range evs {
			actors = append(actors, actorOf(ev))
		}
		if len(evs) != 1 || actors[0] != actor {
			t.Errorf("%s: actors %q, want one event naming %s", c.topic, actors, actor)
		}
	}
	var p map[string]any
	_ = json.Unmarshal(e.journaled(wire.TopicRunProgress, r.ID)[0].Payload, &p)
	if p["text"] != "halfway: tests pass" || p["source"] != "mcp" || p["attempt"] != float64(1) || p["task_id"] != e.task.ID {
		t.Errorf("run.progress payload %v", p)
	}
	// A person's own changes name the token they used.
	e.must(200, "PATCH", "/api/v1/work-items/"+made.ID, map[string]any{"title": "Renamed by a person"}, nil)
	if evs := e.journaled(wire.TopicWorkItemUpdated, made.ID); len(evs) != 2 || actorOf(evs[1]) != wire.AdminTokenName {
		t.Errorf("the operator's update: %d events, last actor %s", len(evs), actorOf(evs[len(evs)-1]))
	}
}

// TestAgentToolsDefaults: a created item is, unless told otherwise, of
// the run's item's kind and under its parent; the nesting rules apply,
// and a refusal of the default parent says how to choose another.
func TestAgentToolsDefaults(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("defaults-host", 4, "shell")
	epic := e.item(e.task.ProjectID, "epic", "Onboarding", nil)
	task := e.item(e.task.ProjectID, "task", "Welcome mail", &epic.ID)
	sub := e.item(e.task.ProjectID, "subtask", "Wording", &task.ID)

	r := e.agentRun(w, task.ID)
	var made wire.WorkItem
	e.mustTool(r, 201, "POST", "/work-items", map[string]any{"title": "Sibling"}, &made)
	if made.Kind != "task" || made.ParentID == nil || *made.ParentID != epic.ID {
		t.Errorf("default: %+v, want a task under the epic", made)
	}
	e.mustTool(r, 201, "POST", "/work-items", map[string]any{"title": "Part", "kind": "subtask", "parent_id": task.ID}, &made)
	if made.Kind != "subtask" || made.ParentID == nil || *made.ParentID != task.ID {
		t.Errorf("explicit: %+v", made)
	}
	e.mustTool(r, 201, "POST", "/work-items", map[string]any{"title": "Next epic", "kind": "epic", "parent_id": nil}, &made)
	if made.Kind != "epic" || made.ParentID != nil {
		t.Errorf("at the top level: %+v", made)
	}
	code, body := e.tool(r.token, "POST", r.ID, "/work-items", map[string]any{"title": "Too big", "kind": "epic"})
	refused(t, "an epic under the default parent (an epic)", code, body, 400, wire.CodeValidationFailed, "parent_id")
	if msg := errorOf(t, body).Message; !strings.Contains(msg, "default parent") || !strings.Contains(msg, "null") {
		t.Errorf("the refusal does not say how to choose: %s", msg)
	}

	rs := e.agentRun(w, sub.ID)
	e.mustTool(rs, 201, "POST", "/work-items", map[string]any{"title": "Another part"}, &made)
	if made.Kind != "subtask" || made.ParentID == nil || *made.ParentID != task.ID {
		t.Errorf("a subtask's run: %+v, want a subtask under the task", made)
	}
}

// TestAgentToolsBadArguments: every malformed call is a 400 naming what
// is wrong, and changes nothing.
func TestAgentToolsBadArguments(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("args-host", 4, "shell")
	r := e.agentRun(w, e.task.ID)
	item := "/work-items/" + e.task.ID
	for _, c := range []struct {
		name, method, path string
		body               any
		code               string
		field              string
	}{
		{"unknown field", "POST", "/work-items", `{"title":"x","colour":"red"}`, wire.CodeValidationFailed, "colour"},
		{"status on create", "POST", "/work-items", `{"title":"x","status":"done"}`, wire.CodeValidationFailed, "status"},
		{"no title", "POST", "/work-items", `{}`, wire.CodeValidationFailed, "title"},
		{"title of the wrong type", "POST", "/work-items", `{"title":5}`, wire.CodeValidationFailed, "title"},
		{"two-line title", "POST", "/work-items", `{"title":"a\nb"}`, wire.CodeValidationFailed, "title"},
		{"unknown kind", "POST", "/work-items", `{"title":"x","kind":"story"}`, wire.CodeValidationFailed, "kind"},
		{"body with NUL", "POST", "/work-items", `{"title":"x","body":"a\u0000b"}`, wire.CodeValidationFailed, "body"},
		{"parent not an id", "POST", "/work-items", `{"title":"x","parent_id":"nope"}`, wire.CodeValidationFailed, "parent_id"},
		{"parent unknown", "POST", "/work-items", `{"title":"x","parent_id":"6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f"}`, wire.CodeValidationFailed, "parent_id"},
		{"not JSON", "POST", "/work-items", `{"title":`, wire.CodeMalformedJSON, ""},
		{"unknown status", "PATCH", item, `{"status":"finished"}`, wire.CodeValidationFailed, "status"},
		{"moving is the operator's", "PATCH", item, `{"parent_id":null}`, wire.CodeValidationFailed, "parent_id"},
		{"empty title", "PATCH", item, `{"title":"  "}`, wire.CodeValidationFailed, "title"},
		{"body with NUL", "PATCH", item, `{"body":"\u0000"}`, wire.CodeValidationFailed, "body"},
		{"empty progress", "POST", "/progress", `{"text":" "}`, wire.CodeValidationFailed, "text"},
		{"progress past 4 KiB", "POST", "/progress", map[string]any{"text": strings.Repeat("x", wire.MaxProgressText+1)}, wire.CodeValidationFailed, "text"},
		{"progress without text", "POST", "/progress", `{}`, wire.CodeValidationFailed, "text"},
		{"list by an unknown status", "GET", "/work-items?status=blocked", nil, wire.CodeValidationFailed, "status"},
		{"list by anything else", "GET", "/work-items?kind=task", nil, wire.CodeValidationFailed, "kind"},
	} {
		code, body := e.tool(r.token, c.method, r.ID, c.path, c.body)
		refused(t, c.name, code, body, http.StatusBadRequest, c.code, c.field)
	}
	var list wire.WorkItemList
	e.mustTool(r, 200, "GET", "/work-items", nil, &list)
	if len(list.WorkItems) != 1 || list.WorkItems[0].Title != e.task.Title {
		t.Errorf("something changed: %+v", list.WorkItems)
	}
	if n := e.countEvents(r.ID, wire.TopicRunProgress); n != 0 {
		t.Errorf("%d run.progress journaled by refused calls", n)
	}
	// Exactly 4 KiB is taken.
	e.mustTool(r, 202, "POST", "/progress", map[string]any{"text": strings.Repeat("é", wire.MaxProgressText/2)}, nil)
}

// TestAgentToolsTakeOnlyTheRunsSignalToken: the routes take the signal
// token of the run in the path and nothing else, and only while that run
// is live.
func TestAgentToolsTakeOnlyTheRunsSignalToken(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("auth-host", 4, "shell")
	r := e.agentRun(w, e.task.ID)
	other := e.agentRun(w, e.task.ID)
	for _, c := range []struct{ name, token string }{
		{"no token", ""},
		{"the operator token", testToken},
		{"the worker token", w.token},
		{"another run's signal token", other.token},
		{"a forged token", strings.Replace(r.token, r.token[len(r.token)-4:], "0000", 1)},
	} {
		for _, path := range []string{"/work-items", "/work-items/" + e.task.ID} {
			code, body := e.tool(c.token, "GET", r.ID, path, nil)
			refused(t, c.name+" on "+path, code, body, 401, wire.CodeUnauthorized, "")
		}
		code, body := e.tool(c.token, "POST", r.ID, "/progress", map[string]any{"text": "x"})
		refused(t, c.name+" on /progress", code, body, 401, wire.CodeUnauthorized, "")
	}
	// The signal token is no operator token either.
	if code, body := e.callAs(r.token, "GET", "/api/v1/work-items/"+e.task.ID, nil); code != 401 {
		t.Errorf("signal token on /api/v1: %d %s", code, body)
	}

	// The run ends: its token no longer reaches anything.
	if code, _, body := e.signal(r.token, r.ID, sig(wire.SignalFinished, 1, "payload", map[string]any{"exit_code": 0})); code != 202 {
		t.Fatalf("finished: %d %s", code, body)
	}
	e.waitRun(r.ID, "exited", func(r wire.Run) bool { return r.Status == wire.RunExited })
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/work-items", nil},
		{"POST", "/work-items", map[string]any{"title": "Too late"}},
		{"POST", "/progress", map[string]any{"text": "still here"}},
	} {
		code, body := e.tool(r.token, c.method, r.ID, c.path, c.body)
		refused(t, "ended run: "+c.method+" "+c.path, code, body, 409, wire.CodeIllegalTransition, "")
		if code == 409 && errorOf(t, body).Details["status"] != wire.RunExited {
			t.Errorf("the refusal does not name the status: %s", body)
		}
	}
	// The other run is live still.
	e.mustTool(other, 200, "GET", "/work-items", nil, nil)
}

// TestAgentToolsRateLimit: a run gets 100 calls a minute; the 101st is
// 429 rate_limited with Retry-After, whatever the route, and another run
// is not affected.
func TestAgentToolsRateLimit(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("rate-host", 4, "shell")
	r := e.agentRun(w, e.task.ID)
	other := e.agentRun(w, e.task.ID)
	for i := range wire.AgentCallsPerMinute {
		path := "/work-items"
		if i%2 == 1 {
			path += "/" + e.task.ID
		}
		if code, body := e.tool(r.token, "GET", r.ID, path, nil); code != 200 {
			t.Fatalf("call %d: %d %s", i+1, code, body)
		}
	}
	req, _ := http.NewRequest("POST", e.url+"/api/internal/runs/"+r.ID+"/progress", strings.NewReader(`{"text":"one more"}`))
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var env wire.Envelope
	_ = json.NewDecoder(resp.Body).Decode(&env)
	resp.Body.Close()
	if resp.StatusCode != 429 || env.Error == nil || env.Error.Code != wire.CodeRateLimited {
		t.Fatalf("call 101: %d %+v, want 429 rate_limited", resp.StatusCode, env.Error)
	}
	if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" || env.Error.Details["retry_after_seconds"] == nil {
		t.Errorf("call 101: Retry-After %q, details %v", ra, env.Error.Details)
	}
	if n := e.countEvents(r.ID, wire.TopicRunProgress); n != 0 {
		t.Errorf("the refused call journaled %d run.progress", n)
	}
	e.mustTool(other, 200, "GET", "/work-items", nil, nil)
}
