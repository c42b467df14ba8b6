package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/spool"
	"pam/internal/wire"
)

// `pam hook` posts for the run of its environment, reads the provider's
// stdin JSON and codex's extra argument (for the CLI's session id, and
// codex's for its type), and exits 0 whatever happens — also when nothing
// can be delivered or its environment is bad.
func TestHook(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	dir := e.dir
	var mu sync.Mutex
	var got []wire.Signal
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sig wire.Signal
		json.NewDecoder(r.Body).Decode(&sig)
		mu.Lock()
		got = append(got, sig)
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(`{"result":"applied"}`))
	}))
	defer srv.Close()
	workerDir := filepath.Join(dir, "worker")
	runID := "0a0a0a0a-1111-4111-8111-111111111111"
	e.setenv("PAM_RUN_ID", runID)
	e.setenv("PAM_ATTEMPT", "1")
	e.setenv("PAM_API_URL", srv.URL)
	e.setenv("PAM_SIGNAL_TOKEN", "pst1.x")
	e.setenv("PAM_WORKER_DATA_DIR", workerDir)
	e.stdin = strings.NewReader(`{"session_id":"abc","hook_event_name":"PostToolUse"}`)
	if r := e.pam("hook", "progress"); r.code != 0 || r.stderr != "" {
		t.Errorf("progress: %v", r)
	}
	e.stdin = strings.NewReader("")
	if r := e.pam("hook", "completed", `{"type":"agent-turn-complete","turn-id":"1"}`); r.code != 0 || r.stderr != "" {
		t.Errorf("completed with codex's argument: %v", r)
	}
	e.stdin = strings.NewReader(`{"hook_event_name":"Notification","message":"Claude needs your permission to use Bash"}`)
	if r := e.pam("hook", "needs-input"); r.code != 0 || r.stderr != "" {
		t.Errorf("needs-input: %v", r)
	}
	e.stdin = strings.NewReader("")
	if r := e.pam("hook", "completed", `{"type":"approval-requested","call-id":"c1"}`); r.code != 0 || r.stderr != "" {
		t.Errorf("codex's approval request: %v", r)
	}
	// The end of codex's title thread posts nothing.
	if r := e.pam("hook", "completed", `{"type":"agent-turn-complete","thread-id":"t2","input-messages":["Generate a concise, single-line task title of at most 36 characters\n\nUser prompt:\nx"]}`); r.code != 0 || r.stderr != "" {
		t.Errorf("codex's title thread: %v", r)
	}
	e.stdin = strings.NewReader("")
	if r := e.pam("hook", "completed", `{"type":"agent-turn-complete","thread-id":"th-1","turn-id":"2"}`); r.code != 0 || r.stderr != "" {
		t.Errorf("completed with codex's thread: %v", r)
	}
	mu.Lock()
	if len(got) != 5 || got[0].Kind != "progress" || got[0].Seq == nil || *got[0].Seq != 1 || got[1].Kind != "completed" || got[1].Source != "provider-hook" {
		t.Errorf("posted %+v", got)
	}
	// The CLI's session id goes with the first signal of the attempt, and
	// again when it changes; the others carry none.
	var payloads []string
	for _, s := range got {
		payloads = append(payloads, string(s.Payload))
	}
	if want := []string{`{"agent_session_id":"abc"}`, ``, ``, ``, `{"agent_session_id":"th-1"}`}; !slices.Equal(payloads, want) {
		t.Errorf("payloads %q, want %q", payloads, want)
	}
	got = got[:4]
	for i, s := range got[2:] {
		if s.Kind != wire.SignalNeedsInput || s.Source != "provider-hook" || s.Seq != nil || s.Attempt == nil || *s.Attempt != 1 {
			t.Errorf("needs-input %d posted %+v", i, s)
		}
	}
	mu.Unlock()

	// Nobody listening: spooled, still 0, still quick.
	srv.Close()
	start := time.Now()
	if r := e.pam("hook", "failed"); r.code != 0 || !strings.Contains(r.stderr, "spooled") {
		t.Errorf("failed while down: %v", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	if files, _, _ := spool.List(spool.Dir(workerDir)); len(files) != 1 || files[0].Signal.Kind != "failed" {
		t.Errorf("spool %+v", files)
	}
	for _, args := range [][]string{{"hook"}, {"hook", "finished"}} {
		if r := e.pam(args...); r.code != 0 || r.stderr == "" {
			t.Errorf("pam %s: %v", strings.Join(args, " "), r)
		}
	}
	e.setenv("PAM_RUN_ID", "")
	if r := e.pam("hook", "completed"); r.code != 0 || !strings.Contains(r.stderr, "PAM_RUN_ID") {
		t.Errorf("outside a session: %v", r)
	}
}
