package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/eventually"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

var pamBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pambin-")
	if err != nil {
		panic(err)
	}
	pamBin = filepath.Join(dir, "pam")
	out, err := exec.Command("go", "build", "-o", pamBin, "../../cmd/pam").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build pam: %v\n%s", err, out)
		os.Exit(1)
	}
	// The serve tests run the binary, but the in-process ones (run_test.go)
	// must leave no goroutine of Run behind.
	goleak.VerifyTestMain(storetest.M(m), goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// proc is a `pam serve` process under test.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	URL    string
	lines  chan string
	stderr *safeBuffer
	done   chan struct{}
}

var listenRe = regexp.MustCompile(`pam serve listening on (\S+)`)

// startServe runs `pam serve` with env and waits until it prints where it
// listens (or fails the test when wait is true and it does not).
func startServe(t *testing.T, wait bool, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(pamBin, "serve")
	cmd.Env = append(os.Environ(), "PAM_BIND=127.0.0.1", "PAM_PORT=0", "PAM_LOG_LEVEL=debug")
	cmd.Env = append(cmd.Env, env...)
	stdout, _ := cmd.StdoutPipe()
	p := &proc{t: t, cmd: cmd, lines: make(chan string, 100), stderr: &safeBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill(syscall.SIGKILL) })
	if wait {
		p.waitListening(90 * time.Second)
	}
	return p
}

func (p *proc) waitListening(d time.Duration) {
	p.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("pam serve exited before listening: %s", p.stderr)
			}
			if m := listenRe.FindStringSubmatch(line); m != nil {
				p.URL = m[1]
				return
			}
		case <-deadline:
			p.t.Fatalf("pam serve did not listen within %s: %s", d, p.stderr)
		}
	}
}

func (p *proc) kill(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) exitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// safeBuffer collects a process's stderr while tests read it.
type safeBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *safeBuffer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

func (w *safeBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func get(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func post(t *testing.T, url, token, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func readToken(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, "token"))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("token mode %o, want 0600", st.Mode().Perm())
	}
	tok := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(tok) {
		t.Fatalf("token %q is not 32 lowercase hex", tok)
	}
	return tok
}

// dataDir makes a data dir the postgres user can traverse when root.
func dataDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pamdata-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(d, 0o711)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestServeExternalDatabase(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	dbURL := storetest.URL(t)
	p := startServe(t, true, "PAM_DATA_DIR="+dir, "PAM_DATABASE_URL="+dbURL)
	tok := readToken(t, dir)
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %o, want 0700 with an external database", st.Mode().Perm())
	}
	if code, body := get(t, p.URL+"/healthz", ""); code != 200 {
		t.Fatalf("healthz %d %s", code, body)
	}
	if code, _ := get(t, p.URL+"/api/v1/projects", ""); code != 401 {
		t.Fatalf("projects without token: %d", code)
	}
	if code, body := get(t, p.URL+"/api/v1/projects", tok); code != 200 || !strings.Contains(string(body), `"projects"`) {
		t.Fatalf("projects: %d %s", code, body)
	}

	// One server per data dir: a second one exits 1 naming the lock.
	second := startServe(t, false, "PAM_DATA_DIR="+dir, "PAM_DATABASE_URL="+dbURL)
	if code := second.exitCode(); code != 1 {
		t.Fatalf("second serve on one data dir exited %d, want 1", code)
	}
	if !strings.Contains(second.stderr.String(), "serve.lock") {
		t.Fatalf("second serve's message does not name serve.lock: %s", second.stderr)
	}

	// SIGTERM: graceful, exit 0; the token is never logged.
	p.kill(syscall.SIGTERM)
	if code := p.exitCode(); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM: %s", code, p.stderr)
	}
	if strings.Contains(p.stderr.String(), tok) {
		t.Fatal("the operator token appears in serve's log")
	}
}

