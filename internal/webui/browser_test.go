package webui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"go.uber.org/goleak"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/store/storetest"
	"pam/internal/webui"
	"pam/internal/wire"
)

// The dashboard's browser tests (docs/architecture.md#web-dashboard):
// real serve, worker and tmux processes, driven through Debian's Chromium
// with chromedp. Each TestDashboard… test has a system of its own (newDash:
// its own serve on its own database, its own worker) and a browser profile
// of its own in the one Chromium the package shares, so any one runs alone
// and in any order, most of them in parallel. Screenshots of every page,
// desktop and phone, go to $TEST_ARTIFACTS/dashboard (or a temporary
// folder the tests log).

// TestMain fails the package when a goroutine outlives its tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

// The dashboard's budgets (docs/architecture.md#web-dashboard), in bytes on the wire (gzip).
const (
	firstPageBudget = 150 << 10
	terminalBudget  = 350 << 10
	firstRender     = time.Second
)

// dash is one serve with one worker, and a Chromium tab on its dashboard
// in a browser profile of its own, for one test.
type dash struct {
	t     *testing.T
	url   string
	token string
	host  string // the worker's host id
	ctx   context.Context
	shots string

	serve     *pamtest.Serve
	serveOpts pamtest.ServeOptions // to start serve again on its port, data dir and database
	phone     context.Context      // a 375×812 touch screen tab, once opened
	allowed   []string             // browser errors the test expects (see newDash)
	project   bool                 // the browser-test project exists (shellRun)

	mu   sync.Mutex
	logs []string // console errors, CSP reports, exceptions
}

func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// The one Chromium of the package: a browser is heavy, a profile
// (chromedp.WithNewBrowserContext) is cheap and as separate as another
// person's browser (its own localStorage, cookies and permissions). It is
// closed when the package's tests have finished.
var (
	browserOnce sync.Once
	browserCtx  context.Context
	browserErr  error
)

func sharedBrowser(t *testing.T) context.Context {
	t.Helper()
	browserOnce.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath()), chromedp.NoSandbox,
			chromedp.WindowSize(1440, 900), chromedp.Flag("lang", "en-US"))
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(alloc)
		pamtest.AtExit(func() {
			cancel()
			cancelAlloc()
		})
		if browserErr = chromedp.Do(ctx); browserErr == nil {
			browserCtx = ctx
		}
	})
	if browserErr != nil {
		t.Fatalf("start chromium: %v", browserErr)
	}
	return browserCtx
}

// newDash starts a serve (PAM_HOST_OFFLINE_AFTER=4s: a host silent for
// 4 s goes offline) and one online worker, web-host, on a database of
// the test's own, and opens a tab in a new browser profile already
// signed in (its localStorage holds the token). When the test ends it
// fails if the browser logged an error that d.allowed does not excuse.
func newDash(t *testing.T) *dash {
	t.Helper()
	pamtest.Require(t, "chromium", "tmux")
	if !webui.New().Built() {
		msg := "the dashboard bundle is not built (internal/webui/dist has no index.html): run make web, or make test, which builds it"
		if pamtest.InCI() {
			t.Fatal(msg)
		}
		t.Skip("SKIP: " + msg)
	}
	opts := pamtest.ServeOptions{DatabaseURL: storetest.URL(t), DataDir: pamtest.ShortDir(t, "pams-"), Env: []string{"PAM_HOST_OFFLINE_AFTER=4s"}}
	sv := pamtest.StartServe(t, opts)
	opts.Port = sv.Port
	d := &dash{t: t, url: sv.URL, token: sv.Token, serve: sv, serveOpts: opts, shots: shotsDir(t), allowed: []string{"favicon"}}
	var created wire.HostCreated
	d.api(201, "POST", "/hosts", map[string]any{"name": "web-host", "max_runs": 20}, &created)
	d.host = created.Host.ID
	pamtest.StartWorker(t, pamtest.WorkerOptions{URL: d.url, Token: created.WorkerToken, Name: "web-host",
		Env: workerEnv})
	eventually.Wait(t, eventually.Long, "the worker to come online", func() bool {
		var h wire.Host
		d.api(200, "GET", "/hosts/web-host", nil, &h)
		return h.Status == "online"
	})

	d.ctx, _ = d.tab(sharedBrowser(t), chromedp.WithNewBrowserContext())
	// Signed in as the fragment sign-in leaves it (TestDashboardSignInThroughFragment
	// covers that path), on a page of the origin that is not the app.
	d.do(d.ctx, chromedp.Navigate(d.url+"/healthz"))
	_ = eval[bool](d, d.ctx, `(localStorage.setItem('pam.token', '`+d.token+`'), true)`)
	t.Cleanup(func() {
		if errs := d.errors(d.allowed...); len(errs) > 0 {
			t.Errorf("the browser reported errors:\n%s", strings.Join(errs, "\n"))
		}
	})
	return d
}

