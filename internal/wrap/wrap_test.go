package wrap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/spool"
	"pam/internal/wire"
)

// received is one signal request the fake orchestrator got.
type received struct {
	Path   string
	Auth   string
	Signal wire.Signal
}

// orchestrator stands in for POST /api/internal/runs/{id}/signals.
type orchestrator struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(n int, sig wire.Signal) (int, string) // nil: 202 applied
}

func newOrchestrator(t *testing.T) *orchestrator {
	o := &orchestrator{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		var sig wire.Signal
		if r.Method != http.MethodPost || dec.Decode(&sig) != nil {
			http.Error(w, `{"error":{"code":"malformed_json","message":"bad"}}`, http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.got = append(o.got, received{Path: r.URL.Path, Auth: r.Header.Get("Authorization"), Signal: sig})
		n := len(o.got)
		answer := o.answer
		o.mu.Unlock()
		status, body := http.StatusAccepted, `{"result":"applied"}`
		if answer != nil {
			status, body = answer(n, sig)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *orchestrator) signals() []received {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]received(nil), o.got...)
}

// fixture is a worker data dir with one dispatch in it.
type fixture struct {
	runID     string
	workerDir string
	configDir string
	d         wire.Dispatch
	stdout    *pamtest.Buffer
	stderr    *pamtest.Buffer
}

func newFixture(t *testing.T, apiURL, prov, binary, prompt string) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{
		runID:     uuid.NewString(),
		workerDir: filepath.Join(root, "data", "worker"),
		configDir: filepath.Join(root, "config"),
		stdout:    &pamtest.Buffer{},
		stderr:    &pamtest.Buffer{},
	}
	f.d = wire.Dispatch{
		RunID: f.runID, Attempt: 2, APIURL: apiURL, SignalToken: "sig-" + f.runID[:8],
		Provider: prov, Binary: binary, TaskID: uuid.NewString(), TaskTitle: "Fix the bug",
		Prompt: prompt, Cwd: root, SessionName: "pam-" + f.runID[:8],
	}
	for _, d := range []string{filepath.Join(f.workerDir, "dispatch"), f.configDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f.writeDispatch(t)
	return f
}

func (f *fixture) writeDispatch(t *testing.T) {
	t.Helper()
	b, err := json.Marshal(f.d)
	if err != nil {
		t.Fatal(err)
	}
	f.writeRaw(t, b)
}

func (f *fixture) writeRaw(t *testing.T, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.workerDir, "dispatch", f.runID+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) writeCatalog(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.configDir, "providers.toml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) options() Options {
	return Options{
		WorkerDataDir: f.workerDir,
		ConfigDir:     f.configDir,
		RunID:         f.runID,
		Stdout:        f.stdout,
		Stderr:        f.stderr,
		Environ:       []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"},
		RetryDelays:   []time.Duration{10 * time.Millisecond, 20 * time.Millisecond},
		TryTimeout:    2 * time.Second,
	}
}

func checkSignal(t *testing.T, r received, f *fixture, kind string) {
	t.Helper()
	if r.Signal.Kind != kind {
		t.Errorf("signal kind %q, want %q", r.Signal.Kind, kind)
	}
	if r.Path != "/api/internal/runs/"+f.runID+"/signals" {
		t.Errorf("%s posted to %s", kind, r.Path)
	}
	if r.Auth != "Bearer "+f.d.SignalToken {
		t.Errorf("%s auth %q", kind, r.Auth)
	}
	if r.Signal.Attempt == nil || *r.Signal.Attempt != 2 || r.Signal.Source != wire.SourceWrapper || r.Signal.Timestamp == nil {
		t.Errorf("%s: %+v", kind, r.Signal)
	}
}

func exitPayload(t *testing.T, sig wire.Signal) int {
	t.Helper()
	var p struct {
		ExitCode *int `json:"exit_code"`
	}
	if err := json.Unmarshal(sig.Payload, &p); err != nil || p.ExitCode == nil {
		t.Fatalf("finished payload %s: %v", sig.Payload, err)
	}
	return *p.ExitCode
}

func TestShellRunAndHoldOpen(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	f := newFixture(t, orch.URL, "shell", "/bin/sh", "echo hello; echo oops >&2; exit 3")
	o := f.options()
	o.HoldOpen = 200 * time.Millisecond
	o.Now = func() time.Time { return time.Date(2025, 6, 1, 15, 4, 5, 0, time.UTC) }
	start := time.Now()
	code := Run(t.Context(), o)
	elapsed := time.Since(start)
	if code != 3 {
		t.Errorf("exit %d, want 3\nstderr:\n%s", code, f.stderr)
	}
	if f.stdout.String() != "hello\n" {
		t.Errorf("stdout %q", f.stdout)
	}
	if !strings.HasPrefix(f.stderr.String(), "oops\n") {
		t.Errorf("stderr %q", f.stderr)
	}
	want := fmt.Sprintf("pam: run %s attempt 2 finished with exit code 3 (failed) — this session stays open until 15:04:05 UTC (PAM_HOLD_OPEN=200ms)\n", f.runID)
	if !strings.Contains(f.stderr.String(), want) {
		t.Errorf("closing line missing; stderr:\n%s\nwant %q", f.stderr, want)
	}
	if elapsed < o.HoldOpen {
		t.Errorf("held open %s, want at least %s", elapsed, o.HoldOpen)
	}
	got := orch.signals()
	if len(got) != 2 {
		t.Fatalf("signals: %+v", got)
	}
	checkSignal(t, got[0], f, wire.SignalStarted)
	checkSignal(t, got[1], f, wire.SignalFinished)
	if c := exitPayload(t, got[1].Signal); c != 3 {
		t.Errorf("finished exit_code %d", c)
	}
	if files, _, _ := spool.List(spool.Dir(f.workerDir)); len(files) != 0 {
		t.Errorf("spooled although delivered: %+v", files)
	}
}

func TestCLIEnvironment(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	f := newFixture(t, orch.URL, "shell", "/bin/sh", "env; pwd")
	f.d.CAFile = "/etc/pam/ca.pem"
	// The worker's pass_env values: the catalog's env wins over them, and
	// a PAM_* name never comes from the file.
	f.d.PassEnv = map[string]string{"ANTHROPIC_API_KEY": "sk-from-worker", "FROM_CATALOG": "passed-loses",
		"PAM_RUN_ID": "forged-run", "PAM_WORKER_TOKEN": "worker-secret-in-dispatch"}
	f.writeDispatch(t)
	f.writeCatalog(t, `
[proxy]
HTTPS_PROXY = "http://proxy.example:3128"
[providers.shell]
env = { FROM_CATALOG = "yes", PAM_RUN_ID = "not-this" }
`)
	o := f.options()
	o.HTTPClient = http.DefaultClient // the CA file does not exist here
	o.Environ = append(o.Environ, "PAM_WORKER_TOKEN=worker-secret", "PAM_TOKEN=operator-secret", "PAM_DATABASE_URL=postgres://x:db-secret@h/db", "KEEP_ME=1", "PAM_SIGNAL_TOKEN=stale")
	if code := Run(t.Context(), o); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	out := f.stdout.String()
	for _, want := range []string{
		"PAM_RUN_ID=" + f.runID + "\n",
		"PAM_ATTEMPT=2\n",
		"PAM_API_URL=" + orch.URL + "\n",
		"PAM_SIGNAL_TOKEN=" + f.d.SignalToken + "\n",
		"PAM_WORKER_DATA_DIR=" + f.workerDir + "\n",
		"PAM_CA_FILE=/etc/pam/ca.pem\n",
		"HTTPS_PROXY=http://proxy.example:3128\n",
		"FROM_CATALOG=yes\n",
		"KEEP_ME=1\n",
		"ANTHROPIC_API_KEY=sk-from-worker\n",
		"\n" + f.d.Cwd + "\n", // pwd
	} {
		if !strings.Contains(out, want) {
			t.Errorf("CLI output lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"PAM_WORKER_TOKEN", "worker-secret", "PAM_TOKEN=", "operator-secret", "db-secret", "not-this", "=stale", "passed-loses", "forged-run", "worker-secret-in-dispatch"} {
		if strings.Contains(out, secret) {
			t.Errorf("CLI environment holds %q:\n%s", secret, out)
		}
	}
}

// TestProcessEnvironment uses the real process environment (Environ nil),
// so it cannot run in parallel.
func TestProcessEnvironment(t *testing.T) {
	t.Setenv("PAM_WORKER_TOKEN", "worker-secret-from-env")
	t.Setenv("PAM_TOKEN", "operator-secret-from-env")
	orch := newOrchestrator(t)
	f := newFixture(t, orch.URL, "shell", "/bin/sh", "env")
	o := f.options()
	o.Environ = nil
	if code := Run(t.Context(), o); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	out := f.stdout.String()
	if !strings.Contains(out, "PAM_RUN_ID="+f.runID) || strings.Contains(out, "secret-from-env") {
		t.Errorf("CLI environment:\n%s", out)
	}
}

// argvScript prints each argument on its own line between brackets.
const argvScript = "#!/bin/sh\nfor a in \"$@\"; do printf '[%s]\\n' \"$a\"; done\n"

func TestPromptIsOneLiteralArgument(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	bin := filepath.Join(t.TempDir(), "fake-agent")
	if err := os.WriteFile(bin, []byte(argvScript), 0o755); err != nil {
		t.Fatal(err)
	}
	pwned := filepath.Join(os.TempDir(), "pwned-"+uuid.NewString())
	prompt := fmt.Sprintf("fix it $(touch %s) `touch %s`; touch %s\n'\"{run_id}", pwned, pwned, pwned)
	f := newFixture(t, orch.URL, "fake", bin, prompt)
	f.d.Args = []string{"--model", "big one"}
	f.writeDispatch(t)
	f.writeCatalog(t, fmt.Sprintf(`
[providers.fake]
binary = %q
args = ["--title", "Task: {task_title}", "{prompt}", "--run={run_id}/{attempt}"]
hooks = "claude"
`, bin))
	o := f.options()
	o.PamBinary = "/opt/pam/bin/pam"
	if code := Run(t.Context(), o); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	if _, err := os.Stat(pwned); err == nil {
		os.Remove(pwned)
		t.Fatal("the prompt was executed by a shell")
	}
	out := f.stdout.String()
	settings := `{"hooks":{"Notification":[{"hooks":[{"command":"'/opt/pam/bin/pam' hook needs-input","type":"command"}]}],"PostToolUse":[{"hooks":[{"command":"'/opt/pam/bin/pam' hook progress","type":"command"}],"matcher":"*"}],"Stop":[{"hooks":[{"command":"'/opt/pam/bin/pam' hook completed","type":"command"}]}]}}`
	want := "[--title]\n[Task: Fix the bug]\n[" + prompt + "]\n[--run=" + f.runID + "/2]\n[--model]\n[big one]\n[--settings]\n[" + settings + "]\n"
	if out != want {
		t.Errorf("argv:\n%s\nwant:\n%s", out, want)
	}
}

func TestOrchestratorDownSpools(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	url := orch.URL
	orch.Close() // nothing listens there any more
	f := newFixture(t, url, "shell", "/bin/sh", "exit 4")
	start := time.Now()
	if code := Run(t.Context(), f.options()); code != 4 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	files, bad, err := spool.List(spool.Dir(f.workerDir))
	if err != nil || len(bad) != 0 || len(files) != 2 {
		t.Fatalf("spool: %+v %+v %v", files, bad, err)
	}
	for i, kind := range []string{wire.SignalStarted, wire.SignalFinished} {
		name := fmt.Sprintf("%020d-%s-2-%s.json", i+1, f.runID, kind)
		if filepath.Base(files[i].Path) != name {
			t.Errorf("spool file %d = %s, want %s", i, filepath.Base(files[i].Path), name)
		}
		if files[i].Token != f.d.SignalToken || files[i].APIURL != url || files[i].RunID != f.runID || files[i].Signal.Source != wire.SourceWrapper {
			t.Errorf("spool entry %d = %+v", i, files[i])
		}
	}
	if c := exitPayload(t, files[1].Signal); c != 4 {
		t.Errorf("spooled exit_code %d", c)
	}
	if !strings.Contains(f.stderr.String(), "2 signal(s) could not be delivered") {
		t.Errorf("stderr:\n%s", f.stderr)
	}
}

func TestRetryThenSpoolKeepsOrder(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	orch.answer = func(int, wire.Signal) (int, string) {
		return http.StatusServiceUnavailable, `{"error":{"code":"unavailable","message":"database down"}}`
	}
	f := newFixture(t, orch.URL, "shell", "/bin/sh", "exit 0")
	if code := Run(t.Context(), f.options()); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	got := orch.signals()
	// started: three tries; finished: straight to the spool behind it.
	if len(got) != 3 {
		t.Fatalf("%d tries: %+v", len(got), got)
	}
	for _, r := range got {
		if r.Signal.Kind != wire.SignalStarted {
			t.Errorf("tried %s", r.Signal.Kind)
		}
	}
	files, _, _ := spool.List(spool.Dir(f.workerDir))
	if len(files) != 2 || files[0].Signal.Kind != wire.SignalStarted || files[1].Signal.Kind != wire.SignalFinished {
		t.Errorf("spool: %+v", files)
	}
}

func TestRefusedIsReportedNotSpooled(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	orch.answer = func(n int, _ wire.Signal) (int, string) {
		if n == 1 {
			return http.StatusConflict, `{"error":{"code":"invalid_attempt","message":"attempt 2 is ahead of\nthe run's attempt 1"}}`
		}
		return http.StatusOK, `{"result":"ignored"}`
	}
	f := newFixture(t, orch.URL, "shell", "/bin/sh", "true")
	if code := Run(t.Context(), f.options()); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	if got := orch.signals(); len(got) != 2 || got[1].Signal.Kind != wire.SignalFinished {
		t.Errorf("signals: %+v", got)
	}
	want := "pam: signal started of run " + f.runID + " attempt 2 refused by the orchestrator: 409 invalid_attempt: attempt 2 is ahead of the run's attempt 1\n"
	if !strings.Contains(f.stderr.String(), want) {
		t.Errorf("stderr:\n%s\nwant %q", f.stderr, want)
	}
	if files, _, _ := spool.List(spool.Dir(f.workerDir)); len(files) != 0 {
		t.Errorf("spooled: %+v", files)
	}
}

func TestBadDispatch(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, f *fixture)
		want  string
	}{
		{"missing", func(t *testing.T, f *fixture) {
			os.Remove(filepath.Join(f.workerDir, "dispatch", f.runID+".json"))
		}, "no such file"},
		{"garbage", func(t *testing.T, f *fixture) { f.writeRaw(t, []byte("{\"run_id\": tru")) }, "dispatch file"},
		{"unknown field", func(t *testing.T, f *fixture) {
			f.writeRaw(t, []byte(`{"run_id":"`+f.runID+`","attempt":1,"api_url":"http://x","signal_token":"t","extra":1}`))
		}, `unknown field "extra"`},
		{"other run", func(t *testing.T, f *fixture) { f.d.RunID = uuid.NewString(); f.writeDispatch(t) }, "is not this run"},
		{"no attempt", func(t *testing.T, f *fixture) { f.d.Attempt = 0; f.writeDispatch(t) }, "attempt 0"},
		{"bad url", func(t *testing.T, f *fixture) { f.d.APIURL = "ftp://x"; f.writeDispatch(t) }, "api_url"},
		{"trailing data", func(t *testing.T, f *fixture) {
			b, _ := json.Marshal(f.d)
			f.writeRaw(t, append(b, []byte(" {}")...))
		}, "after the JSON"},
		{"too large", func(t *testing.T, f *fixture) {
			f.d.Prompt = strings.Repeat("x", maxDispatch)
			f.writeDispatch(t)
		}, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, orch.URL, "shell", "/bin/sh", "exit 0")
			tc.write(t, f)
			o := f.options()
			o.HoldOpen = 50 * time.Millisecond
			code := Run(t.Context(), o)
			if code != ExitNoDispatch {
				t.Errorf("exit %d", code)
			}
			msg := f.stderr.String()
			if !strings.Contains(msg, "pam: run "+f.runID+" cannot start: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("stderr:\n%s\nwant %q", msg, tc.want)
			}
			if !strings.Contains(msg, "stays open until") {
				t.Errorf("no closing line:\n%s", msg)
			}
			if f.stdout.String() != "" {
				t.Errorf("stdout %q", f.stdout)
			}
		})
	}
	t.Run("bad run id", func(t *testing.T) {
		t.Parallel()
		var stderr bytes.Buffer
		code := Run(t.Context(), Options{WorkerDataDir: t.TempDir(), RunID: "../../etc/passwd", Stderr: &stderr, HoldOpen: time.Hour})
		if code != ExitUsage || !strings.Contains(stderr.String(), "not a run id") {
			t.Errorf("exit %d: %s", code, stderr.String())
		}
	})
	if n := len(orch.signals()); n != 0 {
		t.Errorf("%d signals posted without a usable dispatch", n)
	}
}

