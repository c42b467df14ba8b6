package webui_test

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"pam/internal/eventually"
	"pam/internal/wire"
)

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestDashboardSettingsTokens: an admin sees Settings in the nav,
// creates a token there (its secret shown once), rotates one (the old
// secret is refused at once) and revokes one. Desktop and 375 px.
func TestDashboardSettingsTokens(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	d.open(d.ctx, "/inbox#token="+d.token)
	d.waitJS(d.ctx, eventually.Medium, "the Settings nav entry", `[...document.querySelectorAll('.nav-link')].some((a) => a.getAttribute('href') === '/settings')`)
	d.click(d.ctx, `.nav-link[href="/settings"]`)
	d.waitJS(d.ctx, eventually.Medium, "the admin token listed", `document.querySelector('[data-testid=token-row][data-name=admin][data-role=admin]')`)

	// Create a viewer token through the form: its secret is shown once.
	d.click(d.ctx, d.sel("new-token"))
	d.setField(d.ctx, `[data-testid=new-token-form] input[name=name]`, "dana (viewer)")
	d.click(d.ctx, `[data-testid=new-token-form] button[type=submit]`)
	d.waitJS(d.ctx, eventually.Medium, "the secret shown", `document.querySelector('[data-testid=token-secret]')`)
	viewerSecret := eval[string](d, d.ctx, `document.querySelector('[data-testid=token-secret]').textContent`)
	if !hex32.MatchString(viewerSecret) {
		t.Fatalf("secret %q", viewerSecret)
	}
	d.shot(d.ctx, "desktop-settings-secret")
	d.click(d.ctx, `dialog .form-actions .btn.primary`)
	d.waitJS(d.ctx, eventually.Medium, "the new row", `document.querySelector('[data-testid=token-row][data-name="dana (viewer)"][data-role=viewer]') && !document.querySelector('dialog[open]')`)
	if eval[bool](d, d.ctx, fmt.Sprintf(`document.body.textContent.includes(%q)`, viewerSecret)) {
		t.Error("the secret stays on the page after Done")
	}

	// An operator token to rotate, made through the API.
	var op wire.TokenSecret
	d.api(201, "POST", "/tokens", wire.CreateToken{Name: "ci-bot", Role: wire.RoleOperator}, &op)
	d.do(d.ctx, chromedp.Reload())
	d.waitJS(d.ctx, eventually.Medium, "three tokens", `document.querySelectorAll('[data-testid=token-row]').length === 3`)
	d.shot(d.ctx, "desktop-settings")
	phone := d.phoneTab()
	d.open(phone, "/settings")
	d.waitJS(phone, eventually.Medium, "three tokens on the phone", `document.querySelectorAll('[data-testid=token-row]').length === 3`)
	d.noOverflow(phone, "/settings")
	d.shot(phone, "phone-settings")

	// Rotate ci-bot: a new secret, the old one refused at once.
	_ = eval[bool](d, d.ctx, `(window.confirm = () => true, true)`)
	d.click(d.ctx, `[data-testid=token-row][data-name=ci-bot] [data-testid=rotate-token]`)
	d.waitJS(d.ctx, eventually.Medium, "the new secret", `document.querySelector('[data-testid=token-secret]')`)
	newSecret := eval[string](d, d.ctx, `document.querySelector('[data-testid=token-secret]').textContent`)
	if !hex32.MatchString(newSecret) || newSecret == op.Secret {
		t.Fatalf("rotated secret %q (old %q)", newSecret, op.Secret)
	}
	d.shot(d.ctx, "desktop-settings-rotated")
	d.click(d.ctx, `dialog .form-actions .btn.primary`)
	d.apiAs(op.Secret, 401, "GET", "/projects")
	d.apiAs(newSecret, 200, "GET", "/projects")

	// Revoke ci-bot.
	d.click(d.ctx, `[data-testid=token-row][data-name=ci-bot] [data-testid=revoke-token]`)
	d.waitJS(d.ctx, eventually.Medium, "ci-bot gone", `!document.querySelector('[data-testid=token-row][data-name=ci-bot]')`)
	d.apiAs(newSecret, 401, "GET", "/projects")
}

