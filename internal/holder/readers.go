package holder

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// The readers of a holder: the fan-out of PTY output to every reader,
// each with its own pending buffer, and each reader's frames in.

// broadcast hands p to every reader without waiting on any: it is
// appended to each reader's pending buffer, and a reader whose buffer
// would pass PendingLimit is released. With no reader it is kept for the
// first one (bounded, newest kept) or, after the first, discarded.
func (h *holder) broadcast(p []byte) {
	h.mu.Lock()
	if len(h.readers) == 0 {
		if !h.everRead {
			h.pre = appendBounded(h.pre, p, h.o.PreattachLimit)
		}
		h.mu.Unlock()
		return
	}
	frame := AppendFrame(nil, FrameOutput, p)
	var released []int
	for _, r := range h.readers {
		if len(r.pending)+len(frame) > h.o.PendingLimit && r.skip {
			// The count is the reader's total: a later skip may drop an
			// earlier skipped frame not yet sent.
			r.dropped += int64(len(r.pending))
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(r.dropped))
			r.pending = AppendFrame(r.pending[:0], FrameSkipped, n[:])
			r.pending = AppendFrame(r.pending, FrameSize, SizePayload(h.rows, h.cols))
			r.skips++
		}
		if len(r.pending)+len(frame) > h.o.PendingLimit {
			r.released = true
			h.dropLocked(r)
			released = append(released, r.id)
			continue
		}
		r.pending = append(r.pending, frame...)
		poke(r.wake)
	}
	h.mu.Unlock()
	for _, id := range released {
		h.event(Event{Event: "reader_released", Reader: id, Detail: fmt.Sprintf("more than %d bytes pending", h.o.PendingLimit)})
	}
}

// appendBounded appends p to b keeping at most limit bytes, the newest.
func appendBounded(b, p []byte, limit int) []byte {
	if len(p) >= limit {
		return append(b[:0], p[len(p)-limit:]...)
	}
	if over := len(b) + len(p) - limit; over > 0 {
		b = append(b[:0], b[over:]...)
	}
	return append(b, p...)
}

// acceptLoop takes new readers until the listener closes.
func (h *holder) acceptLoop() {
	for {
		c, err := h.ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				h.log.Error("accept", "err", err)
			}
			return
		}
		h.mu.Lock()
		if h.ending {
			h.mu.Unlock()
			c.Close()
			continue
		}
		h.all[c] = struct{}{}
		h.mu.Unlock()
		h.conns.Go(func() {
			h.serveConn(c)
			h.mu.Lock()
			delete(h.all, c)
			h.mu.Unlock()
		})
	}
}

// serveConn reads a connection's hello, registers it as a reader, and
// then takes its frames until it closes. A connection that never says
// hello (a liveness probe) is closed without a trace.
func (h *holder) serveConn(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(helloWait))
	f, err := ReadFrame(c)
	if err != nil || f.Type != FrameHello {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var hello Hello
	if err := json.Unmarshal(f.Payload, &hello); err != nil {
		c.Close()
		return
	}
	sized := hello.Rows > 0 && hello.Cols > 0 && hello.Rows <= MaxDim && hello.Cols <= MaxDim
	r := h.register(c, hello)
	if r == nil {
		c.Close()
		return
	}
	h.event(Event{Event: "reader_attached", Reader: r.id, Rows: hello.Rows, Cols: hello.Cols,
		Detail: map[bool]string{true: "write", false: "read"}[hello.Write]})
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); h.writeLoop(r) }()
	if sized || hello.Redraw {
		rows, cols := hello.Rows, hello.Cols
		if !sized {
			rows, cols = 0, 0
		}
		h.redraw(rows, cols)
	}
	why := h.readLoop(r)
	h.mu.Lock()
	released, skips := r.released, r.skips
	h.dropLocked(r)
	h.mu.Unlock()
	<-writerDone
	if !released {
		if why == "" {
			why = "closed"
		}
		if skips > 0 {
			why += fmt.Sprintf(" (output skipped %d times)", skips)
		}
		h.event(Event{Event: "reader_closed", Reader: r.id, Detail: why})
	}
}

