// Package e2e runs pam as its users do: real `pam serve` and `pam worker`
// processes, a real PostgreSQL, real tmux on a private socket directory,
// and the built-in shell provider as the agent CLI.
package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestMain fails the package when a goroutine outlives its tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

// system is one serve and its workers.
type system struct {
	t     testing.TB
	url   string
	token string
	db    string        // serve's database, for tests that look under the API
	tm    *pamtest.Tmux // TMUX_TMPDIR shared by the workers of this system
}

// newSystem starts serve on a fresh database, with short timers.
func newSystem(t testing.TB, extraEnv ...string) *system {
	t.Helper()
	pamtest.Require(t, "tmux")
	db := storetest.URL(t)
	sv := pamtest.StartServe(t, pamtest.ServeOptions{DatabaseURL: db, Env: append([]string{
		"PAM_DISPATCH_ACK_TIMEOUT=5s", "PAM_RESTART_INITIAL_DELAY=100ms", "PAM_RESTART_MAX_DELAY=500ms"}, extraEnv...)})
	return &system{t: t, url: sv.URL, token: sv.Token, db: db, tm: pamtest.NewTmux(t)}
}

// worker provisions a host and starts `pam worker` for it.
func (s *system) worker(name string, extraEnv ...string) (string, *pamtest.Buffer) {
	s.t.Helper()
	var created wire.HostCreated
	s.must(201, "POST", "/api/v1/hosts", map[string]any{"name": name, "max_runs": 100}, &created)
	data := pamtest.ShortDir(s.t, "pamw-")
	w := pamtest.StartWorker(s.t, pamtest.WorkerOptions{URL: s.url, Token: created.WorkerToken, Name: name, DataDir: data, Tmux: s.tm,
		Env: append([]string{"PAM_CAPTURE_INTERVAL=200ms", "PAM_LIVENESS_INTERVAL=500ms",
			"PAM_HEARTBEAT_INTERVAL=1s", "PAM_STOP_GRACE=2s", "PAM_HOLD_OPEN=1s"}, extraEnv...)})
	eventually.Wait(s.t, eventually.Long, "worker "+name+" to come online", func() bool {
		var h wire.Host
		s.must(200, "GET", "/api/v1/hosts/"+name, nil, &h)
		return h.Status == "online"
	})
	return data, w.Stderr
}

