package store_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"pam/internal/runs"
	"pam/internal/store"
	"pam/internal/wire"
)

// progressLog is a run's run.progress events as "seq/coalesced", and the
// journal's topics of the run, in order.
func (f *fleet) progressLog(runID string) string {
	f.t.Helper()
	rows, err := f.s.Pool.Query(f.t.Context(), `SELECT payload FROM events WHERE run_id = $1 AND topic = 'run.progress' ORDER BY seq`, runID)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	out := ""
	for rows.Next() {
		var p struct {
			Seq       int64 `json:"seq"`
			Coalesced *int  `json:"coalesced"`
		}
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			f.t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &p); err != nil || p.Coalesced == nil {
			f.t.Fatalf("run.progress payload %s (%v)", raw, err)
		}
		out += fmt.Sprintf(" %d/%d", p.Seq, *p.Coalesced)
	}
	return out
}

// TestProgressWindowAcrossServers: the once-a-second window of
// run.progress lives in the run row, so two servers on one database
// (two Stores, each with its own clock and no memory in common) keep it
// together: a progress within the second is held whichever took the
// last one, the trailing flush of either journals it once the second
// has passed, a batch of progress signals keeps the window too, and a
// status change journals the held progress before itself.
func TestProgressWindowAcrossServers(t *testing.T) {
	f := newFleet(t, 1)
	r := f.running()
	t0 := time.Now()
	var now1, now2 time.Time
	f.s.Clock = func() time.Time { return now1 }
	other := &store.Store{Pool: f.s.Pool, Policy: f.s.Policy, Clock: func() time.Time { return now2 }}
	progress := func(s *store.Store, at *time.Time, when time.Duration, seq int64) {
		t.Helper()
		*at = t0.Add(when)
		sig := wire.Signal{Kind: wire.SignalProgress, Attempt: wire.IntPtr(1), Seq: &seq, Source: wire.SourceProviderHook}
		if res, err := runs.New(s).IngestSignal(t.Context(), r.ID, f.host.ID, sig); err != nil || res.Result != wire.ResultApplied {
			t.Fatalf("progress %d: %+v %v", seq, res, err)
		}
	}
	flush := func(s *store.Store, at *time.Time, when time.Duration, want int) {
		t.Helper()
		*at = t0.Add(when)
		if n, err := s.FlushProgress(t.Context()); err != nil || n != want {
			t.Fatalf("flush at %v: %d %v, want %d", when, n, err, want)
		}
	}
	progress(f.s, &now1, 0, 1)
	progress(other, &now2, 500*time.Millisecond, 2)
	progress(f.s, &now1, 600*time.Millisecond, 3)
	flush(other, &now2, 900*time.Millisecond, 0)
	if got := f.progressLog(r.ID); got != " 1/0" {
		t.Fatalf("within the first second: %q, want only seq 1", got)
	}
	flush(f.s, &now1, 1700*time.Millisecond, 1)
	if got := f.progressLog(r.ID); got != " 1/0 3/1" {
		t.Fatalf("after the trailing flush: %q, want seq 3 standing for 2 and itself", got)
	}

	// A batch (group commit) keeps the window: the first after the
	// second is journaled, the rest held.
	now1 = t0.Add(3 * time.Second)
	var batch []store.SignalIn
	for seq := int64(4); seq <= 6; seq++ {
		batch = append(batch, store.SignalIn{RunID: r.ID, Sender: f.host.ID,
			Signal: wire.Signal{Kind: wire.SignalProgress, Attempt: wire.IntPtr(1), Seq: &seq, Source: wire.SourceProviderHook}})
	}
	for i, o := range func() []store.SignalOut { out, _ := runs.New(f.s).IngestSignals(t.Context(), batch); return out }() {
		if o.Err != nil || o.Result != wire.ResultApplied {
			t.Fatalf("batch signal %d: %+v", i, o)
		}
	}
	progress(other, &now2, 3500*time.Millisecond, 7)
	if got := f.progressLog(r.ID); got != " 1/0 3/1 4/0" {
		t.Fatalf("after a batch: %q", got)
	}
	// The run ends within the second: its held progress is journaled
	// before its end.
	now1 = t0.Add(3600 * time.Millisecond)
	f.signal(r.ID, wire.SignalFinished, 1, wire.ResultApplied)
	if got := f.progressLog(r.ID); got != " 1/0 3/1 4/0 7/2" {
		t.Fatalf("after finished: %q, want seq 7 standing for 5, 6 and itself", got)
	}
	if got := f.topics(r.ID, ""); !strings.HasSuffix(got, "run.progress run.progress run.finished run.exited") {
		t.Errorf("journal %q: the held progress is not before the run's end", got)
	}
	flush(other, &now2, 10*time.Second, 0)
}

// TestAgentProgressKeepsTheWindow: pam's report_progress tool goes
// through the same once-a-second window as a progress signal: a second
// call within the second is held (not journaled), and the trailing
// flush journals it with the agent as its actor and the count of what it
// stands for.
func TestAgentProgressKeepsTheWindow(t *testing.T) {
	f := newFleet(t, 1)
	r := f.running()
	t0 := time.Now()
	now := t0
	f.s.Clock = func() time.Time { return now }
	sc, err := f.s.AgentScope(t.Context(), r.ID, f.host.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, at := range []time.Duration{0, 200 * time.Millisecond, 400 * time.Millisecond} {
		now = t0.Add(at)
		if err := f.s.AgentProgress(t.Context(), sc, fmt.Sprintf("step %d", i)); err != nil {
			t.Fatalf("progress %d: %v", i, err)
		}
	}
	texts := func() string {
		t.Helper()
		rows, err := f.s.Pool.Query(t.Context(), `SELECT coalesce(actor, ''), payload->>'text', payload->>'coalesced', payload ? '_actor'
			FROM events WHERE run_id = $1 AND topic = 'run.progress' ORDER BY seq`, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := ""
		for rows.Next() {
			var actor, text, coalesced string
			var leaked bool
			if err := rows.Scan(&actor, &text, &coalesced, &leaked); err != nil {
				t.Fatal(err)
			}
			if actor != wire.AgentActor(r.ID) || leaked {
				t.Fatalf("run.progress %q: actor %q, held actor in the payload %v", text, actor, leaked)
			}
			out += fmt.Sprintf(" %s/%s", text, coalesced)
		}
		return out
	}
	if got := texts(); got != " step 0/0" {
		t.Fatalf("within the second: %q, want only the first", got)
	}
	now = t0.Add(1500 * time.Millisecond)
	if n, err := f.s.FlushProgress(t.Context()); err != nil || n != 1 {
		t.Fatalf("flush: %d %v", n, err)
	}
	if got := texts(); got != " step 0/0 step 2/1" {
		t.Fatalf("after the flush: %q, want the newest standing for one other", got)
	}
}
