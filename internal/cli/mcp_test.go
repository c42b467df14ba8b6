package cli

import (
	"strings"
	"testing"
)

// pam mcp is started by an agent CLI inside a run; outside one it says
// so and what it is, and exits 2 without serving anything.
func TestMCPRefusesOutsideARun(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	r := e.pam("mcp")
	if r.code != 2 || !strings.Contains(r.stderr, "not inside a pam run") || !strings.Contains(r.stderr, "PAM_SIGNAL_TOKEN") || r.stdout != "" {
		t.Errorf("outside a run: %+v", r)
	}
	e.setenv("PAM_RUN_ID", "0d9e5a1c-3b7e-4a53-9d8f-2a5b8c9d0e1f")
	e.setenv("PAM_ATTEMPT", "1")
	e.setenv("PAM_API_URL", "http://127.0.0.1:7898")
	if r := e.pam("mcp"); r.code != 2 || !strings.Contains(r.stderr, "PAM_SIGNAL_TOKEN is unset") {
		t.Errorf("without a token: %+v", r)
	}
}
