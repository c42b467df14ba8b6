package server_test

import (
	"testing"

	"pam/internal/wire"
)

// An archived project is read-only: its work items cannot be created,
// changed or deleted, nor runs started or retried, with 409
// project_archived; POST /projects/{ref}/unarchive brings it back, and
// then they can again.
func TestArchivedProjectRefusesAndComesBack(t *testing.T) {
	t.Parallel()
	e := newReachEnv(t)
	p, task := e.project, e.task
	e.must(200, "DELETE", "/api/v1/projects/"+p.Slug, nil, nil)
	refused := []struct{ method, path, body string }{
		{"POST", "/projects/" + p.Slug + "/work-items", `{"kind":"task","title":"new"}`},
		{"POST", "/projects/" + p.ID + "/work-items", `{"kind":"task","title":"new"}`},
		{"PATCH", "/work-items/" + task.ID, `{"title":"renamed"}`},
		{"PATCH", "/work-items/" + task.ID, `{"status":"doing"}`},
		{"PATCH", "/work-items/" + task.ID, `{"parent_id":null}`},
		{"DELETE", "/work-items/" + task.ID, ``},
		{"POST", "/runs", `{"task_id":"` + task.ID + `","provider":"shell"}`},
		{"POST", "/runs/" + e.run.ID + "/retry", ``},
		{"POST", "/runs/" + e.run.ID + "/continue", ``},
	}
	for _, c := range refused {
		code, body := e.ask(c.method, c.path, c.body)
		if code != 409 || errorOf(t, body).Code != wire.CodeProjectArchived {
			t.Errorf("%s %s on an archived project: %d %s, want 409 project_archived", c.method, c.path, code, body)
		}
	}
	// Reads still work, and so does stopping what runs.
	e.must(200, "GET", "/api/v1/work-items/"+task.ID, nil, nil)
	e.must(202, "POST", "/api/v1/runs/"+e.run.ID+"/stop", nil, nil)

	var back wire.Project
	e.must(200, "POST", "/api/v1/projects/"+p.Slug+"/unarchive", nil, &back)
	if back.Status != wire.ProjectActive {
		t.Fatalf("unarchived project: %+v", back)
	}
	var l wire.ProjectList
	e.must(200, "GET", "/api/v1/projects", nil, &l)
	if len(l.Projects) != 1 || l.Projects[0].ID != p.ID {
		t.Fatalf("active projects after unarchive: %+v", l.Projects)
	}
	evs := e.events("project.updated")
	if len(evs) != 1 {
		t.Fatalf("project.updated events: %d", len(evs))
	}
	// Unarchiving an active project changes nothing and journals nothing.
	e.must(200, "POST", "/api/v1/projects/"+p.ID+"/unarchive", nil, &back)
	if n := len(e.events("project.updated")); n != 1 || back.Status != wire.ProjectActive {
		t.Fatalf("second unarchive: %d events, %+v", n, back)
	}
	e.must(201, "POST", "/api/v1/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "new"}, nil)
	e.must(200, "PATCH", "/api/v1/work-items/"+task.ID, map[string]any{"title": "renamed"}, nil)
	e.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell"}, nil)
	if code, body := e.call("POST", "/api/v1/projects/nope/unarchive", nil); code != 404 {
		t.Fatalf("unarchive of no project: %d %s", code, body)
	}
}
