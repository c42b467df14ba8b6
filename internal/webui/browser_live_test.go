package webui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// The dashboard's live scenarios (docs/architecture.md#web-dashboard, #attention): a run asking
// for input in the Inbox, a host added and going offline on the Fleet,
// serve killed and started again under an open page, and the board and
// run page on a 375×812 touch screen.

// insertText types text as an input method does: CDP's key events
// would type each character twice (a keyDown with text and a char event).
func (d *dash) insertText(ctx context.Context, text string) {
	d.t.Helper()
	if _, err := chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: text}); err != nil {
		d.t.Fatalf("type %q: %v", text, err)
	}
}

// browserTest makes, once, the project the scenarios' tasks go in:
// Browser Test (browser-test), through the API.
func (d *dash) browserTest() {
	d.t.Helper()
	if !d.project {
		d.api(201, "POST", "/projects", map[string]any{"name": "Browser Test"}, nil)
		d.project = true
	}
}

// boardItems fills browser-test's board as an operator's looks: "Wire
// the pane" in Doing, and an epic, "Terminal epic", grouping its task
// "Key bar".
func (d *dash) boardItems() {
	d.t.Helper()
	d.browserTest()
	var w, epic wire.WorkItem
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "task", "title": "Wire the pane"}, &w)
	d.api(200, "PATCH", "/work-items/"+w.ID, map[string]any{"status": "doing"}, nil)
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "epic", "title": "Terminal epic"}, &epic)
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "task", "title": "Key bar", "parent_id": epic.ID}, nil)
}

// readyScript prints ui-42-ready (worked out by the shell, so that the
// echo of the command line is not it), then echoes what it is typed.
const readyScript = `echo ui-$((6*7))-ready; exec cat`

// readyRun starts readyScript on a task "Say hello" and waits until it runs.
func (d *dash) readyRun() wire.Run {
	d.t.Helper()
	return d.shellRun("Say hello", readyScript)
}

// openRun loads run id's page in ctx and waits until its terminal shows
// readyScript's line.
func (d *dash) openRun(ctx context.Context, id string) {
	d.t.Helper()
	d.open(ctx, "/runs/"+id)
	d.waitJS(ctx, eventually.Medium, "the terminal", `window.__pamTerm && window.__pamTerm.buffer.includes('ui-42-ready')`)
}

// shellRun creates a task titled title in the browser-test project and
// starts a one-attempt shell run of script on it, waiting until it runs.
func (d *dash) shellRun(title, script string) wire.Run {
	d.t.Helper()
	d.browserTest()
	var w wire.WorkItem
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "task", "title": title}, &w)
	var r wire.Run
	d.api(202, "POST", "/runs", map[string]any{"task_id": w.ID, "provider": "shell", "prompt": script, "max_attempts": 1}, &r)
	return d.waitRun(r.ID, "to be running", func(r wire.Run) bool { return r.Status == wire.RunRunning })
}

// waitRun waits until the API's run id satisfies ok, and returns it.
func (d *dash) waitRun(id, what string, ok func(wire.Run) bool) wire.Run {
	d.t.Helper()
	var r wire.Run
	eventually.Wait(d.t, eventually.Long, "run "+id[:8]+" "+what, func() bool {
		r = wire.Run{}
		d.api(200, "GET", "/runs/"+id, nil, &r)
		return ok(r)
	})
	return r
}

// waitPane waits until the API's pane of run id shows want.
func (d *dash) waitPane(id, want string) {
	d.t.Helper()
	eventually.Wait(d.t, 20*time.Second, fmt.Sprintf("the pane of %s to show %q", id[:8], want), func() bool {
		var p wire.Pane
		d.api(200, "GET", "/runs/"+id+"/pane", nil, &p)
		return strings.Contains(p.Capture, want)
	})
}

// hookScript is the shell text that calls `pam hook kind` as a
// provider's hook does, with a JSON event on stdin.
func hookScript(t *testing.T, kind string) string {
	return fmt.Sprintf(`echo '{"hook_event_name":"PostToolUse"}' | %s hook %s`, pamtest.Pam(t), kind)
}