// tempShots is the package's temporary folder for screenshots when
// $TEST_ARTIFACTS is not set.
var tempShots = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "pam-dashboard-") })

// shotsDir is $TEST_ARTIFACTS/dashboard, or one in a temporary folder.
func shotsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TEST_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = tempShots(); err != nil {
			t.Fatal(err)
		}
	}
	dir = filepath.Join(dir, "dashboard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// workerEnv makes a worker quick to notice changes and to stop; its
// runs never go idle on their own (PAM_IDLE_AFTER), so what the inbox
// holds is what a scenario put there.
var workerEnv = []string{"PAM_CAPTURE_INTERVAL=200ms", "PAM_LIVENESS_INTERVAL=500ms", "PAM_HEARTBEAT_INTERVAL=1s",
	"PAM_STOP_GRACE=2s", "PAM_HOLD_OPEN=1s", "PAM_IDLE_AFTER=1h"}

// tab opens a browser tab whose console errors, CSP violations and
// exceptions are kept for errors; it is closed when the test ends. Close
// a tab when done with it sooner: each holds an event stream, and a
// browser opens at most six HTTP/1.1 connections to one server. A tab
// opened from d.ctx is in the test's browser profile; with
// chromedp.WithNewBrowserContext() it is a profile of its own (its own
// localStorage), as another person's browser is.
func (d *dash) tab(parent context.Context, opts ...chromedp.ContextOption) (context.Context, context.CancelFunc) {
	d.t.Helper()
	ctx, cancel := chromedp.NewContext(parent, opts...)
	d.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		d.t.Fatalf("open a tab: %v", err)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		var line string
		switch ev := ev.(type) {
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError || strings.Contains(ev.Entry.Text, "Content Security Policy") {
				line = fmt.Sprintf("log %s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		case *runtime.EventExceptionThrown:
			line = "exception: " + ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				line += " " + ev.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				b, _ := json.Marshal(ev.Args)
				line = "console.error " + string(b)
			}
		}
		if line != "" {
			d.mu.Lock()
			d.logs = append(d.logs, line)
			d.mu.Unlock()
		}
	})
	if err != nil {
		d.t.Fatal(err)
	}
	return ctx, cancel
}

// errors returns the kept browser errors that contain none of allowed.
func (d *dash) errors(allowed ...string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
next:
	for _, l := range d.logs {
		for _, a := range allowed {
			if strings.Contains(l, a) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// logMark is where the browser's error log stands now, for excuse.
func (d *dash) logMark() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.logs)
}

// excuse drops the browser errors logged since mark that are network
// failures (requests refused or blocked, sockets that could not open, a
// 503 while serve starts): what a page logs while its server is down and
// coming back, which it is meant to ride out.
func (d *dash) excuse(mark int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	kept := d.logs[:mark:mark]
	for _, l := range d.logs[mark:] {
		if !strings.Contains(l, "net::ERR_") && !strings.Contains(l, "WebSocket connection") && !strings.Contains(l, "status of 503") {
			kept = append(kept, l)
		}
	}
	d.logs = kept
}

func (d *dash) do(ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	d.t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		d.t.Fatalf("browser: %v", err)
	}
}

func eval[T any](d *dash, ctx context.Context, js string) T {
	d.t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](js))
	if err != nil {
		d.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitJS waits until the boolean expression js holds in the tab, polled
// in the page itself; on a timeout it logs what the page shows.
func (d *dash) waitJS(ctx context.Context, dur time.Duration, what, js string) {
	d.t.Helper()
	pred := "(() => { try { return !!(" + js + "); } catch (e) { return false; } })()"
	deadline := time.Now().Add(dur)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		c, cancel := context.WithTimeout(ctx, left+5*time.Second)
		_, err := chromedp.Run(c, chromedp.Poll[bool](pred, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(left)))
		cancel()
		if err == nil {
			return
		}
		if errors.Is(err, chromedp.ErrPollingTimeout) {
			break
		}
		<-tick.C // the page navigated under the poll: poll the new one
	}
	state := eval[string](d, ctx, `JSON.stringify({path: location.pathname, active: document.activeElement && (document.activeElement.className || document.activeElement.tagName),
		mode: (document.querySelector('[data-testid=term-mode]') || {dataset: {}}).dataset.mode, conn: (document.querySelector('[data-testid=conn]') || {dataset: {}}).dataset.state,
		buffer: window.__pamTerm ? window.__pamTerm.buffer.slice(-600) : null, toasts: [...document.querySelectorAll('.toast')].map((t) => t.textContent),
		dialogs: [...document.querySelectorAll('dialog')].map((d) => d.open + ':' + d.className), ua: navigator.userActivation && [navigator.userActivation.isActive, navigator.userActivation.hasBeenActive], hasFocus: document.hasFocus()})`)
	d.t.Fatalf("timed out after %s waiting for %s; the page: %s", dur, what, state)
}

