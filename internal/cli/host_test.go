package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"pam/internal/wire"
)

const testHostID = "7d1e2f3a-0000-4000-8000-000000000003"

const hostJSON = `{"id":"` + testHostID + `","name":"gpu-1","platform":"linux/amd64","status":"online","disabled":false,` +
	`"instance_id":null,"instance_suspect":false,"last_seen_at":"2026-01-01T00:00:00Z","providers":["claude","codex"],` +
	`"max_runs":4,"executor":"tmux","active_runs":2,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`

const workerToken = "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"

func TestHostAddPrintsTheTokenOnce(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, srv := newFakeAPI(t, e)
	f.handle("POST /api/v1/hosts", 201, `{"host":`+hostJSON+`,"worker_token":"`+workerToken+`"}`)

	out := e.mustPam("host", "add", "gpu-1", "--max-runs", "4")
	if got := f.last(); got != `POST /api/v1/hosts {"name":"gpu-1","max_runs":4}` {
		t.Errorf("request %s", got)
	}
	golden(t, "host_add.golden", strings.ReplaceAll(out, srv.URL, "$PAM_URL"))
	if !strings.Contains(out, "PAM_URL="+srv.URL+" PAM_HOST_NAME=gpu-1 pam worker") {
		t.Errorf("no worker command line:\n%s", out)
	}

	e.mustPam("host", "add", "gpu-1")
	if got := f.last(); got != `POST /api/v1/hosts {"name":"gpu-1"}` {
		t.Errorf("without --max-runs: %s", got)
	}
	var created wire.HostCreated
	if err := json.Unmarshal([]byte(e.mustPam("host", "add", "gpu-1", "--json")), &created); err != nil || created.WorkerToken != workerToken {
		t.Errorf("--json: %+v %v", created, err)
	}
}

func TestHostCommands(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	f.handle("GET /api/v1/hosts", 200, `{"hosts":[`+hostJSON+`]}`)
	f.handle("GET /api/v1/hosts/gpu-1", 200, hostJSON)
	f.handle("POST /api/v1/hosts/gpu-1/disable", 200, strings.Replace(hostJSON, `"status":"online","disabled":false`, `"status":"disabled","disabled":true`, 1))
	f.handle("POST /api/v1/hosts/gpu-1/enable", 200, hostJSON)
	f.handle("POST /api/v1/hosts/gpu-1/clear-suspect", 200, hostJSON)
	f.handle("POST /api/v1/hosts/"+testHostID+"/rotate-token", 200, `{"worker_token":"`+workerToken+`"}`)
	f.handle("DELETE /api/v1/hosts/gpu-1", 204, "")

	tests := []struct {
		args      []string
		request   string
		stdoutHas string
	}{
		{[]string{"host", "list"}, "GET /api/v1/hosts", "gpu-1  online  2/4   claude,codex"},
		{[]string{"host", "show", "gpu-1"}, "GET /api/v1/hosts/gpu-1", "active_runs:       2"},
		{[]string{"host", "disable", "gpu-1"}, "POST /api/v1/hosts/gpu-1/disable", "2 active run(s) continue"},
		{[]string{"host", "enable", "gpu-1"}, "POST /api/v1/hosts/gpu-1/enable", "enabled host gpu-1: online"},
		{[]string{"host", "clear-suspect", "gpu-1"}, "POST /api/v1/hosts/gpu-1/clear-suspect", "host gpu-1"},
		{[]string{"host", "rotate-token", "gpu-1"}, "POST /api/v1/hosts/" + testHostID + "/rotate-token", "PAM_HOST_NAME=gpu-1 pam worker"},
		{[]string{"host", "remove", "gpu-1"}, "DELETE /api/v1/hosts/gpu-1", "removed host gpu-1"},
	}
	for _, tt := range tests {
		out := e.mustPam(tt.args...)
		if got := f.last(); got != tt.request {
			t.Errorf("pam %s sent %s, want %s", strings.Join(tt.args, " "), got, tt.request)
		}
		if !strings.Contains(out, tt.stdoutHas) {
			t.Errorf("pam %s printed:\n%s\nwant it to contain %q", strings.Join(tt.args, " "), out, tt.stdoutHas)
		}
	}
	var list wire.HostList
	if err := json.Unmarshal([]byte(e.mustPam("host", "list", "--json")), &list); err != nil || len(list.Hosts) != 1 || list.Hosts[0].ActiveRuns != 2 {
		t.Errorf("host list --json: %+v %v", list, err)
	}

	f.handle("DELETE /api/v1/hosts/busy", 409, `{"error":{"code":"has_active_runs","message":"host busy has 1 active run(s)","details":{"active_runs":1}}}`)
	if r := e.pam("host", "remove", "busy"); r.code != 1 || !strings.Contains(r.stderr, "active run") {
		t.Errorf("remove refused: %v", r)
	}
}

