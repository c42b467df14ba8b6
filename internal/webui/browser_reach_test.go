package webui_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// TestDashboardArchivedProjectRestore: an archived project is not among the projects until
// "Show archived" is ticked; then it is listed apart with a Restore
// button, which brings it back among the active ones, live.
func TestDashboardArchivedProjectRestore(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	var p wire.Project
	d.api(201, "POST", "/projects", map[string]any{"name": "Old times", "description": "Archived, then restored from the dashboard."}, &p)
	d.api(201, "POST", "/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "Still here"}, nil)
	d.api(200, "DELETE", "/projects/"+p.Slug, nil, nil)

	tab, closeTab := d.tab(d.ctx)
	defer closeTab()
	d.open(tab, "/projects")
	d.waitJS(tab, eventually.Medium, "the projects page", `document.querySelector('[data-testid=show-archived]')`)
	named := func(sel string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('[data-testid=%s]')].some((c) => c.textContent.includes('Old times'))`, sel)
	}
	if eval[bool](d, tab, named("project-card")) || eval[bool](d, tab, named("archived-project")) {
		t.Fatal("an archived project is listed before Show archived")
	}
	d.click(tab, d.sel("show-archived")+" input")
	d.waitJS(tab, eventually.Medium, "the archived project with Restore", named("archived-project")+` && location.search === '?archived=1'`)
	d.shot(tab, "desktop-projects-archived")

	phone := d.phoneTab()
	d.open(phone, "/projects?archived=1")
	d.waitJS(phone, eventually.Medium, "the archived project on the phone", named("archived-project"))
	d.noOverflow(phone, "/projects?archived=1")
	d.do(phone, chromedp.ScrollIntoView(`[data-testid=archived-project]`))
	d.shot(phone, "phone-projects-archived")

	d.click(tab, `[data-testid=archived-project] [data-testid=restore-project]`)
	d.waitJS(tab, eventually.Medium, "the project back among the active ones", named("project-card")+` && !`+named("archived-project"))
	var back wire.Project
	d.api(200, "GET", "/projects/"+p.ID, nil, &back)
	if back.Status != wire.ProjectActive {
		t.Fatalf("after Restore: %+v", back)
	}
	// The phone hears it too (the stream), and its board has the items.
	d.waitJS(phone, eventually.Medium, "the restore on the phone, live", named("project-card"))
	d.api(201, "POST", "/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "New again"}, nil)
}

// TestDashboardRunsLoadMore: with more runs than the first load reads, the runs list
// ends with "Load older runs", which brings the rest; once every run is
// there it goes away.
func TestDashboardRunsLoadMore(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	var p wire.Project
	d.api(201, "POST", "/projects", map[string]any{"name": "Many runs"}, &p)
	var task wire.WorkItem
	d.api(201, "POST", "/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "Run it often"}, &task)
	// A provider no host has: the runs stay pending, nothing is spawned.
	const n = 520
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for range work {
				d.api(202, "POST", "/runs", map[string]any{"task_id": task.ID, "provider": "nowhere"}, nil)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	var all wire.RunList
	d.api(200, "GET", "/runs?limit=1000", nil, &all)
	total := len(all.Runs)
	if total <= 500 || all.Next != nil {
		t.Fatalf("%d runs (next %v): the first load reads 500", total, all.Next)
	}

	tab, closeTab := d.tab(d.ctx)
	defer closeTab()
	d.open(tab, "/runs")
	rows := `document.querySelectorAll('[data-testid=run-row]').length`
	d.waitJS(tab, eventually.Long, "the first runs and Load older runs", rows+` >= 500 && !!document.querySelector('[data-testid=runs-more]')`)
	if got := eval[int](d, tab, rows); got >= total {
		t.Fatalf("%d rows of %d before loading more", got, total)
	}
	d.do(tab, chromedp.ScrollIntoView(d.sel("runs-more")))
	d.viewShot(tab, "desktop-runs-load-more")

	phone := d.phoneTab()
	d.open(phone, "/runs")
	d.waitJS(phone, eventually.Long, "Load older runs on the phone", `!!document.querySelector('[data-testid=runs-more]')`)
	d.noOverflow(phone, "/runs")
	d.do(phone, chromedp.ScrollIntoView(d.sel("runs-more")))
	d.shot(phone, "phone-runs-load-more")

	d.click(tab, d.sel("runs-more"))
	d.waitJS(tab, eventually.Long, "every run listed and no more to load",
		fmt.Sprintf(`%s === %d && !document.querySelector('[data-testid=runs-more]')`, rows, total))
	// The oldest run of all is there, and opens.
	oldest := all.Runs[len(all.Runs)-1]
	d.click(tab, fmt.Sprintf(`[data-testid=run-row] a[href="/runs/%s"]`, oldest.ID))
	d.waitJS(tab, eventually.Medium, "the oldest run's page", fmt.Sprintf(`location.pathname === '/runs/%s'`, oldest.ID))
}

// viewShot saves what the tab's screen shows (not the whole page: a list
// of hundreds of runs is many screens long).
func (d *dash) viewShot(ctx context.Context, name string) {
	d.t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := chromedp.Run(c, chromedp.CaptureScreenshot())
	if err != nil {
		d.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(d.shots, name+".png"), b, 0o644); err != nil {
		d.t.Fatal(err)
	}
}
