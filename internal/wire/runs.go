package wire

import "time"

// Run statuses (docs/architecture.md#run-status-machine).
const (
	RunPending  = "pending"
	RunSpawning = "spawning"
	RunRunning  = "running"
	RunExited   = "exited"
	RunFailed   = "failed"
	RunStopped  = "stopped"
)

// Failure reasons (docs/architecture.md#run-status-machine).
const (
	FailNoEligibleHost  = "no_eligible_host"
	FailDispatchTimeout = "dispatch_timeout"
	FailExitNonzero     = "exit_nonzero"
	FailProviderFailed  = "provider_failed"
	FailSpawnFailed     = "spawn_failed"
	FailSessionLost     = "session_lost"
	FailTmuxCrash       = "tmux_crash"
	FailWrapperDied     = "wrapper_died"
	FailCLIHang         = "cli_hang"
	FailHostLost        = "host_lost"
)

// StopCompletedIdle is run.stopped's source when pam stopped a run whose
// agent completed its turn and then had no input and no pane change for
// PAM_COMPLETED_STOP_AFTER (docs/architecture.md#working-waiting-hung); a
// stop by an operator has source manual.
const StopCompletedIdle = "completed_idle"

// Attention values of a run (docs/architecture.md#attention): whether a
// live run waits for a person. Only a running run has one other than none.
const (
	AttentionNone       = "none"
	AttentionNeedsInput = "needs_input"
	// AttentionRateLimited: the provider's usage or rate limit stopped
	// the agent; it waits for the limit to reset (or a person).
	AttentionRateLimited = "rate_limited"
	AttentionIdle        = "idle"
)

// Attention sources: what set or cleared a run's attention, journaled in
// run.attention's source. A needs_input set by a signal carries the
// signal's own source (provider-hook).
const (
	// AttentionSourcePane: the worker's capture saw the pane unchanged for
	// PAM_IDLE_AFTER (idle), or saw it change (none).
	AttentionSourcePane = "pane"
	// AttentionSourceKeys: input through POST /runs/{id}/keys.
	AttentionSourceKeys = "keys"
	// AttentionSourceAttach: input through the attach socket.
	AttentionSourceAttach = "attach"
	// AttentionSourceStatus: the run left running.
	AttentionSourceStatus = "status"
	// AttentionSourceScreen: the worker read a question (or its end) on
	// the captured screen (docs/architecture.md#the-screen-is-read).
	AttentionSourceScreen = "screen"
	// AttentionSourceMessage: a message delivered into the agent's input.
	AttentionSourceMessage = "message"
	// AttentionSourceAnswer: a notification's answer URL pressed a choice.
	AttentionSourceAnswer = "answer"
)

// AttentionDetail is what a run that waits for a person is asked:
// attention_detail of the Run object, null while it waits for nothing.
type AttentionDetail struct {
	// Source is what set the attention (AttentionSource*, provider-hook).
	Source string `json:"source"`
	// Text is the question as plain text, at most MaxAttentionText bytes.
	Text string `json:"text"`
	// Choices are the answers the screen offers, each pressed by its key
	// (a key of the keys allowlist); [] when none were read.
	Choices []Choice `json:"choices"`
	// ResetsAt is when a usage limit resets, when the message names it.
	ResetsAt *time.Time `json:"resets_at"`
}

// Choice is one answer of a question: the key that picks it and its label.
type Choice struct {
	Key   string `json:"key"`
	Label string `json:"label"`
}

// MaxAttentionText bounds AttentionDetail.Text (and each choice label).
const MaxAttentionText = 1000

// ValidAttention reports whether a is an attention value.
func ValidAttention(a string) bool {
	return a == AttentionNone || a == AttentionNeedsInput || a == AttentionRateLimited || a == AttentionIdle
}

// CreateRun is the body of POST /runs.
type CreateRun struct {
	TaskID      string   `json:"task_id"`
	Provider    string   `json:"provider"`
	HostID      *string  `json:"host_id,omitempty"`
	Cwd         *string  `json:"cwd,omitempty"`
	Prompt      *string  `json:"prompt,omitempty"`
	Args        []string `json:"args,omitempty"`
	MaxAttempts *int     `json:"max_attempts,omitempty"`
	// Workspace is "worktree" or "none"; absent means worktree when the
	// project has a repo and no cwd is given.
	Workspace *string `json:"workspace,omitempty"`
}

// StopRun is the body of POST /runs/{id}/stop.
type StopRun struct {
	Force bool `json:"force,omitempty"`
}

// RunList is the body of GET /runs.
type RunList struct {
	Runs []Run `json:"runs"`
	// Next is the ?before= of the following page, null on the last.
	Next *string `json:"next"`
}

// Pane is the body of GET /runs/{id}/pane.
type Pane struct {
	RunID     string     `json:"run_id"`
	Seq       int64      `json:"seq"`
	Capture   string     `json:"capture"`
	Timestamp *time.Time `json:"timestamp"`
}

// Key is one entry of POST /runs/{id}/keys: exactly one of Key (a named
// key pressed), Text (typed key by key) or Paste (one bracketed paste),
// docs/api.md#keys.
type Key struct {
	Key   string `json:"key,omitempty"`
	Text  string `json:"text,omitempty"`
	Paste string `json:"paste,omitempty"`
}

// SendKeys is the body of POST /runs/{id}/keys.
type SendKeys struct {
	Keys []Key `json:"keys"`
}

// KeysResult is the answer of POST /runs/{id}/keys.
type KeysResult struct {
	Delivery string `json:"delivery"` // DeliveryObserved | DeliveryUnconfirmed
}

// Deliveries of a keys request: observed when the pane changed within two
// capture intervals after the keys went in, unconfirmed otherwise.
const (
	DeliveryObserved    = "observed"
	DeliveryUnconfirmed = "unconfirmed"
)

// HostList is the body of GET /hosts.
type HostList struct {
	Hosts []Host `json:"hosts"`
}

// CreateHost is the body of POST /hosts.
type CreateHost struct {
	Name    string `json:"name"`
	MaxRuns *int   `json:"max_runs,omitempty"`
}

// UpdateHost is the body of PATCH /hosts/{ref}. MaxRuns is a pointer so
// that a body without it is refused rather than read as 0.
type UpdateHost struct {
	MaxRuns *int `json:"max_runs"`
}

// HostCreated is the answer of POST /hosts: the only time the worker token
// is shown.
type HostCreated struct {
	Host        Host   `json:"host"`
	WorkerToken string `json:"worker_token"`
}

// WorkerToken is the answer of POST /hosts/{ref}/rotate-token.
type WorkerToken struct {
	WorkerToken string `json:"worker_token"`
}

// ProviderHosts is one entry of GET /providers.
type ProviderHosts struct {
	Name  string   `json:"name"`
	Hosts []string `json:"hosts"`
}

// ProviderList is the body of GET /providers.
type ProviderList struct {
	Providers []ProviderHosts `json:"providers"`
}