// askingRun starts a shell run that prints asking, then (once the pane
// has shown it, so that no later pane change clears the attention) asks
// for input through its hook and reads an answer.
func (d *dash) askingRun(t *testing.T, title string) wire.Run {
	t.Helper()
	gate := pamtest.ShortDir(t, "pamg-") + "/ask"
	r := d.shellRun(title, fmt.Sprintf(`echo 'Apply the migration? [y/N]'; while [ ! -e %s ]; do sleep 0.05; done; %s; read answer; echo "got $answer"; exec cat`,
		gate, hookScript(t, "needs-input")))
	d.waitPane(r.ID, "Apply the migration?")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return d.waitRun(r.ID, "to need input", func(r wire.Run) bool { return r.Attention == wire.AttentionNeedsInput })
}

// inboxState is what the page's inbox and its counts say, as JSON.
const inboxState = `JSON.stringify({cards: [...document.querySelectorAll('[data-testid=inbox-card]')].map((c) => c.dataset.run + ':' + c.dataset.why),
	count: (document.querySelector('[data-testid=inbox-count]') || {}).textContent || '', title: document.title})`

// TestDashboardNeedsInputInInbox: a run whose agent asks for input
// (provider hook `pam hook needs-input`) shows in the Inbox as
// needs_input, live, with the badge and the tab title counting it; an
// answer typed under control clears its attention and it leaves the
// Inbox, live.
func TestDashboardNeedsInputInInbox(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	d.browserTest()
	d.open(d.ctx, "/inbox")
	d.waitJS(d.ctx, eventually.Medium, "the inbox", `document.querySelector('.inbox')`)
	before := eval[int](d, d.ctx, `document.querySelectorAll('[data-testid=inbox-card]').length`)
	r := d.askingRun(t, "Migrate the schema")
	card := fmt.Sprintf(`document.querySelector('[data-testid=inbox-card][data-run=%q]')`, r.ID)
	d.waitJS(d.ctx, eventually.Medium, "the asking run in the inbox (live, from run.attention)", card+` && `+card+`.dataset.why === 'needs_input' && `+card+`.querySelector('.badge.st-needs_input')`)
	var st struct {
		Cards []string
		Count string
		Title string
	}
	if err := json.Unmarshal([]byte(eval[string](d, d.ctx, inboxState)), &st); err != nil {
		t.Fatal(err)
	}
	n := fmt.Sprint(before + 1)
	if len(st.Cards) != before+1 || st.Cards[0] != r.ID+":needs_input" || st.Count != n || !strings.HasPrefix(st.Title, "("+n+")") {
		t.Errorf("inbox %+v, want the asking run first of %s, the badge and the title counting %s", st, n, n)
	}
	d.waitJS(d.ctx, eventually.Medium, "its pane in the card", card+`.querySelector('.thumb').textContent.includes('Apply the migration?')`)
	d.shot(d.ctx, "desktop-inbox-needs-input")

	// One click to the run; the answer typed under control.
	d.click(d.ctx, fmt.Sprintf(`[data-testid=inbox-card][data-run=%q] .inbox-link`, r.ID))
	d.waitJS(d.ctx, eventually.Medium, "the run page with its question", `location.pathname === '/runs/`+r.ID+`' && window.__pamTerm && window.__pamTerm.buffer.includes('Apply the migration?') && document.querySelector('.run-meta .badge.st-needs_input')`)
	d.click(d.ctx, d.sel("take-control"))
	d.waitJS(d.ctx, eventually.Medium, "control of the asking run", `document.querySelector('[data-testid=term-mode]').dataset.mode === 'control'`)
	d.insertText(d.ctx, "yes")
	d.do(d.ctx, press(kb.Enter))
	d.waitJS(d.ctx, eventually.Medium, "the answer read by the run", `window.__pamTerm.buffer.includes('got yes')`)
	d.waitRun(r.ID, "to need nothing", func(r wire.Run) bool { return r.Attention == wire.AttentionNone })
	d.waitJS(d.ctx, eventually.Medium, "the attention badge gone", `!document.querySelector('.run-meta .badge.st-needs_input')`)
	d.click(d.ctx, d.sel("release"))
	d.waitJS(d.ctx, eventually.Medium, "released", `document.querySelector('[data-testid=term-mode]').dataset.mode === 'view'`)
	d.goTo(d.ctx, "/inbox")
	d.waitJS(d.ctx, eventually.Medium, "the answered run out of the inbox, the counts down", `!`+card+` && document.querySelectorAll('[data-testid=inbox-card]').length === `+fmt.Sprint(before)+
		` && (document.querySelector('[data-testid=inbox-count]') || {textContent: '0'}).textContent === '`+fmt.Sprint(before)+`'`)
}

