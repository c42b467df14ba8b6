// Package wire holds the types that cross pam's boundaries: the REST objects
// of docs/api.md#resources, events, the error envelope and a typed client. The server,
// the CLI and the tests all speak through these, so a field renamed here is
// renamed everywhere at once.
package wire

import (
	"encoding/json"
	"time"
)

// A project's status: active, or archived (soft-deleted: read-only, listed
// only when asked, and can be made active again).
const (
	ProjectActive   = "active"
	ProjectArchived = "archived"
)

// Project is a unit of planning that owns a tree of work items.
type Project struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Slug        string `json:"slug"`
	Description string `json:"description"`
	Status      string `json:"status"`
	AutoDone    bool   `json:"auto_done"`
	// AutoContinue sends a running agent stopped at a usage limit its
	// provider's continue message when the limit resets
	// (docs/architecture.md#continue-when-a-limit-resets).
	AutoContinue bool      `json:"auto_continue"`
	Repo         *Repo     `json:"repo"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// WorkItem is one node of a project's plan. Path is the chain of ids from
// the root to the item joined by "/", maintained by the server.
type WorkItem struct {
	ID        string    `json:"id"`
	ProjectID string    `json:"project_id"`
	ParentID  *string   `json:"parent_id"`
	Kind      string    `json:"kind"`
	Title     string    `json:"title"`
	Body      string    `json:"body"`
	Status    string    `json:"status"`
	Path      string    `json:"path"`
	Position  int       `json:"position"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Run is one execution of an agent CLI against a task, across attempts.
type Run struct {
	ID               string     `json:"id"`
	TaskID           string     `json:"task_id"`
	ProjectID        string     `json:"project_id"`
	Provider         string     `json:"provider"`
	HostID           *string    `json:"host_id"`
	TargetHostID     *string    `json:"target_host_id"`
	Status           string     `json:"status"`
	Attempt          int        `json:"attempt"`
	MaxAttempts      int        `json:"max_attempts"`
	FailureReason    *string    `json:"failure_reason"`
	ExitCode         *int       `json:"exit_code"`
	SessionName      string     `json:"session_name"`
	Cwd              string     `json:"cwd"`
	Prompt           string     `json:"prompt"`
	Args             []string   `json:"args"`
	PendingSince     *time.Time `json:"pending_since"`
	NextAttemptAt    *time.Time `json:"next_attempt_at"`
	StartedAt        *time.Time `json:"started_at"`
	FinishedAt       *time.Time `json:"finished_at"`
	CompletedAt      *time.Time `json:"completed_at"`
	CompletionSource *string    `json:"completion_source"`
	// Attention says whether the run waits for a person (Attention*);
	// AttentionSince is when it last became other than none (null while
	// none).
	Attention      string     `json:"attention"`
	AttentionSince *time.Time `json:"attention_since"`
	// AttentionDetail is what the run is asked while it waits for a
	// person (the question, its choices, when a limit resets); null
	// otherwise.
	AttentionDetail *AttentionDetail `json:"attention_detail"`
	// AgentSessionID is the CLI's own conversation id, as its hooks
	// report it; ContinuesRunID the run this one continues.
	AgentSessionID *string    `json:"agent_session_id"`
	ContinuesRunID *string    `json:"continues_run_id"`
	Workspace      *Workspace `json:"workspace"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	// LastInputAt is the latest input into the live run (its start,
	// keys, a message, an attach): the server's bookkeeping for telling
	// a waiting agent from a hung one, not on the wire.
	LastInputAt *time.Time `json:"-"`
	// StatusSource is who decided the current status (wrapper,
	// provider-hook, manual): the server's bookkeeping, not on the wire.
	StatusSource *string `json:"-"`
}

// Host is an execution host of the fleet.
type Host struct {
	ID              string     `json:"id"`
	Name            string     `json:"name"`
	Platform        string     `json:"platform"`
	Status          string     `json:"status"`
	Disabled        bool       `json:"disabled"`
	InstanceID      *string    `json:"instance_id"`
	InstanceSuspect bool       `json:"instance_suspect"`
	LastSeenAt      *time.Time `json:"last_seen_at"`
	Providers       []string   `json:"providers"`
	MaxRuns         int        `json:"max_runs"`
	Executor        string     `json:"executor"`
	ActiveRuns      int        `json:"active_runs"`
	CreatedAt       time.Time  `json:"created_at"`
	UpdatedAt       time.Time  `json:"updated_at"`
}

// HeaderEventSeq is the header of every REST GET answer: the journal
// position its read saw (docs/api.md#server-sent-events). A client that
// loads state and then streams ?after=<it> misses no event.
const HeaderEventSeq = "Pam-Event-Seq"

// Event is one entry of the journal. Seq orders all events totally.
type Event struct {
	Seq       int64   `json:"seq"`
	Topic     string  `json:"topic"`
	RunID     *string `json:"run_id"`
	ProjectID *string `json:"project_id"`
	HostID    *string `json:"host_id"`
	// Actor names who caused the event: agent:<first 8 hex of the run
	// id> for pam's tools for the agent; null when nobody in particular
	// (workers, signals) or not recorded.
	Actor     *string         `json:"actor"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
}

