package server_test

import (
	"slices"
	"testing"

	"pam/internal/wire"
)

// GET /runs pages with before/next: following next from the first page
// reaches every run once, newest first, and the last page's next is null.
func TestRunsPaging(t *testing.T) {
	t.Parallel()
	e := newReachEnv(t)
	want := []string{e.run.ID}
	for range 6 {
		var r wire.Run
		e.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": e.task.ID, "provider": "shell"}, &r)
		want = append(want, r.ID)
	}
	slices.Reverse(want) // newest first

	var all []string
	var pages []int
	q := "/api/v1/runs?limit=3"
	for range 10 {
		var l wire.RunList
		e.must(200, "GET", q, nil, &l)
		pages = append(pages, len(l.Runs))
		for _, r := range l.Runs {
			all = append(all, r.ID)
		}
		if l.Next == nil {
			break
		}
		if *l.Next != l.Runs[len(l.Runs)-1].ID {
			t.Fatalf("next %s is not the page's last run", *l.Next)
		}
		q = "/api/v1/runs?limit=3&before=" + *l.Next
	}
	if !slices.Equal(all, want) || !slices.Equal(pages, []int{3, 3, 1}) {
		t.Fatalf("paged %v in pages %v, want %v", all, pages, want)
	}
	// A page that ends exactly at the last run says so.
	var l wire.RunList
	e.must(200, "GET", "/api/v1/runs?limit=7", nil, &l)
	if len(l.Runs) != 7 || l.Next != nil {
		t.Fatalf("limit 7 of 7: %d runs, next %v", len(l.Runs), l.Next)
	}
	// Filters hold across pages.
	e.must(200, "GET", "/api/v1/runs?limit=2&status=pending&before="+want[1], nil, &l)
	if len(l.Runs) != 2 || l.Runs[0].ID != want[2] || l.Next == nil || *l.Next != want[3] {
		t.Fatalf("filtered page: %+v next %v", l.Runs, l.Next)
	}
	for _, before := range []string{"00000000-0000-4000-8000-000000000000", "urn:uuid:" + want[0], "x"} {
		code, body := e.call("GET", "/api/v1/runs?before="+before, nil)
		if code != 400 || errorOf(t, body).Details["field"] != "before" {
			t.Errorf("before=%s: %d %s, want 400 naming before", before, code, body)
		}
	}
}
