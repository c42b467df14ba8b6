package cli

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"pam/internal/wire"
)

// Item 18 of the hardening issue ("the CLI as a newcomer meets it"): ids
// are typed as the 8 characters the tables print, and an ambiguous prefix
// lists its candidates.

// TestIDPrefixes: every command that names a project, work item, run or
// host takes the 8 characters the tables print, as argument and as
// --project, --task and --host (hardening issue item 18). Before, the
// prefix went to the API as it was and every one of them was not_found.
func TestIDPrefixes(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	realServe(t, e)

	p := pamJSON[wire.Project](e, "project", "create", "--name", "Demo")
	gpu := pamJSON[wire.HostCreated](e, "host", "add", "gpu-1").Host
	spare := pamJSON[wire.HostCreated](e, "host", "add", "spare").Host
	task := pamJSON[wire.WorkItem](e, "item", "add", short(p.ID), "--kind", "task", "--title", "Task")
	leaf := pamJSON[wire.WorkItem](e, "item", "add", "demo", "--kind", "task", "--title", "Leaf")
	run := pamJSON[wire.Run](e, "run", "start", "--task", short(task.ID), "--provider", "shell", "--host", short(gpu.ID))
	if run.TaskID != task.ID || run.TargetHostID == nil || *run.TargetHostID != gpu.ID {
		t.Fatalf("run start --task %s --host %s: %+v", short(task.ID), short(gpu.ID), run)
	}

	// Each command either succeeds, printing want, or is refused by the
	// server for what the object is (so the id reached an object).
	refused := func(stderr string) bool {
		return !strings.Contains(stderr, "matches") && !strings.Contains(stderr, "not found") && !strings.Contains(stderr, "too short")
	}
	for _, c := range []struct {
		args []string
		want string // in stdout; "" = refused by the server, exit 1
	}{
		{[]string{"project", "show", short(p.ID)}, p.ID},
		{[]string{"project", "show", p.ID[:4]}, p.ID}, // the only project: 4 characters are enough
		{[]string{"project", "update", short(p.ID), "--description", "d2"}, "updated project demo"},
		{[]string{"item", "list", short(p.ID)}, "Leaf"},
		{[]string{"item", "show", short(task.ID)}, task.ID},
		{[]string{"item", "update", short(task.ID), "--title", "Task 2"}, "updated task " + short(task.ID)},
		{[]string{"item", "move", short(leaf.ID), "--status", "doing"}, "moved task " + short(leaf.ID) + ": doing"},
		{[]string{"item", "delete", short(leaf.ID)}, "deleted " + leaf.ID},
		{[]string{"run", "show", short(run.ID)}, run.ID},
		{[]string{"run", "list", "--project", short(p.ID), "--task", short(task.ID)}, short(run.ID)},
		{[]string{"run", "keys", short(run.ID), "--enter"}, ""}, // not running
		{[]string{"run", "logs", short(run.ID)}, ""},            // never placed
		{[]string{"run", "stop", short(run.ID)}, "stopped run " + run.ID},
		{[]string{"run", "retry", short(run.ID)}, ""},  // not failed
		{[]string{"run", "attach", short(run.ID)}, ""}, // needs a terminal, after finding the run
		{[]string{"host", "show", short(gpu.ID)}, "gpu-1"},
		{[]string{"host", "set", short(gpu.ID), "--max-runs", "2"}, "host gpu-1: max_runs 2"},
		{[]string{"host", "disable", short(gpu.ID)}, "disabled host gpu-1"},
		{[]string{"host", "enable", short(gpu.ID)}, "enabled host gpu-1"},
		{[]string{"host", "clear-suspect", short(gpu.ID)}, "host gpu-1"},
		{[]string{"host", "rotate-token", short(gpu.ID)}, "worker token of host gpu-1"},
		{[]string{"host", "remove", short(spare.ID)}, "removed host " + spare.ID},
		{[]string{"project", "archive", short(p.ID)}, "archived project demo"},
		{[]string{"project", "show", short(p.ID)}, "archived"}, // archived projects are found too
	} {
		r := e.pam(c.args...)
		switch {
		case c.want == "" && (r.code != 1 || !refused(r.stderr)):
			t.Errorf("pam %s: %v\nwant a refusal by the server, not by the lookup", strings.Join(c.args, " "), r)
		case c.want != "" && (r.code != 0 || !strings.Contains(r.stdout, c.want)):
			t.Errorf("pam %s: %v\nwant exit 0 and %q", strings.Join(c.args, " "), r, c.want)
		}
	}

	// watch follows the run it found to its end (it is stopped).
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if r := e.pamCtx(ctx, "run", "watch", short(run.ID)); r.code != 0 || !strings.Contains(r.stdout, "run "+run.ID+" is stopped") {
		t.Errorf("run watch %s: %v", short(run.ID), r)
	}

	// What is not a unique prefix of an id of that kind is not_found-like,
	// exit 1, and reaches no command.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"item", "show", task.ID[:3]}, `pam: "` + task.ID[:3] + `" is too short to name a work item: give at least 4 characters of its id`},
		{[]string{"run", "stop", "zzzz"}, `pam: no run matches "zzzz"`},
		{[]string{"run", "show", short(task.ID)}, `pam: no run matches "` + short(task.ID) + `"`}, // a work item's id
		{[]string{"item", "add", "demo", "--kind", "task", "--title", "x", "--parent", short(run.ID)}, `pam: no work item matches "` + short(run.ID) + `"`},
		{[]string{"run", "list", "--task", short(run.ID)}, `pam: no work item matches "` + short(run.ID) + `"`},
		{[]string{"host", "show", short(p.ID)}, `pam: no host matches "` + short(p.ID) + `"`},
		{[]string{"run", "start", "--task", short(task.ID), "--provider", "shell", "--host", short(spare.ID)}, `pam: no host matches "` + short(spare.ID) + `"`}, // removed
	} {
		r := e.pam(c.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) || !strings.Contains(r.stderr, "not found") && !strings.Contains(r.stderr, "match") && !strings.Contains(r.stderr, "short") {
			t.Errorf("pam %s: %v\nwant exit 1 and %q", strings.Join(c.args, " "), r, c.want)
		}
	}
}

