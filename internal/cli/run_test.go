package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/creack/pty"

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
	f.handle("POST /api/v1/runs/"+runID+"/messages", 202, `{"delivery":"confirmed"}`)

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
		{[]string{"run", "keys", runID, "--key", "1"}, `POST /api/v1/runs/` + runID + `/keys {"keys":[{"key":"1"}]}`},
		{[]string{"run", "keys", runID, "--key", "Down", "--key", "Down", "--paste", "line one\nline two", "--key", "Enter", "--text", "-t", "--key", "Escape"},
			`POST /api/v1/runs/` + runID + `/keys {"keys":[{"key":"Down"},{"key":"Down"},{"paste":"line one\nline two"},{"key":"Enter"},{"text":"-t"},{"key":"Escape"}]}`},
		{[]string{"run", "send", runID, "now add a test; then $commit"}, `POST /api/v1/runs/` + runID + `/messages {"text":"now add a test; then $commit"}`},
		{[]string{"run", "send", runID, "now", "the", "docs"}, `POST /api/v1/runs/` + runID + `/messages {"text":"now the docs"}`},
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
	if out := e.mustPam("run", "keys", runID, "--enter"); out != "sent; delivery observed (the pane changed)\n" {
		t.Errorf("keys printed %q", out)
	}
	if out := e.mustPam("run", "keys", runID, "--key", "y", "--json"); out != "{\n  \"delivery\": \"observed\"\n}\n" && strings.TrimSpace(out) != `{"delivery":"observed"}` {
		t.Errorf("keys --json printed %q", out)
	}

	if out := e.mustPam("run", "send", runID, "go on"); out != "sent; delivery confirmed (the agent took it)\n" {
		t.Errorf("send printed %q", out)
	}
	if out := e.mustPam("run", "send", runID, "go on", "--json"); strings.Join(strings.Fields(out), "") != `{"delivery":"confirmed"}` {
		t.Errorf("send --json printed %q", out)
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
	eventually.Within(eventually.Medium, func() bool { return out.String() != "" })
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

// A run that waits for a person: run list shows its question, the first
// line, cut to fit; run show prints the question, its choices and the
// command that picks each, or when a usage limit resets. Whatever the
// screen held, escape sequences print as text.
func TestRunQuestion(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	asking := strings.Replace(runJSON, `"attention":"none","attention_since":null,"attention_detail":null`,
		`"attention":"needs_input","attention_since":"2026-01-01T00:00:00Z","attention_detail":{"source":"screen",`+
			`"text":"\nDo you want to make this edit to main.go? It changes the handler and the tests that cover it in one go\n(esc to cancel)",`+
			`"choices":[{"key":"1","label":"Yes"},{"key":"2","label":"Yes, and don't ask again \u001b[31mred\u001b[0m"},{"key":"3","label":"No\u202e"},{"key":"F9","label":"Odd"}],"resets_at":null}`, 1)
	asking = strings.Replace(asking, `"status":"pending"`, `"status":"running"`, 1)
	limited := strings.Replace(runJSON, `"attention":"none","attention_since":null,"attention_detail":null`,
		`"attention":"rate_limited","attention_since":"2026-01-01T00:00:00Z","attention_detail":{"source":"screen","text":"","choices":[],"resets_at":"2026-01-01T05:00:00Z"}`, 1)
	limited = strings.Replace(strings.Replace(limited, runID, "a1b2c3d4-4b7c-4e21-9a03-5c6d8e1f2a3b", 1), `"status":"pending"`, `"status":"running"`, 1)
	f.handle("GET /api/v1/runs", 200, `{"runs":[`+asking+`,`+limited+`,`+runJSON+`]}`)
	f.handle("GET /api/v1/runs/"+runID, 200, asking)

	out := e.mustPam("run", "list", "--attention")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[0], "REASON  QUESTION") {
		t.Fatalf("run list:\n%s", out)
	}
	q := strings.Index(lines[0], "QUESTION")
	for i, want := range []string{
		"Do you want to make this edit to main.go? It changes the ha…", // 60 characters
		"usage limit, resets 2026-01-01T05:00:00Z",
		"-",
	} {
		if got := lines[i+1][q:]; got != want {
			t.Errorf("row %d: question %q, want %q", i+1, got, want)
		}
	}

	out = e.mustPam("run", "show", runID)
	for _, want := range []string{
		"attention:          needs_input",
		"asks (needs_input, from screen):\n  Do you want to make this edit to main.go?",
		"\n  (esc to cancel)\nchoices:\n",
		"  1   Yes  ", "pam run keys f8d9e2a1 --key 1\n",
		`Yes, and don't ask again \x1b[31mred\x1b[0m`,
		`No\u202e`,
		"F9  Odd", "(not a key pam can press)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsAny(out, "\x1b\u202e") {
		t.Errorf("show printed a control character:\n%q", out)
	}
}

