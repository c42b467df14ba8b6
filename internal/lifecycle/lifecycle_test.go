package lifecycle_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"pam/internal/lifecycle"
	"pam/internal/wire"
)

var (
	now    = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	policy = lifecycle.Policy{MaxAttempts: 3, RestartInitialDelay: 10 * time.Second, RestartMaxDelay: 60 * time.Second}
)

const hostA, hostB = "host-a", "host-b"

// run is a run at attempt 1 of 3 on host A.
func run(status string) lifecycle.Run {
	return lifecycle.Run{Status: status, Attempt: 1, MaxAttempts: 3, HostID: hostA, Provider: "shell", SessionName: "pam-0123abcd"}
}

func with(r lifecycle.Run, f func(*lifecycle.Run)) lifecycle.Run { f(&r); return r }

func last(r lifecycle.Run) lifecycle.Run {
	return with(r, func(r *lifecycle.Run) { r.Attempt, r.MaxAttempts = 3, 3 })
}

func sig(kind, source string, attempt int, payload string) lifecycle.Signal {
	s := lifecycle.Signal{Kind: kind, Source: source, Attempt: &attempt, Sender: hostA}
	if payload != "" {
		s.Payload = json.RawMessage(payload)
	}
	return s
}

func progress(seq int64) lifecycle.Signal {
	s := sig(wire.SignalProgress, wire.SourceProviderHook, 1, "")
	s.Seq = &seq
	return s
}

func from(host string, s lifecycle.Signal) lifecycle.Signal { s.Sender = host; return s }

func ingest(r lifecycle.Run, s lifecycle.Signal) func() (lifecycle.Decision, error) {
	return ingestF(r, s, lifecycle.SignalFacts{})
}

func ingestF(r lifecycle.Run, s lifecycle.Signal, f lifecycle.SignalFacts) func() (lifecycle.Decision, error) {
	return func() (lifecycle.Decision, error) { return lifecycle.IngestSignal(r, s, f, policy, now) }
}

func report(r lifecycle.Run, host string, attempt int, state string) func() (lifecycle.Decision, error) {
	return func() (lifecycle.Decision, error) {
		return lifecycle.StateReport(r, host, &attempt, state, "detail", policy, now)
	}
}

func expired(r lifecycle.Run, t lifecycle.Timer, ever bool, host string) func() (lifecycle.Decision, error) {
	return func() (lifecycle.Decision, error) { return lifecycle.Expired(r, t, ever, host, policy, now), nil }
}

func ok(d lifecycle.Decision) func() (lifecycle.Decision, error) {
	return func() (lifecycle.Decision, error) { return d, nil }
}

// edge is one row: the decision about a run, and what it must be. path is
// the status after each write, in order ("" for a write that keeps the
// status: offer, withdraw; none for a decision that only journals); reason
// the failure_reason of a failed step.
type edge struct {
	name   string
	decide func() (lifecycle.Decision, error)
	err    string // the refusal's code, when refused
	result string // the signal's result
	path   []string
	topics []wire.Topic
	reason string
	stop   bool // StopSender
}

const (
	pending  = wire.RunPending
	spawning = wire.RunSpawning
	running  = wire.RunRunning
	exited   = wire.RunExited
	failed   = wire.RunFailed
	stopped  = wire.RunStopped
)

var (
	tFailed   = wire.TopicRunFailed
	tRequeued = wire.TopicRunRequeued
)

