package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestAgainstRealServer runs real commands against a real `pam serve`
// process backed by a real PostgreSQL database, end to end through the
// wire client.
func TestAgainstRealServer(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	sv := pamtest.StartServe(t, pamtest.ServeOptions{DatabaseURL: storetest.URL(t)})
	e.setenv("PAM_URL", sv.URL)
	e.setenv("PAM_TOKEN", sv.Token)

	// Follow the journal from the start (--after 0: without it, --follow
	// starts live) while the commands below run.
	followCtx, stopFollow := context.WithCancel(t.Context())
	defer stopFollow()
	var followOut, followErr pamtest.Buffer
	followDone := make(chan int, 1)
	env := e.env()
	go func() {
		followDone <- env.Main(followCtx, []string{"events", "--follow", "--after", "0", "--json", "--topic", "work_item.*"}, &followOut, &followErr)
	}()

	var p wire.Project
	if err := json.Unmarshal([]byte(e.mustPam("project", "create", "--name", "Demo Project", "--description", "end to end", "--json")), &p); err != nil {
		t.Fatal(err)
	}
	if p.Slug != "demo-project" || p.Status != "active" || !p.AutoDone {
		t.Errorf("created project %+v", p)
	}
	add := func(args ...string) wire.WorkItem {
		t.Helper()
		var w wire.WorkItem
		out := e.mustPam(append([]string{"item", "add", "demo-project", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	m := add("--kind", "milestone", "--title", "Launch")
	epic := add("--kind", "epic", "--title", "Backend", "--parent", m.ID)
	tk := add("--kind", "task", "--title", "REST API", "--parent", epic.ID, "--status", "doing")

	tree := e.mustPam("item", "list", "demo-project", "--tree")
	ids := regexp.MustCompile(`\([0-9a-f]{8}\)`)
	want := "milestone  todo  Launch  (ID)\n" +
		"└── epic  todo  Backend  (ID)\n" +
		"    └── task  doing  REST API  (ID)\n"
	if got := ids.ReplaceAllString(tree, "(ID)"); got != want {
		t.Errorf("item list --tree:\n%s\nwant:\n%s", tree, want)
	}
	if !strings.Contains(tree, "("+tk.ID[:8]+")") {
		t.Errorf("tree lacks the task's short id %s:\n%s", tk.ID[:8], tree)
	}

	// Move the task to the root and back into the tree order.
	e.mustPam("item", "move", tk.ID, "--root")
	tree = ids.ReplaceAllString(e.mustPam("item", "list", "demo-project", "--tree"), "(ID)")
	if !strings.Contains(tree, "\ntask  doing  REST API  (ID)\n") {
		t.Errorf("after move --root:\n%s", tree)
	}
	if r := e.pam("item", "delete", m.ID); r.code != 1 || !strings.Contains(r.stderr, "pam: ") {
		t.Errorf("deleting an item with children: %v", r)
	}
	if r := e.pam("project", "show", "no-such-project"); r.code != 1 || r.stderr == "" {
		t.Errorf("unknown project: %v", r)
	}

	var evs wire.EventList
	if err := json.Unmarshal([]byte(e.mustPam("events", "--json")), &evs); err != nil {
		t.Fatal(err)
	}
	var topics []string
	for _, ev := range evs.Events {
		topics = append(topics, ev.Topic)
	}
	got := strings.Join(topics, " ")
	if !strings.HasPrefix(got, "project.created work_item.created work_item.created work_item.created work_item.reparented") {
		t.Errorf("events: %s", got)
	}
	// --limit N: the newest N, oldest first.
	var newest wire.EventList
	if err := json.Unmarshal([]byte(e.mustPam("events", "--json", "--limit", "2")), &newest); err != nil {
		t.Fatal(err)
	}
	if n := len(evs.Events); len(newest.Events) != 2 || n < 2 || newest.Events[0].Seq != evs.Events[n-2].Seq || newest.Events[1].Seq != evs.Events[n-1].Seq {
		t.Errorf("events --limit 2: %+v", newest.Events)
	}

	// The follower saw the work_item events live, as raw Event JSON lines.
	eventually.Within(15*time.Second, func() bool { return strings.Count(followOut.String(), "\n") >= 4 })
	stopFollow()
	if code := <-followDone; code != 0 {
		t.Fatalf("events --follow exit %d: %s", code, followErr.String())
	}
	var followed []string
	for _, line := range strings.Split(strings.TrimSpace(followOut.String()), "\n") {
		var ev wire.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("follow line %q: %v", line, err)
		}
		followed = append(followed, ev.Topic)
	}
	if strings.Join(followed, " ") != "work_item.created work_item.created work_item.created work_item.reparented" {
		t.Errorf("followed %v", followed)
	}
}

// TestHostSetAgainstRealServer: `pam host set REF --max-runs N` changes a
// host's max_runs through PATCH /hosts/{ref} of a real serve (issue 9
// item 15; the route answered 405 and the command did not exist).
func TestHostSetAgainstRealServer(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	sv := pamtest.StartServe(t, pamtest.ServeOptions{DatabaseURL: storetest.URL(t)})
	e.setenv("PAM_URL", sv.URL)
	e.setenv("PAM_TOKEN", sv.Token)

	e.mustPam("host", "add", "gpu-1")
	var h wire.Host
	if err := json.Unmarshal([]byte(e.mustPam("host", "set", "gpu-1", "--max-runs", "110", "--json")), &h); err != nil {
		t.Fatal(err)
	}
	if h.Name != "gpu-1" || h.MaxRuns != 110 {
		t.Fatalf("host set --json printed %+v, want gpu-1 with max_runs 110", h)
	}
	if out := e.mustPam("host", "set", "--max-runs", "3", h.ID); !strings.Contains(out, "gpu-1") || !strings.Contains(out, "max_runs 3") {
		t.Errorf("host set by id printed %q", out)
	}
	if err := json.Unmarshal([]byte(e.mustPam("host", "show", "gpu-1", "--json")), &h); err != nil {
		t.Fatal(err)
	}
	if h.MaxRuns != 3 {
		t.Fatalf("host show reads max_runs %d, want 3", h.MaxRuns)
	}
	var evs wire.EventList
	if err := json.Unmarshal([]byte(e.mustPam("events", "--json", "--topic", "host.updated")), &evs); err != nil {
		t.Fatal(err)
	}
	if len(evs.Events) != 2 {
		t.Errorf("%d host.updated events, want 2", len(evs.Events))
	}

	// Refusals: the server's (exit 1) and usage errors (exit 2).
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"host", "set", "gpu-1", "--max-runs", "0"}, 1, "max_runs"},
		{[]string{"host", "set", "gpu-1", "--max-runs", "1001"}, 1, "max_runs"},
		{[]string{"host", "set", "no-such-host", "--max-runs", "4"}, 1, "not"},
		{[]string{"host", "set", "gpu-1"}, 2, "--max-runs"},
		{[]string{"host", "set", "--max-runs", "4"}, 2, "REF"},
		{[]string{"host", "set", "gpu-1", "--max-runs", "x"}, 2, "--max-runs"},
		{[]string{"host", "set", "gpu-1", "gpu-2", "--max-runs", "4"}, 2, "gpu-2"},
	} {
		if r := e.pam(c.args...); r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("pam %s: %v, want exit %d naming %q", strings.Join(c.args, " "), r, c.code, c.msg)
		}
	}
	if r := e.pam("host", "set", "--help"); r.code != 0 || !strings.Contains(r.stdout, "--max-runs") {
		t.Errorf("host set --help: %v", r)
	}
	if err := json.Unmarshal([]byte(e.mustPam("host", "show", "gpu-1", "--json")), &h); err != nil {
		t.Fatal(err)
	}
	if h.MaxRuns != 3 {
		t.Fatalf("refused sets changed max_runs to %d", h.MaxRuns)
	}
}