func TestServeStandbyTakesOver(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	active := startServe(t, true, "PAM_DATA_DIR="+dataDir(t), "PAM_DATABASE_URL="+dbURL)
	standby := startServe(t, false, "PAM_DATA_DIR="+dataDir(t), "PAM_DATABASE_URL="+dbURL)
	// The standby says it waits and does not listen while the active runs.
	waitFor(t, 30*time.Second, "standby message", func() bool {
		return strings.Contains(standby.stderr.String(), "standby")
	})
	select {
	case line := <-standby.lines:
		t.Fatalf("standby printed %q while another server was active", line)
	default:
	}
	active.kill(syscall.SIGTERM)
	standby.waitListening(30 * time.Second)
	if code, _ := get(t, standby.URL+"/healthz", ""); code != 200 {
		t.Fatalf("standby after takeover: healthz %d", code)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	eventually.Wait(t, d, what, cond)
}

// TestSSEResumeAcrossRestart: events journaled by one serve process are
// resumed from Last-Event-ID by a client of the next one, exactly.
func TestSSEResumeAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	dbURL := storetest.URL(t)
	env := []string{"PAM_DATA_DIR=" + dir, "PAM_DATABASE_URL=" + dbURL}
	p := startServe(t, true, env...)
	tok := readToken(t, dir)
	for i := 0; i < 30; i++ {
		if code, body := post(t, p.URL+"/api/v1/projects", tok, fmt.Sprintf(`{"name":"p%d"}`, i)); code != 201 {
			t.Fatalf("create: %d %s", code, body)
		}
	}
	ids := readSSE(t, p.URL, tok, "0", 10)
	if ids[0] != 1 || ids[9] != 10 {
		t.Fatalf("first ten ids %v", ids)
	}
	p.kill(syscall.SIGKILL)

	p2 := startServe(t, true, env...)
	for i := 30; i < 40; i++ {
		post(t, p2.URL+"/api/v1/projects", tok, fmt.Sprintf(`{"name":"p%d"}`, i))
	}
	rest := readSSE(t, p2.URL, tok, "10", 30)
	for i, id := range rest {
		if id != int64(11+i) {
			t.Fatalf("after restart got ids %v, want 11..40", rest)
		}
	}
}

// readSSE reads n events from the stream resuming after last.
func readSSE(t *testing.T, base, tok, last string, n int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Last-Event-ID", last)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var ids []int64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for len(ids) < n && sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			id, _ := strconv.ParseInt(v, 10, 64)
			ids = append(ids, id)
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			var ev wire.Event
			if err := json.Unmarshal([]byte(v), &ev); err != nil {
				t.Fatalf("data is not an Event: %s", v)
			}
		}
	}
	if len(ids) < n {
		t.Fatalf("stream ended after %d of %d events: %v", len(ids), n, sc.Err())
	}
	return ids
}

func TestServeEmbeddedDatabase(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	env := []string{"PAM_DATA_DIR=" + dir, "PAM_DATABASE_URL="}

	start := time.Now()
	p := startServe(t, true, env...)
	t.Logf("cold start (initdb + start + migrate): %s", time.Since(start).Round(time.Millisecond))
	tok := readToken(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "postgres", "PG_VERSION")); err != nil {
		t.Fatalf("no cluster in <data>/postgres: %v", err)
	}
	if os.Geteuid() == 0 {
		st, _ := os.Stat(dir)
		if st.Mode().Perm() != 0o711 {
			t.Errorf("data dir mode %o, want 0711 (root, embedded database)", st.Mode().Perm())
		}
	}
	if code, body := post(t, p.URL+"/api/v1/projects", tok, `{"name":"survivor"}`); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}

	// kill -9 the server: its database keeps running and is adopted.
	p.kill(syscall.SIGKILL)
	p = startServe(t, true, env...)
	if code, body := get(t, p.URL+"/api/v1/projects/survivor", tok); code != 200 {
		t.Fatalf("after kill -9 and restart: %d %s", code, body)
	}

	// A clean stop stops the database too.
	p.kill(syscall.SIGTERM)
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit %d: %s", code, p.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres", "postmaster.pid")); err == nil {
		t.Fatal("postmaster.pid left after a clean stop: the database was not stopped")
	}

	start = time.Now()
	p = startServe(t, true, env...)
	t.Logf("warm start (existing cluster): %s", time.Since(start).Round(time.Millisecond))
	if code, _ := get(t, p.URL+"/api/v1/projects/survivor", tok); code != 200 {
		t.Fatalf("after warm start: %d", code)
	}

	// The database dies under the server: /healthz says 503, the API 503.
	pidFile, err := os.ReadFile(filepath.Join(dir, "postgres", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	_ = syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, 30*time.Second, "healthz 503", func() bool {
		code, _ := get(t, p.URL+"/healthz", "")
		return code == 503
	})
	if code, body := get(t, p.URL+"/api/v1/projects", tok); code != 503 || !strings.Contains(string(body), `"unavailable"`) {
		t.Fatalf("API with the database down: %d %s", code, body)
	}
	p.kill(syscall.SIGTERM)

	// The next start recovers the crashed cluster.
	p = startServe(t, true, env...)
	if code, _ := get(t, p.URL+"/api/v1/projects/survivor", tok); code != 200 {
		t.Fatalf("after database crash and restart: %d", code)
	}
	p.kill(syscall.SIGTERM)
}
