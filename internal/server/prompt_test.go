package server_test

import "testing"

// A prompt that starts with "-" for a built-in CLI that takes no "--" is
// refused at POST /runs; one for a CLI that takes "--" (claude, shell) is
// accepted, and a provider the server does not know is left to the
// wrapper's check against the host's catalog (issue 9 item 7).
func TestPromptStartingWithDashNeverAnOptionAPI(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	code, body := e.call("POST", "/api/v1/runs", map[string]any{"task_id": e.task.ID, "provider": "grok", "prompt": "--help"})
	if code != 400 {
		t.Fatalf("grok with a prompt starting with -: %d %s, want 400", code, body)
	}
	if er := errorOf(t, body); er.Code != "validation_failed" || er.Details["field"] != "prompt" {
		t.Errorf("grok with a prompt starting with -: %s, want validation_failed naming prompt", body)
	}
	for _, c := range []struct{ provider, prompt string }{{"claude", "--help"}, {"shell", "-x"}, {"grok", "fix -x"}, {"mycli", "-x"}} {
		if code, body := e.call("POST", "/api/v1/runs", map[string]any{"task_id": e.task.ID, "provider": c.provider, "prompt": c.prompt}); code != 202 {
			t.Errorf("%s with prompt %q: %d %s, want 202", c.provider, c.prompt, code, body)
		}
	}
}
