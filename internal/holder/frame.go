package holder

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The socket protocol (docs/architecture.md#the-pty-holder): every frame
// is a one-byte type, a four-byte big-endian payload length, then the
// payload. A frame carries at most MaxPayload bytes; a reader that meets
// a longer length or an unknown type stops reading that connection.
//
// A reader's first frame is a hello; the holder answers with an info
// frame, then sends output, size and exit frames as they happen.

// FrameType is the first byte of a frame.
type FrameType byte

// The frame types. Output, size, info and exit go from the holder to a
// reader; hello, input, resize and control from a reader to the holder.
const (
	// FrameOutput is bytes the program wrote to the PTY.
	FrameOutput FrameType = 'o'
	// FrameInput is bytes for the program, as typed (or pasted).
	FrameInput FrameType = 'i'
	// FrameResize asks for a new PTY size: rows and cols, two uint16.
	FrameResize FrameType = 'r'
	// FrameControl is a request: ControlStop, ControlKill or
	// ControlRedraw.
	FrameControl FrameType = 'c'
	// FrameHello is a reader's first frame: a JSON Hello.
	FrameHello FrameType = 'h'
	// FrameInfo is the holder's answer to a hello: a JSON Info.
	FrameInfo FrameType = 'n'
	// FrameSize tells readers the PTY's size changed: rows and cols, two
	// uint16. A screen model follows it.
	FrameSize FrameType = 's'
	// FrameExit is the holder's last frame: a JSON Exit.
	FrameExit FrameType = 'x'
	// FrameSkipped tells a reader whose hello asked to Skip that output
	// was dropped because it fell PendingLimit behind: the total number
	// of bytes dropped for it so far, a uint64. A size frame follows it,
	// then new output.
	FrameSkipped FrameType = 'k'
)

// Control requests.
const (
	// ControlStop asks the program to unwind: SIGTERM to its process
	// group and the terminal's foreground group. The holder ends when the
	// program does.
	ControlStop = "stop"
	// ControlKill ends the run where it stands: SIGKILL to those groups,
	// and the holder exits.
	ControlKill = "kill"
	// ControlRedraw makes the program repaint its screen (a size change).
	ControlRedraw = "redraw"
)

const (
	// headerLen is the type byte and the length.
	headerLen = 5
	// MaxPayload bounds one frame's payload, as the uplink bounds its
	// frames (1 MiB).
	MaxPayload = 1 << 20
	// maxControl bounds the payload of a frame that is not output or
	// input: hello, info, resize, control, size, exit are small.
	maxControl = 4 << 10
)

// ErrFrame is a malformed frame: the connection it came on is unusable.
var ErrFrame = errors.New("malformed holder frame")

// Frame is one decoded frame.
type Frame struct {
	Type    FrameType
	Payload []byte
}

// Hello is a reader's first frame.
type Hello struct {
	// Rows and Cols, when both are set, are the reader's terminal size:
	// the holder sizes the PTY to it and makes the program redraw, so
	// the reader starts from a screen, not a transcript. Zero leaves the
	// size alone (a screen model that follows the PTY).
	Rows int `json:"rows,omitempty"`
	Cols int `json:"cols,omitempty"`
	// Write asks to send input. Input from a reader that did not ask is
	// dropped: a watcher cannot type by mistake.
	Write bool `json:"write,omitempty"`
	// Redraw asks for a repaint even without a size.
	Redraw bool `json:"redraw,omitempty"`
	// Skip asks, for a reader that falls PendingLimit behind, to have
	// its pending output dropped (a FrameSkipped says so) rather than be
	// released: a screen model that resynchronizes with a redraw, and
	// must not miss what comes after.
	Skip bool `json:"skip,omitempty"`
}

// Info is the holder's answer to a hello: who it is and the PTY's size.
type Info struct {
	Name     string `json:"name"`
	PID      int    `json:"pid"`
	ChildPID int    `json:"child_pid"`
	RunID    string `json:"run_id,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	Instance string `json:"instance,omitempty"`
	Term     string `json:"term"`
	Rows     int    `json:"rows"`
	Cols     int    `json:"cols"`
}

// Exit is the holder's last frame on every connection.
type Exit struct {
	// Reason says why the connection ends: "exited" (the program ended),
	// "killed", "released" (this reader fell 1 MiB behind) or
	// "shutdown".
	Reason string `json:"reason"`
	// Code is the program's exit code when Reason is "exited" or
	// "killed"; -1 for a signal.
	Code int `json:"code"`
}

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, t FrameType, payload []byte) error {
	_, err := w.Write(AppendFrame(nil, t, payload))
	return err
}

// AppendFrame appends the encoding of one frame to b.
func AppendFrame(b []byte, t FrameType, payload []byte) []byte {
	var h [headerLen]byte
	h[0] = byte(t)
	binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
	b = append(b, h[:]...)
	return append(b, payload...)
}

// SizePayload encodes rows and cols for a resize or size frame.
func SizePayload(rows, cols int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint16(b[0:], uint16(rows))
	binary.BigEndian.PutUint16(b[2:], uint16(cols))
	return b[:]
}

// ParseSize decodes a resize or size payload; both values must be in
// 1..MaxDim.
func ParseSize(p []byte) (rows, cols int, err error) {
	if len(p) != 4 {
		return 0, 0, fmt.Errorf("%w: size payload of %d bytes", ErrFrame, len(p))
	}
	rows = int(binary.BigEndian.Uint16(p[0:]))
	cols = int(binary.BigEndian.Uint16(p[2:]))
	if rows < 1 || cols < 1 || rows > MaxDim || cols > MaxDim {
		return 0, 0, fmt.Errorf("%w: size %dx%d out of range", ErrFrame, rows, cols)
	}
	return rows, cols, nil
}

// MaxDim bounds a terminal dimension, as the attach frames do.
const MaxDim = 1000

// ReadFrame reads one frame. The payload is a new slice. A short read
// inside a frame is io.ErrUnexpectedEOF; EOF before a frame is io.EOF.
func ReadFrame(r io.Reader) (Frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	t := FrameType(h[0])
	n := binary.BigEndian.Uint32(h[1:])
	limit, ok := payloadLimit(t)
	if !ok {
		return Frame{}, fmt.Errorf("%w: unknown type %q", ErrFrame, h[0])
	}
	if n > uint32(limit) {
		return Frame{}, fmt.Errorf("%w: %q payload of %d bytes (at most %d)", ErrFrame, h[0], n, limit)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return Frame{Type: t, Payload: p}, nil
}

// payloadLimit is the largest payload a frame of type t may carry.
func payloadLimit(t FrameType) (int, bool) {
	switch t {
	case FrameOutput, FrameInput:
		return MaxPayload, true
	case FrameResize, FrameControl, FrameHello, FrameInfo, FrameSize, FrameExit, FrameSkipped:
		return maxControl, true
	}
	return 0, false
}

// jsonFrame encodes v as the payload of a frame of type t.
func jsonFrame(t FrameType, v any) []byte {
	b, _ := json.Marshal(v) // plain structs of strings and ints
	return AppendFrame(nil, t, b)
}
