package webui_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// The dashboard's budgets and its pages' screenshots, desktop light and
// dark and phone (docs/architecture.md#web-dashboard).

// netLog records what a tab receives from d's server: sizes on the wire
// and whether each came gzipped.
type netLog struct {
	d     *dash
	mu    sync.Mutex
	urls  map[network.RequestID]string
	gz    map[network.RequestID]bool
	sizes map[network.RequestID]float64
}

func (d *dash) netLog(tab context.Context) *netLog {
	d.t.Helper()
	if _, err := chromedp.Call(tab, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		d.t.Fatal(err)
	}
	n := &netLog{d: d}
	n.reset()
	if err := chromedp.Listen(tab, func(ev any) {
		n.mu.Lock()
		defer n.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventResponseReceived:
			n.urls[ev.RequestID] = ev.Response.URL
			for k, v := range ev.Response.Headers {
				if strings.EqualFold(k, "Content-Encoding") && v == "gzip" {
					n.gz[ev.RequestID] = true
				}
			}
		case *network.EventLoadingFinished:
			n.sizes[ev.RequestID] = ev.EncodedDataLength
		}
	}); err != nil {
		d.t.Fatal(err)
	}
	return n
}

func (n *netLog) reset() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.urls, n.sizes, n.gz = map[network.RequestID]string{}, map[network.RequestID]float64{}, map[network.RequestID]bool{}
}

// measure sums the bytes of the pages and assets (not the API) received
// since the last reset; a script not sent gzipped fails the test.
func (n *netLog) measure() (total float64, files []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, u := range n.urls {
		pu, _ := url.Parse(u)
		if pu == nil || !strings.HasPrefix(u, n.d.url) || strings.HasPrefix(pu.Path, "/api/") {
			continue
		}
		total += n.sizes[id]
		files = append(files, fmt.Sprintf("%s %.1f KiB gzip=%v", pu.Path, n.sizes[id]/1024, n.gz[id]))
		if strings.HasPrefix(pu.Path, "/assets/") && strings.HasSuffix(pu.Path, ".js") && !n.gz[id] {
			n.d.t.Errorf("%s was not sent gzipped", pu.Path)
		}
	}
	return total, files
}

// TestDashboardBudget: the first page's bytes on the wire and its first
// render, and the run page's bytes with the terminal, within their
// budgets. Not in parallel with the other tests: the render budget is
// what the page costs, not what a loaded machine adds.
func TestDashboardBudget(t *testing.T) {
	d := newDash(t)
	r := d.readyRun()
	tab, closeTab := d.tab(d.ctx)
	defer closeTab()
	n := d.netLog(tab)
	// The suite runs this beside other packages against a race-built
	// serve, so one load can be slowed by others' work. The best of three
	// cold loads (the cache is disabled) is judged; the bytes are those of
	// the first load, and every load is logged.
	var render, total float64
	var files []string
	for i := range 3 {
		if i > 0 {
			n.reset()
		}
		d.open(tab, "/inbox")
		d.waitJS(tab, eventually.Medium, "the first render mark", `performance.getEntriesByName('pam-first-render').length`)
		r := eval[float64](d, tab, `performance.getEntriesByName('pam-first-render')[0].startTime`)
		t.Logf("load %d: first render %.0f ms; timings: %s", i+1, r, eval[string](d, tab, `JSON.stringify(performance.getEntriesByType('resource').map((e) => [e.name.replace(location.origin, ''), Math.round(e.startTime), Math.round(e.responseEnd)]).concat([['document', 0, Math.round(performance.getEntriesByType('navigation')[0].responseEnd)]]))`))
		if i == 0 || r < render {
			render = r
		}
		if i == 0 {
			total, files = n.measure()
		}
	}
	t.Logf("first page: %.1f KiB on the wire, first render %.0f ms: %s", total/1024, render, strings.Join(files, ", "))
	if total > firstPageBudget {
		t.Errorf("the first page moved %.1f KiB, budget %d KiB", total/1024, firstPageBudget>>10)
	}
	if render > float64(firstRender.Milliseconds()) {
		t.Errorf("first render at %.0f ms, budget %s", render, firstRender)
	}
	n.reset()
	d.openRun(tab, r.ID)
	total, files = n.measure()
	t.Logf("run page with the terminal: %.1f KiB on the wire: %s", total/1024, strings.Join(files, ", "))
	if total > terminalBudget {
		t.Errorf("the run page moved %.1f KiB, budget %d KiB", total/1024, terminalBudget>>10)
	}
}

// shotPage is a page to screenshot, and what shows once it is drawn.
type shotPage struct{ name, path, ready string }