// addHostInDialog adds a host named name in the fleet page's Add host
// dialog and returns the worker token and command it shows once; the
// dialog is closed.
func (d *dash) addHostInDialog(name string) (token, cmd string) {
	d.t.Helper()
	d.open(d.ctx, "/fleet")
	d.waitJS(d.ctx, eventually.Short, "the fleet", `document.querySelector('[data-testid=host-card]')`)
	d.click(d.ctx, d.sel("add-host"))
	d.setField(d.ctx, `.dialog input[name=name]`, name)
	d.click(d.ctx, `.dialog button[type=submit]`)
	d.waitJS(d.ctx, eventually.Medium, "the worker token, shown once", `document.querySelector('[data-testid=worker-token]')`)
	token = eval[string](d, d.ctx, `document.querySelector('[data-testid=worker-token]').textContent`)
	cmd = eval[string](d, d.ctx, `document.querySelector('[data-testid=worker-cmd]').textContent`)
	d.shot(d.ctx, "desktop-fleet-add-host")
	d.do(d.ctx, press(kb.Escape))
	d.waitJS(d.ctx, eventually.Short, "two hosts", `document.querySelectorAll('[data-testid=host-card]').length === 2`)
	return token, cmd
}

// TestDashboardFleetAddHost: Add host on the fleet page makes the host
// (the API has it) and shows its worker token once, and the command to
// start its worker, which names the host and serve but not the token.
func TestDashboardFleetAddHost(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	tok, cmd := d.addHostInDialog("gpu-box")
	if len(tok) != 64 || strings.Contains(cmd, tok) || !strings.Contains(cmd, "PAM_HOST_NAME=gpu-box") || !strings.Contains(cmd, d.url) {
		t.Errorf("token %q, command %q", tok, cmd)
	}
	d.api(200, "GET", "/hosts/gpu-box", nil, nil)
}

// TestDashboardFleetHostOffline: the host added through the dashboard
// runs its worker with the token the dialog showed; the fleet page shows
// it online, and offline once its worker stops (PAM_HOST_OFFLINE_AFTER
// is 4 s here).
func TestDashboardFleetHostOffline(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	workerToken, _ := d.addHostInDialog("gpu-box")
	w := pamtest.StartWorker(t, pamtest.WorkerOptions{URL: d.url, Token: workerToken, Name: "gpu-box", Env: workerEnv})
	d.goTo(d.ctx, "/fleet")
	card := `document.querySelector('[data-testid=host-card][data-host=gpu-box]')`
	d.waitJS(d.ctx, eventually.Long, "gpu-box online on the fleet page", card+`.dataset.status === 'online' && `+card+`.querySelector('.badge.st-online')`)
	w.Stop(syscall.SIGTERM, 10*time.Second)
	d.waitJS(d.ctx, eventually.Long, "gpu-box offline on the fleet page (live)", card+`.dataset.status === 'offline' && `+card+`.querySelector('.badge.st-offline')`)
	var h wire.Host
	d.api(200, "GET", "/hosts/gpu-box", nil, &h)
	if h.Status != "offline" {
		t.Errorf("the page says offline, the API %q", h.Status)
	}
	if got := eval[string](d, d.ctx, `document.querySelector('[data-testid=host-card][data-host=web-host]').dataset.status`); got != "online" {
		t.Errorf("web-host shown %q", got)
	}
	d.shot(d.ctx, "desktop-fleet-offline")
}

