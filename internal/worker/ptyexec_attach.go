package worker

import (
	"io"
	"pam/internal/holder"
	"pam/internal/tmux"
)

// The pty executor's attach: a remote terminal relayed to a holder as a
// writing reader.

// Attach is a write-mode reader sized to the remote terminal: the
// holder resizes the PTY and the program repaints for it.
func (e *ptyExecutor) Attach(name tmux.SessionName, rows, cols int) (Attachment, error) {
	c, err := e.dial(name, holder.Hello{Rows: rows, Cols: cols, Write: true})
	if err != nil {
		return nil, err
	}
	return &holderClient{c: c}, nil
}

// holderClient is an interactive attach through a holder: Read gives
// the output bytes (size and info frames are the model's business), an
// exit frame ends it.
type holderClient struct {
	c    *holder.Conn
	rest []byte
}

func (h *holderClient) Read(p []byte) (int, error) {
	for len(h.rest) == 0 {
		f, err := h.c.Next()
		if err != nil {
			return 0, err
		}
		switch f.Type {
		case holder.FrameOutput:
			h.rest = f.Payload
		case holder.FrameExit:
			return 0, io.EOF
		}
	}
	n := copy(p, h.rest)
	h.rest = h.rest[n:]
	return n, nil
}

func (h *holderClient) Write(p []byte) (int, error) {
	if err := h.c.Input(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (h *holderClient) Resize(rows, cols int) error { return h.c.Resize(rows, cols) }

// Close leaves the holder: the program is never signalled for it.
func (h *holderClient) Close() error { return h.c.Close() }