// The run status machine, every edge of it, then what is refused.
var machine = []edge{
	{name: "(new) → pending: admitted", decide: ok(lifecycle.Created("shell", "pam-0123abcd", nil)),
		topics: []wire.Topic{wire.TopicRunCreated}},
	{name: "pending: offered to a host", decide: ok(lifecycle.Offered(with(run(pending), func(r *lifecycle.Run) { r.HostID = "" }), hostA)),
		path: []string{""}, topics: []wire.Topic{wire.TopicRunDispatched}},
	{name: "pending → spawning: offer accepted", decide: func() (lifecycle.Decision, error) {
		return lifecycle.Ack(run(pending), hostA, 1, true, "", true)
	}, path: []string{spawning}, topics: []wire.Topic{wire.TopicRunSpawning}},
	{name: "pending: offer refused, withdrawn", decide: func() (lifecycle.Decision, error) {
		return lifecycle.Ack(run(pending), hostA, 1, false, "at capacity", true)
	}, path: []string{""}, topics: []wire.Topic{wire.TopicRunDispatchWithdrawn}},
	{name: "pending: offer not acked in time, withdrawn", decide: expired(run(pending), lifecycle.AckTimeout, false, ""),
		path: []string{""}, topics: []wire.Topic{wire.TopicRunDispatchWithdrawn}},
	{name: "pending → running: started overtakes the ack", decide: ingest(run(pending), sig(wire.SignalStarted, wire.SourceWrapper, 1, "")),
		result: wire.ResultApplied, path: []string{spawning, running}, topics: []wire.Topic{wire.TopicRunSpawning, wire.TopicRunStarted}},
	{name: "pending → failed: dispatch timeout, never eligible", decide: expired(with(run(pending), func(r *lifecycle.Run) { r.HostID = "" }), lifecycle.DispatchTimeout, false, ""),
		path: []string{failed, pending}, reason: wire.FailNoEligibleHost, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "pending → failed: dispatch timeout, eligible but full", decide: expired(last(with(run(pending), func(r *lifecycle.Run) { r.HostID = "" })), lifecycle.DispatchTimeout, true, ""),
		path: []string{failed}, reason: wire.FailDispatchTimeout, topics: []wire.Topic{tFailed}},
	{name: "pending → failed: dispatch timeout while offered to a host that never acks", decide: expired(last(run(pending)), lifecycle.DispatchTimeout, false, ""),
		path: []string{failed}, reason: wire.FailDispatchTimeout, topics: []wire.Topic{tFailed}},
	{name: "pending → failed: host lost (offered)", decide: expired(last(run(pending)), lifecycle.HostLost, false, hostA),
		path: []string{failed}, reason: wire.FailHostLost, topics: []wire.Topic{tFailed}},
	{name: "pending → stopped", decide: func() (lifecycle.Decision, error) { return lifecycle.Stop(run(pending), false) },
		path: []string{stopped}, topics: []wire.Topic{wire.TopicRunStopped}},
	{name: "spawning → stopped", decide: func() (lifecycle.Decision, error) { return lifecycle.Stop(run(spawning), true) },
		path: []string{stopped}, topics: []wire.Topic{wire.TopicRunStopped}},
	{name: "running → stopped", decide: func() (lifecycle.Decision, error) { return lifecycle.Stop(run(running), false) },
		path: []string{stopped}, topics: []wire.Topic{wire.TopicRunStopped}},
	{name: "running → stopped: its turn ended, then no input and no pane change (completed_idle)", decide: quiet(with(run(running), func(r *lifecycle.Run) {
		r.LastInputAt, r.CompletedAt = now.Add(-3*time.Hour), now.Add(-2*time.Hour)
	}), online(now.Add(-2*time.Hour)), timers), path: []string{stopped}, topics: []wire.Topic{wire.TopicRunStopped}},
	{name: "spawning → running: started", decide: ingest(run(spawning), sig(wire.SignalStarted, wire.SourceWrapper, 1, "")),
		result: wire.ResultApplied, path: []string{running}, topics: []wire.Topic{wire.TopicRunStarted}},
	{name: "spawning → exited: finished 0 overtakes started", decide: ingest(run(spawning), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`)),
		result: wire.ResultApplied, path: []string{exited}, topics: []wire.Topic{wire.TopicRunFinished, wire.TopicRunExited}},
	{name: "spawning → failed: finished non-zero overtakes started", decide: ingest(last(run(spawning)), sig(wire.SignalFinished, wire.SourceWrapper, 3, `{"exit_code":2}`)),
		result: wire.ResultApplied, path: []string{failed}, reason: wire.FailExitNonzero, topics: []wire.Topic{wire.TopicRunFinished, tFailed}},
	{name: "spawning → failed: failed signal", decide: ingest(run(spawning), sig(wire.SignalFailed, wire.SourceWrapper, 1, `{"reason":"spawn_failed"}`)),
		result: wire.ResultApplied, path: []string{failed, pending}, reason: wire.FailSpawnFailed, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "spawning → failed: run_state spawn_failed", decide: report(run(spawning), hostA, 1, wire.StateSpawnFailed),
		path: []string{failed, pending}, reason: wire.FailSpawnFailed, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "spawning → failed: run_state workspace_failed", decide: report(run(spawning), hostA, 1, wire.StateWorkspaceFailed),
		path: []string{failed, pending}, reason: wire.FailWorkspaceFailed, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "spawning → failed: no started within the spawn timeout", decide: expired(run(spawning), lifecycle.SpawnTimeout, false, ""),
		path: []string{failed, pending}, reason: wire.FailSpawnFailed, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "spawning → failed: session lost", decide: report(run(spawning), hostA, 1, wire.StateSessionLost),
		path: []string{failed, pending}, reason: wire.FailSessionLost, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "spawning → failed: host lost", decide: expired(run(spawning), lifecycle.HostLost, false, hostA),
		path: []string{failed, pending}, reason: wire.FailHostLost, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "running → exited: finished 0", decide: ingest(run(running), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`)),
		result: wire.ResultApplied, path: []string{exited}, topics: []wire.Topic{wire.TopicRunFinished, wire.TopicRunExited}},
	{name: "running → failed: finished non-zero, requeued", decide: ingest(run(running), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":1}`)),
		result: wire.ResultApplied, path: []string{failed, pending}, reason: wire.FailExitNonzero, topics: []wire.Topic{wire.TopicRunFinished, tFailed, tRequeued}},
	{name: "running → failed: provider failed", decide: ingest(run(running), sig(wire.SignalFailed, wire.SourceProviderHook, 1, "")),
		result: wire.ResultApplied, path: []string{failed, pending}, reason: wire.FailProviderFailed, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "running → failed: session lost", decide: report(run(running), hostA, 1, wire.StateSessionLost),
		path: []string{failed, pending}, reason: wire.FailSessionLost, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "running → failed: tmux crash", decide: report(run(running), hostA, 1, wire.StateTmuxCrash),
		path: []string{failed, pending}, reason: wire.FailTmuxCrash, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "running → failed: wrapper died", decide: report(run(running), hostA, 1, wire.StateWrapperDied),
		path: []string{failed, pending}, reason: wire.FailWrapperDied, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "running → failed: CLI hang", decide: quiet(with(run(running), func(r *lifecycle.Run) { r.LastInputAt = now.Add(-time.Hour) }), online(now.Add(-time.Hour)), timers),
		path: []string{failed, pending}, reason: wire.FailCLIHang, topics: []wire.Topic{tFailed, tRequeued}},
	{name: "running → failed: host lost, attempts used up", decide: expired(last(run(running)), lifecycle.HostLost, false, hostA),
		path: []string{failed}, reason: wire.FailHostLost, topics: []wire.Topic{tFailed}},
	{name: "failed → pending: retry", decide: func() (lifecycle.Decision, error) { return lifecycle.Retry(last(run(failed)), false, "", now) },
		path: []string{pending}, topics: []wire.Topic{tRequeued}},

	// Refused: anything else changes nothing.
	{name: "stop of exited", decide: func() (lifecycle.Decision, error) { return lifecycle.Stop(run(exited), false) }, err: wire.CodeIllegalTransition},
	{name: "stop of stopped", decide: func() (lifecycle.Decision, error) { return lifecycle.Stop(run(stopped), false) }, err: wire.CodeIllegalTransition},
	{name: "stop of failed", decide: func() (lifecycle.Decision, error) { return lifecycle.Stop(run(failed), false) }, err: wire.CodeIllegalTransition},
	{name: "retry of running", decide: func() (lifecycle.Decision, error) { return lifecycle.Retry(run(running), false, "", now) }, err: wire.CodeIllegalTransition},
	{name: "retry of exited", decide: func() (lifecycle.Decision, error) { return lifecycle.Retry(run(exited), false, "", now) }, err: wire.CodeIllegalTransition},
	{name: "retry of stopped", decide: func() (lifecycle.Decision, error) { return lifecycle.Retry(run(stopped), false, "", now) }, err: wire.CodeIllegalTransition},
	{name: "started on running: ignored", decide: ingest(run(running), sig(wire.SignalStarted, wire.SourceWrapper, 1, "")),
		result: wire.ResultIgnored, topics: []wire.Topic{wire.TopicRunSignalReceived}},
	{name: "finished on exited: ignored", decide: ingest(run(exited), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`)),
		result: wire.ResultIgnored, topics: []wire.Topic{wire.TopicRunSignalReceived}},
	{name: "finished on stopped: the manual stop wins", decide: ingest(with(run(stopped), func(r *lifecycle.Run) { r.StatusSource = wire.SourceManual }), sig(wire.SignalFinished, wire.SourceProviderHook, 1, `{"exit_code":0}`)),
		result: wire.ResultIgnored, topics: []wire.Topic{wire.TopicRunSignalReceived}},
	{name: "a wrapper's failed after a hook's started: lower authority", decide: ingest(with(run(running), func(r *lifecycle.Run) { r.StatusSource = wire.SourceProviderHook }), sig(wire.SignalFailed, wire.SourceWrapper, 1, "")),
		result: wire.ResultIgnored, topics: []wire.Topic{wire.TopicRunSignalReceived}},
	{name: "run_state on a terminal run: nothing", decide: report(run(exited), hostA, 1, wire.StateSessionLost)},
	{name: "timers that no longer apply: nothing", decide: func() (lifecycle.Decision, error) {
		for _, c := range []struct {
			r lifecycle.Run
			t lifecycle.Timer
		}{{run(spawning), lifecycle.AckTimeout}, {run(spawning), lifecycle.DispatchTimeout}, {run(running), lifecycle.SpawnTimeout},
			{run(exited), lifecycle.HostLost}} {
			if d := lifecycle.Expired(c.r, c.t, false, hostA, policy, now); len(d.Steps) > 0 {
				return d, fmt.Errorf("timer %d on %s decided %v", c.t, c.r.Status, d.Topics())
			}
		}
		return lifecycle.Expired(run(running), lifecycle.HostLost, false, hostB, policy, now), nil
	}},
}

// The signal results of the ingest, in the order they are judged.
var signals = []edge{
	{name: "applied", decide: ingest(run(spawning), sig(wire.SignalStarted, wire.SourceWrapper, 1, "")), result: wire.ResultApplied,
		path: []string{running}, topics: []wire.Topic{wire.TopicRunStarted}},
	{name: "stale_attempt", decide: ingest(with(run(running), func(r *lifecycle.Run) { r.Attempt = 2 }), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`)),
		result: wire.ResultStaleAttempt, topics: []wire.Topic{wire.TopicRunStaleSignal}},
	{name: "duplicate one-shot", decide: ingestF(run(running), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`), lifecycle.SignalFacts{Processed: true}),
		result: wire.ResultDuplicate},
	{name: "duplicate completed: no input since the last one", decide: ingestF(turn(exited, -time.Hour, -time.Minute), sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), lifecycle.SignalFacts{Processed: true}),
		result: wire.ResultDuplicate},
	{name: "duplicate completed in the instant of the last input", decide: ingestF(turn(running, -time.Hour, -time.Hour), sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), lifecycle.SignalFacts{Processed: true}),
		result: wire.ResultDuplicate},
	{name: "out_of_order progress", decide: ingestF(run(running), progress(3), lifecycle.SignalFacts{LastProgressSeq: 3}), result: wire.ResultOutOfOrder},
	{name: "progress seq 0 is out of order", decide: ingest(run(running), progress(0)), result: wire.ResultOutOfOrder},
	{name: "progress applied in any status", decide: ingestF(run(exited), progress(4), lifecycle.SignalFacts{LastProgressSeq: 3}), result: wire.ResultApplied,
		topics: []wire.Topic{wire.TopicRunProgress}},
	{name: "stale_offer: the run is on another host", decide: ingest(run(running), from(hostB, sig(wire.SignalStarted, wire.SourceWrapper, 1, ""))),
		result: wire.ResultStaleOffer, stop: true, topics: []wire.Topic{wire.TopicRunSignalReceived}},
	{name: "ignored: late signal after host_lost", decide: ingest(with(last(run(failed)), func(r *lifecycle.Run) { r.FailureReason = wire.FailHostLost; r.Attempt = 1 }), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`)),
		result: wire.ResultIgnored, topics: []wire.Topic{wire.TopicRunSignalReceived}},
	{name: "stale_attempt already journaled for its attempt and kind: counted only", decide: ingestF(with(run(running), func(r *lifecycle.Run) { r.Attempt = 2 }),
		sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`), lifecycle.SignalFacts{Refused: []string{wire.ResultStaleAttempt}}),
		result: wire.ResultStaleAttempt},
	{name: "stale_offer already journaled: counted only, the sender still stops", decide: ingestF(run(running), from(hostB, sig(wire.SignalStarted, wire.SourceWrapper, 1, "")),
		lifecycle.SignalFacts{Refused: []string{wire.ResultStaleOffer}}), result: wire.ResultStaleOffer, stop: true},
	{name: "ignored after host_lost already journaled: counted only", decide: ingestF(with(last(run(failed)), func(r *lifecycle.Run) { r.FailureReason = wire.FailHostLost; r.Attempt = 1 }),
		sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`), lifecycle.SignalFacts{Refused: []string{wire.ResultIgnored}}),
		result: wire.ResultIgnored},
	{name: "stale_attempt journaled although another result was", decide: ingestF(with(run(running), func(r *lifecycle.Run) { r.Attempt = 2 }),
		sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`), lifecycle.SignalFacts{Refused: []string{wire.ResultStaleOffer}}),
		result: wire.ResultStaleAttempt, topics: []wire.Topic{wire.TopicRunStaleSignal}},
	{name: "completed applied in any status, no status write", decide: ingest(run(exited), sig(wire.SignalCompleted, wire.SourceProviderHook, 1, "")),
		result: wire.ResultApplied},
	{name: "completed of the next turn: input came after the last one", decide: ingestF(turn(running, -time.Minute, -time.Hour), sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), lifecycle.SignalFacts{Processed: true}),
		result: wire.ResultApplied},
	{name: "invalid_attempt", decide: ingest(run(running), sig(wire.SignalStarted, wire.SourceWrapper, 2, "")), err: wire.CodeInvalidAttempt},
	{name: "missing_attempt", decide: ingest(run(running), lifecycle.Signal{Kind: wire.SignalStarted, Source: wire.SourceWrapper, Sender: hostA}), err: wire.CodeMissingAttempt},
	{name: "missing_seq", decide: ingest(run(running), sig(wire.SignalProgress, wire.SourceWrapper, 1, "")), err: wire.CodeMissingSeq},
	{name: "finished without an exit code", decide: ingest(run(running), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{}`)), err: wire.CodeValidationFailed},
	{name: "ack of a withdrawn offer: journaled, the sender stops", decide: func() (lifecycle.Decision, error) {
		return lifecycle.Ack(with(run(pending), func(r *lifecycle.Run) { r.HostID = hostB }), hostA, 1, true, "", true)
	}, stop: true, topics: []wire.Topic{wire.TopicRunSignalReceived}},
	{name: "ack from a host never offered the run", decide: func() (lifecycle.Decision, error) {
		return lifecycle.Ack(run(pending), hostB, 1, true, "", false)
	}, err: wire.CodeNotFound},
	{name: "run_state for another attempt: journaled only", decide: report(with(run(running), func(r *lifecycle.Run) { r.Attempt = 2 }), hostA, 1, wire.StateSessionLost),
		topics: []wire.Topic{wire.TopicRunSignalReceived}},
	{name: "stale_session: journaled", decide: report(run(running), hostA, 1, wire.StateStaleSession),
		topics: []wire.Topic{wire.TopicRunStaleSession}},
}

