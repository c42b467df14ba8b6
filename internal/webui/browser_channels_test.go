package webui_test

import (
	"crypto/hmac"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/notify"
	"pam/internal/wire"
)

// TestDashboardSettingsChannels: Settings → Notification channels. A webhook added in
// the dialog shows its secret once; Test sends a message the receiver
// can verify with that secret, and the delivery appears in the card; a
// failing channel shows its failed attempt. Desktop and phone.
func TestDashboardSettingsChannels(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	var mu sync.Mutex
	var bodies [][]byte
	var sigs []string
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, sigs = append(bodies, b), append(sigs, r.Header.Get("Pam-Signature"))
		mu.Unlock()
	}))
	defer ok.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	defer failing.Close()

	d.open(d.ctx, "/settings")
	d.waitJS(d.ctx, eventually.Medium, "the channels section", `document.querySelector('[data-testid=channels]') && !document.querySelector('[data-testid=channels] .spinner')`)
	d.click(d.ctx, d.sel("add-channel"))
	d.setField(d.ctx, `#add-channel-form input[name=name]`, "phone")
	d.setField(d.ctx, `#add-channel-form input[name=url]`, ok.URL+"/hook")
	d.setField(d.ctx, `#add-channel-form input[name=events]`, "run.attention, run.failed")
	d.click(d.ctx, `#add-channel-form button[type=submit]`)
	d.waitJS(d.ctx, eventually.Medium, "the secret shown once", `document.querySelector('[data-testid=channel-secret]')`)
	secret := eval[string](d, d.ctx, `document.querySelector('[data-testid=channel-secret]').textContent`)
	d.shot(d.ctx, "desktop-settings-channel-secret")
	d.click(d.ctx, `dialog[open] .form-actions .btn.primary`)
	var list wire.ChannelList
	d.api(200, "GET", "/notifications", nil, &list)
	if len(list.Channels) != 1 || list.Channels[0].Name != "phone" || list.Channels[0].Kind != "webhook" || len(list.Channels[0].Events) != 2 {
		t.Fatalf("channels %+v", list)
	}

	d.click(d.ctx, `[data-testid=channel][data-name=phone] [data-testid=test-channel]`)
	eventually.Wait(t, 20*time.Second, "the test message at the receiver", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(bodies) == 1
	})
	mu.Lock()
	if !hmac.Equal([]byte(sigs[0]), []byte(notify.Sign(secret, bodies[0]))) {
		t.Errorf("the receiver cannot verify %q with the secret the page showed", sigs[0])
	}
	mu.Unlock()
	d.waitJS(d.ctx, 20*time.Second, "the delivered attempt in the card",
		`document.querySelector('[data-testid=channel][data-name=phone] [data-testid=delivery] [data-status=delivered]')`)

	d.api(201, "POST", "/notifications", map[string]any{"name": "team-slack", "kind": "slack", "url": failing.URL, "events": []string{"run.*"}}, nil)
	d.open(d.ctx, "/settings")
	d.waitJS(d.ctx, eventually.Medium, "both channels", `document.querySelectorAll('[data-testid=channel]').length === 2`)
	d.click(d.ctx, `[data-testid=channel][data-name=team-slack] [data-testid=test-channel]`)
	d.waitJS(d.ctx, 20*time.Second, "the failed attempt in the card",
		`document.querySelector('[data-testid=channel][data-name=team-slack] [data-testid=delivery] [data-status=failed]')`)
	d.click(d.ctx, `[data-testid=channel][data-name=phone] [data-testid=channel-deliveries-toggle]`)
	d.waitJS(d.ctx, eventually.Medium, "the phone's deliveries", `document.querySelector('[data-testid=channel][data-name=phone] [data-testid=deliveries]')`)
	d.shot(d.ctx, "desktop-settings-channels")

	phone := d.phoneTab()
	d.open(phone, "/settings")
	d.waitJS(phone, eventually.Medium, "the channels on the phone", `document.querySelectorAll('[data-testid=channel]').length === 2`)
	d.click(phone, `[data-testid=channel][data-name=team-slack] [data-testid=channel-deliveries-toggle]`)
	d.waitJS(phone, eventually.Medium, "the deliveries on the phone", `document.querySelector('[data-testid=deliveries]')`)
	d.noOverflow(phone, "/settings")
	d.shot(phone, "phone-settings-channels")
	d.goTo(phone, "/")
}
