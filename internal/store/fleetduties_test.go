package store_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"pam/internal/runs"
	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

const instanceA = "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f"

// fleet is a store with one online host and a task to run on it.
type fleet struct {
	t    *testing.T
	s    *store.Store
	host wire.Host
	task wire.WorkItem
}

func newFleet(t *testing.T, maxAttempts int) *fleet {
	t.Helper()
	s := storetest.New(t)
	s.Policy = store.Policy{MaxAttempts: maxAttempts, RestartInitialDelay: time.Millisecond, RestartMaxDelay: time.Millisecond}
	ctx := t.Context()
	p, err := s.CreateProject(ctx, wire.CreateProject{Name: "Fleet"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := s.CreateWorkItem(ctx, p.Slug, wire.CreateWorkItem{Kind: "task", Title: "Work"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, s: s, task: task}
	f.host = f.onlineHost("h1")
	return f
}

func (f *fleet) onlineHost(name string) wire.Host {
	f.t.Helper()
	ctx := f.t.Context()
	h, err := f.s.CreateHost(ctx, wire.CreateHost{Name: name})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.s.Register(ctx, h.Host, wire.Register{HostName: name, InstanceID: instanceA, Providers: []string{"shell"}, Protocol: wire.UplinkProtocol}, 90*time.Second); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.s.Heartbeat(ctx, h.Host.ID); err != nil {
		f.t.Fatal(err)
	}
	return h.Host
}

func (f *fleet) sql(q string, args ...any) {
	f.t.Helper()
	if _, err := f.s.Pool.Exec(f.t.Context(), q, args...); err != nil {
		f.t.Fatal(err)
	}
}

// running starts a run and takes it to running on f.host.
func (f *fleet) running() wire.Run {
	f.t.Helper()
	ctx := f.t.Context()
	r, err := runs.New(f.s).CreateRun(ctx, wire.CreateRun{TaskID: f.task.ID, Provider: "shell"})
	if err != nil {
		f.t.Fatal(err)
	}
	offers, err := runs.New(f.s).ClaimAndOffer(ctx, func(string) bool { return true }, 10, time.Second)
	if err != nil || len(offers) != 1 || offers[0].HostID != f.host.ID {
		f.t.Fatalf("offer: %+v %v", offers, err)
	}
	yes := true
	if _, err := runs.New(f.s).AckOffer(ctx, f.host.ID, wire.RunDispatchAckFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Accepted: &yes}); err != nil {
		f.t.Fatal(err)
	}
	f.signal(r.ID, wire.SignalStarted, 1, wire.ResultApplied)
	return f.run(r.ID)
}

func (f *fleet) run(id string) wire.Run {
	f.t.Helper()
	r, err := f.s.GetRun(f.t.Context(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fleet) signal(runID, kind string, attempt int, want string) {
	f.t.Helper()
	sig := wire.Signal{Kind: kind, Attempt: &attempt, Source: wire.SourceWrapper}
	switch kind {
	case wire.SignalFinished:
		sig.Payload = json.RawMessage(`{"exit_code":0}`)
	case wire.SignalProgress:
		seq := int64(1)
		sig.Seq, sig.Source = &seq, wire.SourceProviderHook
	case wire.SignalCompleted:
		sig.Source = wire.SourceProviderHook
	}
	res, err := runs.New(f.s).IngestSignal(f.t.Context(), runID, f.host.ID, sig)
	if err != nil || res.Result != want {
		f.t.Fatalf("%s of attempt %d: %q %v, want %q", kind, attempt, res.Result, err, want)
	}
}

// topics lists the journal's topics, with the given run or host.
func (f *fleet) topics(runID, hostID string) string {
	f.t.Helper()
	rows, err := f.s.Pool.Query(f.t.Context(), `SELECT topic FROM events
		WHERE ($1 = '' OR run_id::text = $1) AND ($2 = '' OR host_id::text = $2) ORDER BY seq`, runID, hostID)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		rows.Scan(&t)
		out = append(out, t)
	}
	return strings.Join(out, " ")
}

// silent makes the host look offline since `ago`, having come online
// `online` ago.
func (f *fleet) silent(ago, online time.Duration) {
	f.sql(`UPDATE hosts SET status = 'offline', last_seen_at = now() - $2::interval, last_online_at = now() - $3::interval WHERE id = $1`,
		f.host.ID, ago, online)
}

func TestHostLost(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	longAgo := time.Now().Add(-3 * time.Hour)
	f := newFleet(t, 3)
	r := f.running()

	// The clock rule: T_dead counts from the latest of last_seen_at, the
	// host's last online transition and this serve's start.
	for _, c := range []struct {
		what         string
		seen, online time.Duration
		start        time.Time
	}{
		{"seen recently", 10 * time.Minute, 3 * time.Hour, longAgo},
		{"came online recently", 2 * time.Hour, 10 * time.Minute, longAgo},
		{"serve started recently", 2 * time.Hour, 3 * time.Hour, time.Now()},
	} {
		f.silent(c.seen, c.online)
		if n, err := runs.New(f.s).MarkHostsLost(ctx, time.Hour, c.start); err != nil || n != 0 {
			t.Fatalf("%s: %d runs lost (%v)", c.what, n, err)
		}
	}
	// An online host is never lost, whatever its clocks say.
	f.sql(`UPDATE hosts SET status = 'online', last_seen_at = now() - interval '5 hours', last_online_at = now() - interval '5 hours' WHERE id = $1`, f.host.ID)
	if n, _ := runs.New(f.s).MarkHostsLost(ctx, time.Hour, longAgo); n != 0 {
		t.Fatalf("an online host lost %d runs", n)
	}

	f.silent(2*time.Hour, 3*time.Hour)
	if n, err := runs.New(f.s).MarkHostsLost(ctx, time.Hour, longAgo); err != nil || n != 1 {
		t.Fatalf("lost %d runs (%v), want 1", n, err)
	}
	got := f.run(r.ID)
	if got.Status != wire.RunPending || got.Attempt != 2 || got.HostID != nil {
		t.Fatalf("after host_lost the run is %+v, want requeued", got)
	}
	wr, err := f.s.WorkerRun(ctx, f.host.ID, r.ID)
	if err != nil || len(wr.Attempts) != 1 || wr.Attempts[0].FailureReason == nil || *wr.Attempts[0].FailureReason != wire.FailHostLost {
		t.Fatalf("attempt history %+v %v", wr.Attempts, err)
	}
	if ts := f.topics("", f.host.ID); !strings.Contains(ts, "worker.lost") {
		t.Errorf("host events: %s", ts)
	}
	if ts := f.topics(r.ID, ""); !strings.Contains(ts, "run.failed run.requeued") {
		t.Errorf("run events: %s", ts)
	}
	// Once its runs are gone nothing more happens (one worker.lost).
	if n, _ := runs.New(f.s).MarkHostsLost(ctx, time.Hour, longAgo); n != 0 {
		t.Errorf("lost again: %d", n)
	}
	// Late signals of the lost incarnation are journaled, never applied.
	f.signal(r.ID, wire.SignalFinished, 1, wire.ResultStaleAttempt)
	if got := f.run(r.ID); got.Status != wire.RunPending || got.Attempt != 2 {
		t.Errorf("a late finished moved the run: %+v", got)
	}
	if ts := f.topics(r.ID, ""); !strings.HasSuffix(ts, "run.stale_signal") {
		t.Errorf("run events: %s", ts)
	}
}

// With no attempt left the host_lost tombstone is final: a late
// finished, completed or progress of that attempt is journaled and
// ignored, never resurrecting the run or completing its item.
func TestLateSignalsAfterHostLostNeverResurrect(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newFleet(t, 1)
	r := f.running()
	f.silent(2*time.Hour, 3*time.Hour)
	if n, err := runs.New(f.s).MarkHostsLost(ctx, time.Hour, time.Now().Add(-3*time.Hour)); err != nil || n != 1 {
		t.Fatalf("lost %d (%v)", n, err)
	}
	for _, kind := range []string{wire.SignalFinished, wire.SignalCompleted, wire.SignalProgress, wire.SignalStarted, wire.SignalFailed} {
		f.signal(r.ID, kind, 1, wire.ResultIgnored)
	}
	got := f.run(r.ID)
	if got.Status != wire.RunFailed || *got.FailureReason != wire.FailHostLost || got.CompletedAt != nil {
		t.Fatalf("the tombstone moved: %+v", got)
	}
	item, _ := f.s.GetWorkItem(ctx, f.task.ID)
	if item.Status == "done" {
		t.Error("a late completed moved the item to done")
	}
	if n := strings.Count(f.topics(r.ID, ""), "run.signal_received"); n != 5 {
		t.Errorf("%d late signals journaled, want 5", n)
	}
}

// TestIgnoredSignalJournalBounded: the late signals of an attempt that
// ended host_lost are ignored and never marked processed, so they can
// come without end; each (attempt, kind) is journaled once, the rest are
// counted in signal_refusals.
func TestIgnoredSignalJournalBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newFleet(t, 1)
	r := f.running()
	f.silent(2*time.Hour, 3*time.Hour)
	if n, err := runs.New(f.s).MarkHostsLost(ctx, time.Hour, time.Now().Add(-3*time.Hour)); err != nil || n != 1 {
		t.Fatalf("lost %d (%v)", n, err)
	}
	kinds := []string{wire.SignalFinished, wire.SignalCompleted, wire.SignalProgress, wire.SignalStarted, wire.SignalFailed}
	const n = 20
	for range n {
		for _, kind := range kinds {
			f.signal(r.ID, kind, 1, wire.ResultIgnored)
		}
	}
	if got := strings.Count(f.topics(r.ID, ""), "run.signal_received"); got != len(kinds) {
		t.Errorf("%d late signals journaled, want %d (one per kind)", got, len(kinds))
	}
	var rows, total int
	if err := f.s.Pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(count), 0) FROM signal_refusals
		WHERE run_id = $1 AND attempt = 1 AND result = 'ignored'`, r.ID).Scan(&rows, &total); err != nil {
		t.Fatal(err)
	}
	if rows != len(kinds) || total != n*len(kinds) {
		t.Errorf("signal_refusals: %d rows counting %d, want %d counting %d", rows, total, len(kinds), n*len(kinds))
	}
}

func TestCLIHang(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	longAgo := time.Now().Add(-3 * time.Hour)
	f := newFleet(t, 2)
	r := f.running()
	quiet := func(output, online time.Duration) {
		f.sql(`UPDATE runs SET last_output_at = now() - $2::interval, started_at = now() - interval '5 hours', last_input_at = now() - interval '5 hours'
			WHERE id = $1`, r.ID, output)
		f.sql(`UPDATE hosts SET last_online_at = now() - $2::interval WHERE id = $1`, f.host.ID, online)
	}
	for _, c := range []struct {
		what           string
		output, online time.Duration
		start          time.Time
		offline        bool
	}{
		{"recent output", 10 * time.Minute, 4 * time.Hour, longAgo, false},
		{"host came online recently", 2 * time.Hour, 10 * time.Minute, longAgo, false},
		{"serve started recently", 2 * time.Hour, 4 * time.Hour, time.Now(), false},
		{"host offline", 2 * time.Hour, 4 * time.Hour, longAgo, true},
	} {
		quiet(c.output, c.online)
		status := "online"
		if c.offline {
			status = "offline"
		}
		f.sql(`UPDATE hosts SET status = $2 WHERE id = $1`, f.host.ID, status)
		if hung, err := runs.New(f.s).FailHungRuns(ctx, time.Hour, 90*time.Second, c.start); err != nil || len(hung) != 0 {
			t.Fatalf("%s: hung %+v (%v)", c.what, hung, err)
		}
	}
	f.sql(`UPDATE hosts SET status = 'online' WHERE id = $1`, f.host.ID)
	quiet(2*time.Hour, 4*time.Hour)
	hung, err := runs.New(f.s).FailHungRuns(ctx, time.Hour, 90*time.Second, longAgo)
	if err != nil || len(hung) != 1 || hung[0] != (store.Hang{RunID: r.ID, Attempt: 1, HostID: f.host.ID}) {
		t.Fatalf("hung %+v (%v)", hung, err)
	}
	got := f.run(r.ID)
	if got.Status != wire.RunPending || got.Attempt != 2 {
		t.Fatalf("after cli_hang: %+v", got)
	}
	if ts := f.topics(r.ID, ""); !strings.Contains(ts, "run.failed run.requeued") {
		t.Errorf("events %s", ts)
	}
	// A disabled host that still heartbeats is online for the hang timer.
	f2 := newFleet(t, 1)
	r2 := f2.running()
	f2.sql(`UPDATE hosts SET disabled = true WHERE id = $1`, f2.host.ID)
	f2.sql(`UPDATE runs SET last_output_at = now() - interval '2 hours', started_at = now() - interval '2 hours', last_input_at = now() - interval '2 hours'
		WHERE id = $1`, r2.ID)
	f2.sql(`UPDATE hosts SET last_online_at = now() - interval '3 hours', last_seen_at = now() WHERE id = $1`, f2.host.ID)
	if hung, _ := runs.New(f2.s).FailHungRuns(ctx, time.Hour, 90*time.Second, longAgo); len(hung) != 1 {
		t.Errorf("disabled live host: hung %+v", hung)
	}
}

// instance_id rules of docs/architecture.md#internal-api: a new id while the pinned one is silent is a
// reinstall; while it is live, a suspect (journaled once, no dispatch).
func TestInstanceReinstallAndSuspect(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newFleet(t, 1)
	reg := func(id string) {
		t.Helper()
		if _, err := f.s.Register(ctx, f.host, wire.Register{HostName: f.host.Name, InstanceID: id, Providers: []string{"shell"}, Protocol: wire.UplinkProtocol}, 90*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clone := "0d0d0d0d-0000-4000-8000-000000000001"
	reg(clone)
	reg(clone)
	h, _ := f.s.GetHost(ctx, f.host.ID)
	if !h.InstanceSuspect || h.InstanceID == nil || *h.InstanceID != instanceA {
		t.Fatalf("after a clone registered: %+v", h)
	}
	if n := strings.Count(f.topics("", f.host.ID), "worker.instance_suspect"); n != 1 {
		t.Errorf("worker.instance_suspect journaled %d times", n)
	}
	// A suspect host gets no new dispatch.
	if _, err := runs.New(f.s).CreateRun(ctx, wire.CreateRun{TaskID: f.task.ID, Provider: "shell"}); err != nil {
		t.Fatal(err)
	}
	if offers, _ := runs.New(f.s).ClaimAndOffer(ctx, func(string) bool { return true }, 10, time.Second); len(offers) != 0 {
		t.Errorf("a suspect host was offered %+v", offers)
	}
	// The pinned instance silent past the offline bound: a reinstall.
	f.sql(`UPDATE hosts SET last_seen_at = now() - interval '10 minutes' WHERE id = $1`, f.host.ID)
	fresh := "0e0e0e0e-0000-4000-8000-000000000002"
	reg(fresh)
	h, _ = f.s.GetHost(ctx, f.host.ID)
	if h.InstanceSuspect || *h.InstanceID != fresh {
		t.Fatalf("after a reinstall: %+v", h)
	}
	if !strings.Contains(f.topics("", f.host.ID), "worker.instance_reinstalled") {
		t.Errorf("host events %s", f.topics("", f.host.ID))
	}
}

// run_state reports: wrapper_died fails the run; an orphan without a run
// is journaled for the host.
func TestRunStateReports(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newFleet(t, 1)
	r := f.running()
	if _, changed, err := runs.New(f.s).RunStateReport(ctx, f.host.ID, wire.RunStateFrame{RunID: r.ID, Attempt: wire.IntPtr(1), State: wire.StateWrapperDied}); err != nil || !changed {
		t.Fatalf("wrapper_died: %v %v", changed, err)
	}
	if got := f.run(r.ID); got.Status != wire.RunFailed || *got.FailureReason != wire.FailWrapperDied {
		t.Errorf("run %+v", got)
	}
	if _, _, err := runs.New(f.s).RunStateReport(ctx, f.host.ID, wire.RunStateFrame{State: wire.StateOrphanDetected, Detail: "session pam-00000000"}); err != nil {
		t.Fatal(err)
	}
	var n int
	f.s.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE topic = 'run.orphan_detected' AND run_id IS NULL AND host_id = $1 AND payload->>'detail' = 'session pam-00000000'`, f.host.ID).Scan(&n)
	if n != 1 {
		t.Errorf("orphan journaled %d times", n)
	}
}