func TestSpawnFailure(t *testing.T) {
	t.Parallel()
	notExec := filepath.Join(t.TempDir(), "not-exec")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	for _, tc := range []struct {
		name, prov, binary, catalog, cwd string
		code                             int
		detail                           string
	}{
		{name: "missing binary", prov: "shell", binary: "/nonexistent/pam-test/claude", code: ExitNotFound, detail: "no such file"},
		{name: "relative binary", prov: "shell", binary: "sh", code: ExitNotFound, detail: "not an absolute path"},
		{name: "not executable", prov: "shell", binary: notExec, code: ExitCannotRun, detail: "not executable"},
		{name: "unknown provider", prov: "cursor", binary: "/bin/sh", code: ExitCannotRun, detail: `provider "cursor" is not in`},
		{name: "bad catalog", prov: "shell", binary: "/bin/sh", catalog: "[providers.shell]\nbniary = 1\n", code: ExitCannotRun, detail: "providers.shell.bniary"},
		{name: "missing cwd", prov: "shell", binary: "/bin/sh", cwd: "/nonexistent/pam-test-cwd", code: ExitCannotRun, detail: "working directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			orch := newOrchestrator(t)
			f := newFixture(t, orch.URL, tc.prov, tc.binary, "echo should-not-run")
			if tc.cwd != "" {
				f.d.Cwd = tc.cwd
				f.writeDispatch(t)
			}
			if tc.catalog != "" {
				f.writeCatalog(t, tc.catalog)
			}
			code := Run(t.Context(), f.options())
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, f.stderr)
			}
			got := orch.signals()
			if len(got) != 1 {
				t.Fatalf("signals: %+v", got)
			}
			checkSignal(t, got[0], f, wire.SignalFailed)
			var p struct{ Reason, Detail string }
			if err := json.Unmarshal(got[0].Signal.Payload, &p); err != nil || p.Reason != "spawn_failed" || !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("payload %s, want detail with %q", got[0].Signal.Payload, tc.detail)
			}
			if strings.Contains(f.stdout.String(), "should-not-run") {
				t.Error("the CLI ran")
			}
			if !strings.Contains(f.stderr.String(), "could not start") {
				t.Errorf("stderr:\n%s", f.stderr)
			}
		})
	}
}

