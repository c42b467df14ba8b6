package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestFailoverKeepsOperatorToken: two serves on one database behind a
// load balancer (a proxy the test points at whichever serve's /healthz
// says ok), a worker behind it. kill -9 of the active serve: the standby
// takes over, the token in the killed serve's token file works against
// it (the token is the database's, and the survivor wrote it to its own
// <data>/token), and every run is dispatched once across the switch — two
// running through it, two queued before it and dispatched by the
// survivor, two created after it. Before, each serve made its own token
// and the survivor answered the operator's token 401; a standby did not
// even listen.
func TestFailoverKeepsOperatorToken(t *testing.T) {
	t.Parallel()
	pamtest.Require(t, "tmux")
	dbURL := storetest.URL(t)
	env := []string{"PAM_DISPATCH_ACK_TIMEOUT=5s", "PAM_RESTART_INITIAL_DELAY=100ms", "PAM_RESTART_MAX_DELAY=500ms"}
	active := pamtest.StartServe(t, pamtest.ServeOptions{DatabaseURL: dbURL, Env: env})
	standby := pamtest.StartServe(t, pamtest.ServeOptions{DatabaseURL: dbURL, Env: env, NoWait: true})
	standbyURL := standby.WaitStandby(eventually.Long)
	if code, body := healthz(t, standbyURL); code != 503 || !strings.Contains(body, `"standby"`) {
		t.Fatalf("standby healthz: %d %s", code, body)
	}
	if code, body := healthz(t, active.URL); code != 200 {
		t.Fatalf("active healthz: %d %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(standby.DataDir, "token")); err == nil {
		t.Fatal("the standby wrote a token file before it was active")
	}

	lb := newProxy(t, active.URL)
	s := &system{t: t, url: lb.URL(), token: active.Token}
	s.faultWorker("failover", lb.URL())
	s.must(200, "PATCH", "/api/v1/hosts/failover", map[string]any{"max_runs": 2}, nil)
	task := s.task()
	g := newGate(t)
	prompt := g.wait("go") + "; exit 0"
	var runs []wire.Run
	for range 2 {
		runs = append(runs, s.runShell(task.ID, prompt, ownCwd(t)))
	}
	for _, r := range runs {
		s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
	}
	// The host is full: these wait, undispatched, through the switch.
	for range 2 {
		runs = append(runs, s.runShell(task.ID, prompt, ownCwd(t)))
	}

	for _, r := range runs[2:] {
		if got := s.waitRun(r.ID, "", time.Second, func(wire.Run) bool { return true }); got.Status != "pending" || countTopic(s.events(r.ID), "run.dispatched") != 0 {
			t.Fatalf("queued run %s is %s before the switch; events %v", r.ID, got.Status, s.topics(r.ID))
		}
	}
	active.Kill9()
	tKill := time.Now()
	eventually.Wait(t, eventually.Long, "the standby to take over", func() bool {
		code, _ := healthz(t, standbyURL)
		return code == 200
	})
	takeover := time.Since(tKill)
	lb.Retarget(t, standbyURL)

	// The operator's token, from the killed serve's data dir, works
	// against the survivor, which holds the same token in its own.
	tok, err := os.ReadFile(filepath.Join(active.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := getWith(t, standbyURL+"/api/v1/projects", strings.TrimSpace(string(tok))); code != 200 {
		t.Fatalf("the operator token against the survivor: %d %s", code, body)
	}
	if b, err := os.ReadFile(filepath.Join(standby.DataDir, "token")); err != nil || string(b) != string(tok) {
		t.Fatalf("the survivor's token file %q (%v), want the database's token", b, err)
	}
	if st, err := os.Stat(filepath.Join(standby.DataDir, "token")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the survivor's token file: %v %v", st, err)
	}

	for range 2 {
		runs = append(runs, s.runShell(task.ID, prompt, ownCwd(t)))
	}
	g.open(t, "go")
	for _, r := range runs {
		got := s.waitRun(r.ID, "ended", 120*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
		evs := s.events(r.ID)
		if got.Status != "exited" || got.Attempt != 1 || countTopic(evs, "run.dispatched") != 1 ||
			countTopic(evs, "run.started") != 1 || countTopic(evs, "run.finished") != 1 {
			t.Fatalf("run %s ended %s at attempt %d; events %v", r.ID, got.Status, got.Attempt, s.topics(r.ID))
		}
	}
	if strings.Contains(standby.Stderr.String(), string(tok)) {
		t.Fatal("the operator token appears in the survivor's log")
	}
	t.Logf("observed: kill -9 of the active serve; the standby answered /healthz 200 %s later; the killed serve's token accepted by the survivor; %d runs (2 running, 2 queued across the switch, 2 after it) each dispatched once, exited at attempt 1",
		takeover.Round(time.Millisecond), len(runs))
}

// healthz is GET url/healthz without a token: its status and body.
func healthz(t *testing.T, url string) (int, string) {
	t.Helper()
	code, body := getWith(t, url+"/healthz", "")
	return code, body
}

// getWith is a GET with an optional bearer token; a transport error is
// status 0 with the error as body.
func getWith(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
