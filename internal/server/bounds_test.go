package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"pam/internal/clock"
	"pam/internal/eventually"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// progressEvents are the seq and coalesced count of each run.progress
// of a run, in journal order.
func (e *runEnv) progressEvents(runID string) (seqs []int64, counts []int) {
	e.t.Helper()
	for _, p := range e.payloads(runID, wire.TopicRunProgress) {
		seq, _ := p["seq"].(float64)
		n, ok := p[wire.PayloadCoalesced].(float64)
		if !ok {
			e.t.Fatalf("run.progress without %q: %v", wire.PayloadCoalesced, p)
		}
		seqs, counts = append(seqs, int64(seq)), append(counts, int(n))
	}
	return seqs, counts
}

// lastProgressSeq is the run's last applied progress seq.
func (e *runEnv) lastProgressSeq(runID string) int64 {
	e.t.Helper()
	var seq int64
	if err := e.store.Pool.QueryRow(context.Background(), `SELECT last_progress_seq FROM runs WHERE id = $1`, runID).Scan(&seq); err != nil {
		e.t.Fatal(err)
	}
	return seq
}

// TestProgressJournaledOncePerSecond: a signal token posting progress as
// fast as it can grows the journal by at most one run.progress a second;
// each event counts the signals it stands for, none is lost (the last
// one is journaled by the trailing flush once its second has passed),
// and every seq was applied.
func TestProgressJournaledOncePerSecond(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("progress-host", 4, "shell")
	r := e.runningWithToken(w)

	const n = 400
	start := time.Now()
	for i := 1; i <= n; i++ {
		body := sig(wire.SignalProgress, 1, "seq", i, "payload", map[string]any{"step": i})
		if code, res, out := e.signal(r.token, r.ID, body); code != 202 || res.Result != wire.ResultApplied {
			t.Fatalf("progress %d: %d %s", i, code, out)
		}
	}
	elapsed := time.Since(start)
	var seqs []int64
	var counts []int
	eventually.Wait(t, 20*time.Second, "the last progress journaled", func() bool {
		seqs, counts = e.progressEvents(r.ID)
		return len(seqs) > 0 && seqs[len(seqs)-1] == n
	})
	// One a second at most: the first at once, one per second passed
	// while they came, and the trailing flush.
	if max := int(elapsed/time.Second) + 2; len(seqs) > max {
		t.Errorf("%d progress signals in %v journaled %d run.progress (seqs %v), want at most %d", n, elapsed, len(seqs), seqs, max)
	}
	total := 0
	for _, c := range counts {
		total += 1 + c
	}
	if total != n {
		t.Errorf("run.progress events stand for %d signals (coalesced %v), want %d", total, counts, n)
	}
	if got := e.lastProgressSeq(r.ID); got != n {
		t.Errorf("last_progress_seq %d, want %d", got, n)
	}
	t.Logf("%d progress signals in %v: run.progress seqs %v, coalesced %v", n, elapsed, seqs, counts)

	// The uplink follows the same rule.
	for i := n + 1; i <= 2*n; i++ {
		w.progress(r.ID, 1, int64(i), `{}`)
	}
	for range n {
		if ack := w.expect(wire.FrameSignalAck); ack.Result != wire.ResultApplied {
			t.Fatalf("uplink progress: %+v", ack)
		}
	}
	eventually.Wait(t, 20*time.Second, "the uplink's last progress journaled", func() bool {
		seqs, counts = e.progressEvents(r.ID)
		return seqs[len(seqs)-1] == 2*n
	})
	total = 0
	for _, c := range counts {
		total += 1 + c
	}
	if total != 2*n {
		t.Errorf("after the uplink's: run.progress events stand for %d signals, want %d", total, 2*n)
	}
}

