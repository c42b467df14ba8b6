package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

const runID = "f8d9e2a1-4b7c-4e21-9a03-5c6d8e1f2a3b"

const runJSON = `{"id":"` + runID + `","task_id":"9c0c2f7e-0000-4000-8000-000000000002","project_id":"8b0c2f7e-0000-4000-8000-000000000001",` +
	`"provider":"claude","host_id":null,"target_host_id":null,"status":"pending","attempt":1,"max_attempts":3,"failure_reason":null,` +
	`"exit_code":null,"session_name":"pam-f8d9e2a1","cwd":"","prompt":"","args":[],"pending_since":"2026-01-01T00:00:00Z",` +
	`"next_attempt_at":null,"started_at":null,"finished_at":null,"completed_at":null,"completion_source":null,"attention":"none","attention_since":null,"attention_detail":null,"agent_session_id":null,"continues_run_id":null,"workspace":null,` +
	`"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`

func TestRunCommandsSendWhatWasGiven(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	f.handle("POST /api/v1/runs", 202, runJSON)
	f.handle("GET /api/v1/runs", 200, `{"runs":[`+runJSON+`]}`)
	f.handle("GET /api/v1/hosts/gpu-1", 200, hostJSON)
	f.handle("GET /api/v1/projects/demo", 200, projectJSON)
	f.handle("POST /api/v1/runs/"+runID+"/stop", 202, runJSON)
	f.handle("POST /api/v1/runs/"+runID+"/retry", 202, runJSON)
	f.handle("POST /api/v1/runs/"+runID+"/continue", 202, runJSON)
	f.handle("POST /api/v1/runs/"+runID+"/complete", 200, runJSON)
	f.handle("POST /api/v1/runs/"+runID+"/keys", 202, `{"delivery":"observed"}`)

	task := "9c0c2f7e-0000-4000-8000-000000000002"
	tests := []struct {
		args []string
		want string // the last request line
	}{
		{[]string{"run", "start", "--task", task, "--provider", "claude"},
			`POST /api/v1/runs {"task_id":"` + task + `","provider":"claude"}`},
		{[]string{"run", "start", "--task", task, "--provider", "codex", "--host", "gpu-1", "--cwd", "/src", "--prompt", "fix it", "--max-attempts", "5", "--", "--model", "o3", "-v"},
			`POST /api/v1/runs {"task_id":"` + task + `","provider":"codex","host_id":"` + testHostID + `","cwd":"/src","prompt":"fix it","args":["--model","o3","-v"],"max_attempts":5}`},
		{[]string{"run", "start", "--task", task, "--provider", "shell", "--host", testHostID, "--prompt", ""},
			`POST /api/v1/runs {"task_id":"` + task + `","provider":"shell","host_id":"` + testHostID + `","prompt":""}`},
		{[]string{"run", "list"}, `GET /api/v1/runs`},
		{[]string{"run", "list", "--status", "running", "--project", "demo", "--host", "gpu-1", "--task", task, "--limit", "5"},
			`GET /api/v1/runs?host_id=` + testHostID + `&limit=5&project_id=8b0c2f7e-0000-4000-8000-000000000001&status=running&task_id=` + task},
		{[]string{"run", "list", "--attention"}, `GET /api/v1/runs?attention=any`},
		{[]string{"run", "list", "--attention=needs_input", "--status", "running"}, `GET /api/v1/runs?attention=needs_input&status=running`},
		{[]string{"run", "stop", runID}, `POST /api/v1/runs/` + runID + `/stop {}`},
		{[]string{"run", "stop", runID, "--force"}, `POST /api/v1/runs/` + runID + `/stop {"force":true}`},
		{[]string{"run", "retry", runID}, `POST /api/v1/runs/` + runID + `/retry`},
		{[]string{"run", "retry", "--fresh", runID}, `POST /api/v1/runs/` + runID + `/retry {"fresh":true}`},
		{[]string{"run", "continue", runID}, `POST /api/v1/runs/` + runID + `/continue {}`},
		{[]string{"run", "continue", runID, "now update the docs"}, `POST /api/v1/runs/` + runID + `/continue {"text":"now update the docs"}`},
		{[]string{"run", "continue", runID, "now", "the", "docs", "--provider", "claude-opus"},
			`POST /api/v1/runs/` + runID + `/continue {"text":"now the docs","provider":"claude-opus"}`},
		{[]string{"run", "complete", runID}, `POST /api/v1/runs/` + runID + `/complete`},
		{[]string{"run", "keys", runID, "--text", "yes please", "--enter", "--key", "C-c", "--text", "x"},
			`POST /api/v1/runs/` + runID + `/keys {"keys":[{"text":"yes please"},{"key":"Enter"},{"key":"C-c"},{"text":"x"}]}`},
	}
	for _, tt := range tests {
		e.mustPam(tt.args...)
		if got := f.last(); got != tt.want {
			t.Errorf("pam %s sent\n  %s\nwant\n  %s", strings.Join(tt.args, " "), got, tt.want)
		}
	}

	out := e.mustPam("run", "start", "--task", task, "--provider", "claude")
	if out != "admitted run "+runID+" (pending, session pam-f8d9e2a1)\n" {
		t.Errorf("start printed %q", out)
	}
	var r wire.Run
	if err := json.Unmarshal([]byte(e.mustPam("run", "start", "--task", task, "--provider", "claude", "--json")), &r); err != nil || r.ID != runID {
		t.Errorf("start --json: %+v %v", r, err)
	}
	if out := e.mustPam("run", "list"); !strings.Contains(out, "f8d9e2a1  pending  1/3      -") {
		t.Errorf("run list:\n%s", out)
	}
	if out := e.mustPam("run", "continue", runID, "go on"); out != "admitted run "+runID+" (pending, session pam-f8d9e2a1), continuing run "+runID+"\n" {
		t.Errorf("continue printed %q", out)
	}
	if err := json.Unmarshal([]byte(e.mustPam("run", "continue", runID, "--json")), &r); err != nil || r.ID != runID {
		t.Errorf("continue --json: %+v %v", r, err)
	}
	if out := e.mustPam("run", "keys", runID, "--enter"); !strings.Contains(out, "pane changed") {
		t.Errorf("keys printed %q", out)
	}

	// An unknown host name is reported before any run is created.
	r2 := e.pam("run", "start", "--task", task, "--provider", "claude", "--host", "nope")
	if r2.code != 1 || !strings.Contains(r2.stderr, "host nope") || strings.HasPrefix(f.last(), "POST") {
		t.Errorf("unknown host: %v (last request %s)", r2, f.last())
	}
}

