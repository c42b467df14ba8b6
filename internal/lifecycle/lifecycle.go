// Package lifecycle decides how a run moves through its status machine:
// pure functions from (the run as it is, what happened, now) to a
// Decision — the guarded status writes to make, in order, and the events
// that journal each (the data of package runwrite). It reads no database
// and no clock but the one passed in; the caller loads the facts through
// store, calls a function here, and has store apply the decision, in one
// transaction. The whole machine is one table test
// (lifecycle_test.go) that walks every edge.
//
// The rules are those of docs/architecture.md, "The run status machine"
// and "Signals": terminal statuses are final, override authority is
// manual > provider-hook > wrapper, a failure with attempts left is
// requeued in the same decision with exponential backoff, and a signal is
// judged first by its epoch (attempt), then by who sent it, then by
// dedup/ordering, and only then by the status it would change.
//
// A run's attention (docs/architecture.md#attention) is decided here too:
// it changes only while the run is running, and a step that takes the run
// out of running journals its clearing in the same decision. So is what
// a quiet running run comes to (Quiet,
// docs/architecture.md#working-waiting-hung): a working one hangs, a
// waiting one waits, one idle after its turn ended is stopped.
//
// One file past 600 lines on purpose: every transition of the machine and
// its guard read together, in the order of the table test that walks them.
package lifecycle

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"pam/internal/runwrite"
	"pam/internal/wire"
)

// The data of a decision lives in package runwrite, which store applies
// without importing the rules here; these names keep it read as
// lifecycle's.
type (
	Write        = runwrite.Write
	Event        = runwrite.Event
	Step         = runwrite.Step
	Decision     = runwrite.Decision
	Policy       = runwrite.Policy
	ProgressNote = runwrite.ProgressNote
	Refusal      = runwrite.Refusal
	SignalFacts  = runwrite.SignalFacts
)

// The writes (runwrite.Write).
const (
	JournalOnly     = runwrite.JournalOnly
	Offer           = runwrite.Offer
	Withdraw        = runwrite.Withdraw
	ToSpawning      = runwrite.ToSpawning
	ToRunning       = runwrite.ToRunning
	ToExited        = runwrite.ToExited
	ToFailed        = runwrite.ToFailed
	ToStopped       = runwrite.ToStopped
	Requeue         = runwrite.Requeue
	SetAttention    = runwrite.SetAttention
	SetAgentSession = runwrite.SetAgentSession
)

// ProgressEvery is runwrite.ProgressEvery: the least time between two
// run.progress events of a run.
const ProgressEvery = runwrite.ProgressEvery

// Active reports whether a status is not terminal (runwrite.Active).
func Active(status string) bool { return runwrite.Active(status) }

// Run is the part of a run a decision reads.
type Run struct {
	Status        string
	Attempt       int
	MaxAttempts   int
	HostID        string // the host it is offered to or placed on; "" when none
	StatusSource  string // who set the status last (wrapper, provider-hook, manual); "" for the orchestrator
	FailureReason string
	Provider      string // for run.started
	SessionName   string // for run.started
	Attention     string // wire.Attention*; "" reads as none
	// CompletedAt is the agent's latest completion (completed_at); zero
	// when none came.
	CompletedAt time.Time
	// LastInputAt is the latest input into the run: its start, keys, a
	// message, input through attach; zero when it never started.
	LastInputAt time.Time
	// AttentionDetail is what the run is asked now (nil: nothing known).
	AttentionDetail *wire.AttentionDetail
	// AgentSessionID is the CLI's own conversation id, as its hooks
	// reported it ("" when none did).
	AgentSessionID string
}

