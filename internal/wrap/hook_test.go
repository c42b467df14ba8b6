package wrap

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"pam/internal/spool"
	"pam/internal/wire"
)

func hookOptions(apiURL, dir, runID, kind string) HookOptions {
	return HookOptions{Kind: kind, RunID: runID, Attempt: "2", APIURL: apiURL, Token: "pst1.sig", WorkerDataDir: dir,
		RetryDelays: []time.Duration{10 * time.Millisecond}, TryTimeout: time.Second}
}

// Hooks post provider-hook signals with the run's token; progress seqs
// are distinct and increasing across hooks running at once.
func TestHookPosts(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	dir := t.TempDir()
	runID := uuid.NewString()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if out, err := Hook(t.Context(), hookOptions(orch.URL, dir, runID, wire.SignalProgress)); err != nil || out.Result != wire.ResultApplied {
				t.Errorf("progress hook: %+v %v", out, err)
			}
		})
	}
	wg.Wait()
	for _, kind := range []string{wire.SignalCompleted, wire.SignalFailed} {
		if _, err := Hook(t.Context(), hookOptions(orch.URL, dir, runID, kind)); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []int
	kinds := map[string]int{}
	for _, r := range orch.signals() {
		if r.Path != "/api/internal/runs/"+runID+"/signals" || r.Auth != "Bearer pst1.sig" || r.Signal.Source != wire.SourceProviderHook ||
			r.Signal.Attempt == nil || *r.Signal.Attempt != 2 || r.Signal.Timestamp == nil {
			t.Errorf("posted %+v", r)
		}
		kinds[r.Signal.Kind]++
		if r.Signal.Kind == wire.SignalProgress {
			seqs = append(seqs, int(*r.Signal.Seq))
		} else if r.Signal.Seq != nil {
			t.Errorf("%s with a seq", r.Signal.Kind)
		}
	}
	slices.Sort(seqs)
	for i, s := range seqs {
		if s != i+1 {
			t.Fatalf("progress seqs %v, want 1..20 each once", seqs)
		}
	}
	if kinds[wire.SignalCompleted] != 1 || kinds[wire.SignalFailed] != 1 {
		t.Errorf("kinds %v", kinds)
	}
	// The counter is per attempt.
	if seq, _ := NextProgressSeq(dir, runID, 3); seq != 1 {
		t.Errorf("attempt 3 starts at %d", seq)
	}
}

// Undeliverable hook signals are spooled, and once one is, the later ones
// of that attempt follow it into the spool.
func TestHookSpools(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	down := true
	var mu sync.Mutex
	orch.answer = func(n int, sig wire.Signal) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return http.StatusServiceUnavailable, `{"error":{"code":"unavailable","message":"down"}}`
		}
		return http.StatusAccepted, `{"result":"applied"}`
	}
	dir := t.TempDir()
	runID := uuid.NewString()
	start := time.Now()
	out, err := Hook(t.Context(), hookOptions(orch.URL, dir, runID, wire.SignalProgress))
	if err != nil || out.Spooled == "" {
		t.Fatalf("not spooled: %+v %v", out, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a failing hook took %s", d)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	if out, _ := Hook(t.Context(), hookOptions(orch.URL, dir, runID, wire.SignalCompleted)); out.Spooled == "" {
		t.Errorf("a signal behind a spooled one was posted: %+v", out)
	}
	files, _, _ := spool.List(spool.Dir(dir))
	if len(files) != 2 || files[0].Signal.Kind != wire.SignalProgress || *files[0].Signal.Seq != 1 || files[1].Signal.Kind != wire.SignalCompleted ||
		files[0].Token != "pst1.sig" || files[0].Signal.Source != wire.SourceProviderHook {
		t.Errorf("spool %+v", files)
	}
}

func TestHookRefusesBadEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := hookOptions("http://127.0.0.1:1", dir, uuid.NewString(), wire.SignalCompleted)
	for name, mod := range map[string]func(*HookOptions){
		"kind":    func(o *HookOptions) { o.Kind = "finished" },
		"run id":  func(o *HookOptions) { o.RunID = "nope" },
		"attempt": func(o *HookOptions) { o.Attempt = "0" },
		"url":     func(o *HookOptions) { o.APIURL = "" },
		"token":   func(o *HookOptions) { o.Token = "" },
		"dir":     func(o *HookOptions) { o.WorkerDataDir = "relative" },
	} {
		o := good
		mod(&o)
		if _, err := Hook(t.Context(), o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A damaged counter never goes backwards.
	runID := uuid.NewString()
	if _, err := NextProgressSeq(dir, runID, 1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hooks", runID+"-1.seq"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if seq, _ := NextProgressSeq(dir, runID, 1); seq <= 1 {
		t.Errorf("after damage: %d", seq)
	}
}

// A hook carries the CLI's session id in its signal's payload the first
// time in an attempt, and again only when it changes; an invalid one is
// left out and said so; a spooled signal counts as reported.
func TestHookReportsTheSessionOncePerAttempt(t *testing.T) {
	t.Parallel()
	orch := newOrchestrator(t)
	dir := t.TempDir()
	runID := uuid.NewString()
	hook := func(kind, session, attempt string) {
		t.Helper()
		o := hookOptions(orch.URL, dir, runID, kind)
		o.AgentSessionID, o.Attempt = session, attempt
		var report bytes.Buffer
		o.Report = &report
		if _, err := Hook(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		if bad := session == "-bad id"; bad != strings.Contains(report.String(), "left out") {
			t.Errorf("hook with %q reported %q", session, report.String())
		}
	}
	hook(wire.SignalProgress, "s1", "2")
	hook(wire.SignalCompleted, "s1", "2") // known: not carried again
	hook(wire.SignalFailed, "s2", "2")    // changed (a /clear): carried, with the reason
	hook(wire.SignalCompleted, "s2", "3") // a new attempt: carried again
	hook(wire.SignalCompleted, "-bad id", "3")
	hook(wire.SignalCompleted, "", "3")
	var payloads []string
	for _, r := range orch.signals() {
		payloads = append(payloads, string(r.Signal.Payload))
	}
	want := []string{`{"agent_session_id":"s1"}`, ``, `{"agent_session_id":"s2","reason":"provider_failed"}`, `{"agent_session_id":"s2"}`, ``, ``}
	if !slices.Equal(payloads, want) {
		t.Errorf("payloads\n%q\nwant\n%q", payloads, want)
	}
	for _, p := range payloads {
		if s, err := wire.AgentSessionOf(json.RawMessage(p)); err != nil || (p != "" && s == "") {
			t.Errorf("payload %s: the server reads %q, %v", p, s, err)
		}
	}

	// Spooled is on its way: the next hook does not carry it again.
	orch.mu.Lock()
	orch.answer = func(int, wire.Signal) (int, string) {
		return http.StatusServiceUnavailable, `{"error":{"code":"unavailable","message":"down"}}`
	}
	orch.mu.Unlock()
	other := uuid.NewString()
	o := hookOptions(orch.URL, dir, other, wire.SignalCompleted)
	o.AgentSessionID = "s9"
	if out, _ := Hook(t.Context(), o); out.Spooled == "" {
		t.Fatalf("not spooled: %+v", out)
	}
	_, _ = Hook(t.Context(), o)
	files, _, _ := spool.List(spool.Dir(dir))
	if len(files) != 2 || string(files[0].Signal.Payload) != `{"agent_session_id":"s9"}` || len(files[1].Signal.Payload) != 0 {
		t.Errorf("spool %+v", files)
	}
}
