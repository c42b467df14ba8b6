package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"pam/internal/wire"
)

func TestWorkItemValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.project("Plan")
	other := e.project("Other")
	m := e.item(p.Slug, "milestone", "m", nil)
	ep := e.item(p.Slug, "epic", "e", &m.ID)
	task := e.item(p.Slug, "task", "t", &ep.ID)
	sub := e.item(p.Slug, "subtask", "s", &task.ID)
	foreign := e.item(other.Slug, "epic", "foreign", nil)
	items := "/api/v1/projects/" + p.Slug + "/work-items"
	missing := uuid.NewString()
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, field        string
	}{
		{"bad kind", "POST", items, map[string]any{"kind": "story", "title": "x"}, 400, "validation_failed", "kind"},
		{"missing kind", "POST", items, map[string]any{"title": "x"}, 400, "validation_failed", "kind"},
		{"empty title", "POST", items, map[string]any{"kind": "task", "title": ""}, 400, "validation_failed", "title"},
		{"long title", "POST", items, map[string]any{"kind": "task", "title": strings.Repeat("t", 201)}, 400, "validation_failed", "title"},
		{"bad status", "POST", items, map[string]any{"kind": "task", "title": "x", "status": "blocked"}, 400, "validation_failed", "status"},
		{"unknown field", "POST", items, map[string]any{"kind": "task", "title": "x", "path": "a/b"}, 400, "validation_failed", "path"},
		{"title not string", "POST", items, map[string]any{"kind": "task", "title": []int{1}}, 400, "validation_failed", "title"},
		{"body with NUL", "POST", items, map[string]any{"kind": "task", "title": "x", "body": "a\x00b"}, 400, "validation_failed", "body"},
		{"parent not found", "POST", items, map[string]any{"kind": "task", "title": "x", "parent_id": missing}, 400, "validation_failed", "parent_id"},
		{"parent not uuid", "POST", items, map[string]any{"kind": "task", "title": "x", "parent_id": "nope"}, 400, "validation_failed", "parent_id"},
		{"parent other project", "POST", items, map[string]any{"kind": "task", "title": "x", "parent_id": foreign.ID}, 400, "validation_failed", "parent_id"},
		{"epic under epic", "POST", items, map[string]any{"kind": "epic", "title": "x", "parent_id": ep.ID}, 400, "validation_failed", "parent_id"},
		{"milestone under epic", "POST", items, map[string]any{"kind": "milestone", "title": "x", "parent_id": ep.ID}, 400, "validation_failed", "parent_id"},
		{"task under subtask", "POST", items, map[string]any{"kind": "task", "title": "x", "parent_id": sub.ID}, 400, "validation_failed", "parent_id"},
		{"subtask under subtask", "POST", items, map[string]any{"kind": "subtask", "title": "x", "parent_id": sub.ID}, 400, "validation_failed", "parent_id"},
		{"unknown project", "POST", "/api/v1/projects/nope/work-items", map[string]any{"kind": "task", "title": "x"}, 404, "not_found", ""},
		{"list unknown project", "GET", "/api/v1/projects/nope/work-items", nil, 404, "not_found", ""},
		{"list bad status", "GET", items + "?status=nope", nil, 400, "validation_failed", "status"},
		{"list bad kind", "GET", items + "?kind=nope", nil, 400, "validation_failed", "kind"},
		{"list bad parent", "GET", items + "?parent_id=nope", nil, 400, "validation_failed", "parent_id"},
		{"get non-uuid", "GET", "/api/v1/work-items/123", nil, 404, "not_found", ""},
		{"get missing", "GET", "/api/v1/work-items/" + missing, nil, 404, "not_found", ""},
		{"patch non-uuid", "PATCH", "/api/v1/work-items/abc", map[string]any{"title": "x"}, 404, "not_found", ""},
		{"patch missing", "PATCH", "/api/v1/work-items/" + missing, map[string]any{"title": "x"}, 404, "not_found", ""},
		{"patch missing, bad body", "PATCH", "/api/v1/work-items/" + missing, map[string]any{"title": ""}, 404, "not_found", ""},
		{"patch missing, malformed", "PATCH", "/api/v1/work-items/" + missing, `{"title":`, 404, "not_found", ""},
		{"patch non-uuid, unknown field", "PATCH", "/api/v1/work-items/abc", map[string]any{"kind": "epic"}, 404, "not_found", ""},
		{"delete non-uuid", "DELETE", "/api/v1/work-items/abc", nil, 404, "not_found", ""},
		{"delete missing", "DELETE", "/api/v1/work-items/" + missing, nil, 404, "not_found", ""},
		{"patch bad status", "PATCH", "/api/v1/work-items/" + task.ID, map[string]any{"status": "nope"}, 400, "validation_failed", "status"},
		{"patch empty title", "PATCH", "/api/v1/work-items/" + task.ID, map[string]any{"title": ""}, 400, "validation_failed", "title"},
		{"patch body with NUL", "PATCH", "/api/v1/work-items/" + task.ID, map[string]any{"body": "\x00"}, 400, "validation_failed", "body"},
		{"patch negative position", "PATCH", "/api/v1/work-items/" + task.ID, map[string]any{"position": -1}, 400, "validation_failed", "position"},
		{"patch kind refused", "PATCH", "/api/v1/work-items/" + task.ID, map[string]any{"kind": "epic"}, 400, "validation_failed", "kind"},
		{"patch parent not uuid", "PATCH", "/api/v1/work-items/" + task.ID, map[string]any{"parent_id": "x"}, 400, "validation_failed", "parent_id"},
		{"reparent into own subtree", "PATCH", "/api/v1/work-items/" + ep.ID, map[string]any{"parent_id": task.ID}, 400, "validation_failed", "parent_id"},
		{"reparent onto itself", "PATCH", "/api/v1/work-items/" + ep.ID, map[string]any{"parent_id": ep.ID}, 400, "validation_failed", "parent_id"},
		{"reparent cross project", "PATCH", "/api/v1/work-items/" + task.ID, map[string]any{"parent_id": foreign.ID}, 400, "validation_failed", "parent_id"},
		{"reparent under lower rank", "PATCH", "/api/v1/work-items/" + task.ID, map[string]any{"parent_id": sub.ID}, 400, "validation_failed", "parent_id"},
		{"reparent under same rank", "PATCH", "/api/v1/work-items/" + ep.ID, map[string]any{"parent_id": foreign.ID}, 400, "validation_failed", "parent_id"},
		{"reparent missing parent", "PATCH", "/api/v1/work-items/" + task.ID, map[string]any{"parent_id": missing}, 400, "validation_failed", "parent_id"},
		{"delete with children", "DELETE", "/api/v1/work-items/" + m.ID, nil, 409, "has_children", ""},
		{"malformed patch", "PATCH", "/api/v1/work-items/" + task.ID, `{"title":`, 400, "malformed_json", ""},
	}
	before := len(e.events("work_item.*"))
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
	if after := len(e.events("work_item.*")); after != before {
		t.Fatalf("refused requests journaled %d events", after-before)
	}
	// Each kind may sit at the project root.
	for _, k := range []string{"milestone", "epic", "task", "subtask"} {
		e.item(p.Slug, k, "root "+k, nil)
	}
}

func TestWorkItemDeleteHasRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.project("Runs")
	task := e.item(p.Slug, "task", "t", nil)
	ctx := t.Context()
	if _, err := e.store.Pool.Exec(ctx, `INSERT INTO runs (id, task_id, project_id, provider, session_name)
		VALUES ($1, $2, $3, 'shell', $4)`, uuid.NewString(), task.ID, p.ID, "pam-"+uuid.NewString()[:8]); err != nil {
		t.Fatal(err)
	}
	code, body := e.call("DELETE", "/api/v1/work-items/"+task.ID, nil)
	if code != 409 || errorOf(t, body).Code != wire.CodeHasRuns {
		t.Fatalf("delete with runs: %d %s", code, body)
	}
	leaf := e.item(p.Slug, "task", "leaf", nil)
	e.must(204, "DELETE", "/api/v1/work-items/"+leaf.ID, nil, nil)
	e.must(404, "GET", "/api/v1/work-items/"+leaf.ID, nil, nil)
	if n := len(e.events("work_item.deleted")); n != 1 {
		t.Fatalf("work_item.deleted events: %d", n)
	}
}

func TestReparentSubtree(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.project("Tree")
	other := e.project("Elsewhere")
	m1 := e.item(p.Slug, "milestone", "m1", nil)
	m2 := e.item(p.Slug, "milestone", "m2", nil)
	ep := e.item(p.Slug, "epic", "epic", &m1.ID)
	task := e.item(p.Slug, "task", "task", &ep.ID)
	sub1 := e.item(p.Slug, "subtask", "sub1", &task.ID)
	sub2 := e.item(p.Slug, "subtask", "sub2", &task.ID)
	if sub1.Path != strings.Join([]string{m1.ID, ep.ID, task.ID, sub1.ID}, "/") {
		t.Fatalf("path of a 4-level item: %s", sub1.Path)
	}
	foreignM := e.item(other.Slug, "milestone", "fm", nil)
	before := e.events("")

	// Refusals write nothing: cross-project, and a cycle.
	code, body := e.call("PATCH", "/api/v1/work-items/"+ep.ID, map[string]any{"parent_id": foreignM.ID})
	if code != 400 || errorOf(t, body).Details["field"] != "parent_id" {
		t.Fatalf("cross-project reparent: %d %s", code, body)
	}
	code, body = e.call("PATCH", "/api/v1/work-items/"+m1.ID, map[string]any{"parent_id": sub2.ID})
	if code != 400 {
		t.Fatalf("cycle reparent: %d %s", code, body)
	}
	if len(e.events("")) != len(before) {
		t.Fatal("refused reparents journaled events")
	}
	var still wire.WorkItem
	e.must(200, "GET", "/api/v1/work-items/"+sub2.ID, nil, &still)
	if still.Path != sub2.Path {
		t.Fatal("refused reparent changed a path")
	}

	// Move the epic (with its 3-level subtree) under m2.
	var moved wire.WorkItem
	e.must(200, "PATCH", "/api/v1/work-items/"+ep.ID, map[string]any{"parent_id": m2.ID}, &moved)
	if moved.ParentID == nil || *moved.ParentID != m2.ID || moved.Path != m2.ID+"/"+ep.ID {
		t.Fatalf("moved epic: %+v", moved)
	}
	want := map[string]string{
		task.ID: strings.Join([]string{m2.ID, ep.ID, task.ID}, "/"),
		sub1.ID: strings.Join([]string{m2.ID, ep.ID, task.ID, sub1.ID}, "/"),
		sub2.ID: strings.Join([]string{m2.ID, ep.ID, task.ID, sub2.ID}, "/"),
	}
	for id, path := range want {
		var got wire.WorkItem
		e.must(200, "GET", "/api/v1/work-items/"+id, nil, &got)
		if got.Path != path {
			t.Errorf("descendant %s path %s, want %s", got.Title, got.Path, path)
		}
	}
	after := e.events("")
	if len(after) != len(before)+1 || after[len(after)-1].Topic != "work_item.reparented" {
		t.Fatalf("reparent journaled %d events, want exactly one work_item.reparented", len(after)-len(before))
	}
	var payload map[string]any
	_ = json.Unmarshal(after[len(after)-1].Payload, &payload)
	if payload["work_item_id"] != ep.ID || payload["to_parent_id"] != m2.ID || payload["from_parent_id"] != m1.ID {
		t.Fatalf("reparented payload: %v", payload)
	}

	// null moves to the root and rewrites the subtree again.
	e.must(200, "PATCH", "/api/v1/work-items/"+ep.ID, `{"parent_id": null}`, &moved)
	if moved.ParentID != nil || moved.Path != ep.ID {
		t.Fatalf("move to root: %+v", moved)
	}
	var s1 wire.WorkItem
	e.must(200, "GET", "/api/v1/work-items/"+sub1.ID, nil, &s1)
	if s1.Path != strings.Join([]string{ep.ID, task.ID, sub1.ID}, "/") {
		t.Fatalf("after move to root, sub1 path %s", s1.Path)
	}
	// A PATCH without parent_id leaves the parent alone.
	var renamed wire.WorkItem
	e.must(200, "PATCH", "/api/v1/work-items/"+task.ID, map[string]any{"title": "renamed"}, &renamed)
	if renamed.ParentID == nil || *renamed.ParentID != ep.ID {
		t.Fatalf("title patch moved the item: %+v", renamed)
	}
}

func TestWorkItemTreeOrderAndStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.project("Order")
	a := e.item(p.Slug, "epic", "a", nil)
	b := e.item(p.Slug, "epic", "b", nil)
	a1 := e.item(p.Slug, "task", "a1", &a.ID)
	a2 := e.item(p.Slug, "task", "a2", &a.ID)
	b1 := e.item(p.Slug, "task", "b1", &b.ID)
	if a.Position != 0 || b.Position != 1 || a2.Position != 1 {
		t.Fatalf("positions: a=%d b=%d a2=%d", a.Position, b.Position, a2.Position)
	}
	titles := func(q string) string {
		var l wire.WorkItemList
		e.must(200, "GET", "/api/v1/projects/"+p.Slug+"/work-items"+q, nil, &l)
		var s []string
		for _, w := range l.WorkItems {
			s = append(s, w.Title)
		}
		return strings.Join(s, ",")
	}
	if got := titles(""); got != "a,a1,a2,b,b1" {
		t.Fatalf("tree order %s", got)
	}
	// Move b before a, a2 before a1.
	e.must(200, "PATCH", "/api/v1/work-items/"+b.ID, map[string]any{"position": 0}, nil)
	e.must(200, "PATCH", "/api/v1/work-items/"+a.ID, map[string]any{"position": 5}, nil)
	e.must(200, "PATCH", "/api/v1/work-items/"+a2.ID, map[string]any{"position": -0}, nil)
	e.must(200, "PATCH", "/api/v1/work-items/"+a1.ID, map[string]any{"position": 3}, nil)
	if got := titles(""); got != "b,b1,a,a2,a1" {
		t.Fatalf("tree order after moves %s", got)
	}
	var w wire.WorkItem
	e.must(200, "PATCH", "/api/v1/work-items/"+b1.ID, map[string]any{"status": "doing"}, &w)
	if w.Status != "doing" {
		t.Fatalf("status: %+v", w)
	}
	if got := titles("?status=doing"); got != "b1" {
		t.Fatalf("status filter %s", got)
	}
	if got := titles("?kind=epic"); got != "b,a" {
		t.Fatalf("kind filter %s", got)
	}
	if got := titles("?parent_id=" + a.ID); got != "a2,a1" {
		t.Fatalf("parent filter %s", got)
	}
	sc := e.events("work_item.status_changed")
	if len(sc) != 1 {
		t.Fatalf("status_changed events: %d", len(sc))
	}
	var payload map[string]any
	_ = json.Unmarshal(sc[0].Payload, &payload)
	if payload["from"] != "todo" || payload["to"] != "doing" {
		t.Fatalf("status_changed payload %v", payload)
	}
	// A PATCH that changes nothing journals nothing.
	n := len(e.events(""))
	e.must(200, "PATCH", "/api/v1/work-items/"+b1.ID, map[string]any{"status": "doing"}, nil)
	if len(e.events("")) != n {
		t.Fatal("no-op PATCH journaled an event")
	}
}

func TestConcurrentReparentsNeverCycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.project("Race")
	a := e.item(p.Slug, "milestone", "a", nil)
	b := e.item(p.Slug, "milestone", "b", nil)
	x := e.item(p.Slug, "epic", "x", &a.ID)
	y := e.item(p.Slug, "epic", "y", &b.ID)
	tx := e.item(p.Slug, "task", "tx", &x.ID)
	ty := e.item(p.Slug, "task", "ty", &y.ID)
	// Move many items concurrently; afterwards every path must be the chain
	// of its parents.
	done := make(chan struct{})
	moves := [][2]string{{tx.ID, y.ID}, {ty.ID, x.ID}, {x.ID, b.ID}, {y.ID, a.ID}, {tx.ID, x.ID}, {ty.ID, y.ID}}
	for i := 0; i < 4; i++ {
		go func(i int) {
			defer func() { done <- struct{}{} }()
			for j := 0; j < 10; j++ {
				m := moves[(i+j)%len(moves)]
				e.call("PATCH", "/api/v1/work-items/"+m[0], map[string]any{"parent_id": m[1]})
			}
		}(i)
	}
	for i := 0; i < 4; i++ {
		<-done
	}
	var l wire.WorkItemList
	e.must(200, "GET", "/api/v1/projects/"+p.Slug+"/work-items", nil, &l)
	byID := map[string]wire.WorkItem{}
	for _, w := range l.WorkItems {
		byID[w.ID] = w
	}
	for _, w := range l.WorkItems {
		want := w.ID
		for cur := w; cur.ParentID != nil; {
			cur = byID[*cur.ParentID]
			want = cur.ID + "/" + want
		}
		if w.Path != want {
			t.Errorf("%s: path %s, want %s", w.Title, w.Path, want)
		}
	}
	if len(l.WorkItems) != 6 {
		t.Fatalf("tree order lost items: %d", len(l.WorkItems))
	}
	_ = fmt.Sprint
}
