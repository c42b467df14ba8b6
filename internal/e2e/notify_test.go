package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/agentrig/fakemodel"
	"pam/internal/eventually"
	"pam/internal/notify"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// A person approves a real claude's command from a notification
// (docs/notifications.md#answer-from-the-notification): a webhook
// channel receives claude's permission question with one answer URL per
// choice, signed; POSTing "Yes" without any bearer token presses 1 in
// the run, the tool runs, and the answer is journaled with the channel as
// actor; the same URL again is 410; serve's log never shows the token.
func TestRealClaudeAnswerFromWebhook(t *testing.T) {
	t.Parallel()
	claude := pamtest.AgentCLI(t, "claude")
	model := fakemodel.NewAnthropic()
	t.Cleanup(model.Close)
	home := pamtest.ShortDir(t, "pamh-")
	writeHome(t, home, ".claude.json", `{"hasCompletedOnboarding": true, "customApiKeyResponses": {"approved": ["`+claudeKey[len(claudeKey)-20:]+`"], "rejected": []}}`)
	// The public address is a name people would use; the answer URL is
	// that plus the route, which the test posts to serve itself.
	const public = "https://pam.example.test"
	a, sp := newAgentRigServe(t, home, `
[proxy]
ANTHROPIC_BASE_URL = "`+model.URL()+`"

[providers.claude]
binary = "`+claude+`"
env = { DISABLE_AUTOUPDATER = "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1" }
`, []string{"PAM_PUBLIC_URL=" + public}, "ANTHROPIC_API_KEY="+claudeKey)

	var mu sync.Mutex
	var payloads []wire.WebhookPayload
	var secret string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if got := r.Header.Get("Pam-Signature"); got != notify.Sign(secret, body) {
			t.Errorf("signature %q does not sign the body", got)
		}
		var p wire.WebhookPayload
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("webhook body %s: %v", body, err)
		}
		payloads = append(payloads, p)
	}))
	defer hook.Close()
	var created wire.ChannelCreated
	mu.Lock()
	a.s.must(201, "POST", "/api/v1/notifications", map[string]any{"name": "phone", "kind": "webhook", "url": hook.URL, "events": []string{"run.attention"}}, &created)
	secret = created.Secret
	mu.Unlock()

	model.Script(
		fakemodel.Turn{Text: "I will write the file.", Tool: &fakemodel.ToolCall{ID: "toolu_e2e_notify", Name: "Bash",
			Input: map[string]any{"command": "echo approved-from-phone > phone.txt", "description": "Write phone.txt"}}},
		fakemodel.Text("The file is written."),
	)
	r := a.start("claude", "PROMPT-NOTIFY write the file")
	wt := a.worktree(r.ID)
	var asked wire.WebhookPayload
	eventually.Wait(t, 90*time.Second, "the question with its answer URLs at the webhook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range payloads {
			if p.Run != nil && p.Run.ID == r.ID && len(p.Answers) > 0 {
				asked = p
				return true
			}
		}
		return false
	})
	if len(asked.Answers) != 3 || asked.Answers[0].Key != "1" || asked.Answers[0].Label != "Yes" || asked.Answers[2].Label != "No" ||
		!strings.Contains(asked.Text, "Do you want to proceed?") || asked.Link == nil || *asked.Link != public+"/runs/"+r.ID {
		t.Fatalf("the question's payload: text %q link %v answers %+v", asked.Text, asked.Link, asked.Answers)
	}
	if _, err := os.Stat(filepath.Join(wt, "phone.txt")); err == nil {
		t.Fatal("the tool ran before anybody answered")
	}

	yes := asked.Answers[0].AnswerURL
	if !strings.HasPrefix(yes, public+"/api/v1/answers/") {
		t.Fatalf("answer_url %q", yes)
	}
	post := func() (int, []byte) {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", a.s.url+strings.TrimPrefix(yes, public), nil)
		res, err := http.DefaultClient.Do(req) // no Authorization: the URL is the credential
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	code, body := post()
	var kr wire.KeysResult
	if code != 202 || json.Unmarshal(body, &kr) != nil {
		t.Fatalf("POST the answer URL: %d %s", code, body)
	}
	a.modelRequest(model, r.ID, eventually.Long, "the tool's result", `"tool_use_id":"toolu_e2e_notify"`, `"type":"tool_result"`)
	if b, err := os.ReadFile(filepath.Join(wt, "phone.txt")); err != nil || string(b) != "approved-from-phone\n" {
		t.Errorf("the approved tool's file: %q %v", b, err)
	}
	if kr.Delivery == wire.DeliveryObserved {
		eventually.Wait(t, eventually.Medium, "run.attention cleared by the answer, with the channel as actor", func() bool {
			for _, ev := range a.s.events(r.ID) {
				if ev.Topic == string(wire.TopicRunAttention) && ev.Actor != nil && *ev.Actor == "phone" && strings.Contains(string(ev.Payload), `"source":"answer"`) {
					return true
				}
			}
			return false
		})
	}
	code, body = post()
	if code != http.StatusGone || !strings.Contains(string(body), wire.CodeAnswerExpired) {
		t.Fatalf("the same URL again: %d %s", code, body)
	}
	token := yes[strings.LastIndex(yes, "/")+1:]
	if logs := sp.proc.Stdout.String() + sp.proc.Stderr.String(); strings.Contains(logs, token) || !strings.Contains(logs, "/api/v1/answers/<redacted>") {
		t.Errorf("serve's log shows the answer token, or no answer request at all")
	}
}