// TestProgressPayloadBound: a progress signal's payload is at most 4 KiB;
// a bigger one is refused validation_failed on both transports, and
// nothing of it is applied or journaled.
func TestProgressPayloadBound(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("payload-host", 4, "shell")
	r := e.runningWithToken(w)

	// Nearly 64 KiB (the bound of any signal's payload) in strings of at
	// most 1,000 characters.
	big := map[string]any{}
	for i := range 60 {
		big[fmt.Sprintf("k%02d", i)] = strings.Repeat("x", 1000)
	}
	code, _, body := e.signal(r.token, r.ID, sig(wire.SignalProgress, 1, "seq", 1, "payload", big))
	if code != 400 || errorOf(t, body).Code != wire.CodeValidationFailed {
		t.Errorf("progress with a 64 KiB payload: %d %s, want 400 validation_failed", code, body)
	}
	raw := `{"note":"` + strings.Repeat("y", 1000) + `","more":"` + strings.Repeat("z", 1000) + `","a":"` + strings.Repeat("a", 1000) +
		`","b":"` + strings.Repeat("b", 1000) + `","c":"` + strings.Repeat("c", 200) + `"}`
	if len(raw) <= wire.MaxProgressPayload {
		t.Fatalf("test payload is %d bytes, not over 4 KiB", len(raw))
	}
	w.send(wire.SignalFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Kind: wire.SignalProgress, Seq: ptr(int64(2)),
		Source: wire.SourceWrapper, Payload: []byte(raw)})
	if f := w.expect(wire.FrameSignalAck); f.Code != wire.CodeValidationFailed {
		t.Errorf("progress frame over 4 KiB: %+v, want validation_failed", f)
	}
	if got := e.lastProgressSeq(r.ID); got != 0 {
		t.Errorf("a refused progress moved last_progress_seq to %d", got)
	}
	// 4 KiB exactly is taken.
	content := `"a":"` + strings.Repeat("y", 1000) + `","b":"` + strings.Repeat("z", 1000) + `","c":"` + strings.Repeat("a", 1000) +
		`","d":"` + strings.Repeat("b", 1000) + `"`
	fits := "{" + strings.Repeat(" ", wire.MaxProgressPayload-2-len(content)) + content + "}"
	w.send(wire.SignalFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Kind: wire.SignalProgress, Seq: ptr(int64(3)),
		Source: wire.SourceWrapper, Payload: []byte(fits)})
	if f := w.expect(wire.FrameSignalAck); f.Result != wire.ResultApplied {
		t.Errorf("progress frame of %d bytes: %+v, want applied", len(fits), f)
	}
	if n := e.countEvents(r.ID, wire.TopicRunProgress); n != 1 {
		t.Errorf("%d run.progress journaled, want 1 (the one that fits)", n)
	}
}

// TestWorkerReportsJournaledOncePerHour: a worker repeating an
// orphan_detected or a stale run_state about one run grows the journal
// by one event per (host, run, kind) an hour; the repeats in between
// are counted and told by the next event journaled.
func TestWorkerReportsJournaledOncePerHour(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	a := e.worker("report-a", 4, "shell")
	b := e.worker("report-b", 4, "shell")
	r := e.start(map[string]any{"host_id": a.hostID})
	d := a.expect(wire.FrameRunDispatch)
	a.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })

	one, two := wire.IntPtr(1), wire.IntPtr(2)
	const n = 5
	send := func() {
		for range n {
			// An orphan on host B naming A's run, a stale session on A,
			// and a report about an attempt the run never had.
			b.send(wire.RunStateFrame{RunID: r.ID, Attempt: one, State: wire.StateOrphanDetected, Detail: "orphan"})
			a.send(wire.RunStateFrame{RunID: r.ID, Attempt: one, State: wire.StateStaleSession, Detail: "stale"})
			a.send(wire.RunStateFrame{RunID: r.ID, Attempt: two, State: wire.StateSessionLost, Detail: "old"})
		}
		a.barrier()
		b.barrier()
	}
	orphans := func() []map[string]any {
		var out []map[string]any
		for _, ev := range e.events("run.orphan_detected") {
			if ev.HostID != nil && *ev.HostID == b.hostID {
				var p map[string]any
				if err := json.Unmarshal(ev.Payload, &p); err != nil {
					t.Fatal(err)
				}
				out = append(out, p)
			}
		}
		return out
	}
	send()
	if got := orphans(); len(got) != 1 || got[0]["repeats"] != float64(0) {
		t.Errorf("%d orphan_detected reports: journaled %v, want one with repeats 0", n, got)
	}
	if got := e.payloads(r.ID, wire.TopicRunStaleSession); len(got) != 1 {
		t.Errorf("%d stale_session reports: journaled %v, want one", n, got)
	}
	if got := e.payloads(r.ID, wire.TopicRunSignalReceived); len(got) != 1 || got[0]["state"] != wire.StateSessionLost {
		t.Errorf("%d session_lost reports of attempt 2: journaled %v, want one", n, got)
	}

	// An hour later (moved in the database) each is journaled again, with
	// the count of those set aside.
	if _, err := e.store.Pool.Exec(context.Background(), `UPDATE report_limits SET journaled_at = journaled_at - interval '61 minutes'`); err != nil {
		t.Fatal(err)
	}
	send()
	if got := orphans(); len(got) != 2 || got[1]["repeats"] != float64(n-1) {
		t.Errorf("orphan_detected an hour later: %v, want a second one with repeats %d", got, n-1)
	}
	if got := e.payloads(r.ID, wire.TopicRunStaleSession); len(got) != 2 || got[1]["repeats"] != float64(n-1) {
		t.Errorf("stale_session an hour later: %v, want a second one with repeats %d", got, n-1)
	}
	if got := e.payloads(r.ID, wire.TopicRunSignalReceived); len(got) != 2 {
		t.Errorf("stale session_lost an hour later: %v, want a second one", got)
	}
}