func TestRunShow(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	f.handle("GET /api/v1/runs/"+runID, 200, runJSON)
	out := e.mustPam("run", "show", runID)
	for _, want := range []string{"status:             pending", "session_name:       pam-f8d9e2a1", "attempt:            1/3", "failure_reason:     -"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	var one, api map[string]any
	json.Unmarshal([]byte(e.mustPam("run", "show", runID, "--json")), &one)
	json.Unmarshal([]byte(runJSON), &api)
	if len(one) != len(api) || one["session_name"] != api["session_name"] {
		t.Errorf("show --json %v", one)
	}
}

// logs streams the text as it arrives; -f asks the server to follow and
// an interrupt ends it with exit 0.
func TestRunLogs(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	release := make(chan struct{})
	f.routes["GET /api/v1/runs/"+runID+"/logs"] = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "line one\n")
		if r.URL.Query().Get("follow") != "true" {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	if out := e.mustPam("run", "logs", runID); out != "line one\n" {
		t.Errorf("logs: %q", out)
	}
	if f.last() != "GET /api/v1/runs/"+runID+"/logs" {
		t.Errorf("request %s", f.last())
	}

	ctx, cancel := context.WithCancel(t.Context())
	var out, errb pamtest.Buffer
	done := make(chan int)
	env := e.env()
	go func() { done <- env.Main(ctx, []string{"run", "logs", "-f", runID}, &out, &errb) }()
	eventually.Within(10*time.Second, func() bool { return out.String() != "" })
	if out.String() != "line one\n" {
		t.Fatalf("followed output %q", out.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after interrupt: %s", code, errb.String())
	}
	close(release)
	if f.last() != "GET /api/v1/runs/"+runID+"/logs?follow=true" {
		t.Errorf("request %s", f.last())
	}

	missing := "0e0e0e0e-0000-4000-8000-000000000000"
	f.handle("GET /api/v1/runs/"+missing+"/logs", 404, `{"error":{"code":"not_found","message":"run not found","details":null}}`)
	if r := e.pam("run", "logs", missing); r.code != 1 || r.stderr != "pam: run not found\n" {
		t.Errorf("unknown run: %v", r)
	}
	if r := e.pam("run", "logs", "nope"); r.code != 1 || r.stderr != "pam: no run matches \"nope\"\n" {
		t.Errorf("not an id: %v", r)
	}
}

// continue's refusals are the API's; a text the API would refuse
// is a usage error before any request; show says the conversation and
// what the run continues.
func TestRunContinue(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	f.handle("POST /api/v1/runs/"+runID+"/continue", 409,
		`{"error":{"code":"not_resumable","message":"the run has no agent session: its CLI's hooks never reported one","details":{}}}`)
	r := e.pam("run", "continue", runID, "more")
	if r.code != 1 || !strings.Contains(r.stderr, "no agent session") {
		t.Errorf("not resumable: %v", r)
	}
	before := f.last()
	r = e.pam("run", "continue", runID, strings.Repeat("x", wire.MaxContinueText+1))
	if r.code != 2 || !strings.Contains(r.stderr, "text") || f.last() != before {
		t.Errorf("a text too long: %v (last request %s)", r, f.last())
	}
	if out := e.mustPam("run", "continue", "--help"); !strings.Contains(out, "--provider") || !strings.Contains(out, "ID [TEXT]") {
		t.Errorf("continue --help:\n%s", out)
	}
	if out := e.mustPam("run", "retry", "--help"); !strings.Contains(out, "--fresh") {
		t.Errorf("retry --help:\n%s", out)
	}

	cont := strings.Replace(strings.Replace(runJSON, `"agent_session_id":null`, `"agent_session_id":"5f0c-abc"`, 1),
		`"continues_run_id":null`, `"continues_run_id":"0a0a0a0a-1111-4111-8111-111111111111"`, 1)
	f.handle("GET /api/v1/runs/"+runID, 200, cont)
	out := e.mustPam("run", "show", runID)
	for _, want := range []string{"agent_session:      5f0c-abc", "continues:          0a0a0a0a-1111-4111-8111-111111111111"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
}
