package store_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"pam/internal/runs"
	"pam/internal/store"
	"pam/internal/wire"
)

// clocks sets a run's clocks to so long ago: its start and last input,
// its last pane change, and its completion (none when completed < 0);
// its host came online long before all of them.
func (f *fleet) clocks(runID string, input, output, completed time.Duration) {
	f.t.Helper()
	f.sql(`UPDATE runs SET started_at = now() - interval '10 hours', last_input_at = now() - $2::interval,
		last_output_at = now() - $3::interval,
		completed_at = CASE WHEN $4::interval < interval '0' THEN NULL ELSE now() - $4::interval END WHERE id = $1`,
		runID, input, output, completed)
	f.sql(`UPDATE hosts SET status = 'online', last_online_at = now() - interval '12 hours' WHERE id = $1`, f.host.ID)
}

// stopPayloads are the payloads of the run's run.stopped events.
func (f *fleet) stopPayloads(runID string) []map[string]any {
	f.t.Helper()
	rows, err := f.s.Pool.Query(f.t.Context(), `SELECT payload FROM events WHERE run_id = $1 AND topic = 'run.stopped' ORDER BY seq`, runID)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var b []byte
		var p map[string]any
		if err := rows.Scan(&b); err != nil || json.Unmarshal(b, &p) != nil {
			f.t.Fatalf("run.stopped payload %s: %v", b, err)
		}
		out = append(out, p)
	}
	return out
}

// Only a working run hangs (docs/architecture.md#working-waiting-hung):
// one whose turn ended after its last input, one that asks a question
// and one stopped by its usage limit wait, however long their panes stay
// quiet; a completion before the last input is an earlier turn's, and
// that run works (and hangs).
func TestCLIHangOnlyForWorkingRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	longAgo := time.Now().Add(-24 * time.Hour)
	f := newFleet(t, 2)
	const never = -time.Hour
	for _, c := range []struct {
		what      string
		attention string
		input     time.Duration // ago
		completed time.Duration // ago; < 0: none
		hung      bool
	}{
		{"completed after its last input", wire.AttentionNone, 5 * time.Hour, 4 * time.Hour, false},
		{"completed after its last input, then idle", wire.AttentionIdle, 5 * time.Hour, 4 * time.Hour, false},
		{"asks a question", wire.AttentionNeedsInput, 5 * time.Hour, never, false},
		{"stopped by its usage limit", wire.AttentionRateLimited, 5 * time.Hour, never, false},
		{"completed, then its usage limit", wire.AttentionRateLimited, 5 * time.Hour, 4 * time.Hour, false},
		{"completed before its last input: a new turn", wire.AttentionNone, 4 * time.Hour, 5 * time.Hour, true},
		{"never completed", wire.AttentionNone, 5 * time.Hour, never, true},
		{"never completed, idle", wire.AttentionIdle, 5 * time.Hour, never, true},
	} {
		r := f.running()
		if c.attention != wire.AttentionNone {
			if _, changed, err := runs.New(f.s).SetAttention(ctx, r.ID, 1, c.attention, "test"); err != nil || !changed {
				t.Fatalf("%s: set attention: %v", c.what, err)
			}
		}
		f.clocks(r.ID, c.input, 3*time.Hour, c.completed)
		hung, err := runs.New(f.s).FailHungRuns(ctx, time.Hour, 90*time.Second, longAgo)
		if err != nil {
			t.Fatal(err)
		}
		got := f.run(r.ID)
		switch {
		case c.hung && (len(hung) != 1 || hung[0] != store.Hang{RunID: r.ID, Attempt: 1, HostID: f.host.ID}):
			t.Errorf("%s: hung %+v, want this run", c.what, hung)
		case c.hung && (got.Status != wire.RunPending || got.Attempt != 2):
			t.Errorf("%s: after cli_hang %s at attempt %d, want requeued", c.what, got.Status, got.Attempt)
		case !c.hung && (len(hung) != 0 || got.Status != wire.RunRunning || got.Attempt != 1):
			t.Errorf("%s: hung %+v, the run %s at attempt %d; want it running", c.what, hung, got.Status, got.Attempt)
		}
		// Nor is a waiting run stopped as idle by the hang sweep.
		if ts := f.topics(r.ID, ""); !c.hung && (strings.Contains(ts, "run.stopped") || strings.Contains(ts, "run.failed")) {
			t.Errorf("%s: events %s", c.what, ts)
		}
		if _, _, err := runs.New(f.s).StopRun(ctx, r.ID, true); err != nil { // not offered again in the next case
			t.Fatal(err)
		}
	}
}