// An orphan report names the run and attempt its session carried: the
// journaled run.orphan_detected has them in its payload, for a run that
// does not exist and for a run of another host alike, and neither run's
// journal gets the event (its run_id column stays empty).
func TestOrphanDetectedCarriesRunID(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newFleet(t, 1)
	other := f.running() // offered to f.host, not to the reporting host
	reporter := f.onlineHost("reporter")
	const ghost = "0badc0de-0000-4000-8000-000000000001"
	for _, c := range []struct{ runID, detail string }{
		{ghost, "session pam-0badc0de"},
		{other.ID, "session pam-" + other.ID[:8]},
	} {
		if _, changed, err := runs.New(f.s).RunStateReport(ctx, reporter.ID, wire.RunStateFrame{State: wire.StateOrphanDetected,
			RunID: c.runID, Attempt: wire.IntPtr(3), Detail: c.detail}); err != nil || changed {
			t.Fatalf("%s: changed %v, %v", c.runID, changed, err)
		}
		var n int
		if err := f.s.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE topic = 'run.orphan_detected' AND run_id IS NULL AND host_id::text = $1
			AND payload->>'run_id' = $2 AND payload->>'attempt' = '3' AND payload->>'detail' = $3 AND payload->>'host_id' = $1`,
			reporter.ID, c.runID, c.detail).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			var got string
			f.s.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(coalesce(run_id::text, '-') || ' ' || payload::text, E'\n'), '') FROM events WHERE topic = 'run.orphan_detected'`).Scan(&got)
			t.Errorf("%s: %d matching events; orphan events:\n%s", c.runID, n, got)
		}
	}
	if got := f.run(other.ID); got.Status != wire.RunRunning || got.Attempt != 1 {
		t.Errorf("the other host's run changed: %+v", got)
	}
	if topics := f.topics(other.ID, ""); strings.Contains(topics, "orphan") {
		t.Errorf("the other host's run got the orphan event in its journal: %s", topics)
	}
}
