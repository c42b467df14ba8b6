package webui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// The dashboard's fleet actions, keyboard and notifications
// (docs/architecture.md#web-dashboard).

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// menuItem opens the actions menu of the host card named host and clicks
// its entry whose text contains label.
func (d *dash) menuItem(ctx context.Context, host, label string) {
	d.t.Helper()
	d.click(ctx, fmt.Sprintf(`[data-testid=host-card][data-host=%q] button[aria-label="Actions for %s"]`, host, host))
	js := fmt.Sprintf(`(() => { const b = [...document.querySelectorAll('[data-testid=host-card][data-host=%q] .menu [role=menuitem]')].find((e) => e.textContent.includes(%q));
		if (!b) return false; document.querySelectorAll('[data-pick]').forEach((e) => e.removeAttribute('data-pick')); b.setAttribute('data-pick', ''); return true; })()`, host, label)
	if !eval[bool](d, ctx, js) {
		d.t.Fatalf("no %q in the menu of %s", label, host)
	}
	d.click(ctx, `[data-pick]`)
}

// registerAs posts a worker register for host with a worker token and
// returns the HTTP status.
func (d *dash) registerAs(token, host string) int {
	d.t.Helper()
	b, _ := json.Marshal(wire.Register{HostName: host, Platform: "linux", InstanceID: "7f2c1a4e-0000-4000-8000-00000000beef", Providers: []string{"shell"}, MaxRuns: 1, Protocol: 1})
	req, _ := http.NewRequest("POST", d.url+"/api/internal/worker/register", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestDashboardFleetDisableEnableRotateRemove: a host of its own (not the worker's) disabled and enabled
// from its card's menu, its token rotated (the new one shown once, the old
// one refused at register), then removed: gone from the page and the API.
func TestDashboardFleetDisableEnableRotateRemove(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	const name = "spare-box"
	d.open(d.ctx, "/fleet")
	d.waitJS(d.ctx, eventually.Medium, "the fleet", `document.querySelector('[data-testid=host-card]')`)
	var created wire.HostCreated
	d.api(201, "POST", "/hosts", map[string]any{"name": name, "max_runs": 2}, &created)
	old := created.WorkerToken
	card := fmt.Sprintf(`document.querySelector('[data-testid=host-card][data-host=%q]')`, name)
	d.waitJS(d.ctx, eventually.Medium, "the new host's card (live)", card)
	// The confirm dialogs of rotate and remove are answered yes.
	_ = eval[bool](d, d.ctx, `(window.__confirm = window.confirm, window.confirm = () => true, true)`)
	defer eval[bool](d, d.ctx, `(window.confirm = window.__confirm || window.confirm, true)`)

	d.menuItem(d.ctx, name, "Disable")
	eventually.Wait(t, eventually.Medium, "the host disabled in the API", func() bool {
		var h wire.Host
		d.api(200, "GET", "/hosts/"+name, nil, &h)
		return h.Disabled && h.Status == "disabled"
	})
	d.waitJS(d.ctx, eventually.Short, "the card showing disabled", card+`.dataset.status === 'disabled' && `+card+`.querySelector('.host-head .badge.st-disabled')`)
	d.shot(d.ctx, "desktop-fleet-disabled")
	d.menuItem(d.ctx, name, "Enable")
	eventually.Wait(t, eventually.Medium, "the host enabled in the API", func() bool {
		var h wire.Host
		d.api(200, "GET", "/hosts/"+name, nil, &h)
		return !h.Disabled && h.Status != "disabled"
	})
	d.waitJS(d.ctx, eventually.Short, "the card enabled again", card+`.dataset.status !== 'disabled' && !`+card+`.querySelector('.badge.st-disabled')`)

	d.menuItem(d.ctx, name, "Rotate token")
	d.waitJS(d.ctx, eventually.Medium, "the new token, shown once", `document.querySelector('dialog [data-testid=worker-token]')`)
	tok := eval[string](d, d.ctx, `document.querySelector('[data-testid=worker-token]').textContent`)
	if !hex64.MatchString(tok) || tok == old {
		t.Errorf("rotated token %q (the old one %q)", tok, old)
	}
	if title := eval[string](d, d.ctx, `document.querySelector('dialog .dialog-head h2').textContent`); !strings.Contains(title, "New token for "+name) {
		t.Errorf("the dialog says %q", title)
	}
	if code := d.registerAs(old, name); code != 401 {
		t.Errorf("register with the old token: %d, want 401", code)
	}
	if code := d.registerAs(tok, name); code != 200 {
		t.Errorf("register with the rotated token: %d, want 200", code)
	}
	d.do(d.ctx, press(kb.Escape))
	d.waitJS(d.ctx, eventually.Short, "the token gone from the page", `!document.querySelector('[data-testid=worker-token]') && !document.body.textContent.includes('`+tok+`')`)

	d.menuItem(d.ctx, name, "Remove")
	d.waitJS(d.ctx, eventually.Medium, "the card gone", `!`+card)
	d.api(404, "GET", "/hosts/"+name, nil, nil)
	d.do(d.ctx, chromedp.Reload())
	d.waitJS(d.ctx, 15*time.Second, "the fleet after a reload", `document.querySelector('[data-testid=host-card]')`)
	if eval[bool](d, d.ctx, card+` !== null`) {
		t.Error("the removed host is back after a reload")
	}
	// The register above journals events that make the page refetch the
	// host; one such read may reach the server just after the remove, and
	// the browser logs its 404 (the page handles it: the host is dropped).
	d.mu.Lock()
	kept := d.logs[:0]
	for _, l := range d.logs {
		if !(strings.Contains(l, "status of 404") && strings.Contains(l, "/api/v1/hosts/"+created.Host.ID)) {
			kept = append(kept, l)
		}
	}
	d.logs = kept
	d.mu.Unlock()
}

// pendingRuns starts n runs of a provider no host has on a task of
// browser-test: they stay pending, listed and never spawned. It returns
// the API's runs, newest first.
func (d *dash) pendingRuns(n int) []wire.Run {
	d.t.Helper()
	d.browserTest()
	var task wire.WorkItem
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "task", "title": "Run it often"}, &task)
	for range n {
		d.api(202, "POST", "/runs", map[string]any{"task_id": task.ID, "provider": "nowhere"}, nil)
	}
	var l wire.RunList
	d.api(200, "GET", "/runs", nil, &l)
	if len(l.Runs) != n {
		d.t.Fatalf("%d runs, want %d", len(l.Runs), n)
	}
	return l.Runs
}

// search presses / (the search field takes the focus), types query and,
// once the first result is what first (a JS expression on it, a) says,
// presses Enter.
func (d *dash) search(query, what, first string) {
	d.t.Helper()
	d.do(d.ctx, press("/"))
	d.waitJS(d.ctx, eventually.Short, "the search field focused", `document.activeElement && document.activeElement.classList.contains('search-input')`)
	d.insertText(d.ctx, query)
	d.waitJS(d.ctx, eventually.Medium, what+" first among the results", `(() => { const a = document.querySelector('.results a.sel'); return a && (`+first+`); })()`)
	d.do(d.ctx, press(kb.Enter))
}

// TestDashboardKeyboard: ? lists the shortcuts, / searches (a task's
// title, then a run's short id, Enter goes there), g i goes to the inbox,
// and on the runs list j/k move the selection and Enter opens the
// selected run.
func TestDashboardKeyboard(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	runs := d.pendingRuns(3)
	var w wire.WorkItem
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "task", "title": "Polish the keyboard"}, &w)
	d.open(d.ctx, "/fleet")
	d.waitJS(d.ctx, eventually.Short, "the fleet", `document.querySelector('[data-testid=host-card]')`)
	d.do(d.ctx, press("?"))
	d.waitJS(d.ctx, eventually.Short, "the shortcuts dialog listing j/k and g i", `[...document.querySelectorAll('dialog[open] .shortcuts tr')].some((r) => r.textContent.startsWith('gi'))
		&& [...document.querySelectorAll('dialog[open] .shortcuts tr')].some((r) => r.textContent.startsWith('j / k'))`)
	d.do(d.ctx, press(kb.Escape))
	d.waitJS(d.ctx, eventually.Short, "the shortcuts closed", `!document.querySelector('dialog .shortcuts')`)

	// / then a task's title: Enter opens it on its board.
	d.search("Polish the keyboard", "the task", `a.textContent.includes('Polish the keyboard')`)
	d.waitJS(d.ctx, eventually.Short, "its board with the task open", fmt.Sprintf(`location.pathname === '/projects/browser-test' && location.search === '?item=%s'`, w.ID))
	d.do(d.ctx, press(kb.Escape))

	// / then a run's short id: Enter opens the run.
	target := runs[len(runs)-1]
	d.goTo(d.ctx, "/inbox")
	d.waitJS(d.ctx, eventually.Short, "no dialog", `!document.querySelector('dialog')`)
	d.search(target.ID[:8], "the run", `a.getAttribute('href') === '/runs/`+target.ID+`'`)
	d.waitJS(d.ctx, eventually.Short, "the run page", `location.pathname === '/runs/`+target.ID+`' && !document.querySelector('dialog')`)

	// g i from the run page.
	_ = eval[bool](d, d.ctx, `(document.activeElement && document.activeElement.blur(), true)`)
	d.do(d.ctx, press("g"), press("i"))
	d.waitJS(d.ctx, eventually.Short, "g i to the inbox", `location.pathname === '/inbox'`)

	// j/k on the runs list, Enter opens the selected one.
	d.goTo(d.ctx, "/runs")
	d.waitJS(d.ctx, eventually.Short, "the runs list", `document.querySelectorAll('[data-testid=run-row]').length >= 3`)
	rows := `[...document.querySelectorAll('[data-testid=run-row]')]`
	selected := `` + rows + `.indexOf(document.activeElement)`
	for i, step := range []struct {
		key  string
		want int
	}{{"j", 0}, {"j", 1}, {"j", 2}, {"k", 1}} {
		d.do(d.ctx, press(step.key))
		d.waitJS(d.ctx, eventually.Short, fmt.Sprintf("key %d (%s) to select row %d", i+1, step.key, step.want), fmt.Sprintf(`%s === %d`, selected, step.want))
	}
	href := eval[string](d, d.ctx, `document.activeElement.querySelector('a').getAttribute('href')`)
	if href != "/runs/"+runs[1].ID {
		// The page and the API order the runs alike (newest first).
		t.Errorf("the second row opens %s, want the API's second run %s", href, runs[1].ID)
	}
	d.do(d.ctx, press(kb.Enter))
	d.waitJS(d.ctx, eventually.Short, "Enter to open the selected run", `location.pathname === '`+href+`'`)
}