func TestMachine(t *testing.T) { walk(t, machine) }

// Every signal set aside without being processed is recorded as a
// refusal of its own (attempt, kind, result), whether journaled or not,
// so the store counts it; a processed or applied one is not.
func TestStaleSignalJournalBounded(t *testing.T) {
	run2 := with(run(running), func(r *lifecycle.Run) { r.Attempt = 2 })
	lost := with(last(run(failed)), func(r *lifecycle.Run) { r.FailureReason = wire.FailHostLost; r.Attempt = 1 })
	old := progress(7)
	for _, c := range []struct {
		name string
		r    lifecycle.Run
		s    lifecycle.Signal
		want *lifecycle.Refusal
	}{
		{"stale_attempt", run2, sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`), &lifecycle.Refusal{Attempt: 1, Kind: wire.SignalFinished, Result: wire.ResultStaleAttempt}},
		{"stale_attempt progress", run2, old, &lifecycle.Refusal{Attempt: 1, Kind: wire.SignalProgress, Result: wire.ResultStaleAttempt}},
		{"stale_offer", run(running), from(hostB, sig(wire.SignalStarted, wire.SourceWrapper, 1, "")), &lifecycle.Refusal{Attempt: 1, Kind: wire.SignalStarted, Result: wire.ResultStaleOffer}},
		{"ignored after host_lost", lost, sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), &lifecycle.Refusal{Attempt: 1, Kind: wire.SignalCompleted, Result: wire.ResultIgnored}},
		{"ignored after exit: processed, not a refusal", run(exited), sig(wire.SignalFailed, wire.SourceWrapper, 1, ""), nil},
		{"applied", run(spawning), sig(wire.SignalStarted, wire.SourceWrapper, 1, ""), nil},
	} {
		for _, journaled := range []bool{false, true} {
			f := lifecycle.SignalFacts{}
			if journaled && c.want != nil {
				f.Refused = []string{c.want.Result}
			}
			d, err := lifecycle.IngestSignal(c.r, c.s, f, policy, now)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			switch {
			case c.want == nil && d.Refusal != nil:
				t.Errorf("%s: refusal %+v, want none", c.name, *d.Refusal)
			case c.want != nil && (d.Refusal == nil || *d.Refusal != *c.want):
				t.Errorf("%s: refusal %+v, want %+v", c.name, d.Refusal, *c.want)
			case c.want != nil && journaled && len(d.Steps) > 0:
				t.Errorf("%s: journaled again: %v", c.name, d.Topics())
			case c.want != nil && !journaled && len(d.Steps) != 1:
				t.Errorf("%s: first refusal journaled %v, want one event", c.name, d.Topics())
			}
		}
	}
}

func TestSignals(t *testing.T) { walk(t, signals) }

// turn is a run whose last input and completion were so long before now.
func turn(status string, input, completed time.Duration) lifecycle.Run {
	return with(run(status), func(r *lifecycle.Run) { r.LastInputAt, r.CompletedAt = now.Add(input), now.Add(completed) })
}

// A completion ends a turn (docs/architecture.md#working-waiting-hung):
// the attempt's first is marked processed, and each turn's is recorded
// (completed_at becomes the latest), but not marked again; a repeat with
// no input since is a duplicate.
func TestCompletionPerTurn(t *testing.T) {
	for _, c := range []struct {
		name      string
		r         lifecycle.Run
		processed bool
		result    string
		marks     bool
	}{
		{"the attempt's first", run(running), false, wire.ResultApplied, true},
		{"the first of a requeued attempt, an earlier attempt's completion before its start", turn(running, -time.Minute, -time.Hour), false, wire.ResultApplied, true},
		{"the next turn's", turn(running, -time.Minute, -time.Hour), true, wire.ResultApplied, false},
		{"a repeat", turn(running, -time.Hour, -time.Minute), true, wire.ResultDuplicate, false},
	} {
		d, err := lifecycle.IngestSignal(c.r, sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), lifecycle.SignalFacts{Processed: c.processed}, policy, now)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		recorded := d.CompleteSource == wire.SourceProviderHook
		if d.Result != c.result || recorded != (c.result == wire.ResultApplied) || (d.Processed != "") != c.marks || d.Changed() {
			t.Errorf("%s: %+v", c.name, d)
		}
	}
}

func walk(t *testing.T, edges []edge) {
	for _, e := range edges {
		t.Run(e.name, func(t *testing.T) {
			d, err := e.decide()
			if e.err != "" {
				if !wire.HasCode(err, e.err) {
					t.Fatalf("want refusal %s, got %v (decision %+v)", e.err, err, d)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Result != e.result {
				t.Errorf("result %q, want %q", d.Result, e.result)
			}
			var path []string
			reason := ""
			for _, s := range d.Steps {
				if s.Write == lifecycle.ToFailed {
					reason = s.Reason
				}
				if s.Write != lifecycle.JournalOnly {
					path = append(path, s.To)
				}
			}
			if !slices.Equal(path, e.path) {
				t.Errorf("path %q, want %q", path, e.path)
			}
			if reason != e.reason {
				t.Errorf("failure_reason %q, want %q", reason, e.reason)
			}
			if !slices.Equal(d.Topics(), e.topics) {
				t.Errorf("topics %v, want %v", d.Topics(), e.topics)
			}
			if d.StopSender != e.stop {
				t.Errorf("stop sender %v, want %v", d.StopSender, e.stop)
			}
		})
	}
}

// Every write is guarded on the status and attempt it was decided from,
// and each step starts where the previous one ended.
func TestStepsChainAndAreGuarded(t *testing.T) {
	for _, e := range slices.Concat(machine, signals, conversations, quietTable(), quietClocks) {
		d, err := e.decide()
		if err != nil {
			continue
		}
		status := ""
		for i, s := range d.Steps {
			if s.Write == lifecycle.JournalOnly {
				continue
			}
			if s.Attempt < 1 {
				t.Errorf("%s: step %d (%s) unguarded on attempt", e.name, i, s.Write)
			}
			if s.From == "" {
				t.Errorf("%s: step %d (%s) unguarded on status", e.name, i, s.Write)
			}
			if status != "" && s.From != status {
				t.Errorf("%s: step %d starts from %s after a step that ended in %s", e.name, i, s.From, status)
			}
			if s.To != "" {
				status = s.To
			}
		}
	}
}

// The restart policy: run.requeued right after run.failed, attempt + 1,
// next_attempt_at = now + min(initial × 2^(attempt−1), max).
func TestRequeueBackoff(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 4: 60 * time.Second, 7: 60 * time.Second} {
		r := with(run(running), func(r *lifecycle.Run) { r.Attempt, r.MaxAttempts = attempt, 20 })
		a := attempt
		d, err := lifecycle.IngestSignal(r, sig(wire.SignalFinished, wire.SourceWrapper, a, `{"exit_code":1}`), lifecycle.SignalFacts{}, policy, now)
		if err != nil {
			t.Fatal(err)
		}
		st := d.Steps[len(d.Steps)-1]
		if st.Write != lifecycle.Requeue || st.Attempt != attempt || !st.NextAttemptAt.Equal(now.Add(want)) {
			t.Errorf("attempt %d: last step %s at attempt %d due %s, want requeue due %s", attempt, st.Write, st.Attempt, st.NextAttemptAt, now.Add(want))
		}
		if got := st.Events[0].Extra["attempt"]; got != attempt+1 {
			t.Errorf("attempt %d: run.requeued says attempt %v", attempt, got)
		}
	}
	if d, _ := lifecycle.Retry(last(run(failed)), false, "", now); !d.Steps[0].RaiseMax || !d.Steps[0].NextAttemptAt.Equal(now) {
		t.Errorf("retry: %+v, want an immediate requeue raising max_attempts", d.Steps[0])
	}
}

// Every status and every signal kind meets every status: whatever is
// decided stays inside the machine (no write from a terminal status but
// the requeue of a failed one, no step into an unknown status).
func TestNothingLeavesTheMachine(t *testing.T) {
	statuses := []string{pending, spawning, running, exited, failed, stopped}
	kinds := map[string]string{wire.SignalStarted: "", wire.SignalFinished: `{"exit_code":0}`, wire.SignalCompleted: "", wire.SignalFailed: "",
		wire.SignalNeedsInput: `{"agent_session_id":"s1"}`}
	for _, st := range statuses {
		for kind, payload := range kinds {
			if kind == wire.SignalCompleted {
				payload = `{"agent_session_id":"s1"}` // recorded in any status, changing none
			}
			for _, source := range []string{wire.SourceWrapper, wire.SourceProviderHook} {
				d, err := lifecycle.IngestSignal(run(st), sig(kind, source, 1, payload), lifecycle.SignalFacts{}, policy, now)
				if err != nil {
					t.Errorf("%s on %s: %v", kind, st, err)
					continue
				}
				for _, s := range d.Steps {
					if s.Write != lifecycle.JournalOnly && !lifecycle.Active(s.From) && s.Write != lifecycle.Requeue && s.Write != lifecycle.SetAgentSession {
						t.Errorf("%s from %s on %s: a write from a terminal status: %+v", kind, source, st, s)
					}
					if s.To != "" && !slices.Contains(statuses, s.To) {
						t.Errorf("%s on %s: unknown status %q", kind, st, s.To)
					}
				}
				if !lifecycle.Active(st) && d.Changed() {
					t.Errorf("%s on terminal %s changed it: %s", kind, st, strings.Join(stepNames(d), ","))
				}
			}
		}
	}
}

func stepNames(d lifecycle.Decision) []string {
	var n []string
	for _, s := range d.Steps {
		n = append(n, s.Write.String())
	}
	return n
}

func attending(status, attention string) lifecycle.Run {
	return with(run(status), func(r *lifecycle.Run) { r.Attention = attention })
}

func attend(r lifecycle.Run, attempt int, to string) func() (lifecycle.Decision, error) {
	return ok(lifecycle.Attention(r, attempt, to, "test"))
}

func needsInput(r lifecycle.Run) func() (lifecycle.Decision, error) {
	return ingest(r, sig(wire.SignalNeedsInput, wire.SourceProviderHook, 1, ""))
}

func change(r lifecycle.Run, c lifecycle.Change) func() (lifecycle.Decision, error) {
	return ok(lifecycle.ChangeAttention(r, 1, c))
}

func screen(r lifecycle.Run, host, attention string, d *wire.AttentionDetail) func() (lifecycle.Decision, error) {
	return ok(lifecycle.Screen(r, host, 1, attention, d))
}

// asked is a run whose attention is a with the question q (source screen).
func asked(a, q string) lifecycle.Run {
	return with(attending(running, a), func(r *lifecycle.Run) { r.AttentionDetail = question(q) })
}

func question(q string) *wire.AttentionDetail {
	return &wire.AttentionDetail{Source: wire.AttentionSourceScreen, Text: q, Choices: []wire.Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: "No"}}}
}

var overIdle = []string{wire.AttentionIdle}

var tAttention = wire.TopicRunAttention

// Attention (docs/architecture.md#attention): set and cleared only on a
// running run at its attempt, idle never over needs_input, every change
// journaled, and cleared with its own event by whatever takes the run out
// of running. A path of "" is the attention write (no status change).
var attention = []edge{
	{name: "none → idle", decide: attend(attending(running, "none"), 1, wire.AttentionIdle), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "unset reads as none", decide: attend(attending(running, ""), 1, wire.AttentionIdle), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "none → needs_input", decide: attend(attending(running, "none"), 1, wire.AttentionNeedsInput), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "idle → needs_input", decide: attend(attending(running, "idle"), 1, wire.AttentionNeedsInput), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "needs_input → none", decide: attend(attending(running, "needs_input"), 1, wire.AttentionNone), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "idle → none", decide: attend(attending(running, "idle"), 1, wire.AttentionNone), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "needs_input stays: idle says less", decide: attend(attending(running, "needs_input"), 1, wire.AttentionIdle)},
	{name: "the same value: nothing", decide: attend(attending(running, "idle"), 1, wire.AttentionIdle)},
	{name: "none cleared again: nothing", decide: attend(attending(running, "none"), 1, wire.AttentionNone)},
	{name: "another attempt: nothing", decide: attend(with(attending(running, "none"), func(r *lifecycle.Run) { r.Attempt = 2 }), 1, wire.AttentionIdle)},
	{name: "an unknown value: nothing", decide: attend(attending(running, "none"), 1, "bored")},
	{name: "pending: nothing", decide: attend(attending(pending, "none"), 1, wire.AttentionIdle)},
	{name: "spawning: nothing", decide: attend(attending(spawning, "none"), 1, wire.AttentionNeedsInput)},
	{name: "exited: nothing", decide: attend(attending(exited, "none"), 1, wire.AttentionIdle)},
	{name: "failed: nothing", decide: attend(attending(failed, "none"), 1, wire.AttentionIdle)},

	{name: "needs_input signal: applied", decide: needsInput(attending(running, "none")), result: wire.ResultApplied,
		path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "needs_input signal again: applied, nothing written", decide: needsInput(attending(running, "needs_input")), result: wire.ResultApplied},
	{name: "needs_input signal on spawning: ignored, not journaled", decide: needsInput(attending(spawning, "none")), result: wire.ResultIgnored},
	{name: "needs_input signal on exited: ignored, not journaled", decide: needsInput(attending(exited, "none")), result: wire.ResultIgnored},
	{name: "needs_input signal of an older attempt: stale", decide: ingest(with(attending(running, "none"), func(r *lifecycle.Run) { r.Attempt = 2 }), sig(wire.SignalNeedsInput, wire.SourceProviderHook, 1, "")),
		result: wire.ResultStaleAttempt, topics: []wire.Topic{wire.TopicRunStaleSignal}},
	{name: "needs_input signal from a withdrawn host: stale_offer", decide: ingest(attending(running, "none"), from(hostB, sig(wire.SignalNeedsInput, wire.SourceProviderHook, 1, ""))),
		result: wire.ResultStaleOffer, stop: true, topics: []wire.Topic{wire.TopicRunSignalReceived}},

	{name: "run_state idle: idle", decide: report(attending(running, "none"), hostA, 1, wire.StateIdle), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "run_state idle from another host: nothing", decide: report(attending(running, "none"), hostB, 1, wire.StateIdle)},
	{name: "run_state idle of an ended run (hold-open): nothing", decide: report(attending(exited, "none"), hostA, 1, wire.StateIdle)},

	{name: "running → exited clears it", decide: ingest(attending(running, "idle"), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`)),
		result: wire.ResultApplied, path: []string{exited}, topics: []wire.Topic{wire.TopicRunFinished, wire.TopicRunExited, tAttention}},
	{name: "running → failed clears it before the requeue", decide: ingest(attending(running, "needs_input"), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":1}`)),
		result: wire.ResultApplied, path: []string{failed, pending}, reason: wire.FailExitNonzero, topics: []wire.Topic{wire.TopicRunFinished, tFailed, tAttention, tRequeued}},
	{name: "running → stopped clears it", decide: func() (lifecycle.Decision, error) { return lifecycle.Stop(attending(running, "needs_input"), false) },
		path: []string{stopped}, topics: []wire.Topic{wire.TopicRunStopped, tAttention}},
	{name: "running → failed by a timer clears it", decide: expired(attending(running, "idle"), lifecycle.HostLost, false, hostA),
		path: []string{failed, pending}, reason: wire.FailHostLost, topics: []wire.Topic{tFailed, tAttention, tRequeued}},
	{name: "running → failed by a worker report clears it", decide: report(attending(running, "idle"), hostA, 1, wire.StateSessionLost),
		path: []string{failed, pending}, reason: wire.FailSessionLost, topics: []wire.Topic{tFailed, tAttention, tRequeued}},

	{name: "needs_input with its question", decide: change(attending(running, "none"), lifecycle.Change{To: wire.AttentionNeedsInput, Source: "t", Detail: question("Continue?")}),
		path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "the same question again: nothing", decide: change(asked("needs_input", "Continue?"), lifecycle.Change{To: wire.AttentionNeedsInput, Source: "t", Detail: question("Continue?")})},
	{name: "the same attention, nothing known: nothing", decide: change(asked("needs_input", "Continue?"), lifecycle.Change{To: wire.AttentionNeedsInput, Source: "t"})},
	{name: "the same attention, a new question: written, journaled", decide: change(asked("needs_input", "Continue?"), lifecycle.Change{To: wire.AttentionNeedsInput, Source: "t", Detail: question("Delete?")}),
		path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "the same question, new choices: written, not journaled", decide: change(asked("needs_input", "Continue?"),
		lifecycle.Change{To: wire.AttentionNeedsInput, Source: "t", Detail: &wire.AttentionDetail{Text: "Continue?", Choices: []wire.Choice{}}}), path: []string{""}},
	{name: "a pane change clears idle", decide: change(attending(running, "idle"), lifecycle.Change{To: wire.AttentionNone, Source: wire.AttentionSourcePane, Over: overIdle}),
		path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "a pane change leaves needs_input", decide: change(asked("needs_input", "Continue?"), lifecycle.Change{To: wire.AttentionNone, Source: wire.AttentionSourcePane, Over: overIdle})},
	{name: "a pane change leaves rate_limited", decide: change(attending(running, "rate_limited"), lifecycle.Change{To: wire.AttentionNone, Source: wire.AttentionSourcePane, Over: overIdle})},
	{name: "idle over rate_limited: nothing", decide: attend(attending(running, "rate_limited"), 1, wire.AttentionIdle)},

	{name: "screen: a question", decide: screen(attending(running, "none"), hostA, wire.AttentionNeedsInput, question("Continue?")), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "screen: a question over idle", decide: screen(attending(running, "idle"), hostA, wire.AttentionNeedsInput, question("Continue?")), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "screen: a usage limit over a question", decide: screen(asked("needs_input", "Continue?"), hostA, wire.AttentionRateLimited, question("limit reached")), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "screen: the question left", decide: screen(asked("needs_input", "Continue?"), hostA, wire.AttentionNone, nil), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "screen: the limit left", decide: screen(attending(running, "rate_limited"), hostA, wire.AttentionNone, nil), path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "screen: asks nothing over idle: nothing", decide: screen(attending(running, "idle"), hostA, wire.AttentionNone, nil)},
	{name: "screen: asks nothing over none: nothing", decide: screen(attending(running, "none"), hostA, wire.AttentionNone, nil)},
	{name: "screen: from another host: nothing", decide: screen(attending(running, "none"), hostB, wire.AttentionNeedsInput, question("Continue?"))},
	{name: "screen: of another attempt: nothing", decide: screen(with(attending(running, "none"), func(r *lifecycle.Run) { r.Attempt = 2 }), hostA, wire.AttentionNeedsInput, question("Continue?"))},
	{name: "screen: a hold-open session: nothing", decide: screen(attending(exited, "none"), hostA, wire.AttentionNeedsInput, question("Continue?"))},
	{name: "needs_input signal with the screen's question", decide: ingestF(attending(running, "none"), sig(wire.SignalNeedsInput, wire.SourceProviderHook, 1, ""),
		lifecycle.SignalFacts{Screen: question("Continue?")}), result: wire.ResultApplied, path: []string{""}, topics: []wire.Topic{tAttention}},
	{name: "needs_input signal over the screen's same question: nothing", decide: ingestF(asked("needs_input", "Continue?"), sig(wire.SignalNeedsInput, wire.SourceProviderHook, 1, ""),
		lifecycle.SignalFacts{Screen: question("Continue?")}), result: wire.ResultApplied},

	{name: "leaving running without attention journals none", decide: ingest(attending(running, "none"), sig(wire.SignalFinished, wire.SourceWrapper, 1, `{"exit_code":0}`)),
		result: wire.ResultApplied, path: []string{exited}, topics: []wire.Topic{wire.TopicRunFinished, wire.TopicRunExited}},
}