// register adds a reader: its first frames are the info frame and, for
// the first reader ever, the output kept since the start.
func (h *holder) register(c net.Conn, hello Hello) *reader {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ending {
		return nil
	}
	h.nextID++
	r := &reader{id: h.nextID, conn: c, write: hello.Write, skip: hello.Skip, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	info := Info{Name: h.o.Name, PID: os.Getpid(), ChildPID: h.cmd.Process.Pid, RunID: h.o.RunID,
		Attempt: h.o.Attempt, Instance: h.o.Instance, Term: h.o.Term, Rows: h.rows, Cols: h.cols}
	r.pending = jsonFrame(FrameInfo, info)
	if !h.everRead {
		h.everRead = true
		for p := h.pre; len(p) > 0; {
			n := min(len(p), readChunk)
			r.pending = AppendFrame(r.pending, FrameOutput, p[:n])
			p = p[n:]
		}
		h.pre = nil
	}
	h.readers[r.id] = r
	poke(r.wake)
	return r
}

// dropLocked removes a reader and closes its socket (h.mu held). Closing
// a reader never signals the program.
func (h *holder) dropLocked(r *reader) {
	if r.gone {
		return
	}
	r.gone = true
	delete(h.readers, r.id)
	close(r.quit)
	_ = r.conn.Close()
}

// writeLoop hands a reader's pending bytes to its socket. Only this
// goroutine ever waits on the reader.
func (h *holder) writeLoop(r *reader) {
	var spare []byte
	for {
		select {
		case <-r.wake:
		case <-r.quit:
			return
		}
		h.mu.Lock()
		b := r.pending
		r.pending = spare[:0]
		closing := r.closing
		h.mu.Unlock()
		if len(b) > 0 {
			if _, err := r.conn.Write(b); err != nil {
				h.mu.Lock()
				h.dropLocked(r)
				h.mu.Unlock()
				return
			}
		}
		spare = b
		if closing {
			h.mu.Lock()
			empty := len(r.pending) == 0
			h.mu.Unlock()
			if empty {
				h.mu.Lock()
				h.dropLocked(r)
				h.mu.Unlock()
				return
			}
			poke(r.wake)
		}
	}
}

// readLoop takes a reader's frames until it closes; it returns why, or
// "" when the holder dropped it.
func (h *holder) readLoop(r *reader) string {
	for {
		f, err := ReadFrame(r.conn)
		if err != nil {
			select {
			case <-r.quit:
				return ""
			default:
			}
			if errors.Is(err, io.EOF) {
				return "closed by the reader"
			}
			return err.Error()
		}
		switch f.Type {
		case FrameInput:
			if r.write && len(f.Payload) > 0 {
				if !h.input.push(f.Payload, r.quit) {
					return ""
				}
			}
		case FrameResize:
			rows, cols, err := ParseSize(f.Payload)
			if err != nil {
				return err.Error()
			}
			h.resize(rows, cols)
		case FrameControl:
			h.control(r, string(f.Payload))
		default:
			return fmt.Sprintf("unexpected frame %q", byte(f.Type))
		}
	}
}

// finish ends every reader: each gets its pending bytes and an exit
// frame, for up to flushWait, then its socket closes.
func (h *holder) finish(e Exit) {
	frame := jsonFrame(FrameExit, e)
	h.mu.Lock()
	h.ending = true
	list := make([]*reader, 0, len(h.readers))
	for _, r := range h.readers {
		r.pending = append(r.pending, frame...)
		r.closing = true
		poke(r.wake)
		list = append(list, r)
	}
	h.mu.Unlock()
	deadline := time.After(flushWait)
	for _, r := range list {
		select {
		case <-r.quit:
		case <-deadline:
		}
	}
	h.mu.Lock()
	for _, r := range list {
		h.dropLocked(r)
	}
	for c := range h.all {
		c.Close() // still saying hello
	}
	h.mu.Unlock()
	h.conns.Wait()
}