func (s *system) call(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(s.t.Context(), method, s.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (s *system) must(want int, method, path string, body, v any) {
	s.t.Helper()
	code, out := s.call(method, path, body)
	if code != want {
		s.t.Fatalf("%s %s: %d, want %d: %s", method, path, code, want, out)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *system) task() wire.WorkItem {
	s.t.Helper()
	var p wire.Project
	s.must(201, "POST", "/api/v1/projects", map[string]any{"name": "E2E"}, &p)
	var w wire.WorkItem
	s.must(201, "POST", "/api/v1/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "Say hello"}, &w)
	return w
}

func (s *system) waitRun(id, what string, d time.Duration, cond func(wire.Run) bool) wire.Run {
	s.t.Helper()
	var r wire.Run
	eventually.Wait(s.t, d, "run "+id+": "+what, func() bool {
		r = wire.Run{}
		s.must(200, "GET", "/api/v1/runs/"+id, nil, &r)
		return cond(r)
	})
	return r
}

func (s *system) tmux(args ...string) (string, error) { return s.tm.Run(args...) }

func (s *system) topics(runID string) []string {
	var l wire.EventList
	s.must(200, "GET", "/api/v1/runs/"+runID+"/events", nil, &l)
	var ts []string
	for _, ev := range l.Events {
		ts = append(ts, ev.Topic)
	}
	return ts
}

func TestShellRunExitsWithOutputInPaneAndLog(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("e2e-host")
	task := s.task()
	var r wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell",
		"prompt": "echo hello-from-pam; sleep 1; exit 0"}, &r)
	got := s.waitRun(r.ID, "exited", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	if got.Status != "exited" || got.ExitCode == nil || *got.ExitCode != 0 {
		t.Fatalf("run ended %+v", got)
	}
	want := "run.created run.dispatched run.spawning run.started run.finished run.exited"
	if ts := strings.Join(s.topics(r.ID), " "); ts != want {
		t.Fatalf("events %s, want %s", ts, want)
	}
	var p wire.Pane
	s.must(200, "GET", "/api/v1/runs/"+r.ID+"/pane", nil, &p)
	if !strings.Contains(p.Capture, "hello-from-pam") {
		t.Fatalf("pane lacks the output: %q", p.Capture)
	}
	code, logs := s.call("GET", "/api/v1/runs/"+r.ID+"/logs", nil)
	if code != 200 || !strings.Contains(string(logs), "hello-from-pam") {
		t.Fatalf("logs: %d %q", code, logs)
	}
}

func TestFailingRunIsRequeuedThenFails(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("e2e-fail")
	task := s.task()
	var r wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell", "prompt": "exit 3", "max_attempts": 2}, &r)
	got := s.waitRun(r.ID, "failed for good", 90*time.Second, func(r wire.Run) bool { return r.Status == "failed" && r.Attempt == 2 })
	if *got.FailureReason != "exit_nonzero" || *got.ExitCode != 3 {
		t.Fatalf("ended %+v", got)
	}
	ts := strings.Join(s.topics(r.ID), " ")
	if strings.Count(ts, "run.failed") != 2 || strings.Count(ts, "run.requeued") != 1 {
		t.Fatalf("events %s", ts)
	}
}

func TestStopLongRun(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	data, _ := s.worker("e2e-stop")
	task := s.task()
	for _, force := range []bool{false, true} {
		var r wire.Run
		s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell", "prompt": "sleep 300"}, &r)
		s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
		if !s.sessionAlive(data, r.SessionName) {
			t.Fatalf("no session %s while running", r.SessionName)
		}
		t0 := time.Now()
		var stopped wire.Run
		s.must(202, "POST", "/api/v1/runs/"+r.ID+"/stop", map[string]any{"force": force}, &stopped)
		if stopped.Status != "stopped" {
			t.Fatalf("stop: %+v", stopped)
		}
		eventually.Wait(t, 15*time.Second, "session "+r.SessionName+" to end", func() bool {
			return !s.sessionAlive(data, r.SessionName)
		})
		t.Logf("force=%v: session gone after %s", force, time.Since(t0).Round(time.Millisecond))
		if got := s.waitRun(r.ID, "stopped", eventually.Short, func(r wire.Run) bool { return true }); got.Status != "stopped" {
			t.Fatalf("after the session ended the run is %s", got.Status)
		}
	}
}

func isActive(s string) bool { return s == "pending" || s == "spawning" || s == "running" }

// TestUpQuickstart is the README's promise: `pam up`, then a shell run
// started with the CLI ends exited with its output in `pam run logs`.
// With the pty executor (PAM_EXECUTOR=pty) the tmux found first on PATH
// is a trap that records any call: a machine without tmux runs it all.
func TestUpQuickstart(t *testing.T) {
	t.Parallel()
	pamtest.Require(t, "postgres") // pam up runs the embedded database
	data := pamtest.ShortDir(t, "pamu-")
	tm := pamtest.NewTmux(t)
	env := []string{"PAM_DATA_DIR=" + data, "PAM_CONFIG_DIR=" + data, tm.Env(), "PAM_PORT=0", "PAM_HOLD_OPEN=1s", "PAM_CAPTURE_INTERVAL=200ms"}
	trapped := filepath.Join(data, "tmux-was-called")
	if usesPTY(nil) {
		bin := t.TempDir()
		script := "#!/bin/sh\necho \"$@\" >> " + trapped + "\necho 'tmux: not installed' >&2\nexit 127\n"
		if err := os.WriteFile(filepath.Join(bin, "tmux"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		t.Cleanup(func() {
			if b, err := os.ReadFile(trapped); err == nil {
				t.Errorf("the pty executor called tmux: %s", b)
			}
		})
	}
	up := pamtest.Start(t, "up", env, "up")
	out := up.Stdout
	var url string
	eventually.Wait(t, 90*time.Second, "pam up to start its worker", func() bool { return strings.Contains(out.String(), "worker:") })
	url = pamtest.ListenURL(out.String())
	// Its stdout is a pipe here, not a terminal: the URL comes without
	// the token, and the line says where the token is.
	if !regexp.MustCompile(`dashboard: http://127\.0\.0\.1:\d+/ \(sign in with the token in `).MatchString(out.String()) || strings.Contains(out.String(), "#token=") {
		t.Fatalf("no dashboard URL, or one with the token: %s", out.String())
	}
	pam := func(args ...string) string {
		t.Helper()
		cmd := pamtest.Command(t, args...)
		cmd.Env = append(cmd.Env, append(env, "PAM_URL="+url)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pam %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	pam("project", "create", "--name", "Quick")
	var item wire.WorkItem
	if err := json.Unmarshal([]byte(pam("item", "add", "quick", "--kind", "task", "--title", "Greet", "--json")), &item); err != nil {
		t.Fatal(err)
	}
	// The local host must be online before the run can be placed quickly.
	var run wire.Run
	if err := json.Unmarshal([]byte(pam("run", "start", "--task", item.ID, "--provider", "shell", "--prompt", "echo hello; exit 0", "--json")), &run); err != nil {
		t.Fatal(err)
	}
	var r wire.Run
	eventually.Wait(t, 60*time.Second, "the run to end", func() bool {
		r = wire.Run{}
		_ = json.Unmarshal([]byte(pam("run", "show", run.ID, "--json")), &r)
		return r.Status != "" && !isActive(r.Status)
	})
	if r.Status != "exited" {
		t.Fatalf("run ended %s (%v)", r.Status, r.FailureReason)
	}
	// The log is the pane captured at PAM_CAPTURE_INTERVAL: give it one.
	eventually.Wait(t, eventually.Medium, "pam run logs to show hello", func() bool {
		return strings.Contains(pam("run", "logs", run.ID), "\nhello\n")
	})
	checkConsole(t, up.Stderr, run.ID)
}

// checkConsole: pam up's console (its log, at the default level info)
// says once that the run started and once that it ended, and shows none
// of the workers' polls, signals and snapshots (/api/internal/…), which
// would otherwise flood it with a line a second.
func checkConsole(t *testing.T, stderr *pamtest.Buffer, runID string) {
	t.Helper()
	lines := func(msg string) []string {
		var got []string
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, "level=INFO") && strings.Contains(l, `msg="`+msg+`"`) && strings.Contains(l, "run_id="+runID) {
				got = append(got, l)
			}
		}
		return got
	}
	eventually.Wait(t, eventually.Medium, "pam up to log the run's end", func() bool { return len(lines("run ended")) > 0 })
	if got := lines("run started"); len(got) != 1 {
		t.Errorf("want one INFO line saying the run started, got %d: %q", len(got), got)
	}
	if got := lines("run ended"); len(got) != 1 || !strings.Contains(got[0], "status=exited") || !strings.Contains(got[0], "exit_code=0") {
		t.Errorf("want one INFO line saying the run exited 0, got %q", got)
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "level=INFO") && strings.Contains(l, "path=/api/internal/") {
			t.Errorf("internal traffic at INFO: %s", l)
			break
		}
	}
}

// TestLogsFollow streams a run's log while it runs and ends with the run.
func TestLogsFollow(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("e2e-logs")
	task := s.task()
	var r wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell",
		"prompt": "for i in 1 2 3 4; do echo line-$i; sleep 0.5; done"}, &r)
	s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
	req, _ := http.NewRequestWithContext(t.Context(), "GET", s.url+"/api/v1/runs/"+r.ID+"/logs?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("logs follow: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(resp.Body); done <- b }()
	select {
	case b := <-done:
		if !strings.Contains(string(b), "line-4") {
			t.Fatalf("the followed log ended without the last line: %q", b)
		}
		if got := s.waitRun(r.ID, "ended", time.Second, func(r wire.Run) bool { return true }); isActive(got.Status) {
			t.Fatalf("the follow ended while the run is %s", got.Status)
		}
	case <-time.After(eventually.Long):
		t.Fatal("logs?follow=true did not end after the run ended")
	}
}