// notifyCapture stands in for window.Notification before the page's
// own script runs: each notification is kept in window.__notes (title,
// options, and the object, whose onclick the page sets); the permission
// is the browser's own, which the test grants.
const notifyCapture = `(() => {
	const Real = window.Notification;
	if (!Real) return;
	window.__notes = [];
	class Captured {
		constructor(title, opts) { this.title = title; this.opts = opts || {}; this.closed = false; window.__notes.push(this); }
		close() { this.closed = true; }
		static get permission() { return Real.permission; }
		static requestPermission(cb) { return Real.requestPermission(cb); }
	}
	window.Notification = Captured;
})()`

// TestDashboardNotifications: with the permission granted and notifications switched
// on in the settings menu, a run that fails gives a notification naming
// the run whose click opens the run's page, and the tab title counts it.
func TestDashboardNotifications(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	if _, err := chromedp.CallBrowser(d.ctx, browser.SetPermission, browser.SetPermissionParams{Permission: &browser.PermissionDescriptor{Name: "notifications"},
		Setting: browser.PermissionSettingGranted, Origin: d.url, BrowserContextID: chromedp.FromContext(d.ctx).BrowserContextID}); err != nil {
		t.Fatalf("grant notifications: %v", err)
	}
	tab, closeTab := d.tab(d.ctx)
	defer closeTab()
	if _, err := chromedp.Call(tab, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: notifyCapture}); err != nil {
		t.Fatal(err)
	}
	d.open(tab, "/inbox")
	if got := eval[string](d, tab, `Notification.permission + ':' + Array.isArray(window.__notes)`); got != "granted:true" {
		t.Fatalf("permission and capture: %s", got)
	}
	d.click(tab, `button[aria-label=Settings]`)
	d.waitJS(tab, eventually.Short, "the opt-in entry", `[...document.querySelectorAll('.menu [role=menuitem]')].some((b) => b.textContent.includes('Notify me'))`)
	_ = eval[bool](d, tab, `(() => { const b = [...document.querySelectorAll('.menu [role=menuitem]')].find((b) => b.textContent.includes('Notify me')); b.setAttribute('data-pick', ''); return true; })()`)
	d.click(tab, `[data-pick]`)
	d.waitJS(tab, eventually.Short, "notifications on", `localStorage.getItem('pam.notify') === '1' && [...document.querySelectorAll('.toast')].some((e) => e.textContent.includes('Notifications on'))`)

	gate := pamtest.ShortDir(t, "pamn-") + "/fail"
	r := d.shellRun("Ship the notifier", fmt.Sprintf(`echo working; while [ ! -e %s ]; do sleep 0.05; done; exit 4`, gate))
	// The page must have seen the run running: it notifies on a change.
	d.goTo(tab, "/runs")
	d.waitJS(tab, eventually.Medium, "the running run listed", `[...document.querySelectorAll('[data-testid=run-row]')].some((row) => row.querySelector('a').getAttribute('href') === '/runs/`+r.ID+`' && row.querySelector('.badge.st-running'))`)
	before := eval[int](d, tab, `(document.title.match(/^\((\d+)\)/) || [0, 0])[1] * 1`)
	if n := eval[int](d, tab, `window.__notes.length`); n != 0 {
		t.Errorf("%d notifications before the run failed", n)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitRun(r.ID, "to fail", func(r wire.Run) bool { return r.Status == wire.RunFailed })
	d.waitJS(tab, eventually.Medium, "a notification", `window.__notes.length > 0`)
	var notes []struct {
		Title string
		Body  string
		Tag   string
	}
	if err := json.Unmarshal([]byte(eval[string](d, tab, `JSON.stringify(window.__notes.map((n) => ({title: n.title, body: n.opts.body, tag: n.opts.tag})))`)), &notes); err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0].Title, "Ship the notifier") || !strings.Contains(notes[0].Title, "failed") ||
		!strings.Contains(notes[0].Body, r.ID[:8]) || notes[0].Tag != r.ID {
		t.Errorf("notifications %+v, want one naming the failed run %s", notes, r.ID)
	}
	want := fmt.Sprintf("(%d)", before+1)
	d.waitJS(tab, eventually.Short, "the tab title counting the failed run", `document.title.startsWith('`+want+`')`)
	// Its click opens the run's page.
	_ = eval[bool](d, tab, `(window.__notes[0].onclick(), true)`)
	d.waitJS(tab, eventually.Short, "the notification's click to open the run", `location.pathname === '/runs/`+r.ID+`' && window.__notes[0].closed`)
}