func TestHostRunUsageErrors(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"host", "add"}, "missing NAME"},
		{[]string{"host", "add", "a", "b"}, `unexpected argument "b"`},
		{[]string{"host", "add", "a", "--max-runs", "x"}, "invalid value"},
		{[]string{"host", "show"}, "missing REF"},
		{[]string{"run", "start", "--task", "t"}, "--task and --provider are required"},
		{[]string{"run", "show"}, "missing ID"},
		{[]string{"run", "keys", "r"}, "nothing to send"},
		{[]string{"run", "keys", "r", "--key", "F1"}, `key "F1" is not allowed; the keys are Enter, Escape`},
		{[]string{"run", "keys", "r", "--paste", "ok\x1b[201~"}, "control character (U+001B"},
		{[]string{"run", "keys", "r", "--text", "two\nlines"}, "not printable ASCII"},
		{[]string{"run", "keys", "r", "--text", "rm -rf / ; echo"}, `text holds ";"`},
		{[]string{"run", "list", "--limit", "-1"}, "cannot be negative"},
	}
	for _, tt := range tests {
		r := e.pam(tt.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, "Usage: pam") {
			t.Errorf("pam %s: %v\nwant exit 2 with %q", strings.Join(tt.args, " "), r, tt.want)
		}
	}
}

// A worker token is printed once, alone on its line, and never inside a
// suggested command line: a command line lands in shell history and the
// process list (issue 9 item 6).
func TestHostAddPrintsNoSecretCommandLine(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	f.handle("POST /api/v1/hosts", 201, `{"host":`+hostJSON+`,"worker_token":"`+workerToken+`"}`)
	f.handle("POST /api/v1/hosts/"+testHostID+"/rotate-token", 200, `{"worker_token":"`+workerToken+`"}`)
	f.handle("GET /api/v1/hosts/gpu-1", 200, hostJSON)
	for _, args := range [][]string{{"host", "add", "gpu-1"}, {"host", "rotate-token", "gpu-1"}} {
		out := e.mustPam(args...)
		alone := 0
		for _, line := range strings.Split(out, "\n") {
			if !strings.Contains(line, workerToken) {
				continue
			}
			if strings.TrimSpace(line) != workerToken {
				t.Errorf("pam %s prints the token inside a line: %q", strings.Join(args, " "), line)
				continue
			}
			alone++
		}
		if alone != 1 {
			t.Errorf("pam %s prints the token alone on %d lines, want 1:\n%s", strings.Join(args, " "), alone, out)
		}
		if strings.Contains(out, "PAM_WORKER_TOKEN=") {
			t.Errorf("pam %s suggests PAM_WORKER_TOKEN on a command line:\n%s", strings.Join(args, " "), out)
		}
		if !strings.Contains(out, "install -m 600 /dev/stdin <data>/worker/token") {
			t.Errorf("pam %s does not show how to write the token file:\n%s", strings.Join(args, " "), out)
		}
	}
}