// A run whose turn ended and that then had no input and no pane change
// for PAM_COMPLETED_STOP_AFTER while its host is online is stopped:
// status stopped at the same attempt, run.stopped with source
// completed_idle, no requeue, the work item as it was. The timer counts
// from the latest of the completion, the last input, the last output,
// the host's last online transition and serve's start; a working run, a
// rate-limited one, and any run with the timer at 0 are never stopped.
func TestCompletedIdleStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	longAgo := time.Now().Add(-24 * time.Hour)
	f := newFleet(t, 3)
	r := f.running()
	f.signal(r.ID, wire.SignalCompleted, 1, wire.ResultApplied)
	// The person moved the item on; the stop must leave it there.
	f.sql(`UPDATE work_items SET status = 'doing' WHERE id = $1`, f.task.ID)
	stops := func(stopAfter time.Duration, start time.Time) []store.IdleStop {
		t.Helper()
		s, err := runs.New(f.s).StopCompletedRuns(ctx, stopAfter, 90*time.Second, start)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	for _, c := range []struct {
		what                     string
		input, output, completed time.Duration // ago
		online                   time.Duration // the host came online so long ago
		start                    time.Time
		offline, rateLimited     bool
		stopAfter                time.Duration
	}{
		{what: "recent output", input: 5 * time.Hour, output: 10 * time.Minute, completed: 4 * time.Hour},
		{what: "recent completion", input: 5 * time.Hour, output: 5 * time.Hour, completed: 10 * time.Minute},
		{what: "completed before the last input: working", input: 2 * time.Hour, output: 2 * time.Hour, completed: 3 * time.Hour},
		{what: "host came online recently", input: 5 * time.Hour, output: 3 * time.Hour, completed: 4 * time.Hour, online: 10 * time.Minute},
		{what: "serve started recently", input: 5 * time.Hour, output: 3 * time.Hour, completed: 4 * time.Hour, start: time.Now()},
		{what: "host offline", input: 5 * time.Hour, output: 3 * time.Hour, completed: 4 * time.Hour, offline: true},
		{what: "rate-limited", input: 5 * time.Hour, output: 3 * time.Hour, completed: 4 * time.Hour, rateLimited: true},
		{what: "stop-after 0: never", input: 5 * time.Hour, output: 3 * time.Hour, completed: 4 * time.Hour, stopAfter: -1},
	} {
		f.clocks(r.ID, c.input, c.output, c.completed)
		if c.online > 0 {
			f.sql(`UPDATE hosts SET last_online_at = now() - $2::interval WHERE id = $1`, f.host.ID, c.online)
		}
		if c.offline {
			f.sql(`UPDATE hosts SET status = 'offline' WHERE id = $1`, f.host.ID)
		}
		if c.rateLimited {
			f.sql(`UPDATE runs SET attention = 'rate_limited', attention_since = now() WHERE id = $1`, r.ID)
		}
		start, stopAfter := longAgo, time.Hour
		if !c.start.IsZero() {
			start = c.start
		}
		if c.stopAfter < 0 {
			stopAfter = 0
		}
		if s := stops(stopAfter, start); len(s) != 0 {
			t.Fatalf("%s: stopped %+v", c.what, s)
		}
		f.sql(`UPDATE runs SET attention = 'none', attention_since = NULL WHERE id = $1`, r.ID)
	}
	if got := f.run(r.ID); got.Status != wire.RunRunning {
		t.Fatalf("the run is %s before its timer", got.Status)
	}

	f.clocks(r.ID, 5*time.Hour, 3*time.Hour, 4*time.Hour)
	f.sql(`UPDATE runs SET attention = 'needs_input', attention_since = now() WHERE id = $1`, r.ID) // "waiting for your input"
	s := stops(time.Hour, longAgo)
	if len(s) != 1 || s[0] != (store.IdleStop{RunID: r.ID, Attempt: 1, HostID: f.host.ID}) {
		t.Fatalf("stopped %+v, want the run", s)
	}
	got := f.run(r.ID)
	if got.Status != wire.RunStopped || got.Attempt != 1 || got.FailureReason != nil || got.Attention != wire.AttentionNone {
		t.Fatalf("after the idle stop: %s at attempt %d, failure %v, attention %s", got.Status, got.Attempt, got.FailureReason, got.Attention)
	}
	if ts := f.topics(r.ID, ""); !strings.HasSuffix(ts, "run.completed run.stopped run.attention") || strings.Contains(ts, "run.requeued") {
		t.Errorf("events %s", ts)
	}
	p := f.stopPayloads(r.ID)
	if len(p) != 1 || p[0]["source"] != wire.StopCompletedIdle || p[0]["from"] != wire.RunRunning || p[0]["force"] != false {
		t.Errorf("run.stopped %v", p)
	}
	if item, _ := f.s.GetWorkItem(ctx, f.task.ID); item.Status != "doing" {
		t.Errorf("the work item moved to %s", item.Status)
	}
	wr, err := f.s.WorkerRun(ctx, f.host.ID, r.ID)
	if err != nil || len(wr.Attempts) != 1 || wr.Attempts[0].Outcome == nil || *wr.Attempts[0].Outcome != wire.RunStopped {
		t.Fatalf("attempt history %+v %v", wr.Attempts, err)
	}
	// Stopped once: the next pass finds nothing.
	if s := stops(time.Hour, longAgo); len(s) != 0 {
		t.Errorf("stopped again: %+v", s)
	}
}

