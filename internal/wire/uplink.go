package wire

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// MaxFrame bounds every uplink and WebSocket frame (docs/architecture.md#internal-api, docs/architecture.md#security-model).
const MaxFrame = 1 << 20

// Uplink frame types (docs/architecture.md#internal-api). Orchestrator → worker:
const (
	FrameHeartbeatAck = "heartbeat_ack"
	FrameRunDispatch  = "run_dispatch"
	FrameRunStop      = "run_stop"
	FrameSendKeys     = "send_keys"
	FrameSignalAck    = "signal_ack"
	FrameAttachOpen   = "attach_open"
	FrameAttachInput  = "attach_input"
	FrameAttachResize = "attach_resize"
	FrameAttachClose  = "attach_close"
	FrameLogRequest   = "log_request"
	FrameError        = "error"
	// FramePaneWatch: a viewer watches the run's pane (pane/ws); the
	// worker refreshes it faster than PAM_CAPTURE_INTERVAL for
	// PaneWatchTTL (docs/architecture.md#capture-by-control-mode).
	FramePaneWatch = "pane_watch"
)

// A watched pane's refresh: the server repeats pane_watch every
// PaneWatchRefresh while a viewer's socket is open, and the worker keeps
// the pane watched for PaneWatchTTL after the last one, so that no
// "unwatch" is needed and a worker that reconnects catches up by itself.
const (
	PaneWatchRefresh = 10 * time.Second
	PaneWatchTTL     = 3 * PaneWatchRefresh
)

// Worker → orchestrator:
const (
	FrameHeartbeat      = "heartbeat"
	FrameRunDispatchAck = "run_dispatch_ack"
	FrameSnapshot       = "snapshot"
	FrameSignal         = "signal"
	FrameLogChunk       = "log_chunk"
	FrameRunState       = "run_state"
	FrameAttachOutput   = "attach_output"
	FrameAttachClosed   = "attach_closed"
	// FrameScreen: what the worker read on a run's screen changed — a
	// question (needs_input, with its text and choices), a usage limit
	// (rate_limited, with resets_at), a busy agent (working) or none of
	// them (docs/architecture.md#the-screen-is-read).
	FrameScreen = "screen"
)

// run_state states.
const (
	StateSessionLost    = "session_lost"
	StateSpawnFailed    = "spawn_failed"
	StateTmuxCrash      = "tmux_crash"
	StateStaleSession   = "stale_session"
	StateOrphanDetected = "orphan_detected"
	// StateWrapperDied: the session's pane is dead (its process, the
	// wrapper, exited) and no finished signal came; the run fails
	// wrapper_died (docs/architecture.md#run-status-machine). An orphan_detected without run_id reports a
	// session that maps to no run of this host.
	StateWrapperDied = "wrapper_died"
	// StateIdle: the worker's capture saw the run's pane unchanged for
	// PAM_IDLE_AFTER; a running run's attention becomes idle
	// (docs/architecture.md#attention). A pane change (the next snapshot)
	// clears it.
	StateIdle = "idle"
)

// Frame is the union of every uplink frame: Type says which fields mean
// something. One flat struct keeps encoding symmetric and lets a decoder
// reject unknown fields.
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
	Keys []Key `json:"keys,omitempty"`

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
	Attention string     `json:"attention,omitempty"`
	Working   bool       `json:"working,omitempty"`
	Choices   []Choice   `json:"choices,omitempty"`
	ResetsAt  *time.Time `json:"resets_at,omitempty"`

	// workspace_* (docs/architecture.md#workspaces); run_dispatch carries
	// repo, project_id and workspace when the run wants a worktree.
	Op        string     `json:"op,omitempty"`
	Repo      *Repo      `json:"repo,omitempty"`
	ProjectID string     `json:"project_id,omitempty"`
	Workspace *Workspace `json:"workspace,omitempty"`
	OK        *bool      `json:"ok,omitempty"`
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