// FromWire is the decision's view of a stored run. Its last input is
// last_input_at, which the start sets (to when the host spawned the CLI);
// started_at for a run started before that column was kept.
func FromWire(r wire.Run) Run {
	return Run{Status: r.Status, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		HostID: deref(r.HostID), StatusSource: deref(r.StatusSource), FailureReason: deref(r.FailureReason),
		Provider: r.Provider, SessionName: r.SessionName, Attention: r.Attention, AttentionDetail: r.AttentionDetail,
		CompletedAt: derefTime(r.CompletedAt), LastInputAt: derefTime(cmp.Or(r.LastInputAt, r.StartedAt)),
		AgentSessionID: deref(r.AgentSessionID)}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// latest is the latest of ts (zero when all are zero).
func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

// backoff is min(initial × 2^(attempt−1), max) for the attempt that failed.
func backoff(p Policy, failedAttempt int) time.Duration {
	p = p.WithDefaults()
	d := p.RestartInitialDelay
	for i := 1; i < failedAttempt && d < p.RestartMaxDelay; i++ {
		d *= 2
	}
	return min(d, p.RestartMaxDelay)
}

// authority orders the sources that may decide a run's status:
// manual > provider-hook > wrapper; the orchestrator's own timers ("")
// rank with the wrapper.
var authority = map[string]int{wire.SourceWrapper: 1, wire.SourceProviderHook: 2, wire.SourceManual: 3}

// fail is the failure of r's current attempt and, while attempts remain,
// its requeue: run.failed, then run.requeued, one decision.
func fail(r Run, reason string, exitCode *int, source string, p Policy, now time.Time) []Step {
	extra := map[string]any{"failure_reason": reason, "from": r.Status}
	if exitCode != nil {
		extra["exit_code"] = *exitCode
	}
	steps := []Step{leave(r, Step{Write: ToFailed, From: r.Status, Attempt: r.Attempt, To: wire.RunFailed,
		Reason: reason, ExitCode: exitCode, Source: source, Events: []Event{{Topic: wire.TopicRunFailed, Extra: extra}}})}
	if r.Attempt < r.MaxAttempts {
		steps = append(steps, requeue(r.Attempt, now.Add(backoff(p, r.Attempt)), false))
	}
	return steps
}

// attentionOf is r's attention, none when unset.
func attentionOf(r Run) string {
	if r.Attention == "" {
		return wire.AttentionNone
	}
	return r.Attention
}

func attentionEvent(from, to, source string, extra map[string]any) Event {
	p := map[string]any{"attention": to, "source": source, "from": from}
	for k, v := range extra {
		p[k] = v
	}
	return Event{Topic: wire.TopicRunAttention, Extra: p}
}

// leave completes a step that may take r out of running: a run that is
// not running waits for nobody, so the store's status write clears its
// attention, and the step journals that (run.attention, source status,
// after the step's own events) when there was one.
func leave(r Run, st Step) Step {
	if r.Status == wire.RunRunning && st.To != wire.RunRunning && attentionOf(r) != wire.AttentionNone {
		st.Events = append(st.Events, attentionEvent(attentionOf(r), wire.AttentionNone, wire.AttentionSourceStatus, map[string]any{"status": st.To}))
	}
	return st
}

// Attention decides a change of a run's attention to `to`
// (docs/architecture.md#attention), reported by source about attempt,
// with no detail and from whatever attention the run has: ChangeAttention
// with only To and Source.
func Attention(r Run, attempt int, to, source string) Decision {
	return ChangeAttention(r, attempt, Change{To: to, Source: source})
}

// Change is one report about a run's attention.
type Change struct {
	To     string // the attention after it
	Source string // who reports it (wire.AttentionSource*, provider-hook)
	// Detail is what the run is asked (To needs_input or rate_limited);
	// nil when nothing is known, which keeps what is known.
	Detail *wire.AttentionDetail
	// Over, when set, lists the attentions the change may replace; the
	// run keeps any other. A pane change clears idle only; a screen that
	// no longer asks clears needs_input and rate_limited only.
	Over []string
}

// ChangeAttention decides a change of a run's attention
// (docs/architecture.md#attention), reported about attempt. It changes
// only on a live run: a run that is not running at that attempt keeps
// none. idle is set only on a run that waits for nothing else —
// needs_input and rate_limited say more, and stay until something clears
// them. The same attention again changes nothing and journals nothing,
// unless it comes with a detail that differs from the run's: then the
// detail is written (its source kept: it says what set the attention),
// and journaled as run.attention again (from = attention) only when the
// question's text changed — a new question is news for a person, a new
// rendering of the same one (its choices, a reset time read again) is
// not. A change to none clears the detail.
func ChangeAttention(r Run, attempt int, c Change) Decision {
	from := attentionOf(r)
	switch {
	case !wire.ValidAttention(c.To), r.Status != wire.RunRunning, attempt != r.Attempt:
		return Decision{}
	case len(c.Over) > 0 && !slices.Contains(c.Over, from):
		return Decision{}
	case c.To == wire.AttentionIdle && from != wire.AttentionNone:
		return Decision{}
	}
	detail := c.Detail
	if c.To == wire.AttentionNone || c.To == wire.AttentionIdle {
		detail = nil
	}
	step := Step{Write: SetAttention, From: wire.RunRunning, Attempt: r.Attempt, AttentionFrom: from, Attention: c.To, AttentionDetail: detail}
	if c.To != from {
		step.Events = []Event{attentionEvent(from, c.To, c.Source, nil)}
		return Decision{Steps: []Step{step}}
	}
	if detail == nil || sameQuestion(r.AttentionDetail, detail) {
		return Decision{}
	}
	if r.AttentionDetail != nil && r.AttentionDetail.Source != "" {
		d := *detail
		d.Source = r.AttentionDetail.Source
		step.AttentionDetail = &d
	}
	if r.AttentionDetail == nil || r.AttentionDetail.Text != detail.Text {
		step.Events = []Event{attentionEvent(from, c.To, c.Source, nil)}
	}
	return Decision{Steps: []Step{step}}
}

// sameQuestion reports whether two details ask the same: text, choices
// and reset time (not who set them).
func sameQuestion(a, b *wire.AttentionDetail) bool {
	if a == nil || b == nil {
		return a == b
	}
	sameReset := (a.ResetsAt == nil) == (b.ResetsAt == nil) && (a.ResetsAt == nil || a.ResetsAt.Equal(*b.ResetsAt))
	return a.Text == b.Text && slices.Equal(a.Choices, b.Choices) && sameReset
}

// Screen decides what the worker read on a run's screen
// (docs/architecture.md#the-screen-is-read), reported by host about
// attempt: only the host the run is on speaks for it. A question or a
// usage limit sets that attention with its detail (source screen); a
// screen that asks nothing — the question left it, or the agent is busy —
// clears needs_input and rate_limited, whatever set them (the worker
// reports a screen that asks nothing only after one that asked, or when
// the agent is working, so a hook's needs_input without a question on the
// screen stays), and leaves idle to the pane's own change.
func Screen(r Run, host string, attempt int, attention string, detail *wire.AttentionDetail) Decision {
	if r.HostID != host {
		return Decision{}
	}
	if attention == wire.AttentionNeedsInput || attention == wire.AttentionRateLimited {
		return ChangeAttention(r, attempt, Change{To: attention, Source: wire.AttentionSourceScreen, Detail: detail})
	}
	return ChangeAttention(r, attempt, Change{To: wire.AttentionNone, Source: wire.AttentionSourceScreen,
		Over: []string{wire.AttentionNeedsInput, wire.AttentionRateLimited}})
}

// requeue is failed → pending at attempt+1, due at next.
func requeue(attempt int, next time.Time, raiseMax bool) Step {
	return Step{Write: Requeue, From: wire.RunFailed, Attempt: attempt, To: wire.RunPending, NextAttemptAt: next, RaiseMax: raiseMax,
		Events: []Event{{Topic: wire.TopicRunRequeued, Extra: map[string]any{"attempt": attempt + 1, "next_attempt_at": next.UTC(), "previous_attempt": attempt}}}}
}

// spawning is pending → spawning: the offered host accepted, or a later
// signal from it proves it did.
func spawning(r Run) Step {
	return Step{Write: ToSpawning, From: wire.RunPending, Attempt: r.Attempt, To: wire.RunSpawning,
		Events: []Event{{Topic: wire.TopicRunSpawning, Extra: map[string]any{"host_id": r.HostID}}}}
}

// fromLive is the status a live-run failure or finish is decided from: a
// pending run (its offer accepted, the ack overtaken) first moves to
// spawning in the same decision.
func fromLive(r Run) (Run, []Step) {
	if r.Status != wire.RunPending {
		return r, nil
	}
	s := spawning(r)
	r.Status = wire.RunSpawning
	return r, []Step{s}
}

func journal(topic wire.Topic, extra map[string]any) Step {
	return Step{Write: JournalOnly, Events: []Event{{Topic: topic, Extra: extra}}}
}

// Created is the admission of a new run: (new) → pending.
func Created(provider, sessionName string, targetHostID *string) Decision {
	return Decision{Steps: []Step{journal(wire.TopicRunCreated,
		map[string]any{"provider": provider, "session_name": sessionName, "target_host_id": targetHostID})}}
}

// ContinuationCreated is the admission of a run that continues another
// (continues): run.created names it.
func ContinuationCreated(provider, sessionName, targetHostID, continues string) Decision {
	d := Created(provider, sessionName, &targetHostID)
	d.Steps[0].Events[0].Extra["continues_run_id"] = continues
	return d
}

// Offered is a pending run offered to host (on every offer).
func Offered(r Run, host string) Decision {
	return Decision{Steps: []Step{{Write: Offer, From: wire.RunPending, Attempt: r.Attempt, HostID: host,
		Events: []Event{{Topic: wire.TopicRunDispatched, Extra: map[string]any{"host_id": host}}}}}}
}

// Stop is POST /runs/{id}/stop: a manual stop of a run that is not
// terminal; it wins over anything after it.
func Stop(r Run, force bool) (Decision, error) {
	if !Active(r.Status) {
		return Decision{}, illegal(r, "stop")
	}
	return Decision{Steps: []Step{leave(r, Step{Write: ToStopped, From: r.Status, Attempt: r.Attempt, To: wire.RunStopped, Source: wire.SourceManual,
		Events: []Event{{Topic: wire.TopicRunStopped, Extra: map[string]any{"source": wire.SourceManual, "force": force, "from": r.Status}}}})}}, nil
}

// Retry is POST /runs/{id}/retry: a run that stayed failed goes back to
// pending at attempt + 1 at once, its max_attempts raised to allow it.
// The new attempt resumes the agent's conversation, if one is known,
// unless fresh: then the conversation is forgotten (agent_session_id
// cleared) and the CLI starts again with the prompt
// (docs/architecture.md#resume-and-continue). continuedBy is the run that
// continues r, if any: its worktree and conversation are that run's now,
// so r is not retried.
func Retry(r Run, fresh bool, continuedBy string, now time.Time) (Decision, error) {
	if r.Status != wire.RunFailed {
		return Decision{}, illegal(r, "retry")
	}
	if continuedBy != "" {
		return Decision{}, wire.Conflict(wire.CodeIllegalTransition, "run was continued by run %s, which took its worktree and conversation: continue that one", continuedBy).
			With("status", r.Status).With("continued_by", continuedBy)
	}
	st := requeue(r.Attempt, now, true)
	if fresh {
		st.Fresh = true
		st.Events[0].Extra["fresh"] = true
	}
	return Decision{Steps: []Step{st}}, nil
}

// ContinueFacts are what the store reads about a continue besides the run.
type ContinueFacts struct {
	// ContinuedBy is the run that already continues this one, if any: a
	// run is continued once, and its continuation after it.
	ContinuedBy string
	// Resumable: the provider of the new run has resume_args on the run's
	// host (as the host reported its catalog, or the built-in's).
	Resumable bool
	// WorktreeGone: the run wants a worktree and has none now (removed,
	// or never made).
	WorktreeGone bool
	// Host is where the conversation is, which the continuation is pinned
	// to: the host holding the run's worktree, or the one it last ran on;
	// "" when it never ran anywhere.
	Host string
}

// Continue decides POST /runs/{id}/continue of r by a new run newRun
// (docs/architecture.md#resume-and-continue): only a run that ended, was
// not continued yet, and whose conversation can be resumed — its hooks
// reported a session, its provider resumes on its host, its worktree is
// still there. The old run journals run.continued naming the new one.
func Continue(r Run, f ContinueFacts, newRun string) (Decision, error) {
	switch {
	case Active(r.Status):
		return Decision{}, wire.Conflict(wire.CodeIllegalTransition, "cannot continue a run that is %s: it is still live", r.Status).With("status", r.Status)
	case f.ContinuedBy != "":
		return Decision{}, wire.Conflict(wire.CodeIllegalTransition, "run was already continued by run %s: continue that one", f.ContinuedBy).
			With("status", r.Status).With("continued_by", f.ContinuedBy)
	case r.AgentSessionID == "":
		return Decision{}, wire.Conflict(wire.CodeNotResumable, "the run has no agent session: its CLI's hooks never reported one")
	case f.Host == "":
		return Decision{}, wire.Conflict(wire.CodeNotResumable, "the run never ran on a host")
	case !f.Resumable:
		return Decision{}, wire.Conflict(wire.CodeNotResumable, "the provider cannot resume a conversation on the run's host (no resume_args)")
	case f.WorktreeGone:
		return Decision{}, wire.Conflict(wire.CodeNotResumable, "the run's worktree is gone (removed, or never made): its conversation cannot be resumed where it was")
	}
	return Decision{Steps: []Step{journal(wire.TopicRunContinued, map[string]any{"run_id": newRun})}}, nil
}

// Complete is a completion mark (POST /runs/{id}/complete, source
// manual): accepted in any status, it changes no status.
func Complete(source string) Decision {
	return Decision{CompleteSource: source}
}

func illegal(r Run, action string) error {
	return wire.Conflict(wire.CodeIllegalTransition, "cannot %s a run that is %s", action, r.Status).With("status", r.Status)
}

// Ack is run_dispatch_ack from host for attempt. offered says whether the
// run was ever offered to that host at that attempt (otherwise the run is
// not the host's to speak of: not found). Accepted → spawning; refused →
// the offer is withdrawn. An ack for an offer withdrawn meanwhile is
// journaled, and an accepting sender is told to stop: that incarnation
// must not run twice.
func Ack(r Run, host string, attempt int, accepted bool, reason string, offered bool) (Decision, error) {
	if !offered {
		return Decision{}, wire.NotFound("run")
	}
	switch {
	case r.Attempt != attempt || r.HostID != host:
		return Decision{StopSender: accepted, Steps: []Step{journal(wire.TopicRunSignalReceived, map[string]any{"kind": "run_dispatch_ack",
			"result": wire.ResultStaleOffer, "from_host_id": host, "acked_attempt": attempt})}}, nil
	case r.Status != wire.RunPending:
		return Decision{}, nil // a repeated ack of a run already spawning or running
	case accepted:
		return Decision{Steps: []Step{spawning(r)}}, nil
	default:
		return withdraw(r, "refused: "+reason), nil
	}
}

func withdraw(r Run, reason string) Decision {
	return Decision{Steps: []Step{{Write: Withdraw, From: wire.RunPending, Attempt: r.Attempt,
		Events: []Event{{Topic: wire.TopicRunDispatchWithdrawn, Extra: map[string]any{"host_id": r.HostID, "reason": reason}}}}}}
}

// Timer is a central timeout that fired for a run.
type Timer int

// The central timers.
const (
	// AckTimeout: an offer not acked within PAM_DISPATCH_ACK_TIMEOUT.
	AckTimeout Timer = iota
	// DispatchTimeout: pending past PAM_DISPATCH_TIMEOUT from pending_since.
	DispatchTimeout
	// SpawnTimeout: spawning past PAM_SPAWN_TIMEOUT without started.
	SpawnTimeout
	// HostLost: the run's host offline past PAM_HOST_LOST_AFTER.
	HostLost
)

// Expired decides a timer that fired for r, judged again on the run as it
// is now (it may have moved on since the scan that found it). everMatched
// is the run's ever_matched (DispatchTimeout: dispatch_timeout when a host
// was ever eligible but for capacity, else no_eligible_host); host is the
// host the timer is about (HostLost). A timer that no longer applies
// decides nothing. The timers of a quiet pane are Quiet's.
func Expired(r Run, t Timer, everMatched bool, host string, p Policy, now time.Time) Decision {
	switch t {
	case AckTimeout:
		if r.Status == wire.RunPending && r.HostID != "" {
			return withdraw(r, "ack_timeout")
		}
	case DispatchTimeout:
		// From pending_since whatever the offers: a run offered to a host
		// that never acks does not stay pending forever. Offered means a
		// host was eligible: dispatch_timeout.
		if r.Status == wire.RunPending {
			reason := wire.FailNoEligibleHost
			if everMatched || r.HostID != "" {
				reason = wire.FailDispatchTimeout
			}
			return Decision{Steps: fail(r, reason, nil, "", p, now)}
		}
	case SpawnTimeout:
		if r.Status == wire.RunSpawning {
			return Decision{Steps: fail(r, wire.FailSpawnFailed, nil, "", p, now)}
		}
	case HostLost:
		if Active(r.Status) && r.HostID == host {
			return Decision{Steps: fail(r, wire.FailHostLost, nil, "", p, now)}
		}
	}
	return Decision{}
}

// TurnEnded reports whether r's agent completed its turn after the last
// input into the run (completed_at ≥ last input): an interactive CLI then
// waits at its prompt for the next input; it is not working.
func TurnEnded(r Run) bool {
	return !r.CompletedAt.IsZero() && !r.CompletedAt.Before(r.LastInputAt)
}

// Waiting reports whether r waits rather than works
// (docs/architecture.md#working-waiting-hung): for a person
// (needs_input), for its usage limit to reset (rate_limited), or for the
// next input after its turn ended. A waiting run is never hung.
func Waiting(r Run) bool {
	a := attentionOf(r)
	return a == wire.AttentionNeedsInput || a == wire.AttentionRateLimited || TurnEnded(r)
}

// Pane is what the pane timers read about a running run besides the run.
type Pane struct {
	// HostOnline: the run's host is online, or disabled and still
	// heartbeating. A quiet pane on a host pam does not hear from says
	// nothing about the run.
	HostOnline bool
	// LastOutput is the last change of the pane the server saw
	// (last_output_at); zero when none.
	LastOutput time.Time
	// Floor is the latest of the host's last transition to online and
	// the start of this serve: no pane timer counts from before it, so an
	// outage of serve or of the host's link never counts against a run.
	Floor time.Time
}

// PaneTimers are the pane timers of serve: Hang is PAM_CLI_HANG_TIMEOUT,
// CompletedStop PAM_COMPLETED_STOP_AFTER. A timer of zero (or less) never
// fires, so a sweep can ask about one of them alone.
type PaneTimers struct {
	Hang          time.Duration
	CompletedStop time.Duration
}

// Quiet decides a running run whose pane may have been quiet too long
// (docs/architecture.md#working-waiting-hung), the one place that tells
// working from waiting from hung:
//
//   - a working run (not Waiting) whose pane and input have been quiet
//     for longer than Hang fails cli_hang, through the restart policy;
//   - a run whose turn ended, and that then had no input and no pane
//     change for longer than CompletedStop, is stopped (run.stopped,
//     source completed_idle, no requeue); unless it is rate_limited: its
//     turn was cut short by the limit, and it waits for the limit to
//     reset, when pam continues it;
//   - any other waiting run waits, however long.
//
// Both timers count from the latest of the run's clocks and pane.Floor,
// and only while its host is online. Anything else decides nothing.
func Quiet(r Run, pane Pane, t PaneTimers, p Policy, now time.Time) Decision {
	if r.Status != wire.RunRunning || !pane.HostOnline {
		return Decision{}
	}
	expired := func(since time.Time, after time.Duration) bool { return after > 0 && now.Sub(since) > after }
	switch {
	case TurnEnded(r):
		since := latest(r.CompletedAt, r.LastInputAt, pane.LastOutput, pane.Floor)
		if attentionOf(r) == wire.AttentionRateLimited || !expired(since, t.CompletedStop) {
			return Decision{}
		}
		return Decision{Steps: []Step{leave(r, Step{Write: ToStopped, From: r.Status, Attempt: r.Attempt, To: wire.RunStopped,
			Events: []Event{{Topic: wire.TopicRunStopped, Extra: map[string]any{"source": wire.StopCompletedIdle, "force": false, "from": r.Status,
				"idle_since": since.UTC()}}}})}}
	case Waiting(r):
		return Decision{}
	case expired(latest(r.LastInputAt, pane.LastOutput, pane.Floor), t.Hang):
		return Decision{Steps: fail(r, wire.FailCLIHang, nil, "", p, now)}
	}
	return Decision{}
}

// Tombstoned reports whether the run's current attempt ended host_lost and
// stayed failed (no requeue followed): its late signals are journaled but
// never applied.
func Tombstoned(r Run) bool {
	return r.Status == wire.RunFailed && r.FailureReason == wire.FailHostLost
}

// Signal is a signal as the ingest sees it.
type Signal struct {
	Kind    string
	Source  string
	Attempt *int
	Seq     *int64
	Payload json.RawMessage
	Sender  string // the host that sent it (by worker token or signal token)
}

// IngestSignal decides a signal in the order the ingest guarantees: the
// epoch (attempt), the sender, dedup and ordering, and only then the
// status write. Its errors are the contract's refusals (missing_attempt,
// invalid_attempt, missing_seq, validation_failed).
func IngestSignal(r Run, sig Signal, f SignalFacts, p Policy, now time.Time) (Decision, error) {
	if sig.Attempt == nil {
		return Decision{}, wire.Errorf(wire.CodeMissingAttempt, "signal has no attempt").With("current_attempt", r.Attempt)
	}
	att := *sig.Attempt
	if att > r.Attempt {
		return Decision{}, wire.Errorf(wire.CodeInvalidAttempt, "signal attempt exceeds the run's current attempt").
			With("signal_attempt", att).With("current_attempt", r.Attempt)
	}
	if sig.Kind == wire.SignalProgress && sig.Seq == nil {
		return Decision{}, wire.Errorf(wire.CodeMissingSeq, "progress signal has no seq")
	}
	session, err := wire.AgentSessionOf(sig.Payload)
	if err != nil {
		return Decision{}, err
	}
	seen := func(result string, extra map[string]any) map[string]any {
		m := map[string]any{"kind": sig.Kind, "source": sig.Source, "result": result}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	// A refusal is journaled the first time for its (attempt, kind,
	// result) only; its repeats are counted.
	refuse := func(result string, topic wire.Topic, payload map[string]any) Decision {
		d := Decision{Result: result, Refusal: &Refusal{Attempt: att, Kind: sig.Kind, Result: result}}
		if !slices.Contains(f.Refused, result) {
			d.Steps = []Step{journal(topic, payload)}
		}
		return d
	}
	if att < r.Attempt {
		return refuse(wire.ResultStaleAttempt, wire.TopicRunStaleSignal,
			map[string]any{"kind": sig.Kind, "source": sig.Source, "signal_attempt": att, "host_id": sig.Sender}), nil
	}
	if r.HostID != sig.Sender {
		// The offer to this host was withdrawn; the run is elsewhere (or
		// waiting for another offer) at this very attempt. The sender is
		// told to stop every time, journaled or not.
		d := refuse(wire.ResultStaleOffer, wire.TopicRunSignalReceived, seen(wire.ResultStaleOffer, map[string]any{"from_host_id": sig.Sender}))
		d.StopSender = true
		return d, nil
	}
	if Tombstoned(r) {
		return refuse(wire.ResultIgnored, wire.TopicRunSignalReceived,
			seen(wire.ResultIgnored, map[string]any{"status": r.Status, "failure_reason": wire.FailHostLost})), nil
	}
	d, err := ingestKind(r, sig, f, att, p, now)
	if err != nil || session == "" || session == r.AgentSessionID {
		return d, err
	}
	// The CLI's session id is the attempt's, whatever the signal does
	// besides: recorded first, before a failure can requeue the run.
	d.Steps = append([]Step{agentSession(r, session)}, d.Steps...)
	return d, nil
}

// agentSession records the session id a signal of r's current attempt
// carried (docs/architecture.md#resume-and-continue): run.agent_session,
// with the one it replaces.
func agentSession(r Run, session string) Step {
	var from any
	if r.AgentSessionID != "" {
		from = r.AgentSessionID
	}
	return Step{Write: SetAgentSession, From: r.Status, Attempt: r.Attempt, AgentSessionID: session,
		Events: []Event{{Topic: wire.TopicRunAgentSession, Extra: map[string]any{"agent_session_id": session, "from": from}}}}
}

// ingestKind is IngestSignal of a signal that passed the epoch, sender and
// tombstone guards: what its kind does to the run.
func ingestKind(r Run, sig Signal, f SignalFacts, att int, p Policy, now time.Time) (Decision, error) {
	switch sig.Kind {
	case wire.SignalNeedsInput:
		return needsInputSignal(r, sig, f, att), nil
	case wire.SignalProgress:
		return progressSignal(sig, f, now), nil
	case wire.SignalCompleted:
		return completedSignal(r, sig, f), nil
	}
	if f.Processed {
		return Decision{Result: wire.ResultDuplicate}, nil
	}
	ignored := Decision{Result: wire.ResultIgnored, Processed: sig.Kind, Steps: []Step{journal(wire.TopicRunSignalReceived,
		map[string]any{"kind": sig.Kind, "source": sig.Source, "result": wire.ResultIgnored, "status": r.Status})}}
	if !Active(r.Status) || authority[r.StatusSource] > authority[sig.Source] {
		return ignored, nil
	}
	if sig.Kind == wire.SignalStarted && r.Status == wire.RunRunning {
		return ignored, nil
	}
	steps, err := lifeSignal(r, sig, p, now)
	if err != nil {
		return Decision{}, err
	}
	return Decision{Result: wire.ResultApplied, Processed: sig.Kind, Steps: steps}, nil
}

// needsInputSignal decides a needs_input hook. Not one-shot (an agent may
// ask many times) and journaled only when the attention changes, so a
// repeated or late hook adds nothing to the journal.
func needsInputSignal(r Run, sig Signal, f SignalFacts, att int) Decision {
	if r.Status != wire.RunRunning {
		return Decision{Result: wire.ResultIgnored}
	}
	// The question is the screen's, when the server read one for this
	// attempt; without one, a new needs_input says at least who set it,
	// and a repeated one keeps what is known.
	detail := f.Screen
	if detail != nil {
		d := *detail
		d.Source = sig.Source
		detail = &d
	} else if attentionOf(r) != wire.AttentionNeedsInput {
		detail = &wire.AttentionDetail{Source: sig.Source, Choices: []wire.Choice{}}
	}
	d := ChangeAttention(r, att, Change{To: wire.AttentionNeedsInput, Source: sig.Source, Detail: detail})
	d.Result = wire.ResultApplied
	return d
}

// progressSignal decides a progress signal: in seq order, journaled at
// most once every ProgressEvery, the ones between held and coalesced
// into the next.
func progressSignal(sig Signal, f SignalFacts, now time.Time) Decision {
	if *sig.Seq <= 0 || *sig.Seq <= f.LastProgressSeq {
		return Decision{Result: wire.ResultOutOfOrder}
	}
	var payload any
	if len(sig.Payload) > 0 {
		payload = sig.Payload
	}
	extra := map[string]any{"seq": *sig.Seq, "source": sig.Source, "payload": payload}
	if !f.ProgressJournaledAt.IsZero() && now.Sub(f.ProgressJournaledAt) < ProgressEvery {
		return Decision{Result: wire.ResultApplied, ProgressSeq: *sig.Seq, Progress: &ProgressNote{Held: extra}}
	}
	extra[wire.PayloadCoalesced] = f.ProgressCoalesced
	return Decision{Result: wire.ResultApplied, ProgressSeq: *sig.Seq, Progress: &ProgressNote{Journaled: true},
		Steps: []Step{journal(wire.TopicRunProgress, extra)}}
}

// completedSignal decides a completion: one per turn
// (docs/architecture.md#working-waiting-hung). The attempt's first is
// marked processed; after it, a completion with input since the last one
// is the next turn's, and one without is a repeat.
func completedSignal(r Run, sig Signal, f SignalFacts) Decision {
	if !f.Processed {
		return Decision{Result: wire.ResultApplied, Processed: sig.Kind, CompleteSource: sig.Source}
	}
	if TurnEnded(r) {
		return Decision{Result: wire.ResultDuplicate}
	}
	return Decision{Result: wire.ResultApplied, CompleteSource: sig.Source}
}

// lifeSignal is the steps of a one-shot signal that moves an active run:
// started, finished or failed, each of which may have overtaken the ack
// (and started) it follows.
func lifeSignal(r Run, sig Signal, p Policy, now time.Time) ([]Step, error) {
	var steps []Step
	switch sig.Kind {
	case wire.SignalStarted:
		r, steps = fromLive(r) // started overtook the ack
		steps = append(steps, Step{Write: ToRunning, From: r.Status, Attempt: r.Attempt, To: wire.RunRunning, Source: sig.Source,
			Events: []Event{{Topic: wire.TopicRunStarted, Extra: map[string]any{"provider": r.Provider, "session_name": r.SessionName, "source": sig.Source}}}})
	case wire.SignalFinished:
		code, err := ExitCode(sig.Payload)
		if err != nil {
			return nil, err
		}
		r, steps = fromLive(r) // finished overtook the ack and started
		steps = append(steps, journal(wire.TopicRunFinished, map[string]any{"exit_code": code, "source": sig.Source}))
		if code != 0 {
			return append(steps, fail(r, wire.FailExitNonzero, &code, sig.Source, p, now)...), nil
		}
		zero := 0
		steps = append(steps, leave(r, Step{Write: ToExited, From: r.Status, Attempt: r.Attempt, To: wire.RunExited, ExitCode: &zero, Source: sig.Source,
			Events: []Event{{Topic: wire.TopicRunExited, Extra: map[string]any{"exit_code": 0}}}}))
	case wire.SignalFailed:
		reason := wire.FailProviderFailed
		var pl struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(sig.Payload, &pl) == nil && pl.Reason == wire.FailSpawnFailed {
			reason = wire.FailSpawnFailed
		}
		r, steps = fromLive(r)
		steps = append(steps, fail(r, reason, nil, sig.Source, p, now)...)
	default:
		return nil, wire.Invalid("kind", "kind must be one of "+wire.SignalKindList)
	}
	return steps, nil
}

// ExitCode reads the exit code of a finished signal's payload.
func ExitCode(payload json.RawMessage) (int, error) {
	var p struct {
		ExitCode *int `json:"exit_code"`
	}
	if len(payload) == 0 || json.Unmarshal(payload, &p) != nil || p.ExitCode == nil {
		return 0, wire.Invalid("payload.exit_code", "a finished signal carries payload {\"exit_code\": N}")
	}
	return *p.ExitCode, nil
}

// StateReport decides a worker's run_state frame about a run (state
// spawn_failed, workspace_failed, session_lost, tmux_crash, wrapper_died fail the current
// attempt; stale_session and orphan_detected are journaled). A report
// about another attempt, or from a host the run is not on, is journaled
// only. State idle sets a running run's attention (Attention, source
// pane); about anything else it decides nothing.
func StateReport(r Run, host string, attempt *int, state, detail string, p Policy, now time.Time) (Decision, error) {
	if state == wire.StateIdle {
		if attempt == nil || r.HostID != host {
			return Decision{}, nil
		}
		return Attention(r, *attempt, wire.AttentionIdle, wire.AttentionSourcePane), nil
	}
	if attempt == nil || *attempt != r.Attempt || r.HostID != host {
		topic := wire.TopicRunSignalReceived
		switch state {
		case wire.StateStaleSession:
			topic = wire.TopicRunStaleSession
		case wire.StateOrphanDetected:
			topic = wire.TopicRunOrphanDetected
		}
		return Decision{Report: state, Steps: []Step{journal(topic, map[string]any{"state": state, "detail": detail, "reported_attempt": attempt, "from_host_id": host})}}, nil
	}
	var reason string
	switch state {
	case wire.StateSpawnFailed:
		reason = wire.FailSpawnFailed
	case wire.StateWorkspaceFailed:
		reason = wire.FailWorkspaceFailed
	case wire.StateSessionLost:
		reason = wire.FailSessionLost
	case wire.StateTmuxCrash:
		reason = wire.FailTmuxCrash
	case wire.StateWrapperDied:
		reason = wire.FailWrapperDied
	case wire.StateStaleSession:
		return Decision{Report: state, Steps: []Step{journal(wire.TopicRunStaleSession, map[string]any{"detail": detail, "host_id": host})}}, nil
	case wire.StateOrphanDetected:
		return Decision{Report: state, Steps: []Step{journal(wire.TopicRunOrphanDetected, map[string]any{"detail": detail, "host_id": host})}}, nil
	default:
		return Decision{}, wire.Invalid("state", "unknown run_state %q", state)
	}
	if !Active(r.Status) {
		return Decision{}, nil
	}
	r, steps := fromLive(r)
	failed := fail(r, reason, nil, wire.SourceWrapper, p, now)
	if detail != "" {
		// What went wrong, in the worker's words (for workspace_failed:
		// the git command and its stderr).
		failed[0].Events[0].Extra["detail"] = detail
	}
	return Decision{Steps: append(steps, failed...)}, nil
}
