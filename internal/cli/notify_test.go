package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"pam/internal/notify"
	"pam/internal/pamtest"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// pam notify add/list/test/remove against a real serve: the test message
// reaches a webhook signed with the secret add printed once.
func TestNotifyAgainstRealServer(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	var mu sync.Mutex
	var sigs, bodies []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		sigs, bodies = append(sigs, r.Header.Get("Pam-Signature")), append(bodies, string(b))
		mu.Unlock()
	}))
	defer hook.Close()
	sv := pamtest.StartServe(t, pamtest.ServeOptions{DatabaseURL: storetest.URL(t), Env: []string{"PAM_PUBLIC_URL=https://pam.example"}})
	e.setenv("PAM_URL", sv.URL)
	e.setenv("PAM_TOKEN", sv.Token)

	if r := e.pam("notify", "add", "phone"); r.code != 2 {
		t.Fatalf("add without --kind and --to: %s", r)
	}
	var created wire.ChannelCreated
	if err := json.Unmarshal([]byte(e.mustPam("notify", "add", "phone", "--kind", "webhook", "--to", hook.URL, "--events", "run.attention, run.failed", "--json")), &created); err != nil {
		t.Fatal(err)
	}
	if created.Secret == "" || strings.Join(created.Channel.Events, " ") != "run.attention run.failed" {
		t.Fatalf("created %+v", created)
	}
	if out := e.mustPam("notify", "list"); !strings.Contains(out, "phone") || !strings.Contains(out, "run.attention,run.failed") {
		t.Fatalf("list:\n%s", out)
	}
	if out := e.mustPam("notify", "test", "phone"); !strings.Contains(out, "delivered a test message to phone (HTTP 200)") {
		t.Fatalf("test: %s", out)
	}
	mu.Lock()
	if len(bodies) != 1 || sigs[0] != notify.Sign(created.Secret, []byte(bodies[0])) || !strings.Contains(bodies[0], `"link":"https://pam.example/"`) {
		t.Fatalf("received %q signed %q", bodies, sigs)
	}
	mu.Unlock()
	if out := e.mustPam("notify", "remove", "phone"); !strings.Contains(out, "removed channel phone") {
		t.Fatalf("remove: %s", out)
	}
	if r := e.pam("notify", "test", "phone"); r.code != 1 {
		t.Fatalf("test of a removed channel: %s", r)
	}
}
