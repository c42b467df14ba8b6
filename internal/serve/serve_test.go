package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestMain: the serve tests run the binary, but the in-process ones
// (run_test.go) must leave no goroutine of Run behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

// stopWait is how long a serve has to exit after a signal in these tests.
const stopWait = 30 * time.Second

func get(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
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
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
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
func dataDir(t *testing.T) string { return pamtest.ShortDir(t, "pamdata-") }

func TestServeExternalDatabase(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	dbURL := storetest.URL(t)
	p := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dir, DatabaseURL: dbURL})
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
	second := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dir, DatabaseURL: dbURL, NoWait: true})
	if code := second.Wait(stopWait); code != 1 {
		t.Fatalf("second serve on one data dir exited %d, want 1", code)
	}
	if !strings.Contains(second.Stderr.String(), "serve.lock") {
		t.Fatalf("second serve's message does not name serve.lock: %s", second.Stderr)
	}

	// SIGTERM: graceful, exit 0; the token is never logged.
	p.Stop(syscall.SIGTERM, stopWait)
	if code := p.Wait(stopWait); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM: %s", code, p.Stderr)
	}
	if strings.Contains(p.Stderr.String(), tok) {
		t.Fatal("the operator token appears in serve's log")
	}
}

func TestServeStandbyTakesOver(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	active := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dataDir(t), DatabaseURL: dbURL})
	standby := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dataDir(t), DatabaseURL: dbURL, NoWait: true})
	// The standby says it waits and does not claim to serve while the
	// active runs.
	standby.WaitStandby(eventually.Long)
	if out := standby.Stdout.String(); strings.Contains(out, "listening") {
		t.Fatalf("standby printed %q while another server was active", out)
	}
	active.Stop(syscall.SIGTERM, stopWait)
	standby.WaitListening(eventually.Long)
	if code, _ := get(t, standby.URL+"/healthz", ""); code != 200 {
		t.Fatalf("standby after takeover: healthz %d", code)
	}
}

// TestStandbyHealthz503: a standby listens, so that a load balancer can
// tell it from the active server: /healthz is 503 {"status":"standby"},
// everything else the 503 unavailable envelope (the token is the
// database's, and the standby holds none of the active one's state).
// SIGTERM ends a standby cleanly. Before, a standby did not listen at all.
func TestStandbyHealthz503(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	active := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dataDir(t), DatabaseURL: dbURL})
	standby := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dataDir(t), DatabaseURL: dbURL, NoWait: true})
	base := standby.WaitStandby(eventually.Long)

	code, body := get(t, base+"/healthz", "")
	var health struct {
		Status string     `json:"status"`
		Error  wire.Error `json:"error"`
	}
	if err := json.Unmarshal(body, &health); code != 503 || err != nil || health.Status != "standby" || health.Error.Code != wire.CodeUnavailable {
		t.Fatalf("standby healthz: %d %s", code, body)
	}
	for _, path := range []string{"/api/v1/projects", "/api/internal/worker/runs", "/metrics"} {
		for _, tok := range []string{"", active.Token} {
			code, body := get(t, base+path, tok)
			var env wire.Envelope
			if err := json.Unmarshal(body, &env); code != 503 || err != nil || env.Error == nil || env.Error.Code != wire.CodeUnavailable {
				t.Fatalf("standby %s (token %v): %d %s", path, tok != "", code, body)
			}
		}
	}
	if code, body := get(t, active.URL+"/healthz", ""); code != 200 || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("active healthz: %d %s", code, body)
	}

	standby.Stop(syscall.SIGTERM, stopWait)
	if code := standby.Wait(stopWait); code != 0 {
		t.Fatalf("standby exited %d after SIGTERM: %s", code, standby.Stderr)
	}
}