func (d *dash) sel(testid string) string { return fmt.Sprintf("[data-testid=%q]", testid) }

// click clicks the first element matching the CSS selector.
func (d *dash) click(ctx context.Context, css string) {
	d.t.Helper()
	d.do(ctx, chromedp.Click(chromedp.CSS(css), chromedp.NodeVisible))
}

// setField sets a form control's value the way typing does (input and
// change events), so Preact's handlers see it.
func (d *dash) setField(ctx context.Context, css, value string) {
	d.t.Helper()
	b, _ := json.Marshal(value)
	sb, _ := json.Marshal(css)
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%s); if (!el) return false;
		const proto = el.tagName === 'SELECT' ? HTMLSelectElement.prototype : el.tagName === 'TEXTAREA' ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
		Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, %s);
		el.dispatchEvent(new Event('input', {bubbles: true})); el.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, sb, b)
	if !eval[bool](d, ctx, js) {
		d.t.Fatalf("no field %s", css)
	}
}

func (d *dash) shot(ctx context.Context, name string) {
	d.t.Helper()
	// Let transitions and the last frames settle.
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(c, chromedp.Evaluate[bool](`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise)); err != nil {
		d.t.Fatalf("wait for a frame: %v", err)
	}
	// A phone's screenshot is its screen: capturing beyond the viewport
	// resizes it for a moment, and the WebGL terminal of an emulated
	// high-density screen is caught mid-redraw.
	shoot := chromedp.FullScreenshot(100)
	if strings.HasPrefix(name, "phone-") {
		shoot = chromedp.CaptureScreenshot()
	}
	b, err := chromedp.Run(c, shoot)
	if err != nil {
		d.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(d.shots, name+".png"), b, 0o644); err != nil {
		d.t.Fatal(err)
	}
}

func (d *dash) api(want int, method, path string, body, out any) {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.url+"/api/v1"+path, rd)
	req.Header.Set("Authorization", "Bearer "+d.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		d.t.Fatalf("%s %s: %d, want %d: %s", method, path, res.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			d.t.Fatal(err)
		}
	}
}

// open loads path in the tab and waits until the dashboard has its data.
func (d *dash) open(ctx context.Context, path string) {
	d.t.Helper()
	d.do(ctx, chromedp.Navigate(d.url+path))
	d.waitJS(ctx, 15*time.Second, "the dashboard to load "+path, `document.querySelector('[data-testid=conn]') && !document.querySelector('.loading .spinner')`)
}

// go navigates inside the app, as a click on a link does.
func (d *dash) goTo(ctx context.Context, path string) {
	d.t.Helper()
	b, _ := json.Marshal(path)
	_ = eval[bool](d, ctx, fmt.Sprintf(`(() => { history.pushState(null, '', %s); dispatchEvent(new PopStateEvent('popstate')); return true; })()`, b))
}

func (d *dash) item(id string) wire.WorkItem {
	var w wire.WorkItem
	d.api(200, "GET", "/work-items/"+id, nil, &w)
	return w
}

// press types keys as a keyboard does: for each key one keyDown that
// carries its character, then a keyUp. chromedp.KeyEvent sends the
// character as a separate "char" event after the keyDown, a round trip
// later; when the keyDown's handler opens a dialog (Enter on a search
// result opens the item), that late character lands on the dialog's
// focused button and presses it. A real keyboard's keypress comes with
// its keydown, and not at all when the keydown's default was prevented.
func press(keys string, opts ...chromedp.KeyOption) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range keys {
			var down, up *input.DispatchKeyEventParams
			for _, k := range kb.Encode(r) {
				for _, o := range opts {
					o(k)
				}
				switch k.Type {
				case kb.KeyDown:
					down = k
				case kb.KeyChar:
					if k.Modifiers&^int64(chromedp.ModifierShift) == 0 {
						down.Text, down.UnmodifiedText = k.Text, k.UnmodifiedText
					}
				case kb.KeyUp:
					up = k
				}
			}
			for _, k := range []*input.DispatchKeyEventParams{down, up} {
				if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *k); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