// TestDashboardServeRestartMissesNothing: with a run journaling progress twice a
// second, serve is killed (-9) under an open run page whose stream is
// held off until events have happened that it has not seen; the page
// shows it reconnects, then the run's Events tab lists exactly the
// journal's events of the run (nothing missed, nothing twice), and the
// stream delivered exactly the journal after the page's first load, in
// order.
func TestDashboardServeRestartMissesNothing(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	r := d.shellRun("Report progress", fmt.Sprintf(`echo reporting; while :; do %s; sleep 0.5; done`, hookScript(t, "progress")))
	tab, closeTab := d.tab(d.ctx)
	defer closeTab()
	d.open(tab, "/runs/"+r.ID)
	d.waitJS(tab, 15*time.Second, "progress rows in the Events tab", `document.querySelectorAll('[data-testid=events] .ev-progress').length >= 2 && document.querySelector('[data-testid=conn]').dataset.state === 'live'`)

	stream := "*://*:*/api/v1/events/stream*"
	if _, err := chromedp.Call(tab, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: []*network.BlockPattern{{URLPattern: stream, Block: true}}}); err != nil {
		t.Fatal(err)
	}
	shown := runEventCount(t, d, r.ID)
	mark := d.logMark()
	defer d.excuse(mark)
	d.serve.Kill9()
	d.waitJS(tab, eventually.Medium, "the reconnecting state and banner", `document.querySelector('[data-testid=conn]').dataset.state === 'reconnecting' && document.querySelector('.banner')`)
	d.serve = pamtest.StartServe(t, d.serveOpts)
	if d.serve.URL != d.url {
		t.Fatalf("serve came back on %s, not %s", d.serve.URL, d.url)
	}
	// Events the page has not seen: the worker back, the run's progress
	// journaled by the new serve.
	eventually.Wait(t, eventually.Long, "progress journaled after the restart", func() bool { return runEventCount(t, d, r.ID) >= shown+4 })
	if got := eval[string](d, tab, `document.querySelector('[data-testid=conn]').dataset.state`); got != "reconnecting" {
		t.Fatalf("the page reconnected while its stream was blocked (%s): the scenario tests nothing", got)
	}
	d.shot(tab, "desktop-reconnecting")
	if _, err := chromedp.Call(tab, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: []*network.BlockPattern{{URLPattern: stream, Block: false}}}); err != nil {
		t.Fatal(err)
	}
	d.waitJS(tab, 20*time.Second, "the page live again", `document.querySelector('[data-testid=conn]').dataset.state === 'live' && !document.querySelector('.banner')`)
	d.api(202, "POST", "/runs/"+r.ID+"/stop", map[string]any{}, nil)
	d.waitRun(r.ID, "to stop", func(r wire.Run) bool { return r.Status == wire.RunStopped })

	// The Events tab against the journal, row by row.
	var rows, seqs []int64
	if !eventually.Within(15*time.Second, func() bool {
		var want wire.EventList
		d.api(200, "GET", "/runs/"+r.ID+"/events", nil, &want)
		seqs = seqs[:0]
		for _, e := range want.Events {
			seqs = append(seqs, e.Seq)
		}
		rows = eval[[]int64](d, tab, `[...document.querySelectorAll('[data-testid=events] [data-seq]')].map((e) => Number(e.dataset.seq)).sort((a, b) => a - b)`)
		stopped := slices.ContainsFunc(want.Events, func(e wire.Event) bool { return e.Topic == string(wire.TopicRunStopped) })
		return stopped && slices.Equal(rows, seqs)
	}) {
		t.Errorf("the Events tab lists seqs %v, the journal %v", rows, seqs)
	}

	d.streamMatchesJournal(tab)
}