// TestExistingTokenFileAdopted: the operator token belongs to the
// database. The first serve adopts the token file its data dir already
// has (an upgrade keeps the operator's credential); a serve of the same
// database with another data dir, holding no token file or another
// token, gets the database's token written there (0600). A damaged file
// with nothing in the database to replace it is refused, not replaced.
// Before, each serve used and made its own <data>/token.
func TestExistingTokenFileAdopted(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	first := dataDir(t)
	const mine = "0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(filepath.Join(first, "token"), []byte(mine+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: first, DatabaseURL: dbURL})
	if tok := readToken(t, first); tok != mine {
		t.Fatalf("the existing token file was not kept: %q", tok)
	}
	if code, body := get(t, p.URL+"/api/v1/projects", mine); code != 200 {
		t.Fatalf("projects with the adopted token: %d %s", code, body)
	}
	p.Stop(syscall.SIGTERM, stopWait)
	if strings.Contains(p.Stderr.String(), mine) {
		t.Fatal("the operator token appears in serve's log")
	}

	other := dataDir(t)
	if err := os.WriteFile(filepath.Join(other, "token"), []byte("fedcba9876543210fedcba9876543210\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{dataDir(t), other} {
		p := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dir, DatabaseURL: dbURL})
		if tok := readToken(t, dir); tok != mine {
			t.Fatalf("data dir %s got token %q, want the database's", dir, tok)
		}
		if code, body := get(t, p.URL+"/api/v1/projects", mine); code != 200 {
			t.Fatalf("projects with the database's token: %d %s", code, body)
		}
		p.Stop(syscall.SIGTERM, stopWait)
		if strings.Contains(p.Stderr.String(), mine) {
			t.Fatal("the operator token appears in serve's log")
		}
	}

	damaged := dataDir(t)
	if err := os.WriteFile(filepath.Join(damaged, "token"), []byte("not a token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fresh := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: damaged, DatabaseURL: storetest.URL(t), NoWait: true})
	if code := fresh.Wait(stopWait); code != 1 || !strings.Contains(fresh.Stderr.String(), "32 lowercase hex") {
		t.Fatalf("a damaged token file on a database without a token: exit %d: %s", code, fresh.Stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(damaged, "token")); string(b) != "not a token\n" {
		t.Fatalf("the damaged token file was rewritten to %q", b)
	}
}

// TestSSEResumeAcrossRestart: events journaled by one serve process are
// resumed from Last-Event-ID by a client of the next one, exactly.
func TestSSEResumeAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	dbURL := storetest.URL(t)
	opts := pamtest.ServeOptions{DataDir: dir, DatabaseURL: dbURL}
	p := pamtest.StartServe(t, opts)
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
	p.Stop(syscall.SIGKILL, stopWait)

	p2 := pamtest.StartServe(t, opts)
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
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
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
	opts := pamtest.ServeOptions{DataDir: dir} // no database URL: the embedded one

	start := time.Now()
	p := pamtest.StartServe(t, opts)
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
	p.Stop(syscall.SIGKILL, stopWait)
	p = pamtest.StartServe(t, opts)
	if code, body := get(t, p.URL+"/api/v1/projects/survivor", tok); code != 200 {
		t.Fatalf("after kill -9 and restart: %d %s", code, body)
	}

	// A clean stop stops the database too.
	p.Stop(syscall.SIGTERM, stopWait)
	if code := p.Wait(stopWait); code != 0 {
		t.Fatalf("exit %d: %s", code, p.Stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres", "postmaster.pid")); err == nil {
		t.Fatal("postmaster.pid left after a clean stop: the database was not stopped")
	}

	start = time.Now()
	p = pamtest.StartServe(t, opts)
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
	eventually.Wait(t, eventually.Long, "healthz 503", func() bool {
		code, _ := get(t, p.URL+"/healthz", "")
		return code == 503
	})
	// A backend the postmaster's SIGKILL left behind may answer a pooled
	// connection a moment longer (it notices its postmaster's death on
	// its own): until then 200 is right. What must never come is anything
	// but 200 or the 503 unavailable envelope, and the 503 must come.
	eventually.Wait(t, eventually.Long, "the API answering 503 unavailable", func() bool {
		code, body := get(t, p.URL+"/api/v1/projects", tok)
		if code != 200 && (code != 503 || !strings.Contains(string(body), `"unavailable"`)) {
			t.Fatalf("API with the database down: %d %s", code, body)
		}
		return code == 503
	})
	p.Stop(syscall.SIGTERM, stopWait)

	// The next start recovers the crashed cluster.
	p = pamtest.StartServe(t, opts)
	if code, _ := get(t, p.URL+"/api/v1/projects/survivor", tok); code != 200 {
		t.Fatalf("after database crash and restart: %d", code)
	}
	p.Stop(syscall.SIGTERM, stopWait)
}
