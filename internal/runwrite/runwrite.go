// Package runwrite is the data a run's decision is made of: the guarded
// writes, the events that journal them and what is recorded besides
// (Decision), the restart policy, and which statuses are live. Package
// lifecycle makes decisions of it; package store applies them, SQL
// only. Neither this package nor store decides anything: keeping the
// data apart lets store apply a decision without importing the rules
// that made it.
package runwrite

import (
	"time"

	"pam/internal/defaults"
	"pam/internal/wire"
)

// Active reports whether a status is not terminal.
func Active(status string) bool {
	return status == wire.RunPending || status == wire.RunSpawning || status == wire.RunRunning
}

// Write is the kind of status write a step makes.
type Write int

// The writes. Each is guarded by the status and attempt of the step's
// From: the store writes … WHERE status = From AND attempt = Attempt, so a
// decision made on stale facts changes nothing.
const (
	// JournalOnly writes no status; the step only journals.
	JournalOnly Write = iota
	// Offer places a pending run on a host (host_id set, offered_at now).
	Offer
	// Withdraw takes a pending run's offer back (host_id cleared).
	Withdraw
	// ToSpawning: pending → spawning, the offered host accepted.
	ToSpawning
	// ToRunning: spawning → running; the attempt's started_at is set and
	// the work item moves todo → doing.
	ToRunning
	// ToExited: → exited with exit code 0; the attempt ends exited.
	ToExited
	// ToFailed: → failed with Reason (and ExitCode); the attempt ends failed.
	ToFailed
	// ToStopped: → stopped by an operator; the attempt ends stopped.
	ToStopped
	// Requeue: failed → pending at attempt + 1, due at NextAttemptAt,
	// host cleared unless pinned, the attempt's fields cleared.
	Requeue
	// SetAttention: a running run's attention from AttentionFrom to
	// Attention; guarded on the status (running), the attempt and the
	// attention it was decided from. It changes no status.
	SetAttention
	// SetAgentSession: the run's agent_session_id becomes AgentSessionID
	// (docs/architecture.md#resume-and-continue); guarded on the status
	// and attempt it was decided from. It changes no status.
	SetAgentSession
)

var writeNames = [...]string{"journal", "offer", "withdraw", "spawning", "running", "exited", "failed", "stopped", "requeue", "attention", "agent_session"}

func (w Write) String() string {
	if int(w) < len(writeNames) {
		return writeNames[w]
	}
	return "write(?)"
}

// Event is one journal entry of a step. The store adds run_id, attempt
// and task_id (as the run is after the step's write) to Extra.
type Event struct {
	Topic wire.Topic
	Extra map[string]any
}

// Step is one guarded write and the events that journal it.
type Step struct {
	Write   Write
	From    string // the status the write is guarded on
	Attempt int    // the attempt the write is guarded on
	To      string // the status after the write ("" for JournalOnly)

	Reason        string    // ToFailed: failure_reason
	ExitCode      *int      // ToFailed, ToExited
	Source        string    // ToRunning, ToExited, ToFailed, ToStopped: status_source ("" for the orchestrator)
	HostID        string    // Offer: the host
	NextAttemptAt time.Time // Requeue: when the new attempt is due (also its pending_since)
	RaiseMax      bool      // Requeue: raise max_attempts to the new attempt (POST /retry)
	// Fresh: Requeue forgets the agent's conversation (agent_session_id
	// cleared), so the new attempt starts afresh (POST /retry {fresh}).
	Fresh bool
	// AgentSessionID is SetAgentSession's session id.
	AgentSessionID string
	AttentionFrom  string // SetAttention: the attention the write is guarded on
	Attention      string // SetAttention: the attention after the write
	// AttentionDetail is SetAttention's attention_detail after the write:
	// what the run is asked (nil: none is known, or the run waits for
	// nothing).
	AttentionDetail *wire.AttentionDetail

	Events []Event
}

