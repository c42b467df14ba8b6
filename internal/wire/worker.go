package wire

import (
	"encoding/json"
	"time"
)

// UplinkProtocol is the uplink protocol version this build speaks: the
// frames of frames.go. It stays 1 while every change to them is one an
// older peer reads (a new optional field, a new frame type it answers
// unexpected_frame); a change it could not read bumps it, and a worker
// and a server of different versions refuse each other at registration
// with protocol_mismatch naming both (docs/architecture.md#uplink-frames).
const UplinkProtocol = 1

// CheckUplinkProtocol is the server's answer to the protocol a worker
// claims at registration: nil when it is UplinkProtocol, else
// protocol_mismatch naming both versions, with the versions this server
// speaks in details.protocols.
func CheckUplinkProtocol(claimed int) error {
	if claimed == UplinkProtocol {
		return nil
	}
	return Errorf(CodeProtocolMismatch, "this server speaks uplink protocol %d, the worker %d", UplinkProtocol, claimed).
		With("protocols", []int{UplinkProtocol})
}

// Register is the body of POST /api/internal/worker/register.
type Register struct {
	HostName   string   `json:"host_name"`
	Platform   string   `json:"platform"`
	InstanceID string   `json:"instance_id"`
	Providers  []string `json:"providers"`
	Executor   string   `json:"executor"`
	MaxRuns    int      `json:"max_runs"`
	Version    string   `json:"version"`
	Protocol   int      `json:"protocol"`
	// Resumable names the providers whose catalog entry on this host can
	// resume a conversation (resume_args): the server refuses to continue
	// a run its host could not resume (docs/architecture.md#resume-and-continue).
	// A worker that does not say (null: an older worker) leaves the
	// server to its built-in knowledge.
	Resumable []string `json:"resumable"`
	// ContinueMessages is each usable provider's continue_message in this
	// host's catalog: what pam types into a run on this host when its
	// usage limit resets (docs/architecture.md#continue-when-a-limit-resets).
	// Null (an older worker) leaves the server to the built-ins'.
	ContinueMessages map[string]string `json:"continue_messages"`
}

// Registered is the answer of POST /api/internal/worker/register.
type Registered struct {
	HostID   string `json:"host_id"`
	Status   string `json:"status"`
	Protocol int    `json:"protocol"`
	// Pinned is for the server only, never sent: whether the registering
	// instance is now the host's pinned instance (not a suspected clone).
	// Only a pinned instance may open the uplink.
	Pinned bool `json:"-"`
}

// WorkerRun is one run as the worker sees it (GET /api/internal/worker/runs).
type WorkerRun struct {
	RunID       string `json:"run_id"`
	Attempt     int    `json:"attempt"`
	Status      string `json:"status"`
	SessionName string `json:"session_name"`
	TaskID      string `json:"task_id"`
	Provider    string `json:"provider"`
	Cwd         string `json:"cwd"`
	// Always on the wire, null where unknown.
	FailureReason *string `json:"failure_reason"`
	HostID        *string `json:"host_id"`
	// Attempts is read only by GET /api/internal/worker/runs/{id} ([] when
	// the run has none yet); the list leaves it null.
	Attempts []RunAttempt `json:"attempts"`
	// FinishedAt is when the current attempt ended, so that a worker can
	// tell a session within its hold-open from one past it (docs/architecture.md#worker-duties).
	FinishedAt *time.Time `json:"finished_at"`
	// ContinuedBy is a live run (pending, spawning or running) that
	// continues this one and takes its worktree over; null when none. A
	// worker's clean-up keeps such a worktree whatever this run's age
	// (docs/architecture.md#resume-and-continue).
	ContinuedBy *string `json:"continued_by"`
}

// WorkerRunList is the body of GET /api/internal/worker/runs.
type WorkerRunList struct {
	Runs []WorkerRun `json:"runs"`
}

// RunAttempt is one row of a run's attempt history.
type RunAttempt struct {
	Attempt       int     `json:"attempt"`
	HostID        *string `json:"host_id"`
	Outcome       *string `json:"outcome"`
	FailureReason *string `json:"failure_reason"`
}