// TestUnrequestedPushIgnored: a workspace_pushed the server did not ask
// for journals nothing; the answer to a push it asked for is journaled.
func TestUnrequestedPushIgnored(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	e.must(200, "PATCH", "/api/v1/projects/runs", map[string]any{"repo": map[string]any{"url": "/srv/app.git"}}, nil)
	a := e.worker("push-host", 4, "shell")
	r := e.start(nil)
	d := a.expect(wire.FrameRunDispatch)
	a.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })
	ws := wire.Workspace{Path: "/data/worktrees/" + r.ID, Branch: d.Workspace.Branch, BaseCommit: strings.Repeat("ab", 20)}
	a.send(wire.WorkspaceReadyFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Workspace: &ws})
	e.waitRun(r.ID, "workspace", func(r wire.Run) bool { return r.Workspace != nil })

	ok := true
	for range 3 {
		a.send(wire.WorkspacePushedFrame{RunID: r.ID, Workspace: &ws, OK: &ok, Detail: "nobody asked"})
	}
	a.barrier()
	if n := e.countEvents(r.ID, wire.TopicRunWorkspacePushed); n != 0 {
		t.Errorf("%d run.workspace_pushed journaled for pushes nobody asked for", n)
	}

	done := make(chan int, 1)
	go func() { code, _ := e.call("POST", "/api/v1/runs/"+r.ID+"/push", nil); done <- code }()
	req := a.expect(wire.FrameWorkspaceRequest)
	a.send(wire.WorkspacePushedFrame{RunID: r.ID, Workspace: &ws, OK: &ok, Detail: "pushed"})
	a.send(wire.WorkspacePushedFrame{RunID: r.ID, Workspace: &ws, OK: &ok, Detail: "again"})
	a.send(wire.WorkspaceReplyFrame{RequestID: req.RequestID, RunID: r.ID, EOF: true,
		Text: `{"run_id":"` + r.ID + `","branch":"` + ws.Branch + `","ok":true,"detail":"pushed"}`})
	if code := <-done; code != 202 {
		t.Fatalf("push: %d", code)
	}
	a.barrier()
	if got := e.payloads(r.ID, wire.TopicRunWorkspacePushed); len(got) != 1 || got[0]["detail"] != "pushed" {
		t.Errorf("run.workspace_pushed after one push asked for: %v, want the one answer", got)
	}
}

// lastOutputAt is the run's last_output_at (zero: none).
func (e *runEnv) lastOutputAt(runID string) time.Time {
	e.t.Helper()
	var at *time.Time
	if err := e.store.Pool.QueryRow(context.Background(), `SELECT last_output_at FROM runs WHERE id = $1`, runID).Scan(&at); err != nil {
		e.t.Fatal(err)
	}
	if at == nil {
		return time.Time{}
	}
	return *at
}