// TouchInput records input into the running run's attempt only: input
// into another attempt, or into a run that ended, records nothing.
func TestTouchInput(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newFleet(t, 2)
	r := f.running()
	// The start is an input, made when the host spawned the CLI.
	var spawning time.Time
	if err := f.s.Pool.QueryRow(ctx, `SELECT spawning_at FROM runs WHERE id = $1`, r.ID).Scan(&spawning); err != nil {
		t.Fatal(err)
	}
	if r.LastInputAt == nil || r.StartedAt == nil || !r.LastInputAt.Equal(spawning) || r.LastInputAt.After(*r.StartedAt) {
		t.Fatalf("spawning at %v, started at %v, last input %v: the start is an input", spawning, r.StartedAt, r.LastInputAt)
	}
	lastInput := func() time.Duration {
		t.Helper()
		var ago time.Duration
		if err := f.s.Pool.QueryRow(ctx, `SELECT now() - last_input_at FROM runs WHERE id = $1`, r.ID).Scan(&ago); err != nil {
			t.Fatal(err)
		}
		return ago
	}
	for _, c := range []struct {
		what    string
		attempt int
		stop    bool
		moves   bool
	}{
		{"another attempt", 2, false, false},
		{"its attempt", 1, false, true},
		{"an ended run", 1, true, false},
	} {
		f.sql(`UPDATE runs SET last_input_at = now() - interval '1 hour' WHERE id = $1`, r.ID)
		if c.stop {
			if _, _, err := runs.New(f.s).StopRun(ctx, r.ID, false); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.s.TouchInput(ctx, r.ID, c.attempt); err != nil {
			t.Fatal(err)
		}
		if moved := lastInput() < time.Minute; moved != c.moves {
			t.Errorf("input into %s: recorded %v, want %v", c.what, moved, c.moves)
		}
	}
}

// Each turn's completion is recorded (docs/architecture.md#working-waiting-hung):
// after input, the next completion is applied and completed_at moves to
// it, so the run waits again rather than hangs; a repeat without input
// between is a duplicate.
func TestCompletionPerTurn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newFleet(t, 2)
	r := f.running()
	f.signal(r.ID, wire.SignalCompleted, 1, wire.ResultApplied)
	f.signal(r.ID, wire.SignalCompleted, 1, wire.ResultDuplicate)
	first := *f.run(r.ID).CompletedAt

	// The next turn: input, and the quiet of a hung CLI since.
	f.sql(`UPDATE runs SET completed_at = now() - interval '3 hours' WHERE id = $1`, r.ID)
	if err := f.s.TouchInput(ctx, r.ID, 1); err != nil {
		t.Fatal(err)
	}
	f.sql(`UPDATE runs SET last_input_at = now() - interval '2 hours', last_output_at = now() - interval '2 hours' WHERE id = $1`, r.ID)
	f.signal(r.ID, wire.SignalCompleted, 1, wire.ResultApplied)
	f.signal(r.ID, wire.SignalCompleted, 1, wire.ResultDuplicate)
	got := f.run(r.ID)
	if got.CompletedAt == nil || !got.CompletedAt.After(first) {
		t.Fatalf("completed_at %v after the second turn, first %v", got.CompletedAt, first)
	}
	if n := strings.Count(f.topics(r.ID, ""), "run.completed"); n != 2 {
		t.Errorf("%d run.completed, want one per turn", n)
	}
	if hung, err := runs.New(f.s).FailHungRuns(ctx, time.Hour, 90*time.Second, time.Now().Add(-24*time.Hour)); err != nil || len(hung) != 0 {
		t.Fatalf("the second turn's completion did not make the run wait: hung %+v (%v)", hung, err)
	}
}