// Signal kinds and sources (docs/architecture.md#internal-api).
const (
	SignalStarted   = "started"
	SignalFinished  = "finished"
	SignalCompleted = "completed"
	SignalFailed    = "failed"
	SignalProgress  = "progress"
	// SignalNeedsInput is what `pam hook needs-input` posts: the agent
	// asked for permission or input, so the run's attention becomes
	// needs_input. Not one-shot (it may come many times per attempt) and
	// without a seq.
	SignalNeedsInput = "needs_input"

	// PayloadCoalesced is the field of a run.progress payload that
	// counts the progress signals applied since the run's previous
	// run.progress and journaled with none of their own: this one stands
	// for them (docs/architecture.md#bounded-journal).
	PayloadCoalesced = "coalesced"

	SourceWrapper      = "wrapper"
	SourceProviderHook = "provider-hook"
	SourceManual       = "manual"
)

// IsSignalKind reports whether k is a signal kind, so that every place
// that checks one (both transports, the spool) takes the same list.
func IsSignalKind(k string) bool {
	switch k {
	case SignalStarted, SignalFinished, SignalCompleted, SignalFailed, SignalProgress, SignalNeedsInput:
		return true
	}
	return false
}

// SignalKindList names the signal kinds for error messages.
const SignalKindList = "started, finished, completed, failed, progress, needs_input"

// Signal results (docs/architecture.md#internal-api).
const (
	ResultApplied      = "applied"
	ResultStaleAttempt = "stale_attempt"
	ResultDuplicate    = "duplicate"
	ResultOutOfOrder   = "out_of_order"
	ResultStaleOffer   = "stale_offer"
	ResultIgnored      = "ignored"
)

// Signal is the body of POST /api/internal/runs/{id}/signals; the uplink
// `signal` frame carries the same fields plus run_id. Attempt is a pointer
// so that a missing attempt is told apart from attempt 0.
type Signal struct {
	Kind      string          `json:"kind"`
	Attempt   *int            `json:"attempt"`
	Seq       *int64          `json:"seq,omitempty"`
	Source    string          `json:"source"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	Timestamp *time.Time      `json:"timestamp"`
}

// SignalResult is the answer of a signal.
type SignalResult struct {
	Result string `json:"result"`
}

// Dispatch is what the worker writes to <data>/worker/dispatch/<run_id>.json
// (0600) for `pam exec run`: nothing secret or large travels on the tmux
// command line or in the tmux server's environment.
type Dispatch struct {
	RunID       string   `json:"run_id"`
	Attempt     int      `json:"attempt"`
	APIURL      string   `json:"api_url"`
	SignalToken string   `json:"signal_token"`
	Provider    string   `json:"provider"`
	Binary      string   `json:"binary"` // absolute path resolved by the worker
	TaskID      string   `json:"task_id"`
	TaskTitle   string   `json:"task_title"`
	Prompt      string   `json:"prompt"`
	Args        []string `json:"args"`
	Cwd         string   `json:"cwd"`
	SessionName string   `json:"session_name"`
	// WorkerDataDir is where hooks and the wrapper find the spool.
	WorkerDataDir string `json:"worker_data_dir"`
	// CAFile is PAM_CA_FILE, when the worker trusts an extra CA.
	CAFile string `json:"ca_file,omitempty"`
	// Resume says the CLI resumes the conversation AgentSessionID with
	// its provider's resume_args instead of starting afresh with the
	// prompt: the orchestrator asked for it and the worker found the
	// conversation's worktree here. ResumeText is the resumed CLI's
	// message; empty means the provider's continue_message
	// (docs/architecture.md#resume-and-continue).
	Resume         bool   `json:"resume,omitempty"`
	AgentSessionID string `json:"agent_session_id,omitempty"`
	ResumeText     string `json:"resume_text,omitempty"`
	// PassEnv holds the values, from the worker's environment, of the
	// variables the provider's pass_env and PAM_PASS_ENV name: the CLI's
	// credentials reach it through this 0600 file, never a command line
	// or the tmux server's environment. Unset variables are absent.
	PassEnv map[string]string `json:"pass_env,omitempty"`
	// Worktree is set when Cwd is the worktree the worker made for this
	// run (<data>/worktrees/<run_id>, docs/architecture.md#workspaces):
	// the only folders the wrapper marks trusted for the CLI.
	Worktree string `json:"worktree,omitempty"`
}