func TestAttention(t *testing.T) { walk(t, attention) }

// The detail an attention write stores: the question with the attention
// that asks it; none, idle and the end of a question store none; a new
// rendering of the same attention keeps who set it; a hook's needs_input
// takes the screen's question as its own, or says who set it.
func TestAttentionDetail(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    lifecycle.Decision
		want *wire.AttentionDetail
	}{
		{"a question", lifecycle.Screen(attending(running, "none"), hostA, 1, wire.AttentionNeedsInput, question("Continue?")), question("Continue?")},
		{"the question left", lifecycle.Screen(asked("needs_input", "Continue?"), hostA, 1, wire.AttentionNone, nil), nil},
		{"idle stores none", lifecycle.ChangeAttention(attending(running, "none"), 1, lifecycle.Change{To: wire.AttentionIdle, Source: "t", Detail: question("x")}), nil},
		{"a new question keeps the source", lifecycle.ChangeAttention(with(asked("needs_input", "Continue?"), func(r *lifecycle.Run) { r.AttentionDetail.Source = wire.SourceProviderHook }),
			1, lifecycle.Change{To: wire.AttentionNeedsInput, Source: "screen", Detail: question("Delete?")}),
			&wire.AttentionDetail{Source: wire.SourceProviderHook, Text: "Delete?", Choices: question("").Choices}},
		{"a hook with the screen's question", must(lifecycle.IngestSignal(attending(running, "idle"), sig(wire.SignalNeedsInput, wire.SourceProviderHook, 1, ""),
			lifecycle.SignalFacts{Screen: question("Continue?")}, policy, now)),
			&wire.AttentionDetail{Source: wire.SourceProviderHook, Text: "Continue?", Choices: question("").Choices}},
		{"a hook without one", must(lifecycle.IngestSignal(attending(running, "none"), sig(wire.SignalNeedsInput, wire.SourceProviderHook, 1, ""),
			lifecycle.SignalFacts{}, policy, now)), &wire.AttentionDetail{Source: wire.SourceProviderHook, Choices: []wire.Choice{}}},
	} {
		if len(tc.d.Steps) != 1 || tc.d.Steps[0].Write != lifecycle.SetAttention {
			t.Errorf("%s: steps %+v", tc.name, tc.d.Steps)
			continue
		}
		if got := tc.d.Steps[0].AttentionDetail; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: detail %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func must(d lifecycle.Decision, err error) lifecycle.Decision {
	if err != nil {
		panic(err)
	}
	return d
}

// Every attention write is guarded on running, the attempt and the value
// it was decided from, journals that change (from, attention, source),
// and never counts as a status change; the clearing that goes with
// leaving running says so (source status, the new status).
func TestAttentionWritesAreGuardedAndJournaled(t *testing.T) {
	for _, e := range slices.Concat(attention, quietTable()) {
		d, err := e.decide()
		if err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		for _, s := range d.Steps {
			for _, ev := range s.Events {
				if ev.Topic != tAttention {
					continue
				}
				p := ev.Extra
				if p["attention"] == nil || p["source"] == nil || p["from"] == nil || (p["attention"] == p["from"] && s.Attention != s.AttentionFrom) {
					t.Errorf("%s: run.attention payload %v", e.name, p)
				}
				if s.Write != lifecycle.SetAttention && (p["source"] != wire.AttentionSourceStatus || p["attention"] != wire.AttentionNone || p["status"] != s.To) {
					t.Errorf("%s: clearing by %s journaled %v", e.name, s.Write, p)
				}
			}
			if s.Write != lifecycle.SetAttention {
				continue
			}
			if s.From != running || s.Attempt != 1 || s.AttentionFrom == "" || s.Attention == "" || s.To != "" {
				t.Errorf("%s: unguarded attention write %+v", e.name, s)
			}
		}
		if d.Final() == "" && d.Changed() {
			t.Errorf("%s: an attention change counts as a status change", e.name)
		}
	}
}

// The pane timers of serve as the tests set them: a working run hangs
// after 30m of quiet, an ended turn is stopped after 1h.
var timers = lifecycle.PaneTimers{Hang: 30 * time.Minute, CompletedStop: time.Hour}

// online is a pane on an online host, its floor (serve start, the host's
// last online transition) long ago, last changed at out.
func online(out time.Time) lifecycle.Pane {
	return lifecycle.Pane{HostOnline: true, LastOutput: out, Floor: now.Add(-48 * time.Hour)}
}

func quiet(r lifecycle.Run, pane lifecycle.Pane, t lifecycle.PaneTimers) func() (lifecycle.Decision, error) {
	return ok(lifecycle.Quiet(r, pane, t, policy, now))
}

// What the pane timers decide about a quiet running run.
type outcome string

const (
	nothing outcome = "nothing"        // working, not quiet long enough; or waiting
	hung    outcome = "cli_hang"       // failed cli_hang, requeued
	stop    outcome = "completed_idle" // stopped, no requeue
)

// quietEdge is the edge an outcome is, for a run with attention att.
func quietEdge(name string, decide func() (lifecycle.Decision, error), att string, o outcome) edge {
	e := edge{name: name, decide: decide}
	var cleared []wire.Topic
	if att != wire.AttentionNone {
		cleared = []wire.Topic{tAttention}
	}
	switch o {
	case hung:
		e.path, e.reason = []string{failed, pending}, wire.FailCLIHang
		e.topics = slices.Concat([]wire.Topic{tFailed}, cleared, []wire.Topic{tRequeued})
	case stop:
		e.path = []string{stopped}
		e.topics = slices.Concat([]wire.Topic{wire.TopicRunStopped}, cleared)
	}
	return e
}

// Working, waiting, hung (docs/architecture.md#working-waiting-hung):
// every attention × completion × input case, its pane quiet for less than
// the hang timeout, for longer than it, and for longer than the stop
// timer too. The rule as a table: what a run whose pane has been quiet
// past both timers comes to. Past the hang timeout only, the hung stay
// hung and the rest wait; before it, nothing happens to anyone.
var pastBoth = map[string]map[string]outcome{
	// completion: none, before the last input (a new turn, or an earlier
	// attempt's), after the last input (the turn ended).
	wire.AttentionNone:        {"none": hung, "before": hung, "after": stop},
	wire.AttentionIdle:        {"none": hung, "before": hung, "after": stop},
	wire.AttentionNeedsInput:  {"none": nothing, "before": nothing, "after": stop},
	wire.AttentionRateLimited: {"none": nothing, "before": nothing, "after": nothing},
}

func quietTable() []edge {
	var edges []edge
	for _, att := range []string{wire.AttentionNone, wire.AttentionIdle, wire.AttentionNeedsInput, wire.AttentionRateLimited} {
		for _, completion := range []string{"none", "before", "after"} {
			for _, input := range []string{"start", "keys"} {
				for _, q := range []struct {
					name string
					d    time.Duration
				}{{"quiet 10m", 10 * time.Minute}, {"quiet 45m", 45 * time.Minute}, {"quiet 2h", 2 * time.Hour}} {
					// The pane's last change is the latest clock, q.d ago;
					// the start 20m before it, keys 10m before it.
					out := now.Add(-q.d)
					r := attending(running, att)
					r.LastInputAt = out.Add(-20 * time.Minute)
					if input == "keys" {
						r.LastInputAt = out.Add(-10 * time.Minute)
					}
					switch completion {
					case "before":
						r.CompletedAt = r.LastInputAt.Add(-time.Minute)
					case "after":
						r.CompletedAt = r.LastInputAt.Add(5 * time.Minute)
					}
					want := pastBoth[att][completion]
					switch {
					case q.d < timers.Hang:
						want = nothing
					case q.d < timers.CompletedStop && want == stop:
						want = nothing
					}
					name := fmt.Sprintf("attention %s, completion %s, input %s, %s: %s", att, completion, input, q.name, want)
					edges = append(edges, quietEdge(name, quiet(r, online(out), timers), att, want))
				}
			}
		}
	}
	return edges
}

// The clocks: what each timer counts from, and when neither applies.
var quietClocks = []edge{
	quietEdge("the hang timer counts from the latest input, not the last output",
		quiet(with(run(running), func(r *lifecycle.Run) { r.LastInputAt = now.Add(-20 * time.Minute) }), online(now.Add(-2*time.Hour)), timers), "none", nothing),
	quietEdge("the stop timer counts from the completion, not the output before it",
		quiet(with(run(running), func(r *lifecycle.Run) {
			r.LastInputAt, r.CompletedAt = now.Add(-3*time.Hour), now.Add(-50*time.Minute)
		}), online(now.Add(-2*time.Hour)), timers), "none", nothing),
	quietEdge("the stop timer counts from a pane change after the completion",
		quiet(with(run(running), func(r *lifecycle.Run) {
			r.LastInputAt, r.CompletedAt = now.Add(-3*time.Hour), now.Add(-2*time.Hour)
		}), online(now.Add(-50*time.Minute)), timers), "none", nothing),
	quietEdge("a completion in the same instant as the input ends the turn",
		quiet(with(run(running), func(r *lifecycle.Run) { r.LastInputAt = now.Add(-2 * time.Hour); r.CompletedAt = r.LastInputAt }),
			online(now.Add(-2*time.Hour)), timers), "none", stop),
	quietEdge("the floor holds the hang timer back (serve or the host came back 10m ago)",
		quiet(with(run(running), func(r *lifecycle.Run) { r.LastInputAt = now.Add(-3 * time.Hour) }),
			lifecycle.Pane{HostOnline: true, LastOutput: now.Add(-2 * time.Hour), Floor: now.Add(-10 * time.Minute)}, timers), "none", nothing),
	quietEdge("the floor holds the stop timer back",
		quiet(with(run(running), func(r *lifecycle.Run) {
			r.LastInputAt, r.CompletedAt = now.Add(-3*time.Hour), now.Add(-3*time.Hour)
		}), lifecycle.Pane{HostOnline: true, LastOutput: now.Add(-2 * time.Hour), Floor: now.Add(-10 * time.Minute)}, timers), "none", nothing),
	quietEdge("exactly the hang timeout: not yet",
		quiet(with(run(running), func(r *lifecycle.Run) { r.LastInputAt = now.Add(-time.Hour) }), online(now.Add(-30*time.Minute)), timers), "none", nothing),
	quietEdge("exactly the stop timer: not yet",
		quiet(with(run(running), func(r *lifecycle.Run) {
			r.LastInputAt, r.CompletedAt = now.Add(-2*time.Hour), now.Add(-time.Hour)
		}), online(time.Time{}), timers), "none", nothing),
	quietEdge("no output ever: the hang timer counts from the start",
		quiet(with(run(running), func(r *lifecycle.Run) { r.LastInputAt = now.Add(-31 * time.Minute) }), online(time.Time{}), timers), "none", hung),
	quietEdge("stop timer 0 (PAM_COMPLETED_STOP_AFTER=0): an ended turn waits forever",
		quiet(with(run(running), func(r *lifecycle.Run) {
			r.LastInputAt, r.CompletedAt = now.Add(-48*time.Hour), now.Add(-47*time.Hour)
		}), online(time.Time{}), lifecycle.PaneTimers{Hang: timers.Hang}), "none", nothing),
	quietEdge("hang timer 0: the stop sweep alone never fails a working run",
		quiet(with(run(running), func(r *lifecycle.Run) { r.LastInputAt = now.Add(-48 * time.Hour) }), online(time.Time{}),
			lifecycle.PaneTimers{CompletedStop: timers.CompletedStop}), "none", nothing),
	quietEdge("hang timer 0: an ended turn is still stopped",
		quiet(with(run(running), func(r *lifecycle.Run) {
			r.LastInputAt, r.CompletedAt = now.Add(-48*time.Hour), now.Add(-47*time.Hour)
		}), online(time.Time{}), lifecycle.PaneTimers{CompletedStop: timers.CompletedStop}), "none", stop),
	quietEdge("host offline: a working run is not hung",
		quiet(with(run(running), func(r *lifecycle.Run) { r.LastInputAt = now.Add(-48 * time.Hour) }), lifecycle.Pane{}, timers), "none", nothing),
	quietEdge("host offline: an ended turn is not stopped",
		quiet(with(run(running), func(r *lifecycle.Run) {
			r.LastInputAt, r.CompletedAt = now.Add(-48*time.Hour), now.Add(-47*time.Hour)
		}), lifecycle.Pane{}, timers), "none", nothing),
	{name: "hung at its last attempt: failed, not requeued",
		decide: quiet(last(with(run(running), func(r *lifecycle.Run) { r.LastInputAt = now.Add(-48 * time.Hour) })), online(time.Time{}), timers),
		path:   []string{failed}, reason: wire.FailCLIHang, topics: []wire.Topic{tFailed}},
}

func TestWorkingWaitingHung(t *testing.T) {
	walk(t, quietTable())
	walk(t, quietClocks)
	// Neither timer touches a run that is not running.
	for _, st := range []string{pending, spawning, exited, failed, stopped} {
		for _, completed := range []time.Time{{}, now.Add(-47 * time.Hour)} {
			r := with(run(st), func(r *lifecycle.Run) { r.LastInputAt, r.CompletedAt = now.Add(-48*time.Hour), completed })
			if d := lifecycle.Quiet(r, online(time.Time{}), timers, policy, now); len(d.Steps) > 0 {
				t.Errorf("%s, completed %v: %v", st, !completed.IsZero(), d.Topics())
			}
		}
	}
}

// Waiting is the rule the hang timer asks (and the API may show): a
// question, a usage limit, or a turn that ended since the last input.
func TestWaiting(t *testing.T) {
	input := now.Add(-time.Hour)
	for _, c := range []struct {
		attention string
		completed time.Time
		waiting   bool
	}{
		{wire.AttentionNone, time.Time{}, false},
		{wire.AttentionIdle, time.Time{}, false},
		{"", time.Time{}, false},
		{wire.AttentionNeedsInput, time.Time{}, true},
		{wire.AttentionRateLimited, time.Time{}, true},
		{wire.AttentionNone, input.Add(-time.Second), false},
		{wire.AttentionNone, input, true},
		{wire.AttentionIdle, input.Add(time.Second), true},
	} {
		r := with(run(running), func(r *lifecycle.Run) { r.Attention, r.LastInputAt, r.CompletedAt = c.attention, input, c.completed })
		if got := lifecycle.Waiting(r); got != c.waiting {
			t.Errorf("attention %q, completed %s: waiting %v, want %v", c.attention, c.completed, got, c.waiting)
		}
	}
}

// The stop is the orchestrator's, guarded on running and the attempt,
// and says why: source completed_idle, from running, since when.
func TestCompletedIdleStop(t *testing.T) {
	r := with(attending(running, wire.AttentionNeedsInput), func(r *lifecycle.Run) {
		r.LastInputAt, r.CompletedAt = now.Add(-3*time.Hour), now.Add(-2*time.Hour)
	})
	d := lifecycle.Quiet(r, online(now.Add(-90*time.Minute)), timers, policy, now)
	if len(d.Steps) != 1 {
		t.Fatalf("steps %v", stepNames(d))
	}
	st := d.Steps[0]
	if st.Write != lifecycle.ToStopped || st.From != running || st.Attempt != 1 || st.Source != "" || st.To != stopped {
		t.Errorf("step %+v", st)
	}
	p := st.Events[0].Extra
	if p["source"] != wire.StopCompletedIdle || p["from"] != running || p["force"] != false || p["idle_since"] != now.Add(-90*time.Minute) {
		t.Errorf("run.stopped %v", p)
	}
	if !d.Changed() || d.Final() != stopped {
		t.Errorf("changed %v, final %q", d.Changed(), d.Final())
	}
}

func sessionOf(r lifecycle.Run, id string) lifecycle.Run {
	return with(r, func(r *lifecycle.Run) { r.AgentSessionID = id })
}

func withSession(s lifecycle.Signal, id string) lifecycle.Signal {
	s.Payload = json.RawMessage(`{"agent_session_id":"` + id + `"}`)
	return s
}

var tSession = wire.TopicRunAgentSession

// Conversations (docs/architecture.md#resume-and-continue): the session
// id a hook reports is recorded once and again when it changes, in any
// status of the current attempt and before whatever the signal does; a
// retry resumes unless fresh; a continue needs an ended run whose
// conversation can be resumed.
var conversations = []edge{
	{name: "a hook's session id is recorded", decide: ingest(run(running), withSession(sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), "s1")),
		result: wire.ResultApplied, path: []string{""}, topics: []wire.Topic{tSession}},
	{name: "the same session again: nothing more", decide: ingest(sessionOf(run(running), "s1"), withSession(progress(1), "s1")),
		result: wire.ResultApplied, topics: []wire.Topic{wire.TopicRunProgress}},
	{name: "a changed session (a /clear) is recorded again", decide: ingest(sessionOf(run(running), "s1"), withSession(progress(1), "s2")),
		result: wire.ResultApplied, path: []string{""}, topics: []wire.Topic{tSession, wire.TopicRunProgress}},
	{name: "recorded after the CLI exited", decide: ingest(run(exited), withSession(sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), "s1")),
		result: wire.ResultApplied, path: []string{""}, topics: []wire.Topic{tSession}},
	{name: "recorded with a duplicate", decide: ingestF(run(running), withSession(sig(wire.SignalStarted, wire.SourceWrapper, 1, ""), "s1"), lifecycle.SignalFacts{Processed: true}),
		result: wire.ResultDuplicate, path: []string{""}, topics: []wire.Topic{tSession}},
	{name: "recorded with a needs_input that a stopped run ignores", decide: ingest(run(stopped), withSession(sig(wire.SignalNeedsInput, wire.SourceProviderHook, 1, ""), "s1")),
		result: wire.ResultIgnored, path: []string{""}, topics: []wire.Topic{tSession}},
	{name: "recorded before the failure it came with requeues the run", decide: ingest(run(running), withSession(sig(wire.SignalFailed, wire.SourceProviderHook, 1, ""), "s1")),
		result: wire.ResultApplied, path: []string{"", failed, pending}, reason: wire.FailProviderFailed, topics: []wire.Topic{tSession, tFailed, tRequeued}},
	{name: "an older attempt's session is not recorded", decide: ingest(with(run(running), func(r *lifecycle.Run) { r.Attempt = 2 }), withSession(sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), "s1")),
		result: wire.ResultStaleAttempt, topics: []wire.Topic{wire.TopicRunStaleSignal}},
	{name: "a withdrawn offer's session is not recorded", decide: ingest(run(running), from(hostB, withSession(sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), "s1"))),
		result: wire.ResultStaleOffer, stop: true, topics: []wire.Topic{wire.TopicRunSignalReceived}},
	{name: "a session after host_lost is not recorded", decide: ingest(with(last(run(failed)), func(r *lifecycle.Run) { r.FailureReason = wire.FailHostLost; r.Attempt = 1 }),
		withSession(sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), "s1")), result: wire.ResultIgnored, topics: []wire.Topic{wire.TopicRunSignalReceived}},
	{name: "a bad session id is refused", decide: ingest(run(running), withSession(sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), "-rf")), err: wire.CodeValidationFailed},
	{name: "a session id that is no string is refused", decide: ingest(run(running), sig(wire.SignalCompleted, wire.SourceProviderHook, 1, `{"agent_session_id":7}`)), err: wire.CodeValidationFailed},

	{name: "retry resumes the conversation", decide: func() (lifecycle.Decision, error) {
		return lifecycle.Retry(sessionOf(last(run(failed)), "s1"), false, "", now)
	},
		path: []string{pending}, topics: []wire.Topic{tRequeued}},
	{name: "retry fresh forgets it", decide: func() (lifecycle.Decision, error) {
		return lifecycle.Retry(sessionOf(last(run(failed)), "s1"), true, "", now)
	},
		path: []string{pending}, topics: []wire.Topic{tRequeued}},
	{name: "retry of a continued run", decide: func() (lifecycle.Decision, error) {
		return lifecycle.Retry(sessionOf(last(run(failed)), "s1"), false, "run-2", now)
	},
		err: wire.CodeIllegalTransition},

	{name: "continue of an exited run", decide: cont(sessionOf(run(exited), "s1"), lifecycle.ContinueFacts{Host: hostA, Resumable: true}), topics: []wire.Topic{wire.TopicRunContinued}},
	{name: "continue of a stopped run", decide: cont(sessionOf(run(stopped), "s1"), lifecycle.ContinueFacts{Host: hostA, Resumable: true}), topics: []wire.Topic{wire.TopicRunContinued}},
	{name: "continue of a failed run", decide: cont(sessionOf(last(run(failed)), "s1"), lifecycle.ContinueFacts{Host: hostA, Resumable: true}), topics: []wire.Topic{wire.TopicRunContinued}},
	{name: "continue of a pending run", decide: cont(sessionOf(run(pending), "s1"), lifecycle.ContinueFacts{Host: hostA, Resumable: true}), err: wire.CodeIllegalTransition},
	{name: "continue of a spawning run", decide: cont(sessionOf(run(spawning), "s1"), lifecycle.ContinueFacts{Host: hostA, Resumable: true}), err: wire.CodeIllegalTransition},
	{name: "continue of a running run", decide: cont(sessionOf(run(running), "s1"), lifecycle.ContinueFacts{Host: hostA, Resumable: true}), err: wire.CodeIllegalTransition},
	{name: "continue of a run continued already", decide: cont(sessionOf(run(exited), "s1"), lifecycle.ContinueFacts{Host: hostA, Resumable: true, ContinuedBy: "run-2"}), err: wire.CodeIllegalTransition},
	{name: "continue without an agent session", decide: cont(run(exited), lifecycle.ContinueFacts{Host: hostA, Resumable: true}), err: wire.CodeNotResumable},
	{name: "continue of a provider without resume_args", decide: cont(sessionOf(run(exited), "s1"), lifecycle.ContinueFacts{Host: hostA}), err: wire.CodeNotResumable},
	{name: "continue after the worktree was removed", decide: cont(sessionOf(run(exited), "s1"), lifecycle.ContinueFacts{Host: hostA, Resumable: true, WorktreeGone: true}), err: wire.CodeNotResumable},
	{name: "continue of a run never placed", decide: cont(with(sessionOf(run(exited), "s1"), func(r *lifecycle.Run) { r.HostID = "" }), lifecycle.ContinueFacts{Resumable: true}), err: wire.CodeNotResumable},
}

