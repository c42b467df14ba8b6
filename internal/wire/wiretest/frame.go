// Package wiretest reads uplink frames loosely, for tests' assertions
// about what a peer sent: one struct with every field any frame type
// carries, decoded without the strict per-type rules of wire.DecodeFrame
// (which the fakes run first, to check what they receive). Production
// code never uses it: each frame type is its own struct in wire.
package wiretest

import (
	"encoding/json"
	"time"

	"pam/internal/wire"
)

// Frame is any uplink frame, read loosely: Type says which fields mean
// something.
type Frame struct {
	Type string `json:"type"`

	// Shared by many frames.
	RunID     string     `json:"run_id,omitempty"`
	Attempt   *int       `json:"attempt,omitempty"`
	Timestamp *time.Time `json:"timestamp,omitempty"`

	// heartbeat
	HostID     string `json:"host_id,omitempty"`
	InstanceID string `json:"instance_id,omitempty"`

	// run_dispatch
	TaskID      string   `json:"task_id,omitempty"`
	Provider    string   `json:"provider,omitempty"`
	SessionName string   `json:"session_name,omitempty"`
	Cwd         string   `json:"cwd,omitempty"`
	Prompt      string   `json:"prompt,omitempty"`
	Args        []string `json:"args,omitempty"`
	TaskTitle   string   `json:"task_title,omitempty"`
	SignalToken string   `json:"signal_token,omitempty"`
	// AgentSessionID: the conversation this attempt resumes, set only
	// when the orchestrator asks for a resume; the resume's message, when
	// the run brings one (a continuation's text), travels in Text
	// (docs/architecture.md#resume-and-continue).
	AgentSessionID string `json:"agent_session_id,omitempty"`

	// run_dispatch_ack
	Accepted *bool  `json:"accepted,omitempty"`
	Reason   string `json:"reason,omitempty"`

	// run_stop
	Force bool `json:"force,omitempty"`

	// send_keys
	Keys []wire.Key `json:"keys,omitempty"`

	// signal / signal_ack
	Kind    string          `json:"kind,omitempty"`
	Seq     *int64          `json:"seq,omitempty"`
	Source  string          `json:"source,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Result  string          `json:"result,omitempty"`

	// snapshot
	Capture string `json:"capture,omitempty"`

	// log_chunk / log_request
	Text      string `json:"text,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	Offset    *int64 `json:"offset,omitempty"`
	EOF       bool   `json:"eof,omitempty"`

	// run_state
	State  string `json:"state,omitempty"`
	Detail string `json:"detail,omitempty"`

	// screen (and text): what the screen asks, and whether the agent is
	// busy (docs/architecture.md#the-screen-is-read).
	Attention string        `json:"attention,omitempty"`
	Working   bool          `json:"working,omitempty"`
	Choices   []wire.Choice `json:"choices,omitempty"`
	ResetsAt  *time.Time    `json:"resets_at,omitempty"`

	// workspace_* (docs/architecture.md#workspaces); run_dispatch carries
	// repo, project_id and workspace when the run wants a worktree.
	Op        string          `json:"op,omitempty"`
	Repo      *wire.Repo      `json:"repo,omitempty"`
	ProjectID string          `json:"project_id,omitempty"`
	Workspace *wire.Workspace `json:"workspace,omitempty"`
	OK        *bool           `json:"ok,omitempty"`
	// Part and Commit: workspace_request's diff part, and the commit a
	// push must find the branch at; Commit on workspace_reply is the
	// branch's head the diff was taken at.
	Part   string `json:"part,omitempty"`
	Commit string `json:"commit,omitempty"`

	// attach_*
	AttachID string `json:"attach_id,omitempty"`
	Bytes    []byte `json:"bytes,omitempty"` // base64 in JSON
	Rows     int    `json:"rows,omitempty"`
	Cols     int    `json:"cols,omitempty"`

	// error (also signal_ack with an error code)
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Decode reads one frame loosely.
func Decode(b []byte) (Frame, error) {
	var f Frame
	err := json.Unmarshal(b, &f)
	return f, err
}

// Of is a typed frame as Decode reads its encoding.
func Of(f wire.Frame) Frame {
	b, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	out, err := Decode(b)
	if err != nil {
		panic(err)
	}
	return out
}