// frameCarries names, per frame type, the fields the contract lists for it
// (docs/architecture.md#internal-api): these are on the wire even when
// empty — null, "", [], false or 0 — so a reader never tells "absent"
// from "empty". Optional fields (a signal_ack's result or code, a
// log_chunk's request_id and eof, an error's run_id) stay omitted when
// empty.
var frameCarries = map[string][]string{
	FrameHeartbeatAck:   {"timestamp"},
	FrameRunDispatch:    {"run_id", "task_id", "provider", "session_name", "attempt", "cwd", "prompt", "args", "task_title", "signal_token"},
	FrameRunStop:        {"run_id", "attempt", "force"},
	FrameSendKeys:       {"run_id", "attempt", "keys"},
	FrameSignalAck:      {"run_id", "attempt", "kind", "seq"},
	FrameAttachOpen:     {"attach_id", "run_id", "session_name", "rows", "cols"},
	FrameAttachInput:    {"attach_id", "bytes"},
	FrameAttachResize:   {"attach_id", "rows", "cols"},
	FrameAttachClose:    {"attach_id"},
	FrameLogRequest:     {"request_id", "run_id", "offset"},
	FrameError:          {"code", "message"},
	FramePaneWatch:      {"run_id", "attempt"},
	FrameHeartbeat:      {"host_id", "instance_id", "timestamp"},
	FrameRunDispatchAck: {"run_id", "attempt", "accepted", "reason"},
	FrameSnapshot:       {"run_id", "attempt", "capture", "timestamp"},
	FrameSignal:         {"run_id", "kind", "attempt", "seq", "source", "payload", "timestamp"},
	FrameLogChunk:       {"run_id", "text", "timestamp"},
	FrameRunState:       {"run_id", "attempt", "state", "detail"},
	FrameAttachOutput:   {"attach_id", "bytes"},
	FrameAttachClosed:   {"attach_id", "reason"},
	FrameScreen:         {"run_id", "attempt", "attention", "working", "text", "choices", "resets_at"},
	// Workspace frames (workspace.go).
	FrameWorkspaceRequest: {"request_id", "run_id", "op"},
	FrameWorkspaceReply:   {"request_id", "run_id", "text", "eof"},
	FrameWorkspaceReady:   {"run_id", "attempt", "workspace"},
	FrameWorkspaceRemoved: {"run_id", "workspace", "reason"},
	FrameWorkspacePushed:  {"run_id", "workspace", "ok", "detail"},
}

// emptyJSON is how a field of Frame is spelled when it is empty.
func emptyJSON(field string) string {
	switch field {
	case "attempt", "timestamp", "accepted", "seq", "offset", "payload", "workspace", "repo", "ok", "resets_at":
		return "null"
	case "args", "keys", "choices":
		return "[]"
	case "force", "eof", "working":
		return "false"
	case "rows", "cols":
		return "0"
	default:
		return `""`
	}
}

// FrameCarries lists the fields a frame of type typ always carries.
func FrameCarries(typ string) []string { return slices.Clone(frameCarries[typ]) }

// MarshalJSON encodes f with every field its type carries, empty ones
// included (frameCarries), and no other empty field.
func (f Frame) MarshalJSON() ([]byte, error) {
	type plain Frame
	b, err := json.Marshal(plain(f))
	if err != nil {
		return nil, err
	}
	carries := frameCarries[f.Type]
	if len(carries) == 0 {
		return b, nil
	}
	var extra []byte
	for _, field := range frameFields {
		if slices.Contains(carries, field.name) && !field.set(&f) {
			extra = append(extra, `,"`+field.name+`":`+emptyJSON(field.name)...)
		}
	}
	if len(extra) == 0 {
		return b, nil
	}
	out := make([]byte, 0, len(b)+len(extra))
	out = append(out, b[:len(b)-1]...) // b is an object: {"type":...}
	out = append(out, extra...)
	return append(out, '}'), nil
}

// IntPtr is a small helper for the optional ints of frames.
func IntPtr(n int) *int { return &n }

// DecodeFrame parses one frame, refusing oversized input, unknown fields
// and unknown types. It checks the shape only; Validate checks the
// contents, so that a receiver can answer a frame it could read but not
// take (a refused run_dispatch is acked, a refused signal is
// signal_acked).
func DecodeFrame(b []byte) (Frame, error) {
	var f Frame
	if len(b) > MaxFrame {
		return f, fmt.Errorf("frame of %d bytes exceeds %d", len(b), MaxFrame)
	}
	if err := decodeStrictBytes(b, &f); err != nil {
		return f, err
	}
	if string(f.Payload) == "null" {
		f.Payload = nil // an empty payload, as a carried field spells it
	}
	if f.Type == "" {
		return f, fmt.Errorf("frame without a type")
	}
	if _, ok := frameChecks[f.Type]; !ok {
		return f, fmt.Errorf("unknown frame type %s", quote(f.Type))
	}
	return f, nil
}
