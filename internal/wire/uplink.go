package wire

import "time"

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

// IntPtr is a small helper for the optional ints of frames.
func IntPtr(n int) *int { return &n }