// Decision is what to do about one happening.
type Decision struct {
	// Result is the answer to a signal (wire.Result*); "" otherwise.
	Result string
	// Steps are made in order, in one transaction.
	Steps []Step
	// StopSender: the sending host's incarnation must not run (stale offer).
	StopSender bool
	// Processed != "" records that one-shot signal kind as processed for
	// the run's attempt (so a repeat is a duplicate).
	Processed string
	// Refusal records a signal set aside without being processed
	// (stale_attempt, stale_offer, or ignored after host_lost), so that
	// its repeats are counted instead of journaled again.
	Refusal *Refusal
	// ProgressSeq > 0 records last_progress_seq.
	ProgressSeq int64
	// Report != "" marks a worker's run_state report that is only
	// journaled (orphan_detected, stale_session, or a report about an
	// attempt or host the run has left): the store journals it once per
	// (host, run, kind) an hour and counts the repeats in between.
	Report string
	// Progress says how the applied progress signal is journaled (nil
	// for any other decision): at once, or held back for the trailing
	// flush because one was journaled less than ProgressEvery ago.
	Progress *ProgressNote
	// CompleteSource != "" records the completion mark (completed_at,
	// run.completed, and the work item to done when the project's
	// auto_done is set — a fact the store reads).
	CompleteSource string
}

// Changed reports whether the decision writes a status (so that capacity
// may have freed or a run may be due).
func (d Decision) Changed() bool {
	for _, s := range d.Steps {
		if s.Write != JournalOnly && s.Write != SetAttention && s.Write != SetAgentSession {
			return true
		}
	}
	return false
}

// Final is the run's status after the decision ("" when unchanged).
func (d Decision) Final() string {
	final := ""
	for _, s := range d.Steps {
		if s.To != "" {
			final = s.To
		}
	}
	return final
}

// Topics are the decision's events in journal order.
func (d Decision) Topics() []wire.Topic {
	var t []wire.Topic
	for _, s := range d.Steps {
		for _, e := range s.Events {
			t = append(t, e.Topic)
		}
	}
	return t
}

// Policy is the restart policy (PAM_MAX_ATTEMPTS,
// PAM_RESTART_INITIAL_DELAY, PAM_RESTART_MAX_DELAY).
type Policy struct {
	MaxAttempts         int
	RestartInitialDelay time.Duration
	RestartMaxDelay     time.Duration
}

// WithDefaults fills what is unset.
func (p Policy) WithDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = defaults.MaxAttempts
	}
	if p.RestartInitialDelay <= 0 {
		p.RestartInitialDelay = defaults.RestartInitialDelay
	}
	if p.RestartMaxDelay <= 0 {
		p.RestartMaxDelay = defaults.RestartMaxDelay
	}
	return p
}

// ProgressEvery is the least time between two run.progress events of a
// run: the progress signals in between are applied (their seq recorded)
// and counted, and the newest of them is journaled by the next one or
// by the trailing flush (docs/architecture.md#bounded-journal).
const ProgressEvery = time.Second

// ProgressNote is how an applied progress signal is journaled.
type ProgressNote struct {
	// Journaled: the decision's run.progress event is written now, with
	// the count of the signals it stands for (coalesced); the run's
	// progress window starts again.
	Journaled bool
	// Held is the event's payload when it is not journaled now: kept
	// on the run (the newest only) for the trailing flush.
	Held map[string]any
}

// Refusal is a signal of a run that the ingest set aside without
// processing it: an old attempt's (stale_attempt), a withdrawn offer's
// (stale_offer), or one that came after its attempt ended host_lost
// (ignored). Nothing marks such a signal processed, so an old token could
// send them without end; the first of each (run, attempt, kind, result)
// is journaled and the rest are only counted, so the journal stays
// bounded (docs/architecture.md#signal-ingest).
type Refusal struct {
	Attempt int // the signal's attempt
	Kind    string
	Result  string
}

// SignalFacts are what the store reads for a signal besides the run
// (lifecycle.IngestSignal decides with them).
type SignalFacts struct {
	// Processed: this one-shot kind was already applied for the attempt.
	Processed bool
	// LastProgressSeq is the run's last applied progress seq.
	LastProgressSeq int64
	// Refused lists the results (stale_attempt, stale_offer, ignored) a
	// signal of this kind at this attempt was already set aside with, and
	// journaled for: a repeat is not journaled again.
	Refused []string
	// Screen is the question the server last read on the run's screen
	// for the signal's attempt and sender (nil: none): a needs_input
	// signal carries it as its detail.
	Screen *wire.AttentionDetail
	// ProgressJournaledAt is when the run's last run.progress was
	// journaled (zero: never), and ProgressCoalesced how many progress
	// signals were applied since without a run.progress of their own.
	ProgressJournaledAt time.Time
	ProgressCoalesced   int
}