// TestDashboardScreenshots: with a failed run and an asking one, the
// inbox lists both, newest first, with their live thumbnails and the tab
// title counting them; every page drawn, desktop light and dark (the
// dark background checked) and on the phone (nothing wider than the
// screen); ? opens the shortcuts and g i goes to the inbox; the phone's
// collapsed nav opens.
func TestDashboardScreenshots(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	d.boardItems()
	ready := d.readyRun()
	var w wire.WorkItem
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "task", "title": "Build the release"}, &w)
	var r wire.Run
	d.api(202, "POST", "/runs", map[string]any{"task_id": w.ID, "provider": "shell", "prompt": "echo compiling; echo 'error: 3 tests failed'; sleep 1; exit 3", "max_attempts": 1}, &r)
	d.waitRun(r.ID, "to fail", func(r wire.Run) bool { return r.Status == wire.RunFailed })
	asking := d.askingRun(t, "Approve the release notes")
	d.open(d.ctx, "/inbox")
	want := asking.ID + ":needs_input," + r.ID + ":failed"
	if !eventually.Within(eventually.Medium, func() bool {
		return eval[string](d, d.ctx, `[...document.querySelectorAll('[data-testid=inbox-card]')].map((c) => c.dataset.run + ':' + c.dataset.why).join()`) == want
	}) {
		t.Fatalf("the inbox %s, want the asking and the failed run, newest first: %s", eval[string](d, d.ctx, inboxState), want)
	}
	d.waitJS(d.ctx, eventually.Medium, "the inbox thumbnails", `document.querySelectorAll('.thumb:not(.thumb-empty)').length === 2`)
	if title := eval[string](d, d.ctx, `document.title`); !strings.HasPrefix(title, "(2)") {
		t.Errorf("tab title %q, want the inbox count", title)
	}
	pages := []shotPage{
		{"inbox", "/inbox", `[data-testid=inbox-card][data-run="` + asking.ID + `"] .thumb:not(.thumb-empty)`},
		{"projects", "/projects", `[data-testid=project-card]`},
		{"board", "/projects/browser-test", `[data-testid=item-card]`},
		{"runs", "/runs", `[data-testid=run-row]`},
		{"run", "/runs/" + ready.ID, `[data-testid=terminal] .xterm`},
		{"run-asking", "/runs/" + asking.ID, `[data-testid=terminal] .xterm`},
		{"fleet", "/fleet", `[data-testid=host-card]`},
	}
	for _, p := range pages {
		d.goTo(d.ctx, p.path)
		d.waitJS(d.ctx, eventually.Medium, p.name, `document.querySelector('`+p.ready+`')`)
		d.shot(d.ctx, "desktop-"+p.name)
	}
	d.darkShots(pages)
	d.goTo(d.ctx, "/fleet")
	// Shortcuts: ? opens the list, g i goes to the inbox.
	d.do(d.ctx, press("?"))
	d.waitJS(d.ctx, eventually.Short, "the shortcuts dialog", `document.querySelector('dialog[open] .shortcuts')`)
	d.shot(d.ctx, "desktop-shortcuts")
	d.do(d.ctx, press(kb.Escape), press("gi"))
	d.waitJS(d.ctx, eventually.Short, "g i to the inbox", `location.pathname === '/inbox'`)

	phone := d.phoneTab()
	for _, p := range pages {
		d.open(phone, p.path)
		d.waitJS(phone, eventually.Medium, p.name, `document.querySelector('`+p.ready+`')`)
		if p.name == "run" {
			d.waitJS(phone, eventually.Medium, "the pane", `window.__pamTerm.buffer.includes('ui-42-ready')`)
		}
		d.noOverflow(phone, p.path)
		d.shot(phone, "phone-"+p.name)
	}
	d.click(phone, `.nav-toggle`)
	d.waitJS(phone, eventually.Short, "the collapsed nav open", `document.querySelector('.nav.open')`)
	d.shot(phone, "phone-nav")
}

// darkShots draws pages in the main tab as a system set to dark gets
// them, checks their background is the dark one and screenshots them.
func (d *dash) darkShots(pages []shotPage) {
	d.t.Helper()
	if _, err := chromedp.Call(d.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
		d.t.Fatal(err)
	}
	for _, p := range pages {
		d.goTo(d.ctx, p.path)
		d.waitJS(d.ctx, eventually.Medium, p.name, `document.querySelector('`+p.ready+`')`)
		if bg := eval[string](d, d.ctx, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(14, 15, 18)" {
			d.t.Errorf("dark %s: body background %s", p.name, bg)
		}
		d.shot(d.ctx, "desktop-dark-"+p.name)
	}
	if _, err := chromedp.Call(d.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{}); err != nil {
		d.t.Fatal(err)
	}
}
