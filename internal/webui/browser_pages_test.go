package webui_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// The dashboard's sign-in, board and run page (docs/architecture.md#web-dashboard).

// TestDashboardSignInThroughFragment: a browser that has never signed in
// opens a link with the token in its fragment: the token leaves the
// address bar for localStorage, the stream goes live, and the page's CSP
// allows the origin's own scripts only.
func TestDashboardSignInThroughFragment(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	tab, _ := d.tab(d.ctx, chromedp.WithNewBrowserContext())
	d.do(tab, chromedp.Navigate(d.url+"/inbox#token="+d.token))
	d.waitJS(tab, 15*time.Second, "the signed-in shell", `document.querySelector('[data-testid=conn]')`)
	if href := eval[string](d, tab, `location.href`); strings.Contains(href, d.token) || strings.Contains(href, "token") {
		t.Errorf("the token stays in the address bar: %s", href)
	}
	if got := eval[string](d, tab, `localStorage.getItem('pam.token')`); got != d.token {
		t.Errorf("localStorage token %q", got)
	}
	d.waitJS(tab, eventually.Medium, "the stream to be live", `document.querySelector('[data-testid=conn]').dataset.state === 'live'`)
	res, err := http.Get(d.url + "/inbox")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if csp := res.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'self'") || strings.Contains(csp, "script-src") {
		t.Errorf("CSP %q", csp)
	}
	d.shot(tab, "desktop-inbox-empty")
}

// TestDashboardSignOutAndForm: signing out forgets the token and shows
// the form; the form refuses a wrong token and takes the right one; a
// stored token the server refuses later (rotated, say) returns to the
// form and is forgotten.
func TestDashboardSignOutAndForm(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	d.allowed = append(d.allowed, "401", "Unauthorized") // the refused tokens
	d.open(d.ctx, "/inbox")
	d.click(d.ctx, `button[aria-label=Settings]`)
	d.click(d.ctx, `.menu button.danger`)
	d.waitJS(d.ctx, eventually.Short, "the sign-in form", `document.querySelector('#token')`)
	if got := eval[bool](d, d.ctx, `localStorage.getItem('pam.token') === null`); !got {
		t.Error("the token stays in localStorage after sign-out")
	}
	d.shot(d.ctx, "desktop-signin")
	d.setField(d.ctx, "#token", strings.Repeat("0", 32))
	d.click(d.ctx, `.signin-card button[type=submit]`)
	d.waitJS(d.ctx, eventually.Short, "a refused token's message", `document.querySelector('.form-error')`)
	d.setField(d.ctx, "#token", d.token)
	d.click(d.ctx, `.signin-card button[type=submit]`)
	d.waitJS(d.ctx, eventually.Medium, "the shell after the form", `document.querySelector('[data-testid=conn]')`)
	_ = eval[bool](d, d.ctx, `(localStorage.setItem('pam.token', '`+strings.Repeat("1", 32)+`'), true)`)
	d.do(d.ctx, chromedp.Reload())
	d.waitJS(d.ctx, eventually.Medium, "the form after a 401", `document.querySelector('#token') && document.querySelector('.notice')`)
	if got := eval[bool](d, d.ctx, `localStorage.getItem('pam.token') === null`); !got {
		t.Error("a refused token stays in localStorage")
	}
	d.open(d.ctx, "/inbox#token="+d.token)
}