func cont(r lifecycle.Run, f lifecycle.ContinueFacts) func() (lifecycle.Decision, error) {
	return func() (lifecycle.Decision, error) { return lifecycle.Continue(r, f, "run-2") }
}

func TestConversations(t *testing.T) { walk(t, conversations) }

// What the conversation steps write and journal: the session and the one
// it replaces, guarded on the status and attempt; a fresh retry's
// requeue forgets the conversation and says so; run.continued names the
// new run; a continuation's run.created names the run it continues.
func TestConversationSteps(t *testing.T) {
	d, _ := lifecycle.IngestSignal(sessionOf(run(exited), "s1"), withSession(sig(wire.SignalCompleted, wire.SourceProviderHook, 1, ""), "s2"), lifecycle.SignalFacts{}, policy, now)
	st := d.Steps[0]
	if st.Write != lifecycle.SetAgentSession || st.AgentSessionID != "s2" || st.From != exited || st.Attempt != 1 || d.Changed() {
		t.Errorf("step %+v (changed %v)", st, d.Changed())
	}
	if got := st.Events[0].Extra; got["agent_session_id"] != "s2" || got["from"] != "s1" {
		t.Errorf("run.agent_session %v", got)
	}
	if d.CompleteSource != wire.SourceProviderHook {
		t.Errorf("the completion itself was lost: %+v", d)
	}
	d, _ = lifecycle.IngestSignal(run(running), withSession(progress(1), "s1"), lifecycle.SignalFacts{}, policy, now)
	if got := d.Steps[0].Events[0].Extra; got["from"] != nil {
		t.Errorf("a first session replaces %v", got["from"])
	}
	for fresh, want := range map[bool]bool{false: false, true: true} {
		d, _ := lifecycle.Retry(sessionOf(last(run(failed)), "s1"), fresh, "", now)
		if st := d.Steps[0]; st.Fresh != want || (st.Events[0].Extra["fresh"] == true) != want {
			t.Errorf("retry fresh=%v: %+v", fresh, st)
		}
	}
	d, _ = lifecycle.Continue(sessionOf(run(exited), "s1"), lifecycle.ContinueFacts{Host: hostA, Resumable: true}, "run-2")
	if got := d.Steps[0].Events[0].Extra; got["run_id"] != "run-2" {
		t.Errorf("run.continued %v", got)
	}
	d = lifecycle.ContinuationCreated("claude", "pam-0b0b0b0b", hostA, "run-1")
	if got := d.Steps[0].Events[0].Extra; got["continues_run_id"] != "run-1" || *(got["target_host_id"].(*string)) != hostA {
		t.Errorf("run.created %v", got)
	}
}