// A completion that overtakes its run's started signal (the CLI's hook
// posts over HTTP, the wrapper's started may come later) ends the first
// turn: the start is an input made when the host spawned the CLI, before
// any hook of it, so the run waits and is not hung.
func TestCompletionBeforeStartedEndsTheTurn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newFleet(t, 2)
	r, err := runs.New(f.s).CreateRun(ctx, wire.CreateRun{TaskID: f.task.ID, Provider: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	if offers, err := runs.New(f.s).ClaimAndOffer(ctx, func(string) bool { return true }, 10, time.Second); err != nil || len(offers) != 1 {
		t.Fatalf("offer: %+v %v", offers, err)
	}
	yes := true
	if _, err := runs.New(f.s).AckOffer(ctx, f.host.ID, wire.RunDispatchAckFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Accepted: &yes}); err != nil {
		t.Fatal(err)
	}
	f.signal(r.ID, wire.SignalCompleted, 1, wire.ResultApplied)
	f.signal(r.ID, wire.SignalStarted, 1, wire.ResultApplied)
	got := f.run(r.ID)
	if got.Status != wire.RunRunning || got.CompletedAt == nil || got.LastInputAt == nil || got.LastInputAt.After(*got.CompletedAt) {
		t.Fatalf("run %s, completed_at %v, last_input_at %v: the start counts after the completion", got.Status, got.CompletedAt, got.LastInputAt)
	}
	// Quiet since long before the hang timeout: a working run would hang.
	f.sql(`UPDATE runs SET started_at = now() - interval '2 hours', last_output_at = now() - interval '2 hours',
		last_input_at = last_input_at - interval '2 hours', completed_at = completed_at - interval '2 hours' WHERE id = $1`, r.ID)
	f.sql(`UPDATE hosts SET status = 'online', last_online_at = now() - interval '12 hours' WHERE id = $1`, f.host.ID)
	if hung, err := runs.New(f.s).FailHungRuns(ctx, time.Hour, 90*time.Second, time.Now().Add(-24*time.Hour)); err != nil || len(hung) != 0 {
		t.Fatalf("a run whose completion overtook its start was hung: %+v (%v)", hung, err)
	}
}
