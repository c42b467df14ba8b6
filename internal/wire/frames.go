package wire

import (
	"encoding/json"
	"time"
)

// Frame is one uplink frame (docs/architecture.md#uplink-frames): a
// struct per frame type, each holding exactly the fields its type
// carries. Type names it on the wire; Validate checks its contents
// without state. Encoding (json.Marshal) writes the type first; Decode
// reads it back strictly.
type Frame interface {
	Type() string
	Validate() error
}

// List is a frame's list field: never omitted, and [] rather than null
// when empty, so that a reader never tells "absent" from "empty".
type List[T any] []T

// MarshalJSON writes nil as [].
func (l List[T]) MarshalJSON() ([]byte, error) {
	if l == nil {
		return []byte("[]"), nil
	}
	return json.Marshal([]T(l))
}

// Every frame lists the fields the contract names for its type without
// omitempty: they are on the wire even when empty (null, "", [], false
// or 0). The optional ones (a signal_ack's result or code, a log_chunk's
// request_id and eof, an error's run_id, a dispatch's workspace and
// resume) are left out when empty.

// Orchestrator → worker.

// HeartbeatAckFrame answers a heartbeat (and opens every uplink).
type HeartbeatAckFrame struct {
	Timestamp *time.Time `json:"timestamp"`
}

// RunDispatchFrame offers a run's attempt to the worker. Repo, ProjectID
// and Workspace come when the run wants a worktree; AgentSessionID when
// the attempt resumes a conversation, and Text with it when the resume
// brings a message (docs/architecture.md#resume-and-continue).
type RunDispatchFrame struct {
	RunID          string       `json:"run_id"`
	TaskID         string       `json:"task_id"`
	Provider       string       `json:"provider"`
	SessionName    string       `json:"session_name"`
	Attempt        *int         `json:"attempt"`
	Cwd            string       `json:"cwd"`
	Prompt         string       `json:"prompt"`
	Args           List[string] `json:"args"`
	TaskTitle      string       `json:"task_title"`
	SignalToken    string       `json:"signal_token"`
	Repo           *Repo        `json:"repo,omitempty"`
	ProjectID      string       `json:"project_id,omitempty"`
	Workspace      *Workspace   `json:"workspace,omitempty"`
	AgentSessionID string       `json:"agent_session_id,omitempty"`
	Text           string       `json:"text,omitempty"`
}

// RunStopFrame stops a run's session (force: without the graceful ladder).
type RunStopFrame struct {
	RunID   string `json:"run_id"`
	Attempt *int   `json:"attempt"`
	Force   bool   `json:"force"`
}

// SendKeysFrame types keys into a run's pane (docs/api.md#keys).
type SendKeysFrame struct {
	RunID   string    `json:"run_id"`
	Attempt *int      `json:"attempt"`
	Keys    List[Key] `json:"keys"`
}