func TestCancelStopsCLI(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	f := newFixture(t, orch.URL, "shell", "/bin/sh", "exec sleep 60")
	o := f.options()
	o.HoldOpen = time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- Run(ctx, o) }()
	eventually.Wait(t, eventually.Medium, "started", func() bool { return len(orch.signals()) == 1 })
	cancel()
	var code int
	select {
	case code = <-done:
	case <-time.After(eventually.Medium):
		t.Fatal("Run did not end after cancel")
	}
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d", code)
	}
	got := orch.signals()
	if len(got) != 2 || exitPayload(t, got[1].Signal) != 143 {
		t.Errorf("signals: %+v", got)
	}
	if !strings.Contains(f.stderr.String(), "(killed by signal 15, terminated) — this session closes now (the run was stopped)") {
		t.Errorf("stderr:\n%s", f.stderr)
	}
}

// TestSignals sends real signals to this process, which Run catches with
// HandleSignals: SIGINT while the CLI runs is left to the CLI, SIGINT during
// hold-open ends it; SIGTERM is passed on to the CLI and skips hold-open.
func TestSignals(t *testing.T) {
	orch := newOrchestrator(t)

	t.Run("interrupt", func(t *testing.T) {
		gate := filepath.Join(t.TempDir(), "go")
		f := newFixture(t, orch.URL, "shell", "/bin/sh", fmt.Sprintf("while [ ! -e %s ]; do sleep 0.01; done; exit 5", gate))
		o := f.options()
		o.HandleSignals = true
		o.HoldOpen = time.Hour
		var log pamtest.Buffer
		o.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
		done := make(chan int, 1)
		go func() { done <- Run(t.Context(), o) }()
		eventually.Wait(t, eventually.Medium, "started", func() bool { return strings.Contains(fmt.Sprint(orch.signals()), f.runID) })
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		// The SIGINT must be seen while the CLI runs, not queue for hold-open.
		eventually.Wait(t, eventually.Medium, "the SIGINT", func() bool { return strings.Contains(log.String(), "signal=interrupt") })
		os.WriteFile(gate, nil, 0o600)
		eventually.Wait(t, eventually.Medium, "hold-open", func() bool { return strings.Contains(f.stderr.String(), "stays open until") })
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		select {
		case code := <-done:
			if code != 5 {
				t.Errorf("exit %d", code)
			}
		case <-time.After(eventually.Medium):
			t.Fatal("SIGINT did not end hold-open")
		}
	})

	t.Run("terminate", func(t *testing.T) {
		f := newFixture(t, orch.URL, "shell", "/bin/sh", "exec sleep 60")
		o := f.options()
		o.HandleSignals = true
		o.HoldOpen = time.Hour
		done := make(chan int, 1)
		go func() { done <- Run(t.Context(), o) }()
		eventually.Wait(t, eventually.Medium, "started", func() bool { return strings.Contains(fmt.Sprint(orch.signals()), f.runID) })
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case code := <-done:
			if code != 143 {
				t.Errorf("exit %d", code)
			}
		case <-time.After(eventually.Medium):
			t.Fatal("SIGTERM did not stop the run")
		}
		if !strings.Contains(f.stderr.String(), "closes now (the run was stopped)") {
			t.Errorf("stderr:\n%s", f.stderr)
		}
	})
}

func TestShortDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		5 * time.Minute: "5m", time.Hour: "1h", 90 * time.Second: "1m30s",
		200 * time.Millisecond: "200ms", 36 * time.Hour: "36h", time.Hour + time.Second: "1h0m1s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestSenderFallsBackToPosting: a signal queued behind spooled ones is
// still posted when the spool cannot take it.
func TestSenderFallsBackToPosting(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	dir := t.TempDir()
	run := uuid.NewString()
	one := 1
	if _, err := spool.Write(dir, spool.Entry{RunID: run, Signal: wire.Signal{Kind: wire.SignalStarted, Attempt: &one, Source: wire.SourceWrapper}}); err != nil {
		t.Fatal(err)
	}
	// A counter that cannot be replaced breaks every further write.
	os.Remove(filepath.Join(dir, ".seq"))
	if err := os.MkdirAll(filepath.Join(dir, ".seq", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	var report pamtest.Buffer
	s := &Sender{Client: orch.Client(), APIURL: orch.URL, Token: "tok", RunID: run, SpoolDir: dir, Report: &report}
	out := s.Send(t.Context(), wire.Signal{Kind: wire.SignalFinished, Attempt: &one, Source: wire.SourceWrapper})
	if !out.Delivered() || out.Result != wire.ResultApplied {
		t.Errorf("outcome %+v\n%s", out, report.String())
	}
	if !strings.Contains(report.String(), "posting it now") {
		t.Errorf("report: %s", report.String())
	}
}
