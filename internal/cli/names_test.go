package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"pam/internal/wire"
)

// Item 19 of the hardening issue ("the CLI as a newcomer meets it"):
// tables and show name hosts and tasks as the operator named them.

// TestTablesPrintHostNames: run list and run show name a run's host (and
// the host it is pinned to) as the operator named it, from one GET /hosts
// (hardening issue item 19); --json stays the API's Run with ids. Before,
// they printed host ids.
func TestTablesPrintHostNames(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	db := realServe(t, e)
	p := pamJSON[wire.Project](e, "project", "create", "--name", "Demo")
	gpu := pamJSON[wire.HostCreated](e, "host", "add", "gpu-1").Host
	task := pamJSON[wire.WorkItem](e, "item", "add", "demo", "--kind", "task", "--title", "Task")
	insertTwins(t, db, p.ID, task.ID, gpu.ID) // twin1 ran on gpu-1, twin2 is pinned to it

	list := e.mustPam("run", "list")
	for _, want := range []string{"abcd1111  exited   1/3      -          shell     gpu-1 ", "abcd2222  stopped  1/3      -          shell     gpu-1 (pinned) "} {
		if !strings.Contains(list, want) {
			t.Errorf("run list lacks %q:\n%s", want, list)
		}
	}
	if strings.Contains(list, short(gpu.ID)) {
		t.Errorf("run list prints the host id %s:\n%s", short(gpu.ID), list)
	}
	show := e.mustPam("run", "show", twin1)
	if !strings.Contains(show, "\nhost:               gpu-1\n") || !strings.Contains(show, "\ntarget_host:        -\n") || strings.Contains(show, gpu.ID) {
		t.Errorf("run show of a run on gpu-1:\n%s", show)
	}
	show = e.mustPam("run", "show", twin2)
	if !strings.Contains(show, "\nhost:               -\n") || !strings.Contains(show, "\ntarget_host:        gpu-1\n") {
		t.Errorf("run show of a run pinned to gpu-1:\n%s", show)
	}
	var runs wire.RunList
	if err := json.Unmarshal([]byte(e.mustPam("run", "list", "--json")), &runs); err != nil {
		t.Fatal(err)
	}
	for _, r := range runs.Runs {
		if r.ID == twin1 && (r.HostID == nil || *r.HostID != gpu.ID) {
			t.Errorf("run list --json: host_id %v, want the id %s", r.HostID, gpu.ID)
		}
	}
	if r := pamJSON[wire.Run](e, "run", "show", twin2); r.TargetHostID == nil || *r.TargetHostID != gpu.ID {
		t.Errorf("run show --json: target_host_id %v, want the id %s", r.TargetHostID, gpu.ID)
	}
}

// A host the list does not hold (removed after the run was read) prints
// as its short id, and the list is not read when no run names a host.
func TestTablesPrintUnknownHostAsShortID(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	gone := "0a0b0c0d-0000-4000-8000-000000000009"
	f.handle("GET /api/v1/runs", 200, `{"runs":[`+strings.Replace(runJSON, `"host_id":null`, `"host_id":"`+gone+`"`, 1)+`]}`)
	f.handle("GET /api/v1/hosts", 200, `{"hosts":[`+hostJSON+`]}`)
	if out := e.mustPam("run", "list"); !strings.Contains(out, "  claude    0a0b0c0d  ") {
		t.Errorf("run list:\n%s", out)
	}
	if f.last() != "GET /api/v1/hosts" {
		t.Errorf("last request %s, want the host list", f.last())
	}
	f.handle("GET /api/v1/runs", 200, `{"runs":[`+runJSON+`]}`)
	e.mustPam("run", "list")
	if f.last() != "GET /api/v1/runs" {
		t.Errorf("no run names a host, yet the last request was %s", f.last())
	}
}

// TestRunShowPrintsTaskTitle: run show names the run's task by title,
// with its id to copy (hardening issue item 19); --json is the API's Run.
// Before, it printed task_id alone.
func TestRunShowPrintsTaskTitle(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	realServe(t, e)
	e.mustPam("project", "create", "--name", "Demo")
	task := pamJSON[wire.WorkItem](e, "item", "add", "demo", "--kind", "task", "--title", "Write the welcome page")
	run := pamJSON[wire.Run](e, "run", "start", "--task", task.ID, "--provider", "shell")
	out := e.mustPam("run", "show", run.ID)
	if want := "\ntask:               Write the welcome page (" + task.ID + ")\n"; !strings.Contains(out, want) {
		t.Errorf("run show lacks %q:\n%s", want, out)
	}
	raw := e.mustPam("run", "show", run.ID, "--json")
	var fields map[string]any
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		t.Fatal(err)
	}
	if fields["task_id"] != task.ID || strings.Contains(raw, "Write the welcome page") {
		t.Errorf("run show --json is not the API's Run:\n%s", raw)
	}
}