// SignalAckFrame answers a signal frame: Result as POST signals would,
// or Code and Message when it was refused.
type SignalAckFrame struct {
	RunID   string `json:"run_id"`
	Attempt *int   `json:"attempt"`
	Kind    string `json:"kind"`
	Seq     *int64 `json:"seq"`
	Result  string `json:"result,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// AttachOpenFrame opens a terminal relay to a run's session; no size
// means the worker's default.
type AttachOpenFrame struct {
	AttachID    string `json:"attach_id"`
	RunID       string `json:"run_id"`
	SessionName string `json:"session_name"`
	Rows        int    `json:"rows"`
	Cols        int    `json:"cols"`
}

// AttachInputFrame carries keystrokes to a relay (base64 in JSON).
type AttachInputFrame struct {
	AttachID string `json:"attach_id"`
	Bytes    []byte `json:"bytes"`
}

// AttachResizeFrame resizes a relay's terminal.
type AttachResizeFrame struct {
	AttachID string `json:"attach_id"`
	Rows     int    `json:"rows"`
	Cols     int    `json:"cols"`
}

// AttachCloseFrame closes a relay.
type AttachCloseFrame struct {
	AttachID string `json:"attach_id"`
}

// LogRequestFrame asks for a run's log from Offset.
type LogRequestFrame struct {
	RequestID string `json:"request_id"`
	RunID     string `json:"run_id"`
	Offset    *int64 `json:"offset"`
}

// ErrorFrame refuses a frame; RunID names the run of the frame refused,
// when it named a valid one.
type ErrorFrame struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	RunID   string `json:"run_id,omitempty"`
}

// PaneWatchFrame: a viewer watches the run's pane; the worker captures
// it at the full rate for PaneWatchTTL.
type PaneWatchFrame struct {
	RunID   string `json:"run_id"`
	Attempt *int   `json:"attempt"`
}

// WorkspaceRequestFrame asks for a diff, a stat, a push or a removal of
// a run's worktree. Part is a diff's part; Commit the head a push must
// find the branch at.
type WorkspaceRequestFrame struct {
	RequestID string `json:"request_id"`
	RunID     string `json:"run_id"`
	Op        string `json:"op"`
	Part      string `json:"part,omitempty"`
	Commit    string `json:"commit,omitempty"`
}

// Worker → orchestrator.

// HeartbeatFrame keeps the host online; the first frame of an uplink.
type HeartbeatFrame struct {
	HostID     string     `json:"host_id"`
	InstanceID string     `json:"instance_id"`
	Timestamp  *time.Time `json:"timestamp"`
}

// RunDispatchAckFrame takes or declines a run_dispatch.
type RunDispatchAckFrame struct {
	RunID    string `json:"run_id"`
	Attempt  *int   `json:"attempt"`
	Accepted *bool  `json:"accepted"`
	Reason   string `json:"reason"`
}

// SnapshotFrame carries a capture of a run's pane.
type SnapshotFrame struct {
	RunID     string     `json:"run_id"`
	Attempt   *int       `json:"attempt"`
	Capture   string     `json:"capture"`
	Timestamp *time.Time `json:"timestamp"`
}

// SignalFrame is POST /api/internal/runs/{id}/signals over the uplink.
type SignalFrame struct {
	RunID     string          `json:"run_id"`
	Kind      string          `json:"kind"`
	Attempt   *int            `json:"attempt"`
	Seq       *int64          `json:"seq"`
	Source    string          `json:"source"`
	Payload   json.RawMessage `json:"payload"`
	Timestamp *time.Time      `json:"timestamp"`
}

// LogChunkFrame carries part of a run's log; RequestID names the
// log_request it answers, EOF ends the answer.
type LogChunkFrame struct {
	RunID     string     `json:"run_id"`
	Text      string     `json:"text"`
	Timestamp *time.Time `json:"timestamp"`
	RequestID string     `json:"request_id,omitempty"`
	EOF       bool       `json:"eof,omitempty"`
}

// RunStateFrame reports what the worker saw of a run's session.
type RunStateFrame struct {
	RunID   string `json:"run_id"`
	Attempt *int   `json:"attempt"`
	State   string `json:"state"`
	Detail  string `json:"detail"`
}

// AttachOutputFrame carries a relay's output (base64 in JSON).
type AttachOutputFrame struct {
	AttachID string `json:"attach_id"`
	Bytes    []byte `json:"bytes"`
}

// AttachClosedFrame: a relay ended, and why.
type AttachClosedFrame struct {
	AttachID string `json:"attach_id"`
	Reason   string `json:"reason"`
}

// ScreenFrame: what the worker read on a run's screen changed
// (docs/architecture.md#the-screen-is-read).
type ScreenFrame struct {
	RunID     string       `json:"run_id"`
	Attempt   *int         `json:"attempt"`
	Attention string       `json:"attention"`
	Working   bool         `json:"working"`
	Text      string       `json:"text"`
	Choices   List[Choice] `json:"choices"`
	ResetsAt  *time.Time   `json:"resets_at"`
}

// WorkspaceReplyFrame answers a workspace_request: text chunks until
// EOF, or an error Code; Commit is the branch's head a diff was taken at.
type WorkspaceReplyFrame struct {
	RequestID string `json:"request_id"`
	RunID     string `json:"run_id"`
	Text      string `json:"text"`
	EOF       bool   `json:"eof"`
	Code      string `json:"code,omitempty"`
	Message   string `json:"message,omitempty"`
	Commit    string `json:"commit,omitempty"`
}

// WorkspaceReadyFrame reports a worktree made for an attempt.
type WorkspaceReadyFrame struct {
	RunID     string     `json:"run_id"`
	Attempt   *int       `json:"attempt"`
	Workspace *Workspace `json:"workspace"`
}

// WorkspaceRemovedFrame reports a worktree removed.
type WorkspaceRemovedFrame struct {
	RunID     string     `json:"run_id"`
	Workspace *Workspace `json:"workspace"`
	Reason    string     `json:"reason"`
}

// WorkspacePushedFrame reports the outcome of a push.
type WorkspacePushedFrame struct {
	RunID     string     `json:"run_id"`
	Workspace *Workspace `json:"workspace"`
	OK        *bool      `json:"ok"`
	Detail    string     `json:"detail"`
}