// streamMatchesJournal checks what the tab's event stream delivered
// (window.__pamStream): it reconnected at least once, and delivered every
// event of the journal after the page's first load, once, in order.
func (d *dash) streamMatchesJournal(tab context.Context) {
	d.t.Helper()
	var rec struct {
		After      int64
		Seqs       []int64
		Reconnects int
	}
	if err := json.Unmarshal([]byte(eval[string](d, tab, `JSON.stringify(window.__pamStream)`)), &rec); err != nil {
		d.t.Fatal(err)
	}
	if rec.Reconnects < 1 || len(rec.Seqs) == 0 {
		d.t.Fatalf("the stream record %+v: no reconnect, or nothing received", rec)
	}
	last := rec.Seqs[len(rec.Seqs)-1]
	var journal []int64
	for after := rec.After; after < last; {
		var l wire.EventList
		d.api(200, "GET", fmt.Sprintf("/events?after=%d&limit=1000", after), nil, &l)
		if len(l.Events) == 0 {
			break
		}
		for _, e := range l.Events {
			if e.Seq <= last {
				journal = append(journal, e.Seq)
			}
		}
		after = l.Events[len(l.Events)-1].Seq
	}
	if !slices.Equal(rec.Seqs, journal) {
		d.t.Errorf("the page's stream delivered %d events %v,\nthe journal after %d holds %d: %v", len(rec.Seqs), rec.Seqs, rec.After, len(journal), journal)
	}
	d.t.Logf("the page's stream delivered %d events after seq %d across %d reconnect(s)", len(rec.Seqs), rec.After, rec.Reconnects)
}

// runEventCount is how many events the journal holds for run id.
func runEventCount(t *testing.T, d *dash, id string) int {
	t.Helper()
	var l wire.EventList
	d.api(200, "GET", "/runs/"+id+"/events", nil, &l)
	return len(l.Events)
}

// phoneTab is the 375×812 touch screen tab, opened once.
func (d *dash) phoneTab() context.Context {
	d.t.Helper()
	if d.phone == nil {
		d.phone, _ = d.tab(d.ctx)
		d.do(d.phone, chromedp.EmulateViewport(375, 812, chromedp.EmulateMobile, chromedp.EmulateTouch))
	}
	return d.phone
}

// noOverflow fails the test if the page is wider than the phone's screen.
func (d *dash) noOverflow(ctx context.Context, page string) {
	d.t.Helper()
	// A mobile layout viewport widens to fit wide content (innerWidth
	// grows with it): both must stay at the screen's 375 px.
	got := eval[string](d, ctx, `JSON.stringify([document.scrollingElement.scrollWidth, innerWidth, screen.width])`)
	var w [3]int
	if err := json.Unmarshal([]byte(got), &w); err != nil {
		d.t.Fatal(err)
	}
	if w[0] > w[1] || w[1] > w[2] {
		d.t.Errorf("%s overflows the phone: scrollWidth %d, innerWidth %d, screen %d", page, w[0], w[1], w[2])
	}
}

// touch dispatches one touch event at x, y (none for the end).
func (d *dash) touch(ctx context.Context, typ input.DispatchTouchEventType, x, y float64) {
	d.t.Helper()
	pts := []*input.TouchPoint{}
	if typ != input.DispatchTouchEventTypeTouchEnd {
		one, force := 1.0, 1.0
		pts = append(pts, &input.TouchPoint{X: x, Y: y, RadiusX: &one, RadiusY: &one, Force: &force, ID: new(float64)})
	}
	if _, err := chromedp.Call(ctx, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: typ, TouchPoints: pts}); err != nil {
		d.t.Fatalf("touch %s at %.0f,%.0f: %v", typ, x, y, err)
	}
}