// TestDashboardSettingsViewer: a viewer signed in another browser sees no
// Settings and no control its role cannot use (take control, stop,
// messages, adding hosts, new projects) on pages that show them to an
// admin, and the journal names the admin who started the run.
func TestDashboardSettingsViewer(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	d.allowed = append(d.allowed, "403") // the viewer's refused Settings
	var viewer wire.TokenSecret
	d.api(201, "POST", "/tokens", wire.CreateToken{Name: "dana (viewer)", Role: wire.RoleViewer}, &viewer)
	var p wire.Project
	d.api(201, "POST", "/projects", map[string]any{"name": "Roles"}, &p)
	var w wire.WorkItem
	d.api(201, "POST", "/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "Watch me"}, &w)
	var r wire.Run
	d.api(202, "POST", "/runs", map[string]any{"task_id": w.ID, "provider": "shell", "prompt": "echo roles-ready; exec cat", "max_attempts": 1}, &r)
	d.waitRun(r.ID, "to be running", func(r wire.Run) bool { return r.Status == wire.RunRunning })

	// The admin sees the controls on these pages.
	d.open(d.ctx, "/runs/"+r.ID)
	d.waitJS(d.ctx, 15*time.Second, "the admin's controls", `document.querySelector('[data-testid=take-control]') && document.querySelector('[data-testid=stop]') && document.querySelector('[data-testid=message]')`)

	tab, cancel := d.tab(d.ctx, chromedp.WithNewBrowserContext())
	defer cancel()
	d.open(tab, "/runs/"+r.ID+"#token="+viewer.Secret)
	d.waitJS(tab, 15*time.Second, "the viewer's pane", `document.querySelector('[data-testid=term-mode]') && document.querySelector('[data-testid=term-mode]').dataset.mode === 'view' && window.__pamTerm && window.__pamTerm.buffer.includes('roles-ready')`)
	for _, sel := range []string{"take-control", "stop", "complete", "message", "message-send", "revoke"} {
		if eval[bool](d, tab, fmt.Sprintf(`!!document.querySelector('[data-testid=%s]')`, sel)) {
			t.Errorf("a viewer sees %s on the run page", sel)
		}
	}
	if eval[bool](d, tab, `[...document.querySelectorAll('.nav-link')].some((a) => a.getAttribute('href') === '/settings')`) {
		t.Error("a viewer sees Settings in the nav")
	}
	// The journal names who started the run.
	d.waitJS(tab, eventually.Medium, "run.created by admin in the events", `[...document.querySelectorAll('.ev-sum')].some((e) => e.textContent.includes('by admin'))`)
	d.shot(tab, "desktop-viewer-run")
	d.goTo(tab, "/fleet")
	d.waitJS(tab, eventually.Medium, "the fleet", `document.querySelector('[data-testid=host-card]')`)
	if eval[bool](d, tab, `!!document.querySelector('[data-testid=add-host]') || !!document.querySelector('.host-card .menu-wrap')`) {
		t.Error("a viewer sees the fleet's admin actions")
	}
	d.goTo(tab, "/projects")
	d.waitJS(tab, eventually.Medium, "the projects", `document.querySelector('h1')`)
	if eval[bool](d, tab, `!!document.querySelector('[data-testid=new-project]')`) {
		t.Error("a viewer sees New project")
	}
	d.goTo(tab, "/settings")
	d.waitJS(tab, eventually.Medium, "settings refused", `document.body.textContent.includes('Settings are for admin tokens')`)
}

// apiAs calls the API with another token's secret and checks the status.
func (d *dash) apiAs(secret string, want int, method, path string) {
	d.t.Helper()
	saved := d.token
	d.token = secret
	defer func() { d.token = saved }()
	d.api(want, method, path, nil, nil)
}