// Snapshot is the data of the SSE "snapshot" event sent to a subscriber
// whose cursor was purged: the state it can no longer rebuild from events.
type Snapshot struct {
	Reason string `json:"reason"`
	Runs   []Run  `json:"runs"`
	Hosts  []Host `json:"hosts"`
}

// ProjectList, WorkItemList and EventList are the list envelopes of docs/api.md#resources.
type ProjectList struct {
	Projects []Project `json:"projects"`
}

// WorkItemList is the body of GET /projects/{ref}/work-items.
type WorkItemList struct {
	WorkItems []WorkItem `json:"work_items"`
}

// EventList is the body of GET /events.
type EventList struct {
	Events []Event `json:"events"`
}

// CreateProject is the body of POST /projects.
type CreateProject struct {
	Name         string     `json:"name"`
	Slug         *string    `json:"slug,omitempty"`
	Description  *string    `json:"description,omitempty"`
	AutoDone     *bool      `json:"auto_done,omitempty"`
	AutoContinue *bool      `json:"auto_continue,omitempty"`
	Repo         *RepoInput `json:"repo,omitempty"`
}

// UpdateProject is the body of PATCH /projects/{ref}; nil fields are kept.
type UpdateProject struct {
	Name         *string `json:"name,omitempty"`
	Description  *string `json:"description,omitempty"`
	AutoDone     *bool   `json:"auto_done,omitempty"`
	AutoContinue *bool   `json:"auto_continue,omitempty"`
	// Repo: absent keeps it, null removes it.
	Repo OptionalRepo `json:"repo,omitzero"`
}

// CreateWorkItem is the body of POST /projects/{ref}/work-items.
type CreateWorkItem struct {
	Kind     string  `json:"kind"`
	Title    string  `json:"title"`
	Body     *string `json:"body,omitempty"`
	ParentID *string `json:"parent_id,omitempty"`
	Status   *string `json:"status,omitempty"`
}

// UpdateWorkItem is the body of PATCH /work-items/{id}. ParentID
// distinguishes "absent" (keep) from JSON null (move to the root).
type UpdateWorkItem struct {
	Title    *string  `json:"title,omitempty"`
	Body     *string  `json:"body,omitempty"`
	Status   *string  `json:"status,omitempty"`
	Position *int     `json:"position,omitempty"`
	ParentID Optional `json:"parent_id,omitzero"`
}

// Optional is a nullable string that remembers whether it was present in
// the JSON at all, so PATCH can tell "parent_id": null from no parent_id.
type Optional struct {
	Set   bool
	Value *string
}

// UnmarshalJSON records presence; null leaves Value nil.
func (o *Optional) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		o.Value = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	o.Value = &s
	return nil
}

// MarshalJSON writes the value or null.
func (o Optional) MarshalJSON() ([]byte, error) {
	if o.Value == nil {
		return []byte("null"), nil
	}
	return json.Marshal(*o.Value)
}

// IsZero lets omitzero drop an absent Optional when encoding.
func (o Optional) IsZero() bool { return !o.Set }

// Health is the body of GET /healthz.
type Health struct {
	Status string `json:"status"`
}
