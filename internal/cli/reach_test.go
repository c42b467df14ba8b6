package cli

import (
	"slices"
	"strings"
	"testing"

	"pam/internal/wire"
)

// pam run list pages with --before, taking the next the page before
// ended with (its --json shape carries it; a table says it on stderr), and
// pam project unarchive brings an archived project back, where items can
// be added again.
func TestRunListBeforeAndUnarchive(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	realServe(t, e)
	pamJSON[wire.Project](e, "project", "create", "--name", "Demo")
	task := pamJSON[wire.WorkItem](e, "item", "add", "demo", "--kind", "task", "--title", "Task")
	var want []string
	for range 3 {
		want = append(want, pamJSON[wire.Run](e, "run", "start", "--task", task.ID, "--provider", "shell").ID)
	}
	slices.Reverse(want)

	first := pamJSON[wire.RunList](e, "run", "list", "--limit", "2")
	if len(first.Runs) != 2 || first.Next == nil || *first.Next != want[1] {
		t.Fatalf("first page: %+v", first)
	}
	second := pamJSON[wire.RunList](e, "run", "list", "--limit", "2", "--before", short(*first.Next))
	if len(second.Runs) != 1 || second.Runs[0].ID != want[2] || second.Next != nil {
		t.Fatalf("second page: %+v", second)
	}
	table := e.pam("run", "list", "--limit", "2")
	if table.code != 0 || !strings.Contains(table.stdout, short(want[1])) || strings.Contains(table.stdout, short(want[2])) ||
		!strings.Contains(table.stderr, "--before "+want[1]) {
		t.Fatalf("table page: %v", table)
	}

	e.mustPam("project", "archive", "demo")
	if r := e.pam("item", "add", "demo", "--kind", "task", "--title", "Late"); r.code != 1 || !strings.Contains(r.stderr, "archived") {
		t.Fatalf("item add to an archived project: %v", r)
	}
	if out := e.mustPam("project", "unarchive", "demo"); !strings.Contains(out, "unarchived project demo") {
		t.Fatalf("unarchive: %q", out)
	}
	if p := pamJSON[wire.Project](e, "project", "show", "demo"); p.Status != wire.ProjectActive {
		t.Fatalf("after unarchive: %+v", p)
	}
	e.mustPam("item", "add", "demo", "--kind", "task", "--title", "Late")
}