// TestEveryIDArgumentIsResolved: each command whose argument names an
// object declares which kind, so client() resolves it — a new command
// that forgets would take only whole ids again.
func TestEveryIDArgumentIsResolved(t *testing.T) {
	t.Parallel()
	var walk func(c *command, path string)
	walk = func(c *command, path string) {
		for _, s := range c.subs {
			walk(s, path+" "+s.name)
		}
		if c.subs == nil && (c.args == "ID" || c.args == "REF" || c.args == "PROJECT") && c.names == nil {
			t.Errorf("%s %s: its argument names an object but the command does not resolve id prefixes", path, c.args)
		}
	}
	walk(root, "pam")
}

// TestAmbiguousPrefixListsCandidates: a prefix that several objects share
// is refused (exit 1) with the candidates, each with what tells it apart
// — a run's status, provider and host name, an item's title, a project's
// slug, a host's name — and a longer prefix then picks one (hardening
// issue item 18). Before, the prefix was sent as an id: not_found.
func TestAmbiguousPrefixListsCandidates(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	db := realServe(t, e)
	p := pamJSON[wire.Project](e, "project", "create", "--name", "Demo")
	gpu := pamJSON[wire.HostCreated](e, "host", "add", "gpu-1").Host
	task := pamJSON[wire.WorkItem](e, "item", "add", "demo", "--kind", "task", "--title", "Task")
	insertTwins(t, db, p.ID, task.ID, gpu.ID)

	for _, c := range []struct {
		args []string
		head string
		rows []string // one per candidate, in order
	}{
		{[]string{"run", "show", "abcd"}, `pam: "abcd" matches 2 runs; give more characters of the id:`,
			[]string{twin2 + "  stopped  shell  host gpu-1 (pinned)  task " + short(task.ID), twin1 + "  exited   shell  host gpu-1           task " + short(task.ID)}},
		{[]string{"run", "stop", "ABCD"}, `pam: "ABCD" matches 2 runs`, []string{twin2, twin1}}, // newest first
		{[]string{"item", "show", "abcd"}, `pam: "abcd" matches 2 work items; give more characters of the id:`,
			[]string{twin1 + "  task  todo  Twin task 1", twin2 + "  task  todo  Twin task 2"}},
		{[]string{"project", "show", "abcd"}, `pam: "abcd" matches 2 projects; give more characters of the id:`,
			[]string{twin1 + "  twin-1  active  Twin 1", twin2 + "  twin-2  active  Twin 2"}},
		{[]string{"host", "show", "abcd"}, `pam: "abcd" matches 2 hosts; give more characters of the id:`,
			[]string{twin1 + "  twin-host-1  registered", twin2 + "  twin-host-2  registered"}},
		{[]string{"run", "list", "--task", "abcd"}, `pam: "abcd" matches 2 work items`, []string{twin1, twin2}},
		{[]string{"run", "list", "--host", "abcd"}, `pam: "abcd" matches 2 hosts`, []string{twin1, twin2}},
		{[]string{"run", "list", "--project", "abcd"}, `pam: "abcd" matches 2 projects`, []string{twin1, twin2}},
		{[]string{"run", "start", "--task", "abcd", "--provider", "shell"}, `pam: "abcd" matches 2 work items`, []string{twin1, twin2}},
	} {
		r := e.pam(c.args...)
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		ok := r.code == 1 && r.stdout == "" && len(lines) == 1+len(c.rows) && strings.HasPrefix(lines[0], c.head)
		for i, row := range c.rows {
			ok = ok && len(lines) > i+1 && strings.HasPrefix(strings.TrimSpace(lines[i+1]), row)
		}
		if !ok {
			t.Errorf("pam %s: %v\nwant exit 1, %q and a line per candidate starting %q", strings.Join(c.args, " "), r, c.head, c.rows)
		}
	}

	// --host takes a prefix too: the runs on gpu-1 (not those pinned to it).
	if out := e.mustPam("run", "list", "--host", short(gpu.ID)); !strings.Contains(out, "abcd1111") || strings.Contains(out, "abcd2222") {
		t.Errorf("run list --host %s:\n%s", short(gpu.ID), out)
	}

	// One more character picks one.
	if out := e.mustPam("run", "show", "abcd2"); !strings.Contains(out, twin2) {
		t.Errorf("run show abcd2:\n%s", out)
	}
	if out := e.mustPam("item", "show", "abcd1111"); !strings.Contains(out, "Twin task 1") {
		t.Errorf("item show abcd1111:\n%s", out)
	}
	if r := e.pam("run", "show", "abcd3"); r.code != 1 || r.stderr != "pam: no run matches \"abcd3\"\n" {
		t.Errorf("run show abcd3: %v", r)
	}

	// A slug or a name that reads like an id prefix is the object it names.
	pamJSON[wire.Project](e, "project", "create", "--name", "Abcd")
	if out := e.mustPam("project", "show", "abcd"); !regexp.MustCompile(`(?m)^slug:\s+abcd$`).MatchString(out) {
		t.Errorf("project show abcd (a slug):\n%s", out)
	}

	// Past wire.MaxIDPrefixMatches the list says there are more.
	for i := range 12 {
		if _, err := db.Exec(t.Context(), `INSERT INTO work_items (id, project_id, kind, title, path) VALUES ($1::uuid, $2, 'task', 'many', $1)`,
			fmt.Sprintf("beef%04d-0000-4000-8000-000000000000", i), p.ID); err != nil {
			t.Fatal(err)
		}
	}
	r := e.pam("item", "delete", "beef")
	if r.code != 1 || !strings.HasPrefix(r.stderr, `pam: "beef" matches 10 work items or more; give more characters of the id:`) || strings.Count(r.stderr, "\n") != 11 {
		t.Errorf("item delete beef: %v", r)
	}
}

