package wire

import (
	"fmt"
	"time"
)

// Frame types of the public WebSockets (docs/api.md#websockets, docs/api.md): /pane/ws sends
// pane_snapshot; /attach/ws sends lease_acquired, data, resize and error,
// and takes input, resize and release_lease.
const (
	WSPaneSnapshot  = "pane_snapshot"
	WSLeaseAcquired = "lease_acquired"
	WSData          = "data"
	WSResize        = "resize"
	WSError         = "error"
	WSInput         = "input"
	WSReleaseLease  = "release_lease"
)

// Codes of the attach socket's error frames. lease_held is CodeLeaseHeld.
const (
	// CodeLeaseRevoked: DELETE /runs/{id}/lease took the lease away.
	CodeLeaseRevoked = "lease_revoked"
	// CodeLeaseExpired: the holder was silent (no frame, no pong) past
	// PAM_LEASE_TTL.
	CodeLeaseExpired = "lease_expired"
	// CodeRunEnded: the run left running (or was not running at all).
	CodeRunEnded = "run_ended"
	// CodeRunNotRunning: the run is pending or spawning; nothing to attach to yet.
	CodeRunNotRunning = "run_not_running"
	// CodeRelayClosed: the worker's side of the relay ended (its reason
	// is the message) while the run still runs.
	CodeRelayClosed = "relay_closed"
	// CodeMalformedFrame: a client frame that is not JSON of a known type;
	// it is dropped and the socket stays.
	CodeMalformedFrame = "malformed_frame"
	// CodeTooSlow: the client did not take its output fast enough.
	CodeTooSlow = "too_slow"
	// CodeForbidden: a browser handshake from a foreign Origin (403).
	CodeForbidden = "forbidden"
	// CodeTokenRevoked: the socket's token was revoked or rotated; the
	// socket is closed.
	CodeTokenRevoked = "token_revoked"
)

// Purposes of a WebSocket ticket (POST /ws-tickets).
const (
	PurposePane   = "pane"
	PurposeAttach = "attach"
)

// Terminal geometry bounds for attach (rows and cols of resize frames).
const (
	MinTermSize = 1
	MaxTermSize = 1000
)

// PaneSnapshot is the frame of /pane/ws: the whole screen of a run, seq
// growing by one per distinct snapshot.
type PaneSnapshot struct {
	Type      string     `json:"type"`
	Seq       int64      `json:"seq"`
	RunID     string     `json:"run_id"`
	Capture   string     `json:"capture"`
	Timestamp *time.Time `json:"timestamp"`
}

// LeaseHolder says who holds an attach lease: what the lease_held error
// shows to the others and what run.lease_* events journal. Auth is how
// the holder authenticated: header, token or ticket.
type LeaseHolder struct {
	// Token is the name of the token the holder authenticated with.
	Token      string    `json:"token"`
	RemoteAddr string    `json:"remote_addr"`
	UserAgent  string    `json:"user_agent"`
	Auth       string    `json:"auth"`
	AttachedAt time.Time `json:"attached_at"`
}

// TermFrame is any frame of /attach/ws, both ways; Type says which fields
// mean something. Bytes is base64 in JSON.
type TermFrame struct {
	Type       string       `json:"type"`
	RunID      string       `json:"run_id,omitempty"`
	AttachedAt *time.Time   `json:"attached_at,omitempty"`
	Code       string       `json:"code,omitempty"`
	Message    string       `json:"message,omitempty"`
	Holder     *LeaseHolder `json:"holder,omitempty"`
	Bytes      []byte       `json:"bytes,omitempty"`
	Rows       int          `json:"rows,omitempty"`
	Cols       int          `json:"cols,omitempty"`
}

// DecodeTermFrame parses one client frame of /attach/ws: known types
// only, unknown fields refused, sizes in bounds.
func DecodeTermFrame(b []byte) (TermFrame, error) {
	var f TermFrame
	if len(b) > MaxFrame {
		return f, fmt.Errorf("frame of %d bytes exceeds %d", len(b), MaxFrame)
	}
	if err := decodeStrictBytes(b, &f); err != nil {
		return f, err
	}
	switch f.Type {
	case WSInput, WSReleaseLease:
	case WSResize:
		if !ValidTermSize(f.Rows, f.Cols) {
			return f, fmt.Errorf("resize to %dx%d: rows and cols must be %d to %d", f.Rows, f.Cols, MinTermSize, MaxTermSize)
		}
	case "":
		return f, fmt.Errorf("frame without a type")
	default:
		return f, fmt.Errorf("unknown frame type %q", f.Type)
	}
	return f, nil
}

// ValidTermSize reports whether rows × cols is a terminal size pam relays.
func ValidTermSize(rows, cols int) bool {
	return rows >= MinTermSize && rows <= MaxTermSize && cols >= MinTermSize && cols <= MaxTermSize
}

// CreateWSTicket is the body of POST /ws-tickets.
type CreateWSTicket struct {
	RunID   string `json:"run_id"`
	Purpose string `json:"purpose"`
}

// WSTicket is the answer of POST /ws-tickets: single use, valid until
// ExpiresAt, for one run and purpose.
type WSTicket struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
}