// TestSnapshotOnlyFromCurrentHost: once a run's offer to host A was
// withdrawn and the run went to host B, A's snapshots (and its screen
// readings) neither overwrite the pane nor move the hang timer; neither
// does a snapshot of an attempt the run is not at. B's are taken.
func TestSnapshotOnlyFromCurrentHost(t *testing.T) {
	t.Parallel()
	const ack = time.Minute
	e := newRunEnv(t, runOpts{ack: ack, storeClock: clock.NewManual(time.Now())})
	a := e.worker("pane-a", 4, "shell")
	r := e.start(nil)
	da := a.expect(wire.FrameRunDispatch) // a never acks: the offer is withdrawn
	e.must(200, "POST", "/api/v1/hosts/pane-a/disable", nil, nil)
	a.reconnect()
	b := e.worker("pane-b", 4, "shell")
	e.advance(ack + time.Second)
	db := b.expect(wire.FrameRunDispatch)
	if db.RunID != r.ID || *db.Attempt != 1 {
		t.Fatalf("re-offer %+v", db)
	}
	b.ack(db, true)
	if code, _, body := e.signal(db.SignalToken, r.ID, sig(wire.SignalStarted, 1)); code != 202 {
		t.Fatalf("started: %d %s", code, body)
	}
	b.snapshot(db, "b's screen")
	eventually.Wait(t, eventually.Medium, "b's pane change recorded", func() bool { return !e.lastOutputAt(r.ID).IsZero() })
	// The hang timer is moved far back, so that any write shows.
	old := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	if _, err := e.store.Pool.Exec(context.Background(), `UPDATE runs SET last_output_at = $2 WHERE id = $1`, r.ID, old); err != nil {
		t.Fatal(err)
	}

	a.snapshot(da, "a's stale screen")
	a.screen(da, 1, wire.AttentionNeedsInput, "a's question?")
	// A run_state writes the run's pending pane change before it is
	// handled: whatever a's snapshot noted is written by now.
	a.send(wire.RunStateFrame{RunID: r.ID, Attempt: wire.IntPtr(1), State: wire.StateIdle})
	a.barrier()
	b.snapshot(wiretest.Frame{RunID: r.ID, Attempt: wire.IntPtr(2)}, "an attempt the run is not at")
	b.send(wire.RunStateFrame{RunID: r.ID, Attempt: wire.IntPtr(2), State: wire.StateIdle})
	b.barrier()
	if p := e.fleet.Pane(r.ID); p.Capture != "b's screen" {
		t.Errorf("pane %q after stale snapshots, want b's", p.Capture)
	}
	if at := e.lastOutputAt(r.ID); !at.Equal(old) {
		t.Errorf("last_output_at moved to %v by stale snapshots (was %v)", at, old)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNone {
		t.Errorf("attention %q after a withdrawn host's screen", got.Attention)
	}

	// The current host and attempt are heard.
	b.snapshot(db, "b's next screen")
	b.send(wire.RunStateFrame{RunID: r.ID, Attempt: wire.IntPtr(1), State: wire.StateIdle})
	b.barrier()
	if p := e.fleet.Pane(r.ID); p.Capture != "b's next screen" {
		t.Errorf("pane %q, want b's next screen", p.Capture)
	}
	if at := e.lastOutputAt(r.ID); !at.After(old) {
		t.Errorf("last_output_at %v not moved by the current host's snapshot", at)
	}
}

// TestSignalTokenExpires: a signal token is refused (401) once its run
// has ended for 24 h — moved in the database, not waited for; until
// then a late signal is answered as the ingest table says. The host's
// worker token is not a signal token and is still answered.
func TestSignalTokenExpires(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("expiry-host", 4, "shell")
	r := e.runningWithToken(w)
	if code, _, body := e.signal(r.token, r.ID, sig(wire.SignalFinished, 1, "payload", map[string]any{"exit_code": 0})); code != 202 {
		t.Fatalf("finished: %d %s", code, body)
	}
	e.waitRun(r.ID, "exited", func(r wire.Run) bool { return r.Status == wire.RunExited })
	ended := func(ago time.Duration) {
		t.Helper()
		if _, err := e.store.Pool.Exec(context.Background(), `UPDATE runs SET finished_at = now() - $2::float8 * interval '1 second' WHERE id = $1`,
			r.ID, ago.Seconds()); err != nil {
			t.Fatal(err)
		}
	}
	ended(23 * time.Hour)
	if code, res, body := e.signal(r.token, r.ID, sig(wire.SignalProgress, 1, "seq", 1)); code != 202 || res.Result != wire.ResultApplied {
		t.Errorf("progress of a run ended 23 h ago: %d %s, want 202 applied", code, body)
	}
	ended(25 * time.Hour)
	code, _, body := e.signal(r.token, r.ID, sig(wire.SignalProgress, 1, "seq", 2))
	if code != 401 || errorOf(t, body).Code != wire.CodeUnauthorized {
		t.Errorf("signal token of a run ended 25 h ago: %d %s, want 401 unauthorized", code, body)
	}
	if code, _, body := e.signal(r.token, r.ID, sig(wire.SignalFinished, 1, "payload", map[string]any{"exit_code": 0})); code != 401 {
		t.Errorf("finished with a signal token of a run ended 25 h ago: %d %s, want 401", code, body)
	}
	if code, res, body := e.signal(w.token, r.ID, sig(wire.SignalProgress, 1, "seq", 3)); code != 202 || res.Result != wire.ResultApplied {
		t.Errorf("the worker token on a run ended 25 h ago: %d %s, want 202 applied", code, body)
	}
	if got := e.lastProgressSeq(r.ID); got != 3 {
		t.Errorf("last_progress_seq %d, want 3 (the refused seq 2 not applied)", got)
	}
}