// TestDashboardPhoneTouch: on a 375×812 touch screen the board and the run page fit
// the width; a card dragged by touch to the board's edge scrolls the
// board one column and drops there (the API says so); the run page's
// key bar shows under control and types what the phone lacks.
func TestDashboardPhoneTouch(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	run := d.readyRun()
	phone := d.phoneTab()
	var w wire.WorkItem
	d.api(201, "POST", "/projects/browser-test/work-items", map[string]any{"kind": "task", "title": "Drag me by touch"}, &w)
	d.open(phone, "/projects/browser-test")
	card := fmt.Sprintf(`[data-testid=col-todo] [data-item=%q]`, w.ID)
	d.waitJS(phone, eventually.Medium, "the new card in To do", `document.querySelector('`+card+`')`)
	d.noOverflow(phone, "the board")

	// The grip's centre, in the viewport once scrolled into it.
	var at [2]float64
	if err := json.Unmarshal([]byte(eval[string](d, phone, `(() => { const g = document.querySelector('`+card+` [data-grip]'); g.scrollIntoView({block: 'center'});
		const r = g.getBoundingClientRect(); return JSON.stringify([r.x + r.width / 2, r.y + r.height / 2]); })()`)), &at); err != nil {
		t.Fatal(err)
	}
	x, y := at[0], at[1]
	d.touch(phone, input.DispatchTouchEventTypeTouchStart, x, y)
	d.touch(phone, input.DispatchTouchEventTypeTouchMove, x-10, y+6)
	d.waitJS(phone, eventually.Short, "the drag to start", `document.body.classList.contains('is-dragging')`)
	// Held at the right edge, the board scrolls one column.
	for _, px := range []float64{x + 20, 372} {
		d.touch(phone, input.DispatchTouchEventTypeTouchMove, px, y+10)
	}
	d.waitJS(phone, eventually.Short, "the board scrolled to Doing", `(() => { const b = document.querySelector('.board'), c = b.querySelector('[data-col=doing]').getBoundingClientRect();
		return c.left >= 0 && c.right <= innerWidth + 1 && Math.abs(c.left - 12) < 30; })()`)
	d.touch(phone, input.DispatchTouchEventTypeTouchMove, 180, y+10)
	d.waitJS(phone, eventually.Short, "Doing under the finger", `document.querySelector('[data-col=doing].drop')`)
	d.touch(phone, input.DispatchTouchEventTypeTouchEnd, 0, 0)
	eventually.Wait(t, eventually.Medium, "the card dragged by touch to be doing in the API", func() bool { return d.item(w.ID).Status == "doing" })
	d.waitJS(phone, eventually.Short, "the card in Doing", `document.querySelector('[data-testid=col-doing] [data-item="`+w.ID+`"]') && !document.querySelector('.drag-ghost')`)
	d.noOverflow(phone, "the board after the drag")

	// The run page: it fits, and under control the key bar shows, fits
	// and types: ↑ reaches cat as ESC [ A, which the tty echoes as ^[[A.
	d.openRun(phone, run.ID)
	d.noOverflow(phone, "the run page")
	d.click(phone, d.sel("take-control"))
	d.waitJS(phone, eventually.Medium, "control and the key bar on the phone", `document.querySelector('[data-testid=term-mode]').dataset.mode === 'control' && getComputedStyle(document.querySelector('.keybar')).display === 'flex'`)
	d.waitJS(phone, eventually.Short, "the key bar inside the screen's width, every key in it", `(() => { const b = document.querySelector('.keybar').getBoundingClientRect();
		return b.height > 0 && b.left >= 0 && b.right <= innerWidth && [...document.querySelectorAll('.keybar .key')].every((k) => { const r = k.getBoundingClientRect(); return r.width >= 28 && r.right <= innerWidth; }); })()`)
	d.noOverflow(phone, "the run page under control")
	d.do(phone, chromedp.Tap(chromedp.CSS(`.keybar .key:nth-child(5)`)))
	d.waitJS(phone, eventually.Short, "the key bar's arrow echoed", `window.__pamTerm.buffer.includes('^[[A')`)
	d.shot(phone, "phone-run-control")
	d.click(phone, d.sel("release"))
	d.waitJS(phone, eventually.Medium, "released", `document.querySelector('[data-testid=term-mode]').dataset.mode === 'view'`)
}