// TestDashboardBoardCreateAndMove: a project and two tasks made in the
// dashboard; a card dragged by mouse to Doing, moved by Shift+→ to Done
// and Shift+← back (each in the API); an epic made through the API shows
// as its tasks' group, live.
func TestDashboardBoardCreateAndMove(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	d.open(d.ctx, "/projects")
	d.click(d.ctx, d.sel("new-project"))
	d.setField(d.ctx, `#new-project-form input[name=name]`, "Browser Test")
	d.click(d.ctx, `#new-project-form button[type=submit]`)
	d.waitJS(d.ctx, eventually.Medium, "the new project's board", `location.pathname === '/projects/browser-test' && document.querySelector('[data-testid=board]')`)
	d.api(200, "GET", "/projects/browser-test", nil, nil)
	for _, title := range []string{"Wire the pane", "Say hello"} {
		d.click(d.ctx, d.sel("new-item"))
		d.setField(d.ctx, `#item-form input[name=title]`, title)
		d.click(d.ctx, `#item-form button[type=submit]`)
		d.waitJS(d.ctx, eventually.Medium, "the card "+title, fmt.Sprintf(`[...document.querySelectorAll('[data-testid=col-todo] [data-testid=item-card]')].some((c) => c.textContent.includes(%q))`, title))
	}
	var l wire.WorkItemList
	d.api(200, "GET", "/projects/browser-test/work-items", nil, &l)
	if len(l.WorkItems) != 2 {
		t.Fatalf("the API lists %d items, want 2", len(l.WorkItems))
	}
	first := l.WorkItems[0]
	for _, w := range l.WorkItems {
		if w.Title == "Wire the pane" {
			first = w
		}
	}
	card := fmt.Sprintf(`[data-item=%q]`, first.ID)
	d.do(d.ctx, chromedp.DragAndDrop(chromedp.CSS(card), chromedp.CSS(`[data-testid=col-doing] .column-body`)))
	eventually.Wait(t, eventually.Medium, "the dragged card to be doing in the API", func() bool { return d.item(first.ID).Status == "doing" })
	d.waitJS(d.ctx, eventually.Short, "the card in the doing column", `document.querySelector('[data-testid=col-doing] `+card+`')`)
	// Keyboard: Shift+→ moves the focused card one column right.
	d.do(d.ctx, chromedp.Focus(chromedp.CSS(card)), press(kb.ArrowRight, chromedp.KeyModifiers(chromedp.ModifierShift)))
	eventually.Wait(t, eventually.Medium, "the card moved by keyboard to be done", func() bool { return d.item(first.ID).Status == "done" })
	// The page may show the move a moment after the API has it: a
	// Shift+← on the card still drawn in doing would send it to todo.
	d.waitJS(d.ctx, eventually.Short, "the card in the done column", `document.querySelector('[data-testid=col-done] `+card+`')`)
	d.do(d.ctx, chromedp.Focus(chromedp.CSS(card)), press(kb.ArrowLeft, chromedp.KeyModifiers(chromedp.ModifierShift)))
	eventually.Wait(t, eventually.Medium, "the card moved back to doing", func() bool { return d.item(first.ID).Status == "doing" })
	// An epic groups its tasks.
	var epic wire.WorkItem
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "epic", "title": "Terminal epic"}, &epic)
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "task", "title": "Key bar", "parent_id": epic.ID}, nil)
	d.waitJS(d.ctx, eventually.Medium, "the epic's group on the board (live, from the stream)", `[...document.querySelectorAll('.group-label')].some((g) => g.textContent === 'Terminal epic')`)
	d.shot(d.ctx, "desktop-board-moved") // desktop-board is TestDashboardScreenshots'
}

// TestDashboardStartShellRunAndSeeOutput: a task's Start run on the board
// starts a shell run and opens its page, whose terminal shows the run's
// output within 2 s of the run running, with its status live. Not in
// parallel: the 2 s are the page's, not a busy machine's.
func TestDashboardStartShellRunAndSeeOutput(t *testing.T) {
	d := newDash(t)
	d.boardItems()
	var task wire.WorkItem
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "task", "title": "Say hello"}, &task)
	d.open(d.ctx, "/projects/browser-test")
	d.click(d.ctx, fmt.Sprintf(`[data-item=%q]`, task.ID))
	d.click(d.ctx, d.sel("start-run"))
	d.setField(d.ctx, `#start-run-form select[name=provider]`, "shell")
	d.setField(d.ctx, `#start-run-form textarea[name=prompt]`, readyScript)
	d.click(d.ctx, `#start-run-form button[type=submit]`)
	d.waitJS(d.ctx, eventually.Medium, "the run page", `/^\/runs\/[0-9a-f-]{36}$/.test(location.pathname)`)
	runID := strings.TrimPrefix(eval[string](d, d.ctx, `location.pathname`), "/runs/")
	d.waitRun(runID, "to be running", func(r wire.Run) bool { return r.Status == wire.RunRunning && r.TaskID == task.ID })
	start := time.Now()
	d.waitJS(d.ctx, eventually.Medium, "the run's output in the terminal", `window.__pamTerm && window.__pamTerm.buffer.includes('ui-42-ready')`)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the output reached the terminal %s after the run was running, want ≤ 2s", took.Round(time.Millisecond))
	} else {
		t.Logf("output in the terminal %s after the run was running", took.Round(time.Millisecond))
	}
	d.waitJS(d.ctx, eventually.Medium, "the run's status badge live", `document.querySelector('.run-meta .badge.st-running')`)
	d.shot(d.ctx, "desktop-run-started") // desktop-run is TestDashboardScreenshots'
}