// TestParentPrefix: --parent of item add, move and list takes a prefix of
// the parent's id too, and an ambiguous one lists the candidate items
// (hardening issue item 18).
func TestParentPrefix(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	db := realServe(t, e)
	p := pamJSON[wire.Project](e, "project", "create", "--name", "Demo")
	m := pamJSON[wire.WorkItem](e, "item", "add", "demo", "--kind", "milestone", "--title", "Launch")
	epic := pamJSON[wire.WorkItem](e, "item", "add", "demo", "--kind", "epic", "--title", "Backend", "--parent", short(m.ID))
	if epic.ParentID == nil || *epic.ParentID != m.ID {
		t.Fatalf("item add --parent %s: parent %v, want %s", short(m.ID), epic.ParentID, m.ID)
	}
	tk := pamJSON[wire.WorkItem](e, "item", "add", "demo", "--kind", "task", "--title", "REST API")
	moved := pamJSON[wire.WorkItem](e, "item", "move", short(tk.ID), "--parent", short(epic.ID))
	if moved.ParentID == nil || *moved.ParentID != epic.ID {
		t.Fatalf("item move --parent %s: parent %v, want %s", short(epic.ID), moved.ParentID, epic.ID)
	}
	if out := e.mustPam("item", "list", "demo", "--parent", short(epic.ID)); !strings.Contains(out, "REST API") || strings.Contains(out, "Backend") {
		t.Errorf("item list --parent %s:\n%s", short(epic.ID), out)
	}

	insertTwins(t, db, p.ID, tk.ID, pamJSON[wire.HostCreated](e, "host", "add", "gpu-1").Host.ID)
	for _, args := range [][]string{
		{"item", "add", "demo", "--kind", "task", "--title", "x", "--parent", "abcd"},
		{"item", "move", short(tk.ID), "--parent", "abcd"},
		{"item", "list", "demo", "--parent", "abcd"},
	} {
		r := e.pam(args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, `pam: "abcd" matches 2 work items`) ||
			!strings.Contains(r.stderr, twin1+"  task  todo  Twin task 1") || !strings.Contains(r.stderr, twin2) {
			t.Errorf("pam %s: %v", strings.Join(args, " "), r)
		}
	}
	if got := pamJSON[wire.WorkItem](e, "item", "show", short(tk.ID)); got.ParentID == nil || *got.ParentID != epic.ID {
		t.Errorf("the refused move changed the parent: %+v", got)
	}
}
