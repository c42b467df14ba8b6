package wire

import (
	"encoding/json"
	"fmt"
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

	// attach_*
	AttachID string `json:"attach_id,omitempty"`
	Bytes    []byte `json:"bytes,omitempty"` // base64 in JSON
	Rows     int    `json:"rows,omitempty"`
	Cols     int    `json:"cols,omitempty"`

	// error (also signal_ack with an error code)
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
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
	if f.Type == "" {
		return f, fmt.Errorf("frame without a type")
	}
	if _, ok := frameChecks[f.Type]; !ok {
		return f, fmt.Errorf("unknown frame type %s", quote(f.Type))
	}
	return f, nil
}