// TestSafeText: what a screen held prints as text on the operator's
// terminal: controls and format characters as escapes, invalid UTF-8
// replaced, printable text (any language) and newlines as they are.
func TestSafeText(t *testing.T) {
	for in, want := range map[string]string{
		"Do you want to proceed?": "Do you want to proceed?",
		"naïve ✓ 日本\nnext":        "naïve ✓ 日本\nnext",
		"\x1b[2J\x1b]0;title\x07": `\x1b[2J\x1b]0;title\x07`,
		"a\rb\tc\x7f":             `a\x0db\x09c\x7f`,
		"\u009b31m":               `\x9b31m`,
		"abc\u202edef\u200b":      `abc\u202edef\u200b`,
		"bad \xff byte":           "bad \uFFFD byte",
		"a literal \uFFFD stays":  "a literal \uFFFD stays",
	} {
		if got := safeText(in); got != want {
			t.Errorf("safeText(%q) = %q, want %q", in, got, want)
		}
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

// pam run send: - reads the message from stdin (its last newline
// dropped); a text the API would refuse is a usage error before any
// request; an unconfirmed delivery says so.
func TestRunSend(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	f.handle("POST /api/v1/runs/"+runID+"/messages", 202, `{"delivery":"unconfirmed"}`)
	e.stdin = strings.NewReader("first line\nsecond | line\n")
	if out := e.mustPam("run", "send", runID, "-"); !strings.Contains(out, "delivery unconfirmed") {
		t.Errorf("send printed %q", out)
	}
	if got, want := f.last(), `POST /api/v1/runs/`+runID+`/messages {"text":"first line\nsecond | line"}`; got != want {
		t.Errorf("send - sent\n  %s\nwant\n  %s", got, want)
	}
	before := f.last()
	for _, text := range []string{"a\x1b[2J", strings.Repeat("x", wire.MaxMessageText+1)} {
		if r := e.pam("run", "send", runID, text); r.code != 2 || !strings.Contains(r.stderr, "text") || f.last() != before {
			t.Errorf("text %.20q: %v (last request %s)", text, r, f.last())
		}
	}
	if r := e.pam("run", "send", runID); r.code != 2 {
		t.Errorf("send without a text: %v", r)
	}
	if out := e.mustPam("run", "send", "--help"); !strings.Contains(out, "ID TEXT") || !strings.Contains(out, "--json") || !strings.Contains(out, "stdin") {
		t.Errorf("send --help:\n%s", out)
	}
}

// run logs prints the pane's escape sequences only to a terminal: piped
// into grep or a file (stdout not a terminal, --color=auto, the default)
// or with --color=never it prints plain text with words whole;
// --color=always keeps the sequences wherever stdout goes.
func TestRunLogsColor(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	f, _ := newFakeAPI(t, e)
	const raw = "--- 2026-12-02T00:00:00Z attempt 1 ---\n\x1b[1mhel\x1b[0;32mlo\x1b[0m wor\x1b[7mld\x1b[0m\n"
	const plain = "--- 2026-12-02T00:00:00Z attempt 1 ---\nhello world\n"
	f.routes["GET /api/v1/runs/"+runID+"/logs"] = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, raw)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, plain},
		{[]string{"--color=auto"}, plain},
		{[]string{"--color", "never"}, plain},
		{[]string{"--color=always"}, raw},
	} {
		if out := e.mustPam(append([]string{"run", "logs", runID}, c.args...)...); out != c.want {
			t.Errorf("run logs %v to a pipe: %q, want %q", c.args, out, c.want)
		}
	}
	if r := e.pam("run", "logs", runID, "--color=rainbow"); r.code != 2 || !strings.Contains(r.stderr, "--color") {
		t.Errorf("--color=rainbow: %v", r)
	}

	// To a terminal, auto keeps the sequences.
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	var got pamtest.Buffer
	go io.Copy(&got, master)
	var errb bytes.Buffer
	code := e.env().Main(t.Context(), []string{"run", "logs", runID}, tty, &errb)
	tty.Close()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	eventually.Wait(t, eventually.Medium, "the log on the terminal", func() bool {
		return strings.ReplaceAll(got.String(), "\r\n", "\n") == raw
	})
}