// TestDashboardTakeControlTypeEcho: control of a run under the lease
// types into it; another browser (a profile of its own: its own
// localStorage, signed in with the token in its address) finds the lease
// held, sees by whom, cannot type, revokes the lease and takes control.
func TestDashboardTakeControlTypeEcho(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	r := d.readyRun()
	d.openRun(d.ctx, r.ID)
	d.click(d.ctx, d.sel("take-control"))
	d.waitJS(d.ctx, eventually.Medium, "control of the run", `document.querySelector('[data-testid=term-mode]').dataset.mode === 'control'`)
	d.insertText(d.ctx, "hello-attach")
	d.do(d.ctx, press(kb.Enter))
	d.waitJS(d.ctx, eventually.Short, "the typed text echoed twice (tty and cat)", `window.__pamTerm.buffer.split('hello-attach').length >= 3`)
	d.shot(d.ctx, "desktop-run-control")

	other, closeOther := d.tab(d.ctx, chromedp.WithNewBrowserContext())
	defer closeOther()
	d.do(other, chromedp.Navigate(d.url+"/runs/"+r.ID))
	d.waitJS(other, eventually.Medium, "the sign-in form: the other browser has no token", `document.querySelector('#token')`)
	d.open(other, "/runs/"+r.ID+"#token="+d.token)
	d.waitJS(other, eventually.Medium, "the other browser's read-only view", `document.querySelector('[data-testid=term-mode]').dataset.mode === 'view'`)
	d.click(other, d.sel("take-control"))
	d.waitJS(other, eventually.Medium, "the lease held elsewhere", `document.querySelector('[data-testid=term-mode]').dataset.mode === 'held'`)
	holder := eval[string](d, other, `document.querySelector('[data-testid=holder]').textContent`)
	if !strings.Contains(holder, "Chrome") || !strings.Contains(holder, "127.0.0.1") {
		t.Errorf("holder shown as %q", holder)
	}
	d.shot(other, "desktop-run-held")
	// Typing there reaches nothing. The holder then types a marker:
	// once its echo is back, keys sent before it would be too.
	d.do(other, chromedp.Focus(chromedp.CSS(`[data-testid=terminal] textarea`)))
	d.insertText(other, "intruder-keys")
	d.do(other, press(kb.Enter))
	d.insertText(d.ctx, "marker-after")
	d.do(d.ctx, press(kb.Enter))
	d.waitJS(d.ctx, eventually.Short, "the holder's marker echoed", `window.__pamTerm.buffer.split('marker-after').length >= 3`)
	if buf := eval[string](d, d.ctx, `window.__pamTerm.buffer`); strings.Contains(buf, "intruder") {
		t.Errorf("keys typed without the lease reached the run:\n%s", buf)
	}
	d.click(other, d.sel("revoke"))
	d.waitJS(other, eventually.Medium, "control after the revoke", `document.querySelector('[data-testid=term-mode]').dataset.mode === 'control'`)
	d.waitJS(d.ctx, eventually.Medium, "the first browser back to the read-only view", `document.querySelector('[data-testid=term-mode]').dataset.mode === 'view' && document.querySelector('.term-msg').textContent.includes('revoked')`)
	d.insertText(other, "typed-by-the-other")
	d.do(other, press(kb.Enter))
	d.waitJS(other, eventually.Short, "the other browser's typing echoed", `window.__pamTerm.buffer.split('typed-by-the-other').length >= 3`)
	d.click(other, d.sel("release"))
	d.waitJS(other, eventually.Medium, "the other browser released", `document.querySelector('[data-testid=term-mode]').dataset.mode === 'view'`)
}

// TestDashboardStopFromRunPage: Stop on a live run's page stops it (the
// API says so), and the page shows it live: the stopped badge,
// run.stopped among its events, no Stop button.
func TestDashboardStopFromRunPage(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	r := d.readyRun()
	d.openRun(d.ctx, r.ID)
	d.click(d.ctx, d.sel("stop"))
	d.waitRun(r.ID, "stopped in the API", func(r wire.Run) bool { return r.Status == wire.RunStopped })
	d.waitJS(d.ctx, eventually.Medium, "the stopped badge and run.stopped in Events, live",
		`document.querySelector('.run-meta .badge.st-stopped') && document.querySelector('[data-testid=events]').textContent.includes('run.stopped') && !document.querySelector('[data-testid=stop]')`)
}
